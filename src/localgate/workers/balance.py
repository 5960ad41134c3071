"""Least-connections accepting for workers that share one listening socket.

The kernel gives a new connection to whichever worker calls ``accept`` first, and an event
loop that wakes to a readable listening socket accepts until none is left: a burst of
connections (a client opening its pool of keep-alive connections at once, a load balancer
reconnecting) lands on one worker, and stays there. Measured with two workers and 64
connections opened together: 58 on one worker and 6 on the other, and two workers served
no more than one.

So each worker accepts from the shared socket itself, one connection at a time, and only
while it holds no more connections than the least busy of the others; otherwise it leaves
the connection in the queue for them and looks again shortly. Every worker publishes its
count of open connections on a small board all of them map (a file in the workers' shared
directory). A worker that has not refreshed its slot for ``STALE_S`` is gone or stuck and
not waited for, and a connection nobody else took within ``PATIENCE_S`` is taken anyway:
balance never costs more than that much latency. The one-socket model's promises hold: a
connection waits in the one queue until a live worker takes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import mmap
import os
import socket
import ssl
import struct
import time
from collections.abc import Callable
from pathlib import Path

__all__ = ["PATIENCE_S", "RETRY_S", "STALE_S", "BalancedAcceptor", "ConnectionBoard"]

logger = logging.getLogger("localgate.workers")

# A worker's slot: its open connections, and when it last said so (time.monotonic, the
# same clock in every process of the host).
_SLOT = struct.Struct("<qd")
# A slot older than this belongs to a worker that is gone or stuck: not waited for.
STALE_S = 1.0
# A worker that left a connection to the others looks at the queue again after this...
RETRY_S = 0.002
# ... and takes the connection itself if nobody else has for this long.
PATIENCE_S = 0.05


class ConnectionBoard:
    """Every worker's count of open connections, in a file all of them map.

    Slots are written without a lock: a torn read gives a count that is off for one
    decision, which costs a little balance, never a connection.
    """

    def __init__(
        self,
        path: Path,
        count: int,
        index: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not 0 <= index < count:
            raise ValueError(f"worker index {index} is not among {count} workers")
        self._index = index
        self._count = count
        self._clock = clock
        size = count * _SLOT.size
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            # Every worker makes sure of the size; extending a file to the size it has
            # changes nothing, so the workers need not agree on who creates it.
            if os.fstat(fd).st_size < size:
                os.ftruncate(fd, size)
            self._map = mmap.mmap(fd, size)
        finally:
            os.close(fd)

    def publish(self, connections: int) -> None:
        """This worker holds ``connections`` open connections, as of now."""
        _SLOT.pack_into(self._map, self._index * _SLOT.size, connections, self._clock())

    def leave(self) -> None:
        """This worker takes no more connections: the others stop counting it at once."""
        _SLOT.pack_into(self._map, self._index * _SLOT.size, 0, -math.inf)

    def fewest_elsewhere(self) -> int | None:
        """The fewest connections any other live worker holds (None: no other is live)."""
        now = self._clock()
        fewest: int | None = None
        for index in range(self._count):
            if index == self._index:
                continue
            connections, when = _SLOT.unpack_from(self._map, index * _SLOT.size)
            if now - when > STALE_S:
                continue
            if fewest is None or connections < fewest:
                fewest = connections
        return fewest

    def close(self) -> None:
        """Unmap the board."""
        self._map.close()


class BalancedAcceptor:
    """Accepts from ``listener`` on this event loop, one connection at a time, while this
    worker holds no more connections than the least busy other worker (``ConnectionBoard``);
    each connection goes to ``protocol_factory``, as ``loop.create_server`` would give it."""

    def __init__(
        self,
        listener: socket.socket,
        protocol_factory: Callable[[], asyncio.Protocol],
        board: ConnectionBoard,
        connections: Callable[[], int],
        *,
        ssl_context: ssl.SSLContext | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._listener = listener
        self._factory = protocol_factory
        self._board = board
        self._connections = connections
        self._ssl = ssl_context
        self._clock = clock
        self._loop: asyncio.AbstractEventLoop | None = None
        self._watching = False
        self._retry: asyncio.TimerHandle | None = None
        # Since when, and when last, this worker left a waiting connection to the others.
        self._declined_since = 0.0
        self._declined_at: float | None = None
        self._handshakes: set[asyncio.Task[object]] = set()
        # Times a connection was left to the others (for tests and debugging).
        self.declines = 0

    def start(self) -> None:
        """Begin accepting (on the running loop)."""
        self._loop = asyncio.get_running_loop()
        self._listener.setblocking(False)
        self.publish()
        self._watch()

    def stop(self) -> None:
        """Accept no more; connections already taken are not touched."""
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None
        if self._watching and self._loop is not None:
            self._loop.remove_reader(self._listener.fileno())
            self._watching = False
        self._loop = None
        self._board.leave()
        self._board.close()

    def publish(self) -> None:
        """Tell the other workers how many connections this one holds (also a heartbeat:
        call it at least every ``STALE_S``)."""
        if self._loop is not None:
            self._board.publish(self._held())

    def _watch(self) -> None:
        self._retry = None
        if self._loop is not None and not self._watching:
            self._loop.add_reader(self._listener.fileno(), self._readable)
            self._watching = True

    def _pause(self) -> None:
        if self._loop is None:
            return
        if self._watching:
            self._loop.remove_reader(self._listener.fileno())
            self._watching = False
        if self._retry is None:
            self._retry = self._loop.call_later(RETRY_S, self._watch)

    def _held(self) -> int:
        # Connections still being set up (a TLS handshake) count as held.
        return self._connections() + len(self._handshakes)

    def _readable(self) -> None:
        mine = self._held()
        self._board.publish(mine)
        fewest = self._board.fewest_elsewhere()
        if fewest is not None and mine > fewest:
            now = self._clock()
            # Declines while a connection waits come every RETRY_S or so; a longer gap
            # since the last one means the queue emptied meanwhile: a new wait begins.
            if self._declined_at is None or now - self._declined_at > PATIENCE_S:
                self._declined_since = now
            self._declined_at = now
            if now - self._declined_since < PATIENCE_S:
                self.declines += 1
                self._pause()
                return
        try:
            connection, _ = self._listener.accept()
        except (BlockingIOError, InterruptedError):
            return  # another worker took it
        except OSError as exc:
            # Out of file descriptors, say: the connection stays queued; look again soon
            # rather than spin on a socket that stays readable.
            logger.warning("accepting a connection failed: %s", exc)
            self._pause()
            return
        self._declined_at = None
        self._adopt(connection)
        self._board.publish(self._held())

    def _adopt(self, connection: socket.socket) -> None:
        connection.setblocking(False)
        if connection.family in (socket.AF_INET, socket.AF_INET6):
            connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        loop = self._loop
        if loop is None:  # stopped meanwhile
            connection.close()
            return
        task = loop.create_task(
            loop.connect_accepted_socket(self._factory, connection, ssl=self._ssl)
        )
        self._handshakes.add(task)
        task.add_done_callback(lambda done: self._adopted(done, connection))

    def _adopted(self, task: asyncio.Task[object], connection: socket.socket) -> None:
        self._handshakes.discard(task)
        if task.cancelled() or task.exception() is not None:
            # A TLS handshake that failed or timed out: the client went away or spoke
            # something else; nothing was served on it.
            if not task.cancelled():
                logger.debug("connection not set up: %s", task.exception())
            with contextlib.suppress(OSError):
                connection.close()
