"""A real ``localgate serve`` process for tests that need one: signals, crashes, reloads."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import httpx

from tests.conftest import STARTUP_TIMEOUT_S, wait_until

__all__ = ["free_port", "start"]


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
