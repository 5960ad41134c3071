"""The parent of ``localgate serve --workers N``: binds the port, runs N workers, supervises.

Pre-fork, one socket: the parent binds and listens once, then starts N workers (each a
``localgate serve`` of its own, with its own event loop) that inherit the listening socket
and accept from it. Chosen over ``SO_REUSEPORT`` (one socket per worker) because:

- a worker that dies loses nothing waiting: connections queue on the one socket the parent
  keeps open and the other workers take them, while with ``SO_REUSEPORT`` the kernel has
  already assigned some to the dead worker's socket, and they are reset;
- the port is bound once: "port in use" is one error at start, not N, and no other process
  of the same user can join the port and receive a share of the traffic, which
  ``SO_REUSEPORT`` allows;
- it is what uvicorn's and gunicorn's worker models do, on every platform.

The kernel hands each connection to one of the workers waiting in ``accept``; under load
they all wait, so the load spreads.

The parent runs no event loop and imports nothing of the gateway: it waits for signals and
for its children. SIGTERM or Ctrl-C drains every worker (each runs its own drain, see
``app/drain.py``) and the parent closes its copy of the socket after ``drain_delay_s``, so
new connections are refused once the workers stop listening (at once on a second signal);
it exits 0 once every worker has exited 0. SIGHUP is passed to every worker (each reloads
its configuration; the pid file names the parent). A worker that dies is started again, at
once the first time and then after a growing pause; more than ``MAX_RESTARTS`` deaths of one
worker within ``RESTART_WINDOW_S`` stop the gateway (exit 1) rather than restart forever.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import logging
import os
import selectors
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

__all__ = [
    "MAX_RESTARTS",
    "RESTART_WINDOW_S",
    "WORKER_ENV",
    "RestartPolicy",
    "Supervisor",
    "WorkerSpec",
    "bind",
]

logger = logging.getLogger("localgate.workers")

# Tells a `localgate serve` that it is a worker, and what it inherited (JSON, WorkerSpec).
WORKER_ENV = "LOCALGATE_WORKER"
MAX_RESTARTS = 5
RESTART_WINDOW_S = 60.0
# Beyond drain_delay_s + drain_timeout_s: the workers' own shutdown (audit flush, last
# checkpoint) gets this long before the parent kills what is left.
SHUTDOWN_GRACE_S = 30.0
# A worker that exits with this code could not start (serve's own code for it).
START_FAILED = 3
# How often a worker held back by an invalid configuration file looks at it again.
CONFIG_RETRY_S = 2.0
_TICK_S = 0.5
_PR_SET_PDEATHSIG = 1
_FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@dataclass(frozen=True, slots=True)
class WorkerSpec:
    """What a worker inherits: its index among ``count`` workers, the listening socket,
    where it reports readiness, the directory where the workers answer each other's
    questions (metrics, configuration), and its supervisor's pid (a reload goes through it)."""

    index: int
    listen_fd: int
    ready_fd: int
    metrics_dir: str
    count: int
    supervisor_pid: int

    def encode(self) -> str:
        """As the worker finds it in ``WORKER_ENV``."""
        return json.dumps(
            {
                "index": self.index,
                "listen_fd": self.listen_fd,
                "ready_fd": self.ready_fd,
                "metrics_dir": self.metrics_dir,
                "count": self.count,
                "supervisor_pid": self.supervisor_pid,
            }
        )

    @classmethod
    def decode(cls, text: str) -> WorkerSpec:
        """The spec ``encode`` wrote."""
        raw = json.loads(text)
        return cls(
            index=int(raw["index"]),
            listen_fd=int(raw["listen_fd"]),
            ready_fd=int(raw["ready_fd"]),
            metrics_dir=str(raw["metrics_dir"]),
            count=int(raw["count"]),
            supervisor_pid=int(raw["supervisor_pid"]),
        )


@dataclass(slots=True)
class RestartPolicy:
    """When a dead worker may start again: at once after its first death in the window,
    then after 1, 2, 4, ... seconds (at most 30); never after ``MAX_RESTARTS`` deaths."""

    max_restarts: int = MAX_RESTARTS
    window_s: float = RESTART_WINDOW_S
    deaths: list[float] = field(default_factory=list)

    def after_death(self, now: float) -> float | None:
        """Seconds to wait before starting the worker again, or None: give up."""
        self.deaths = [when for when in self.deaths if now - when < self.window_s]
        self.deaths.append(now)
        if len(self.deaths) > self.max_restarts:
            return None
        return 0.0 if len(self.deaths) == 1 else min(2.0 ** (len(self.deaths) - 2), 30.0)


@dataclass(slots=True)
class _Slot:
    index: int
    restarts: RestartPolicy
    process: subprocess.Popen[bytes] | None = None
    ready: bool = False
    start_at: float | None = None  # when a dead worker is due to start again
    ever_ready: bool = False
    reload_pending: bool = False  # a SIGHUP came while it was starting
    held: bool = False  # not started again: the configuration file is invalid now


def bind(host: str, port: int, backlog: int = 2048) -> socket.socket:
    """The listening socket the workers share (raises OSError: port in use, ...)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind((host, port))
        sock.listen(backlog)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


class Supervisor:
    """Runs ``count`` workers on ``listener`` until told to stop; ``run`` returns the exit code."""

    def __init__(
        self,
        *,
        command: Sequence[str],
        environment: Mapping[str, str],
        listener: socket.socket,
        count: int,
        metrics_dir: Path,
        drain_delay_s: float,
        drain_timeout_s: float,
        max_restarts: int = MAX_RESTARTS,
        config_problem: Callable[[], str | None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._command = list(command)
        self._environment = dict(environment)
        self._listener: socket.socket | None = listener
        self._metrics_dir = metrics_dir
        self._drain_delay_s = drain_delay_s
        self._drain_timeout_s = drain_timeout_s
        self._clock = clock
        # Asked before a dead worker starts again: it reads the configuration file as it is
        # now, and an invalid one would only make it die again.
        self._config_problem = config_problem
        self._slots = [_Slot(index, RestartPolicy(max_restarts)) for index in range(count)]
        self._signals: list[int] = []
        self._stopping_since: float | None = None
        self._exit_code = 0
        self._ready_read, self._ready_write = os.pipe()
        os.set_inheritable(self._ready_write, True)
        os.set_blocking(self._ready_read, False)
        self._ready_buffer = b""
        self._announced = False

    def run(self) -> int:
        """Start the workers and supervise them until they have all exited."""
        wake_read, wake_write = socket.socketpair()
        wake_read.setblocking(False)
        wake_write.setblocking(False)
        previous_wakeup = signal.set_wakeup_fd(wake_write.fileno())
        handlers = {sig: signal.signal(sig, self._on_signal) for sig in _FORWARDED}
        handlers[signal.SIGCHLD] = signal.signal(signal.SIGCHLD, self._on_signal)
        selector = selectors.DefaultSelector()
        selector.register(wake_read, selectors.EVENT_READ)
        selector.register(self._ready_read, selectors.EVENT_READ)
        try:
            for slot in self._slots:
                self._start(slot)
            while any(
                slot.process is not None or slot.start_at is not None for slot in self._slots
            ):
                for key, _ in selector.select(timeout=_TICK_S):
                    if key.fileobj is wake_read:
                        with contextlib.suppress(BlockingIOError):
                            wake_read.recv(4096)
                    else:
                        self._read_ready()
                self._handle_signals()
                self._reap()
                self._tick()
        finally:
            for sig, handler in handlers.items():
                signal.signal(sig, handler)
            signal.set_wakeup_fd(previous_wakeup)
            selector.close()
            wake_read.close()
            wake_write.close()
            self._close_listener()
            os.close(self._ready_read)
            os.close(self._ready_write)
            self._kill_all()
        return self._exit_code

    def _on_signal(self, sig: int, frame: FrameType | None) -> None:
        self._signals.append(sig)

    def _handle_signals(self) -> None:
        pending, self._signals = self._signals, []
        for sig in pending:
            if sig == signal.SIGCHLD:
                continue  # reaped below
            if sig == signal.SIGHUP:
                if self._stopping_since is None:
                    logger.info("SIGHUP: every worker reloads its configuration")
                    self._reload_all()
                continue
            if self._stopping_since is None:
                self._stop(
                    f"draining: every worker stops; listening for {self._drain_delay_s:g} s "
                    f"more, then requests in flight have up to {self._drain_timeout_s:g} s "
                    "to finish"
                )
            else:
                # A second signal ends the delay: the workers stop listening at once, and
                # so does this copy of the socket (else the kernel would still queue new
                # connections on it, that nobody accepts until the delay is over).
                self._close_listener()
            # Each signal goes on to the workers as it came: the first drains them, a second
            # stops their listening at once, a second Ctrl-C gives up on what is in flight.
            self._signal_all(sig)

    def _stop(self, reason: str, level: int = logging.INFO) -> None:
        self._stopping_since = self._clock()
        for slot in self._slots:
            slot.start_at = None
        logger.log(level, reason)

    def _reload_all(self) -> None:
        for slot in self._slots:
            if slot.process is None:
                continue  # dead: it reads the file when it starts again
            if not slot.ready:
                # Still starting: it may have read the file before the change, and it
                # cannot take the signal before its handler is installed.
                slot.reload_pending = True
                continue
            with contextlib.suppress(ProcessLookupError):
                slot.process.send_signal(signal.SIGHUP)

    def _signal_all(self, sig: int) -> None:
        for slot in self._slots:
            if slot.process is not None and slot.process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    slot.process.send_signal(sig)

    def _start(self, slot: _Slot) -> None:
        if self._listener is None:
            raise RuntimeError("workers start only while the gateway listens")
        spec = WorkerSpec(
            index=slot.index,
            listen_fd=self._listener.fileno(),
            ready_fd=self._ready_write,
            metrics_dir=str(self._metrics_dir),
            count=len(self._slots),
            supervisor_pid=os.getpid(),
        )
        slot.ready = slot.reload_pending = False
        slot.start_at = None
        # The command is this gateway's own, run again as a worker.
        slot.process = subprocess.Popen(  # noqa: S603
            self._command,
            env={**self._environment, WORKER_ENV: spec.encode()},
            pass_fds=(spec.listen_fd, spec.ready_fd),
            # Ctrl-C reaches the parent only, which passes it on once: a terminal's signal
            # would otherwise reach every worker twice.
            start_new_session=True,
            preexec_fn=_die_with_parent,  # the parent runs no threads
        )
        logger.info("worker %d: started (pid %d)", slot.index, slot.process.pid)

    def _read_ready(self) -> None:
        with contextlib.suppress(BlockingIOError):
            self._ready_buffer += os.read(self._ready_read, 4096)
        *lines, self._ready_buffer = self._ready_buffer.split(b"\n")
        for line in lines:
            with contextlib.suppress(ValueError):
                index, pid = (int(part) for part in line.split())
                slot = self._slots[index]
                if slot.process is not None and slot.process.pid == pid:
                    slot.ready = slot.ever_ready = True
                    if slot.reload_pending and self._stopping_since is None:
                        slot.reload_pending = False
                        with contextlib.suppress(ProcessLookupError):
                            slot.process.send_signal(signal.SIGHUP)
        if not self._announced and all(slot.ready for slot in self._slots):
            self._announced = True
            logger.info("%d workers ready", len(self._slots))

    def _reap(self) -> None:
        now = self._clock()
        for slot in self._slots:
            process = slot.process
            if process is None or process.poll() is None:
                continue
            code = process.returncode
            slot.process = None
            if self._stopping_since is not None:
                logger.info("worker %d: exited (%s)", slot.index, _describe(code))
                if code != 0 and self._exit_code == 0:
                    self._exit_code = 1
                continue
            if not self._announced and code == START_FAILED and not slot.ever_ready:
                # The gateway cannot start (its log says why): stop, as one process would.
                self._exit_code = START_FAILED
                self._stop(f"worker {slot.index} could not start; stopping", logging.ERROR)
                self._signal_all(signal.SIGTERM)
                continue
            wait = slot.restarts.after_death(now)
            if wait is None:
                self._exit_code = 1
                self._stop(
                    f"worker {slot.index} died {slot.restarts.max_restarts + 1} times within "
                    f"{slot.restarts.window_s:g} s ({_describe(code)}); stopping the gateway "
                    "instead of restarting it again",
                    logging.ERROR,
                )
                self._signal_all(signal.SIGTERM)
                continue
            logger.warning(
                "worker %d: died (%s); starting it again%s",
                slot.index,
                _describe(code),
                f" in {wait:g} s" if wait else "",
            )
            slot.start_at = now + wait

    def _tick(self) -> None:
        now = self._clock()
        if self._stopping_since is None:
            for slot in self._slots:
                if slot.start_at is not None and now >= slot.start_at:
                    self._restart(slot, now)
            return
        elapsed = now - self._stopping_since
        if elapsed >= self._drain_delay_s:
            # The workers stop listening now too: from here, connections are refused.
            self._close_listener()
        overdue = elapsed >= self._drain_delay_s + self._drain_timeout_s + SHUTDOWN_GRACE_S
        if overdue and any(slot.process is not None for slot in self._slots):
            logger.error("workers still running long after the drain; killing them")
            self._exit_code = 1
            self._kill_all()

    def _restart(self, slot: _Slot, now: float) -> None:
        problem = self._config_problem() if self._config_problem is not None else None
        if problem is not None:
            if not slot.held:
                logger.error(
                    "worker %d: not started again while the configuration file is invalid "
                    "(%s); the other workers keep their last good configuration. Fix the "
                    "file; the worker starts once it is valid",
                    slot.index,
                    problem,
                )
            slot.held = True
            slot.start_at = now + CONFIG_RETRY_S
            return
        slot.held = False
        self._start(slot)

    def _close_listener(self) -> None:
        if self._listener is not None:
            self._listener.close()
            self._listener = None

    def _kill_all(self) -> None:
        for slot in self._slots:
            if slot.process is not None:
                with contextlib.suppress(ProcessLookupError):
                    slot.process.kill()
                slot.process.wait()
                slot.process = None


def _describe(code: int) -> str:
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
        return f"killed by signal {-code}"
    return f"exit code {code}"


def _die_with_parent() -> None:
    """In the worker, between fork and exec: SIGHUP ignored until the gateway handles it (a
    reload must not end a worker still starting; an ignored signal stays ignored across
    exec); SIGTERM (a drain) if the parent dies, so no worker is left serving a port
    nobody supervises (Linux only)."""
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    if sys.platform != "linux":
        return
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
