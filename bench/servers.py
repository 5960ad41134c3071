"""The benchmark's child processes: started pinned, polled until ready, always stopped.

Each server runs in its own process and session, so a Ctrl-C reaches only the
benchmark, which then stops them in order; on Linux each child also gets SIGTERM
from the kernel should the benchmark itself die without cleaning up.
"""

from __future__ import annotations

import ctypes
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import IO

__all__ = [
    "BenchError",
    "ServerProcess",
    "clean_environment",
    "create_tenant_key",
    "free_ports",
    "http_call",
    "pinned",
    "stopping_cleanly",
]

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
_POLL_INTERVAL_S = 0.05
_STOP_TIMEOUT_S = 10.0
_PR_SET_PDEATHSIG = 1


class BenchError(RuntimeError):
    """The benchmark cannot go on; the message says why."""


# Google credentials a caller may have set: never handed to a server a benchmark starts.
_CREDENTIAL_VARIABLES = ("GEMINI_API_KEY", "GOOGLE_API_KEY")


def clean_environment() -> dict[str, str]:
    """This process's environment without localgate's settings or Google credentials, so
    that no configuration or key of the caller's reaches the servers a benchmark starts."""
    return {
        name: value
        for name, value in os.environ.items()
        if not name.startswith("LOCALGATE_") and name not in _CREDENTIAL_VARIABLES
    }


def create_tenant_key(localgate: str, env: Mapping[str, str]) -> str:
    """A key for the tenant ``bench``, made with ``localgate keys create`` in ``env``."""
    command = [localgate, "keys", "create", "--tenant", "bench", "--json"]
    try:
        done = subprocess.run(
            command, env=dict(env), capture_output=True, text=True, timeout=60, check=True
        )
        key = json.loads(done.stdout)["key"]
    except (OSError, subprocess.SubprocessError, ValueError, KeyError) as exc:
        raise BenchError(f"could not create a tenant key with {command[:3]}: {exc}") from exc
    if not isinstance(key, str):
        raise BenchError("`localgate keys create --json` printed no key")
    return key


def stopping_cleanly(measure: Callable[[], int]) -> int:
    """Run a whole benchmark (``measure`` returns its exit code) so that a SIGTERM unwinds
    like Ctrl-C, stopping every server it started on the way out; a ``BenchError`` or an
    interruption ends it with a message and exit code 1 or 130."""
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        return measure()
    except BenchError as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("bench: interrupted; every server it started has been stopped", file=sys.stderr)
        return 130


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def free_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports on 127.0.0.1 that nothing listens on right now.

    Another program could still take one before the server binds it; the server then
    fails to start and the readiness check reports it.
    """
    sockets = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def fake_upstream_command(
    port: int, *, python: str = sys.executable, stream_events: int | None = None
) -> list[str]:
    """The command that runs the fake Gemini upstream on 127.0.0.1:``port``, streaming
    ``stream_events`` events per answer (None: its usual three)."""
    command = [python, "-m", "localgate.testing.fake_gemini", "--port", str(port)]
    if stream_events is not None:
        command += ["--stream-events", str(stream_events)]
    return command


def pinned(command: Sequence[str], cpus: Sequence[int] | None) -> list[str]:
    """``command`` run under ``taskset`` on ``cpus``, or as it is when ``cpus`` is None."""
    if not cpus:
        return list(command)
    return ["taskset", "--cpu-list", ",".join(map(str, cpus)), *command]


def http_call(
    port: int,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: Mapping[str, str] | None = None,
    timeout_s: float = 5.0,
) -> tuple[int, str, bytes]:
    """One request to 127.0.0.1:``port``: status, content type and body (no proxies involved)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout_s)
    try:
        connection.request(method, path, body=body, headers=dict(headers or {}))
        response = connection.getresponse()
        return response.status, response.getheader("content-type", ""), response.read()
    finally:
        connection.close()


class ServerProcess:
    """A server the benchmark started; ``stop`` is safe to call at any time, more than once."""

    def __init__(
        self,
        name: str,
        command: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: Path,
        log_path: Path,
    ) -> None:
        self.name = name
        self.command = list(command)
        self.log_path = log_path
        self._env = dict(env)
        self._cwd = cwd
        self._process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def pid(self) -> int:
        """The process id (the server itself: taskset execs it)."""
        if self._process is None:
            raise BenchError(f"{self.name} was not started")
        return self._process.pid

    def start(self) -> None:
        """Launch the process, its output going to ``log_path``."""
        self._log = self.log_path.open("wb")
        try:
            self._process = subprocess.Popen(
                self.command,
                cwd=self._cwd,
                env=self._env,
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent if sys.platform == "linux" else None,
            )
        except OSError as exc:
            self._log.close()
            raise BenchError(f"cannot start {self.name} ({self.command[0]}): {exc}") from exc

    def wait_ready(self, probe: Callable[[], bool], deadline_s: float) -> None:
        """Poll ``probe`` until it returns True; raise if the process exits or time runs out."""
        deadline = time.monotonic() + deadline_s
        while True:
            self.check_alive()
            try:
                if probe():
                    return
            except (OSError, http.client.HTTPException):
                pass  # not listening yet
            if time.monotonic() > deadline:
                raise BenchError(
                    f"{self.name} was not ready within {deadline_s:g}s.\n{self.log_tail()}"
                )
            time.sleep(_POLL_INTERVAL_S)

    def check_alive(self) -> None:
        """Raise ``BenchError`` with the end of the log if the process has exited."""
        if self._process is None:
            raise BenchError(f"{self.name} was not started")
        code = self._process.poll()
        if code is not None:
            raise BenchError(f"{self.name} exited with status {code}.\n{self.log_tail()}")

    def cpu_seconds(self) -> float:
        """User plus system CPU time the process (all its threads) has used so far."""
        stat = Path(f"/proc/{self.pid}/stat").read_text()
        fields = stat.rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS

    def log_tail(self, lines: int = 20) -> str:
        """The last lines of the process's output."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return f"(no log at {self.log_path})"
        tail = "\n".join(text.splitlines()[-lines:])
        return f"--- last lines of {self.name}'s output ---\n{tail}"

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it has not exited after a grace period."""
        process = self._process
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=_STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self._log is not None:
            self._log.close()
            self._log = None


def _die_with_parent() -> None:
    # Runs in the child between fork and exec; survives the exec of taskset and the server.
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
