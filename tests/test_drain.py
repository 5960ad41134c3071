"""SIGTERM drains: not ready at once, still accepting for the drain delay, then streams in
flight finish, completions are on record, and the process exits 0. A real `localgate serve`."""

from __future__ import annotations

import json
import os
import signal
import socket
import threading
from pathlib import Path

import httpx
from click.testing import CliRunner

from localgate.cli import main
from localgate.testing import FakeGemini
from tests.conftest import INFRASTRUCTURE_TIMEOUT_S, wait_until
from tests.gateway_process import free_port, start

STREAM = "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
GENERATE = "/v1beta/models/gemini-2.5-flash:generateContent"
BODY = {"contents": [{"parts": [{"text": "hi"}]}]}


def refuses_connections(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(5)
        return probe.connect_ex(("127.0.0.1", port)) != 0


def test_sigterm_drains_then_finishes_the_streams_in_flight_and_exits_0(
    tmp_path: Path, upstream: FakeGemini
) -> None:
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
    # A delay long enough that the checks below happen inside it on a loaded machine; the
    # test does not wait for it to pass except where it must (listening stops after it).
    config.write_text(f"server:\n  drain_delay_s: {INFRASTRUCTURE_TIMEOUT_S / 6:g}\n")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    gateway = start(env, port, tmp_path / "gateway.log", "--config", str(config))
    hold = threading.Event()
    upstream.stream(["one", " two", " three"], hold=hold)  # held after the first event
    streamed: list[str] = []
    first = threading.Event()
    ended = threading.Event()

    def read_stream() -> None:
        with (
            httpx.Client(base_url=base, timeout=INFRASTRUCTURE_TIMEOUT_S) as client,
            client.stream("POST", STREAM, json=BODY, headers={"x-goog-api-key": key}) as response,
        ):
            for line in response.iter_lines():
                if line.startswith("data: "):
                    streamed.append(line)
                    first.set()
        ended.set()

    reader = threading.Thread(target=read_stream)
    reader.start()
    try:
        assert first.wait(INFRASTRUCTURE_TIMEOUT_S)
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

        # After the delay it stops listening; the stream in flight is still open.
        wait_until(lambda: refuses_connections(port))
        assert not ended.is_set()
        assert gateway.poll() is None
    finally:
        hold.set()
        reader.join(INFRASTRUCTURE_TIMEOUT_S)

    assert len(streamed) == 3  # the whole stream arrived, after the listener had closed
    assert gateway.wait(timeout=INFRASTRUCTURE_TIMEOUT_S) == 0
    verified = CliRunner().invoke(main, ["audit", "verify"], env=env)
    assert "acme: OK (4 records" in verified.output, verified.output  # both completions in
