"""The worker's side of ``localgate serve --workers N``: serve the inherited socket."""

from __future__ import annotations

import contextlib
import os
import socket
from pathlib import Path

import uvicorn

from localgate.app.drain import Drain, DrainingServer
from localgate.app.worker import WorkerSlot
from localgate.workers.supervisor import WORKER_ENV, WorkerSpec

__all__ = ["Worker", "worker_from_environment"]


class Worker:
    """This process as one worker of a supervisor (``supervisor.py``)."""

    def __init__(self, spec: WorkerSpec) -> None:
        self.spec = spec

    @property
    def slot(self) -> WorkerSlot:
        """What the app needs to know of it."""
        return WorkerSlot(
            index=self.spec.index,
            metrics_dir=Path(self.spec.metrics_dir),
            count=self.spec.count,
            supervisor_pid=self.spec.supervisor_pid,
        )

    def listener(self) -> socket.socket:
        """The listening socket the supervisor bound."""
        return socket.socket(fileno=self.spec.listen_fd)

    def server(self, config: uvicorn.Config, drain: Drain, delay_s: float) -> DrainingServer:
        """The draining server, telling the supervisor once it serves."""
        return _WorkerServer(config, drain, delay_s, self.spec)


def worker_from_environment() -> Worker | None:
    """The worker this process was started as, or None (not started by a supervisor)."""
    encoded = os.environ.get(WORKER_ENV)
    return Worker(WorkerSpec.decode(encoded)) if encoded else None


class _WorkerServer(DrainingServer):
    def __init__(
        self, config: uvicorn.Config, drain: Drain, delay_s: float, spec: WorkerSpec
    ) -> None:
        super().__init__(config, drain, delay_s)
        self._spec = spec

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        """uvicorn's start-up; then "ready" to the supervisor (one line, atomic in a pipe)."""
        await super().startup(sockets)
        if self.started:
            with contextlib.suppress(OSError):
                os.write(self._spec.ready_fd, f"{self._spec.index} {os.getpid()}\n".encode())
            with contextlib.suppress(OSError):
                os.close(self._spec.ready_fd)
