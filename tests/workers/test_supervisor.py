"""The supervisor's decisions, with stand-in workers: restarts and their bound, a worker that
cannot start, and what `localgate serve` refuses before starting any."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from localgate.cli import main
from localgate.config import ServerSettings, Settings, resolve_workers
from localgate.workers import shared_state_problems
from localgate.workers.supervisor import RestartPolicy, Supervisor, WorkerSpec, bind


def test_restarts_are_immediate_then_slower_then_refused() -> None:
    policy = RestartPolicy(max_restarts=5, window_s=60)
    waits = [policy.after_death(now) for now in (0.0, 1.0, 2.0, 3.0, 4.0)]
    assert waits == [0.0, 1.0, 2.0, 4.0, 8.0]
    assert policy.after_death(5.0) is None  # a sixth death within a minute: give up


def test_deaths_outside_the_window_are_forgotten() -> None:
    policy = RestartPolicy(max_restarts=2, window_s=60)
    assert policy.after_death(0.0) == 0.0
    assert policy.after_death(30.0) == 1.0
    assert policy.after_death(100.0) == 0.0  # the earlier two are over a minute old
    assert policy.after_death(110.0) == 1.0


def test_worker_spec_travels_through_the_environment() -> None:
    spec = WorkerSpec(
        index=3,
        listen_fd=7,
        ready_fd=9,
        metrics_dir="/run/localgate-workers",
        count=4,
        supervisor_pid=1234,
    )
    assert WorkerSpec.decode(spec.encode()) == spec


def _supervise(tmp_path: Path, script: str, max_restarts: int = 5) -> int:
    listener = bind("127.0.0.1", 0)
    try:
        return Supervisor(
            command=[sys.executable, "-c", script],
            environment={},
            listener=listener,
            count=2,
            metrics_dir=tmp_path,
            drain_delay_s=0,
            drain_timeout_s=5,
            max_restarts=max_restarts,
        ).run()
    finally:
        listener.close()


def test_a_worker_that_cannot_start_stops_the_gateway_with_its_code(tmp_path: Path) -> None:
    assert _supervise(tmp_path, "raise SystemExit(3)") == 3


def test_workers_that_keep_dying_stop_the_gateway_instead_of_a_restart_storm(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Exit 1 (not "could not start"): restarted, until the bound is reached.
    assert _supervise(tmp_path, "raise SystemExit(1)", max_restarts=1) == 1
    assert "died 2 times within 60 s (exit code 1); stopping the gateway" in caplog.text


def test_the_port_is_bound_once_by_the_supervisor() -> None:
    listener = bind("127.0.0.1", 0)
    try:
        port = listener.getsockname()[1]
        with pytest.raises(OSError, match="in use"), socket.socket() as other:
            other.bind(("127.0.0.1", port))
        assert listener.get_inheritable()
    finally:
        listener.close()


def test_auto_is_the_cores_this_process_may_use() -> None:
    assert resolve_workers("auto") >= 1
    assert resolve_workers(3) == 3
    assert ServerSettings(workers="auto").worker_count == resolve_workers("auto")
    with pytest.raises(ValueError, match="workers"):
        ServerSettings(workers=0)


def test_memory_limits_with_several_workers_are_refused_in_one_line(tmp_path: Path) -> None:
    config = tmp_path / "localgate.yaml"
    config.write_text("limits:\n  default:\n    requests_per_minute: 60\n")
    env = {"LOCALGATE_DATA_DIR": str(tmp_path / "data"), "GEMINI_API_KEY": "k"}
    # Whatever holds the port, the configuration's contradiction is what is reported:
    # another start would meet it again.
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = str(taken.getsockname()[1])
        refused = CliRunner().invoke(
            main, ["serve", "--config", str(config), "--workers", "2", "--port", port], env=env
        )
    assert refused.exit_code == 1
    lines = refused.output.strip().splitlines()
    assert lines[-1].startswith("localgate: cannot start: limits.backend: memory counts")
    assert "use limits.backend: redis" in lines[-1]


def test_limits_set_only_on_a_tenants_key_count_too() -> None:
    settings = Settings.model_validate(
        {"tenants": {"acme": {"limits": {"keys": {"k1": {"concurrent_requests": 2}}}}}}
    )
    assert shared_state_problems(settings, 2)
    assert not shared_state_problems(settings, 1)
    assert not shared_state_problems(Settings(), 4)  # no limits: nothing to share
    redis = settings.model_copy(
        update={
            "limits": settings.limits.model_copy(
                update={"backend": "redis", "redis_url": "redis://127.0.0.1:6379/13"}
            )
        }
    )
    assert not shared_state_problems(redis, 2)


def test_workers_option_rejects_what_is_not_a_count(tmp_path: Path) -> None:
    env = {"LOCALGATE_DATA_DIR": str(tmp_path / "data")}
    refused = CliRunner().invoke(main, ["serve", "--workers", "0"], env=env)
    assert refused.exit_code == 2
    assert "--workers" in refused.output


def test_a_port_in_use_is_one_line_and_exit_1(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {"LOCALGATE_DATA_DIR": str(tmp_path / "data"), "GEMINI_API_KEY": "k"}
        refused = CliRunner().invoke(
            main, ["serve", "--workers", "2", "--port", str(port)], env=env
        )
    # Found by the start-up checks, before any worker is started (as with one process).
    assert refused.exit_code == 1
    assert refused.output.strip().splitlines()[-1] == (
        "localgate: cannot start: server.port: cannot listen on "
        f"127.0.0.1:{port}: Address already in use"
    )
    assert "Traceback" not in refused.output
