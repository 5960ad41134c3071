"""kill -9 under load: after a restart the log verifies, and every request that a
client received whole (a unary answer, or a stream to its end) has its request record and
its completion record."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from localgate.audit.database import SqliteDatabase
from localgate.audit.store import AuditReader
from localgate.cli import main
from localgate.testing import FakeGemini
from tests.conftest import INFRASTRUCTURE_TIMEOUT_S, wait_until
from tests.gateway_process import free_port, start

GENERATE = "/v1beta/models/gemini-2.5-flash:generateContent"
STREAM = "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"


def kill_9_under_load(
    gateway: subprocess.Popen[bytes], port: int, key: str, answers: int
) -> list[str]:
    """Load the gateway from 16 clients (12 unary, 4 streaming), SIGKILL it after ``answers``
    complete answers; their request ids."""
    acknowledged: list[str] = []
    stop = threading.Event()
    budget = iter(range(20_000))  # bounded: the clients stop after this many requests

    def load(path: str) -> None:
        with httpx.Client(
            base_url=f"http://127.0.0.1:{port}", timeout=INFRASTRUCTURE_TIMEOUT_S
        ) as client:
            while not stop.is_set() and next(budget, None) is not None:
                try:
                    # Read to the end of the response: a stream cut short raises.
                    response = client.post(
                        path,
                        json={"contents": [{"parts": [{"text": "hi"}]}]},
                        headers={"x-goog-api-key": key},
                    )
                except httpx.TransportError:
                    continue
                if response.status_code == 200:
                    acknowledged.append(response.headers["x-request-id"])

    # Many in flight, so that answers are always going out when the kill lands.
    paths = [GENERATE] * 12 + [STREAM] * 4
    workers = [threading.Thread(target=load, args=(path,)) for path in paths]
    for worker in workers:
        worker.start()
    wait_until(lambda: len(acknowledged) >= answers, timeout=INFRASTRUCTURE_TIMEOUT_S)
    gateway.send_signal(signal.SIGKILL)
    gateway.wait(timeout=INFRASTRUCTURE_TIMEOUT_S)
    stop.set()
    for worker in workers:
        worker.join(timeout=INFRASTRUCTURE_TIMEOUT_S)
    return acknowledged


def test_kill_9_under_load_loses_no_record_of_an_answer_the_client_received(
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
    acknowledged: list[str] = []
    # The window at risk is short (one group commit): three kills make landing in it,
    # had it still existed, near certain.
    for _ in range(3):
        gateway = start(env, port, tmp_path / "gateway.log")
        acknowledged += kill_9_under_load(gateway, port, key, answers=150)

    restarted = start(env, port, tmp_path / "gateway.log")
    restarted.send_signal(signal.SIGTERM)  # a clean stop signs a checkpoint
    restarted.wait(timeout=INFRASTRUCTURE_TIMEOUT_S)

    reader = AuditReader(SqliteDatabase(data / "audit.db"))
    records = list(reader.records("acme"))
    reader.close()
    recorded = {r.request_id for r in records if r.kind == "request"}
    completed = {r.request_id for r in records if r.kind == "answer"}
    verified = CliRunner().invoke(main, ["audit", "verify"])

    assert len(acknowledged) >= 450
    assert set(acknowledged) <= recorded
    # A unary answer goes out, and a stream ends, only once its completion is on disk.
    assert sorted(set(acknowledged) - completed) == []
    assert verified.exit_code == 0, verified.output
    assert "acme: OK" in verified.output
