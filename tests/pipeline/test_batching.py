"""Requests that reach a stage in the same turn of the event loop go through it together.

Each test runs on a real event loop (asyncio and uvloop) and tells turns apart by what
the tasks record after their await: nothing here waits on a clock.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
import uvloop

from localgate.pipeline.batching import Together
from tests.conftest import INFRASTRUCTURE_TIMEOUT_S

Run = Callable[[Coroutine[Any, Any, Any]], Any]


@pytest.fixture(params=["asyncio", "uvloop"])
def run(request: pytest.FixtureRequest) -> Run:
    if request.param == "uvloop":
        return lambda main: uvloop.run(main)
    return asyncio.run


class Stage:
    """Records what it runs; fails for the items it is told to."""

    def __init__(self, failing: frozenset[int] = frozenset()) -> None:
        self.log: list[str] = []
        self.failing = failing

    def __call__(self, item: int) -> None:
        self.log.append(f"work {item}")
        if item in self.failing:
            raise ValueError(f"item {item} is refused")


async def request(together: Together[int], stage: Stage, item: int) -> None:
    await together(item)
    stage.log.append(f"on {item}")


def test_requests_of_one_turn_run_back_to_back_in_order(run: Run) -> None:
    stage = Stage()
    together = Together(stage)

    async def main() -> None:
        await asyncio.gather(*(request(together, stage, n) for n in range(4)))

    run(main())
    # Run one at a time, each request would go on before the next one's work.
    assert stage.log == [f"work {n}" for n in range(4)] + [f"on {n}" for n in range(4)]


def test_each_request_gets_its_own_error(run: Run) -> None:
    stage = Stage(failing=frozenset({1}))
    together = Together(stage)

    async def main() -> list[BaseException | None]:
        return await asyncio.gather(*(together(n) for n in range(3)), return_exceptions=True)

    outcomes = run(main())
    assert outcomes[0] is None
    assert outcomes[2] is None
    assert isinstance(outcomes[1], ValueError)
    assert "item 1" in str(outcomes[1])
    assert stage.log == ["work 0", "work 1", "work 2"]


def test_a_batch_stops_at_the_limit_and_lets_its_requests_go_on(run: Run) -> None:
    stage = Stage()
    together = Together(stage, limit=2)

    async def main() -> None:
        await asyncio.gather(*(request(together, stage, n) for n in range(5)))

    run(main())
    assert stage.log == [
        "work 0", "work 1", "on 0", "on 1",
        "work 2", "work 3", "on 2", "on 3",
        "work 4", "on 4",
    ]  # fmt: skip


def test_a_request_cancelled_while_waiting_is_not_run(run: Run) -> None:
    stage = Stage()
    together = Together(stage)

    async def main() -> list[BaseException | None]:
        tasks = [asyncio.create_task(together(n)) for n in range(3)]
        await asyncio.sleep(0)  # one turn: all three wait, their batch not run yet
        assert stage.log == []
        tasks[1].cancel()
        return await asyncio.gather(*tasks, return_exceptions=True)

    outcomes = run(main())
    assert isinstance(outcomes[1], asyncio.CancelledError)
    assert outcomes[0] is None
    assert outcomes[2] is None
    assert stage.log == ["work 0", "work 2"]


def test_a_loop_closed_with_requests_waiting_leaves_nothing_behind() -> None:
    stage = Stage()
    together = Together(stage)
    first = asyncio.new_event_loop()
    try:
        waiting = first.create_task(together(0))
        # One turn: the request waits, and the loop stops before its batch runs.
        first.call_soon(first.stop)
        first.run_forever()
        assert not waiting.done()
    finally:
        first.close()

    async def main() -> None:
        # Taken for the old loop's, a request would wait for a batch that never runs.
        await asyncio.wait_for(together(1), INFRASTRUCTURE_TIMEOUT_S)

    asyncio.run(main())
    assert stage.log == ["work 1"]


def test_an_interruption_stops_the_batch_and_goes_on_up(run: Run) -> None:
    ran: list[int] = []

    def interrupted(item: int) -> None:
        ran.append(item)
        if item == 1:
            raise KeyboardInterrupt

    together = Together(interrupted)

    async def main() -> None:
        await asyncio.gather(*(together(n) for n in range(3)), return_exceptions=True)

    with pytest.raises(KeyboardInterrupt):
        run(main())
    assert ran == [0, 1]


def test_each_request_is_run_in_its_own_context(run: Run) -> None:
    current: contextvars.ContextVar[str] = contextvars.ContextVar("current")
    seen: list[tuple[int, str]] = []
    together: Together[int] = Together(lambda item: seen.append((item, current.get())))

    async def one(item: int) -> None:
        current.set(f"request {item}")
        await together(item)

    async def main() -> None:
        await asyncio.gather(*(one(n) for n in range(3)))

    run(main())
    assert seen == [(0, "request 0"), (1, "request 1"), (2, "request 2")]


def test_the_limit_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        Together(Stage(), limit=0)


def test_a_request_alone_runs_at_once_without_waiting_for_a_turn(run: Run) -> None:
    stage = Stage()
    together = Together(stage, alone=lambda: True)

    async def main() -> None:
        asyncio.get_running_loop().call_soon(stage.log.append, "next turn")
        await request(together, stage, 1)

    run(main())
    # Waiting for company, the work would come after the turn's other callbacks.
    assert stage.log == ["work 1", "on 1", "next turn"]


def test_a_request_alone_gets_its_own_error_at_once(run: Run) -> None:
    stage = Stage(failing=frozenset({1}))
    together = Together(stage, alone=lambda: True)

    async def main() -> None:
        with pytest.raises(ValueError, match="item 1 is refused"):
            await together(1)

    run(main())
    assert stage.log == ["work 1"]


def test_a_request_that_finds_others_waiting_joins_them(run: Run) -> None:
    """Told it is alone by the time it arrives (the others' requests just ended, say), a
    request that finds others queued waits with them: it does not overtake them."""
    stage = Stage()
    answers = iter([False, True])
    together = Together(stage, alone=lambda: next(answers))

    async def main() -> None:
        await asyncio.gather(request(together, stage, 0), request(together, stage, 1))

    run(main())
    assert stage.log == ["work 0", "work 1", "on 0", "on 1"]
