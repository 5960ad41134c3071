"""A real ``localgate serve`` process for tests that need one: signals, crashes, reloads."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from pathlib import Path

import httpx

from localgate.testing import FakeGemini
from tests.conftest import INFRASTRUCTURE_TIMEOUT_S, STARTUP_TIMEOUT_S, wait_until

__all__ = ["HeldStream", "free_port", "refuses_connections", "start"]

_STREAM = "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"


def free_port() -> int:
    """A port nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def start(env: dict[str, str], port: int, log: Path, *options: str) -> subprocess.Popen[bytes]:
    """``localgate serve`` on ``port`` with ``env``, output to ``log``; returns once it answers."""
    command = [sys.executable, "-m", "localgate", "serve", "--port", str(port), *options]
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


def refuses_connections(port: int) -> bool:
    """Nothing accepts a connection on ``port``."""
    with socket.socket() as probe:
        probe.settimeout(5)
        return probe.connect_ex(("127.0.0.1", port)) != 0


class HeldStream:
    """A stream through the gateway at ``base`` with ``key``, held by the fake upstream after
    its first event until ``release`` (or the ``with`` block ends); ``lines`` has its events,
    ``ended`` is set once the client saw it close."""

    def __init__(self, base: str, key: str, upstream: FakeGemini) -> None:
        self._hold = threading.Event()
        upstream.stream(["one", " two", " three"], hold=self._hold)
        self.lines: list[str] = []
        self.ended = threading.Event()
        self._first = threading.Event()
        self._base, self._key = base, key
        self._reader = threading.Thread(target=self._read)

    def __enter__(self) -> HeldStream:
        self._reader.start()
        assert self._first.wait(INFRASTRUCTURE_TIMEOUT_S)
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()

    def release(self) -> None:
        """Let the upstream finish the stream, and wait for the client to have read it."""
        self._hold.set()
        self._reader.join(INFRASTRUCTURE_TIMEOUT_S)

    def _read(self) -> None:
        body = {"contents": [{"parts": [{"text": "hi"}]}]}
        with (
            httpx.Client(base_url=self._base, timeout=INFRASTRUCTURE_TIMEOUT_S) as client,
            client.stream(
                "POST", _STREAM, json=body, headers={"x-goog-api-key": self._key}
            ) as response,
        ):
            for line in response.iter_lines():
                if line.startswith("data: "):
                    self.lines.append(line)
                    self._first.set()
        self.ended.set()
