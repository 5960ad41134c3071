"""Least-connections accepting (workers/balance.py): two acceptors on one listening socket,
as two workers would be, with real loopback connections and a clock the test moves."""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
from collections.abc import Callable, Coroutine, Iterator
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import pytest
import uvloop

from localgate.workers.balance import PATIENCE_S, STALE_S, BalancedAcceptor, ConnectionBoard
from tests.certificates import TestAuthority
from tests.conftest import INFRASTRUCTURE_TIMEOUT_S

T = TypeVar("T")
Runs = Callable[[Coroutine[Any, Any, Any]], Any]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Held(asyncio.Protocol):
    """A connection an acceptor handed over, counted while open."""

    def __init__(self, open_: set[Held]) -> None:
        self._open = open_

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self._open.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self._open.discard(self)


class Worker:
    """One acceptor and the connections it took, on its own descriptor of the socket."""

    def __init__(self, listener: socket.socket, board: ConnectionBoard, clock: Clock) -> None:
        self.open: set[Held] = set()
        self.listener = socket.socket(fileno=os.dup(listener.fileno()))
        self.acceptor = BalancedAcceptor(
            self.listener,
            lambda: Held(self.open),
            board,
            lambda: len(self.open),
            clock=clock,
        )

    def close(self) -> None:
        self.acceptor.stop()
        for held in list(self.open):
            held.transport.close()
        self.listener.close()


@pytest.fixture(params=["asyncio", "uvloop"])
def run_loop(request: pytest.FixtureRequest) -> Callable[[Coroutine[Any, Any, T]], T]:
    """Runs a coroutine on asyncio's loop, or on uvloop's as the gateway does."""
    factory = uvloop.new_event_loop if request.param == "uvloop" else None

    def run(coroutine: Coroutine[Any, Any, T]) -> T:
        with asyncio.Runner(loop_factory=factory) as runner:
            return runner.run(coroutine)

    return run


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    sock = socket.create_server(("127.0.0.1", 0), backlog=128)
    yield sock
    sock.close()


def _connect(listener: socket.socket, count: int) -> list[socket.socket]:
    """``count`` connections, all queued before any acceptor runs (a burst)."""
    return [socket.create_connection(listener.getsockname()) for _ in range(count)]


async def _until(condition: Callable[[], bool]) -> None:
    """Let the loop run until ``condition`` holds (it changes in the acceptors' callbacks,
    which have no event of their own to wait on)."""

    async def poll() -> None:
        while not condition():  # noqa: ASYNC110 - see above
            await asyncio.sleep(0.001)

    await asyncio.wait_for(poll(), INFRASTRUCTURE_TIMEOUT_S)


def test_a_burst_of_connections_is_shared_evenly(
    tmp_path: Path, listener: socket.socket, run_loop: Runs
) -> None:
    clock = Clock()
    clients = _connect(listener, 20)

    async def run() -> tuple[int, int]:
        boards = [ConnectionBoard(tmp_path / "board", 2, index, clock) for index in range(2)]
        first, second = (Worker(listener, board, clock) for board in boards)
        first.acceptor.start()
        second.acceptor.start()
        try:
            await _until(lambda: len(first.open) + len(second.open) == 20)
            return len(first.open), len(second.open)
        finally:
            first.close()
            second.close()

    try:
        first, second = run_loop(run())
        # Even but for a connection in flight: one being set up counts once as a handshake
        # and once as open until its task's callback has run, so a tie can go either way.
        assert first + second == 20
        assert abs(first - second) <= 2, (first, second)
    finally:
        for client in clients:
            client.close()


def test_without_balance_one_acceptor_takes_the_whole_burst(
    tmp_path: Path, listener: socket.socket, run_loop: Runs
) -> None:
    """What the board prevents: alone (the other worker gone), an acceptor takes them all,
    as an event loop accepting until the queue is empty does."""
    clock = Clock()
    gone = ConnectionBoard(tmp_path / "board", 2, 1, clock)
    gone.publish(0)
    clock.now += STALE_S + 1  # the other worker stopped refreshing its slot
    clients = _connect(listener, 8)

    async def run() -> int:
        worker = Worker(listener, ConnectionBoard(tmp_path / "board", 2, 0, clock), clock)
        worker.acceptor.start()
        try:
            await _until(lambda: len(worker.open) == 8)
            return len(worker.open)
        finally:
            worker.close()

    try:
        assert run_loop(run()) == 8
    finally:
        for client in clients:
            client.close()


def _declined_since(acceptor: BalancedAcceptor, seen: int) -> bool:
    return acceptor.declines > seen


def test_a_busier_worker_leaves_a_connection_to_the_other_until_patience_runs_out(
    tmp_path: Path, listener: socket.socket, run_loop: Runs
) -> None:
    clock = Clock()
    # The other worker is alive with no connections, but not accepting (stuck, say).
    other = ConnectionBoard(tmp_path / "board", 2, 1, clock)
    other.publish(0)
    clients = _connect(listener, 2)

    async def run() -> list[int]:
        worker = Worker(listener, ConnectionBoard(tmp_path / "board", 2, 0, clock), clock)
        worker.acceptor.start()
        taken = []
        declines = 0
        try:
            await _until(lambda: len(worker.open) == 1)  # 0 <= 0: its turn
            # Now it holds more than the other: it looks again every few milliseconds,
            # and leaves the connection queued while the other worker may still take it.
            step = PATIENCE_S / 4
            for _ in range(4):
                await _until(partial(_declined_since, worker.acceptor, declines))
                declines = worker.acceptor.declines
                taken.append(len(worker.open))
                clock.now += step
                other.publish(0)  # alive all along
            # Waited PATIENCE_S in all: it takes the connection itself.
            await _until(lambda: len(worker.open) == 2)
            taken.append(len(worker.open))
            return taken
        finally:
            worker.close()

    try:
        assert run_loop(run()) == [1, 1, 1, 1, 2]
    finally:
        for client in clients:
            client.close()


def test_a_worker_that_stops_is_not_counted_any_more(tmp_path: Path) -> None:
    clock = Clock()
    boards = [ConnectionBoard(tmp_path / "board", 3, index, clock) for index in range(3)]
    assert boards[0].fewest_elsewhere() is None  # nobody else has said anything yet
    boards[1].publish(4)
    boards[2].publish(7)
    assert boards[0].fewest_elsewhere() == 4
    boards[1].leave()
    assert boards[0].fewest_elsewhere() == 7
    clock.now += STALE_S + 0.5
    assert boards[0].fewest_elsewhere() is None
    boards[2].publish(2)
    assert boards[0].fewest_elsewhere() == 2


def test_the_board_refuses_an_index_outside_the_workers(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="worker index 2 is not among 2 workers"):
        ConnectionBoard(tmp_path / "board", 2, 2)


class Greeting(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.write(b"served")  # type: ignore[attr-defined]
        transport.close()


def test_a_tls_listener_hands_over_connections_after_the_handshake(
    tmp_path: Path, listener: socket.socket, run_loop: Runs
) -> None:
    """With TLS on, each connection is set up as ``create_server`` would: the handshake,
    then the protocol; a client that trusts the CA reads what the protocol wrote."""
    authority = TestAuthority(tmp_path / "ca")
    issued = authority.server("gateway")
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_context.load_cert_chain(issued.cert_file, issued.key_file)
    client_context = ssl.create_default_context(cafile=authority.cert_file)
    clock = Clock()

    async def run() -> bytes:
        acceptor = BalancedAcceptor(
            listener,
            Greeting,
            ConnectionBoard(tmp_path / "board", 1, 0, clock),
            lambda: 0,
            ssl_context=server_context,
            clock=clock,
        )
        acceptor.start()
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(
                    *listener.getsockname(), ssl=client_context, server_hostname="localhost"
                ),
                INFRASTRUCTURE_TIMEOUT_S,
            )
            greeting = await asyncio.wait_for(reader.read(), INFRASTRUCTURE_TIMEOUT_S)
            writer.close()
            return greeting
        finally:
            acceptor.stop()

    assert run_loop(run()) == b"served"
