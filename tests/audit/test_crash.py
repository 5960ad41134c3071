"""kill -9 under load: after a restart the log verifies, and every request that a
client saw succeed has its request record."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from localgate.audit.database import SqliteDatabase
from localgate.audit.store import AuditReader
from localgate.cli import main
from localgate.testing import FakeGemini
from tests.conftest import INFRASTRUCTURE_TIMEOUT_S, STARTUP_TIMEOUT_S, wait_until

GENERATE = "/v1beta/models/gemini-2.5-flash:generateContent"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def start(env: dict[str, str], port: int, log: Path) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "localgate", "serve", "--port", str(port)]
    with log.open("ab") as output:
        # The command is fixed: the test starts the gateway it tests.
        process = subprocess.Popen(command, env=env, stdout=output, stderr=subprocess.STDOUT)  # noqa: S603

    def ready() -> bool:
        try:
            return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).status_code == 200
        except httpx.TransportError:
            return process.poll() is not None

    wait_until(ready, timeout=STARTUP_TIMEOUT_S)
    assert process.poll() is None, log.read_text()
    return process


def test_kill_9_under_load_loses_no_acknowledged_request(
    tmp_path: Path, upstream: FakeGemini, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    env = {
        **os.environ,
        "LOCALGATE_DATA_DIR": str(data),
        "LOCALGATE_UPSTREAM_URL": upstream.base_url,
        "GEMINI_API_KEY": "upstream-key",
    }
    env.pop("LOCALGATE_CONFIG", None)
    monkeypatch.setenv("LOCALGATE_DATA_DIR", str(data))
    issued = CliRunner().invoke(main, ["keys", "create", "--tenant", "acme", "--json"])
    key = json.loads(issued.output)["key"]
    port = free_port()
    gateway = start(env, port, tmp_path / "gateway.log")

    acknowledged: list[str] = []
    stop = threading.Event()

    def load() -> None:
        base_url = f"http://127.0.0.1:{port}"
        with httpx.Client(base_url=base_url, timeout=INFRASTRUCTURE_TIMEOUT_S) as client:
            while not stop.is_set():
                try:
                    response = client.post(
                        GENERATE,
                        json={"contents": [{"parts": [{"text": "hi"}]}]},
                        headers={"x-goog-api-key": key},
                    )
                except httpx.TransportError:
                    continue
                if response.status_code == 200:
                    acknowledged.append(response.headers["x-request-id"])

    workers = [threading.Thread(target=load) for _ in range(4)]
    for worker in workers:
        worker.start()
    wait_until(lambda: len(acknowledged) >= 200)
    gateway.send_signal(signal.SIGKILL)
    gateway.wait(timeout=INFRASTRUCTURE_TIMEOUT_S)
    stop.set()
    for worker in workers:
        worker.join(timeout=INFRASTRUCTURE_TIMEOUT_S)

    restarted = start(env, port, tmp_path / "gateway.log")
    restarted.send_signal(signal.SIGTERM)  # a clean stop signs a checkpoint
    restarted.wait(timeout=INFRASTRUCTURE_TIMEOUT_S)

    reader = AuditReader(SqliteDatabase(data / "audit.db"))
    recorded = {r.request_id for r in reader.records("acme") if r.kind == "request"}
    reader.close()
    verified = CliRunner().invoke(main, ["audit", "verify"])

    assert len(acknowledged) >= 200
    assert set(acknowledged) <= recorded
    assert verified.exit_code == 0, verified.output
    assert "acme: OK" in verified.output
