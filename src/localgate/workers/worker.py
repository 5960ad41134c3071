"""The worker's side of ``localgate serve --workers N``: serve the inherited socket."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from pathlib import Path

import uvicorn

from localgate.app.drain import Drain, DrainingServer
from localgate.app.worker import WorkerSlot
from localgate.workers.balance import BalancedAcceptor, ConnectionBoard
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
    """uvicorn's server on the inherited socket, accepting its share of the connections
    (``balance.py``) rather than whatever reaches it first."""

    def __init__(
        self, config: uvicorn.Config, drain: Drain, delay_s: float, spec: WorkerSpec
    ) -> None:
        super().__init__(config, drain, delay_s)
        self._spec = spec
        self._acceptor: BalancedAcceptor | None = None

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        """uvicorn's start-up (its lifespan) without its server: this worker accepts from
        the listening socket itself; then "ready" to the supervisor (one line, atomic in a
        pipe)."""
        await super().startup([])
        if self.started and sockets:
            config = self.config

            def create_protocol() -> asyncio.Protocol:
                # What uvicorn's own server makes for each connection.
                protocol: asyncio.Protocol = config.http_protocol_class(  # type: ignore[call-arg]
                    config=config,
                    server_state=self.server_state,
                    app_state=self.lifespan.state,
                )
                return protocol

            board = ConnectionBoard(
                Path(self._spec.metrics_dir) / "connections", self._spec.count, self._spec.index
            )
            self._acceptor = BalancedAcceptor(
                sockets[0],
                create_protocol,
                board,
                lambda: len(self.server_state.connections),
                ssl_context=config.ssl,
            )
            self._acceptor.start()
        if self.started:
            with contextlib.suppress(OSError):
                os.write(self._spec.ready_fd, f"{self._spec.index} {os.getpid()}\n".encode())
            with contextlib.suppress(OSError):
                os.close(self._spec.ready_fd)

    async def on_tick(self, counter: int) -> bool:
        """uvicorn's tick (every 0.1 s): also tells the other workers how busy this one is,
        which is the sign that it is alive."""
        if self._acceptor is not None:
            self._acceptor.publish()
        return await super().on_tick(counter)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        """Stop accepting, leave the board, then uvicorn's shutdown (which closes the
        socket)."""
        if self._acceptor is not None:
            self._acceptor.stop()
        await super().shutdown(sockets)
