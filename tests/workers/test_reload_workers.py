"""`localgate reload` and the admin API's reload with `serve --workers 2`, as real processes:
each worker's outcome is reported, applied or rejected with its problems, and a rejection by
any worker is a non-zero exit code (the API: `applied` false)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from localgate.cli import main
from localgate.testing import FakeGemini
from tests.conftest import INFRASTRUCTURE_TIMEOUT_S, wait_until
from tests.gateway_process import free_port, start


@dataclass
class Gateway:
    """A `localgate serve --workers 2` whose upstream key is a file, with its admin API."""

    process: subprocess.Popen[bytes]
    base: str
    admin: str
    token: str
    env: dict[str, str]
    config: Path
    key_file: Path
    log: Path

    def reload(self, **env: str) -> tuple[int, str]:
        """`localgate reload`, with the gateway's environment and ``env``."""
        command = ["reload", "--config", str(self.config)]
        result = CliRunner().invoke(
            main, [*command, "--timeout", str(INFRASTRUCTURE_TIMEOUT_S)], env={**self.env, **env}
        )
        return result.exit_code, result.output

    def pids(self) -> dict[int, int]:
        """Each worker's pid, as /readyz lists every worker's configuration."""
        answer = httpx.get(
            f"{self.base}/readyz", params={"workers": "all"}, timeout=INFRASTRUCTURE_TIMEOUT_S
        ).json()
        return {worker["worker"]: worker["pid"] for worker in answer["workers"]}


@pytest.fixture
def gateway(tmp_path: Path, upstream: FakeGemini) -> Iterator[Gateway]:
    # No GEMINI_API_KEY: the gateway reads its upstream key from a file.
    env = {
        **{
            name: value
            for name, value in os.environ.items()
            if not name.startswith("LOCALGATE_") and name != "GEMINI_API_KEY"
        },
        "LOCALGATE_DATA_DIR": str(tmp_path / "data"),
        "LOCALGATE_UPSTREAM_URL": upstream.base_url,
    }
    key_file = tmp_path / "upstream.key"
    key_file.write_text("upstream-key\n")
    key_file.chmod(0o600)
    port, admin_port = free_port(), free_port()
    config = tmp_path / "localgate.yaml"
    config.write_text(
        f"server:\n  port: {port}\nupstream:\n  api_key_file: {key_file}\n"
        f"admin:\n  port: {admin_port}\n"
    )
    env["LOCALGATE_CONFIG"] = str(config)
    created = CliRunner().invoke(
        main, ["admin", "token", "create", "--role", "admin", "--json"], env=env
    )
    token = json.loads(created.output)["token"]
    log = tmp_path / "gateway.log"
    process = start(env, port, log, "--workers", "2")
    gateway = Gateway(
        process,
        f"http://127.0.0.1:{port}",
        f"http://127.0.0.1:{admin_port}",
        token,
        env,
        config,
        key_file,
        log,
    )
    try:
        # Both workers answer their siblings (the first to answer /healthz may be alone).
        wait_until(lambda: len(gateway.pids()) == 2)
        yield gateway
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(INFRASTRUCTURE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def test_localgate_reload_reports_every_workers_outcome(gateway: Gateway) -> None:
    pids = gateway.pids()
    gateway.config.write_text(
        gateway.config.read_text() + "proxy:\n  redaction:\n    scan_answers: false\n"
    )
    code, output = gateway.reload()
    assert code == 0, f"{output}\n{gateway.log.read_text()}"
    assert "Reloaded: every worker (2) runs the file now." in output
    for index in (0, 1):
        assert f"worker {index} (pid {pids[index]}): applied; running version 2 (" in output

    # The operator's shell has GEMINI_API_KEY, so the file checks out there; the gateway
    # reads its key from the file, which is gone: every worker rejects the reload.
    gateway.key_file.unlink()
    gateway.config.write_text(gateway.config.read_text().replace("false", "true"))
    code, output = gateway.reload(GEMINI_API_KEY="operator-key")
    assert code == 1, f"{output}\n{gateway.log.read_text()}"
    assert "Not reloaded everywhere: of 2 workers, 2 rejected the file" in output
    for index in (0, 1):
        assert f"worker {index} (pid {pids[index]}): rejected; still running version 2 (" in output
    problem = f"      upstream.api_key_file: cannot read {gateway.key_file}"
    assert output.count(problem) == 2, output
    assert gateway.pids() == pids  # nobody restarted: the workers keep their configuration


def test_the_admin_apis_reload_goes_to_every_worker(gateway: Gateway) -> None:
    pids = gateway.pids()
    good = gateway.config.read_text()
    with httpx.Client(
        base_url=gateway.admin,
        headers={"authorization": f"Bearer {gateway.token}"},
        timeout=INFRASTRUCTURE_TIMEOUT_S,
    ) as admin:
        gateway.config.write_text(good + "proxy:\n  redaction:\n    scan_answers: false\n")
        applied = admin.post("/admin/api/v1/config/reload")
        gateway.config.write_text(good + "server:\n  max_body_bytes: -1\n")
        rejected = admin.post("/admin/api/v1/config/reload")

    assert applied.status_code == 200, applied.text
    assert applied.json()["applied"] is True
    assert [
        (worker["worker"], worker["pid"], worker["outcome"], worker["version"])
        for worker in applied.json()["workers"]
    ] == [(0, pids[0], "applied", 2), (1, pids[1], "applied", 2)]

    assert rejected.status_code == 200, rejected.text
    assert rejected.json()["applied"] is False
    workers = rejected.json()["workers"]
    assert [(worker["worker"], worker["outcome"], worker["version"]) for worker in workers] == [
        (0, "rejected", 2),
        (1, "rejected", 2),
    ]
    for worker in workers:
        assert any("server.max_body_bytes" in problem for problem in worker["problems"])
    assert any(p.startswith("worker 1: server.max_body_bytes") for p in rejected.json()["problems"])
