"""One vector store process for all the workers on a host.

The embedded ChromaDB keeps its files for one process: several workers opening the same
directory would corrupt it. So with the cache or retrieval on, no ``cache.chroma_url`` and
more than one worker, the supervisor starts one Chroma server (the ``chroma`` command of
the installed chromadb) on the embedded store's own directory, listening on loopback, and
hands its address to the workers (``LOCALGATE_CHROMA_URL``). Its data stays where a
single gateway keeps it, so going from one worker to several and back keeps the cache.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

__all__ = ["StoreProcess", "StoreProcessError"]

logger = logging.getLogger("localgate.workers")

_START_TIMEOUT_S = 60.0
_STOP_TIMEOUT_S = 30.0
_PR_SET_PDEATHSIG = 1


class StoreProcessError(RuntimeError):
    """The store process could not be started; the message says why, in one line."""


class StoreProcess:
    """A ``chroma run`` on loopback over ``path``, started and stopped by the supervisor."""

    def __init__(self, process: subprocess.Popen[bytes], url: str, path: Path) -> None:
        self._process = process
        self.url = url
        self.path = path

    @classmethod
    def start(cls, path: Path, log: Path) -> StoreProcess:
        """Start it and wait until it answers (raises ``StoreProcessError``)."""
        command = _chroma_command()
        path.mkdir(parents=True, exist_ok=True)
        port = _free_port()
        url = f"http://127.0.0.1:{port}"
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("ab") as output:
            process = subprocess.Popen(  # noqa: S603 - the chromadb package's own command
                [command, "run", "--path", str(path), "--host", "127.0.0.1", "--port", str(port)],
                stdout=output,
                stderr=subprocess.STDOUT,
                env={**os.environ, "ANONYMIZED_TELEMETRY": "False"},
                start_new_session=True,  # stopped by the supervisor, after the workers
                preexec_fn=_die_with_parent,  # the parent runs no threads
            )
        store = cls(process, url, path)
        deadline = time.monotonic() + _START_TIMEOUT_S
        while not store.answers():
            if process.poll() is not None:
                raise StoreProcessError(
                    f"the vector store process for {path} exited at start ({log} says why)"
                )
            if time.monotonic() > deadline:
                store.stop()
                raise StoreProcessError(
                    f"the vector store process for {path} did not answer within "
                    f"{_START_TIMEOUT_S:g} s ({log})"
                )
            time.sleep(0.1)
        logger.info("vector store %s: served to the workers at %s (pid %d)", path, url, process.pid)
        return store

    def answers(self) -> bool:
        """Whether its heartbeat answers."""
        try:
            with urllib.request.urlopen(f"{self.url}/api/v2/heartbeat", timeout=2) as reply:  # noqa: S310 - our own loopback URL
                return bool(reply.status == 200)
        except (OSError, urllib.error.URLError):
            return False

    def stop(self) -> None:
        """Stop it (after the workers, which flush their cache writes into it)."""
        if self._process.poll() is not None:
            return
        self._process.terminate()
        try:
            self._process.wait(timeout=_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()


def _chroma_command() -> str:
    beside = Path(sys.executable).parent / "chroma"
    if beside.exists():
        return str(beside)
    found = shutil.which("chroma")
    if found is None:
        raise StoreProcessError(
            "the `chroma` command of the chromadb package is not installed; it serves the "
            "vector store to several workers (or set cache.chroma_url to a Chroma server)"
        )
    return found


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _die_with_parent() -> None:
    if sys.platform != "linux":
        return
    with contextlib.suppress(OSError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
