"""SIGTERM drains: not ready at once, still accepting for the drain delay, then streams in
flight finish, completions are on record, and the process exits 0. A real `localgate serve`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import httpx
from click.testing import CliRunner

from localgate.cli import main
from localgate.testing import FakeGemini
from tests.conftest import INFRASTRUCTURE_TIMEOUT_S, wait_until
from tests.gateway_process import HeldStream, free_port, refuses_connections, start

GENERATE = "/v1beta/models/gemini-2.5-flash:generateContent"
BODY = {"contents": [{"parts": [{"text": "hi"}]}]}


def _gateway(
    tmp_path: Path, upstream: FakeGemini, drain_delay_s: float
) -> tuple[subprocess.Popen[bytes], int, str, dict[str, str]]:
    data = tmp_path / "data"
    env = {
        **{name: value for name, value in os.environ.items() if not name.startswith("LOCALGATE_")},
        "LOCALGATE_DATA_DIR": str(data),
        "LOCALGATE_UPSTREAM_URL": upstream.base_url,
        "GEMINI_API_KEY": "upstream-key",
    }
    issued = CliRunner().invoke(main, ["keys", "create", "--tenant", "acme", "--json"], env=env)
    key = json.loads(issued.output)["key"]
    config = tmp_path / "localgate.yaml"
    config.write_text(f"server:\n  drain_delay_s: {drain_delay_s:g}\n")
    port = free_port()
    gateway = start(env, port, tmp_path / "gateway.log", "--config", str(config))
    return gateway, port, key, env


def test_sigterm_drains_then_finishes_the_streams_in_flight_and_exits_0(
    tmp_path: Path, upstream: FakeGemini
) -> None:
    # A delay the test never reaches, however loaded the machine: the checks made during the
    # drain happen inside it, and a second SIGTERM ends it (as an operator's second signal).
    gateway, port, key, env = _gateway(tmp_path, upstream, drain_delay_s=3600)
    base = f"http://127.0.0.1:{port}"
    try:
        with HeldStream(base, key, upstream) as stream:
            gateway.send_signal(signal.SIGTERM)

            # Not ready at once, but still answering: the load balancer moves traffic away.
            wait_until(lambda: httpx.get(f"{base}/readyz", timeout=5).status_code == 503)
            ready = httpx.get(f"{base}/readyz", timeout=5).json()
            assert ready["status"] == "draining"
            assert ready["checks"]["server"].startswith("draining")
            answered = httpx.post(
                f"{base}{GENERATE}", json=BODY, headers={"x-goog-api-key": key}, timeout=30
            )
            assert answered.status_code == 200

            # The second signal ends the delay: it stops listening; the stream is still open.
            gateway.send_signal(signal.SIGTERM)
            wait_until(lambda: refuses_connections(port))
            assert not stream.ended.is_set()
            assert gateway.poll() is None

        assert len(stream.lines) == 3  # the whole stream arrived, after the listener closed
        assert gateway.wait(timeout=INFRASTRUCTURE_TIMEOUT_S) == 0
    finally:
        if gateway.poll() is None:
            gateway.kill()
            gateway.wait()
    verified = CliRunner().invoke(main, ["audit", "verify"], env=env)
    assert "acme: OK (4 records" in verified.output, verified.output  # both completions in


def test_after_the_drain_delay_it_stops_listening_on_its_own_and_the_stream_finishes(
    tmp_path: Path, upstream: FakeGemini
) -> None:
    gateway, port, key, env = _gateway(tmp_path, upstream, drain_delay_s=0.5)
    base = f"http://127.0.0.1:{port}"
    try:
        with HeldStream(base, key, upstream) as stream:
            gateway.send_signal(signal.SIGTERM)
            wait_until(lambda: refuses_connections(port))  # nothing checked inside the delay
            assert not stream.ended.is_set()
            assert gateway.poll() is None
        assert len(stream.lines) == 3
        assert gateway.wait(timeout=INFRASTRUCTURE_TIMEOUT_S) == 0
    finally:
        if gateway.poll() is None:
            gateway.kill()
            gateway.wait()
    verified = CliRunner().invoke(main, ["audit", "verify"], env=env)
    assert "acme: OK (2 records" in verified.output, verified.output
