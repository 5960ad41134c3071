"""Circuit breakers shared by replicas through the Redis running here (limits.backend: redis).

Each "replica" is a dispatcher of its own with its own ``SharedBreakers`` on one key prefix:
what one learns reaches the other only through Redis. Syncs are called by the test, never
waited for; the dispatchers' clocks are the test's (the shared marker's time is Redis's).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from localgate.config import CircuitBreakerSettings, RetrySettings
from localgate.errors import LocalgateError, ServiceUnavailable, UpstreamUnreachable
from localgate.upstream import Router, UpstreamDispatcher
from localgate.upstream.breaker import BreakerState
from localgate.upstream.shared_breakers import SharedBreakers
from tests.limits.conftest import REDIS_URL
from tests.limits.conftest import redis_prefix as redis_prefix  # the fixture, for pytest
from tests.upstream.fakes import ScriptedUpstream
from tests.upstream.test_retries import Clock, call, context

BREAKER = CircuitBreakerSettings(failure_ratio=0.5, window_s=30, min_requests=6, open_s=30)


class Replica:
    """A dispatcher over one upstream, its clock, and its link to the shared breakers."""

    def __init__(self, prefix: str, settings: CircuitBreakerSettings = BREAKER) -> None:
        self.clock = Clock()
        self.upstream = ScriptedUpstream("primary")
        self.dispatcher = UpstreamDispatcher(
            Router(self.upstream),
            retries=RetrySettings(max_attempts=1),
            breaker=settings,
            clock=self.clock,
            sleep=self.clock.sleep,
        )
        self.shared = SharedBreakers(
            REDIS_URL, lambda: self.dispatcher.breakers, settings, prefix=prefix
        )
        self.dispatcher.share_breakers(self.shared)

    def state(self) -> BreakerState:
        return self.dispatcher.breaker("primary").state

    async def send(self, *, fail: bool) -> LocalgateError | None:
        """One call; the error it ended with, if any."""
        self.upstream.error = UpstreamUnreachable("refused") if fail else None
        try:
            await self.dispatcher.unary(context(), (self.upstream,), call())
        except LocalgateError as exc:
            return exc
        return None

    async def settle(self) -> None:
        """Let what the replica publishes in the background reach Redis."""
        await asyncio.gather(*self.shared._tasks)


def in_replicas(
    test: Callable[[Replica, Replica], Awaitable[None]],
) -> Callable[[str], None]:
    """A test running ``test`` on two replicas sharing a key prefix of the test's own."""

    def run(redis_prefix: str) -> None:
        async def body() -> None:
            one, two = Replica(redis_prefix), Replica(redis_prefix)
            try:
                await test(one, two)
            finally:
                await one.shared.close()
                await two.shared.close()

        asyncio.run(body())

    return run


async def _opening_on_one_replica_is_seen_by_the_other(one: Replica, two: Replica) -> None:
    for _ in range(6):
        await one.send(fail=True)
    await one.settle()
    assert one.state() is BreakerState.OPEN
    assert two.state() is BreakerState.CLOSED

    await two.shared.sync()

    assert two.state() is BreakerState.OPEN
    assert not two.shared._tasks  # an opening learnt from Redis is not published back
    calls_before = len(two.upstream.calls)
    refused = await two.send(fail=False)
    assert isinstance(refused, ServiceUnavailable)
    assert "circuit breaker is open" in refused.message
    assert len(two.upstream.calls) == calls_before  # nothing was sent


test_an_opening_on_one_replica_is_seen_by_the_other = in_replicas(
    _opening_on_one_replica_is_seen_by_the_other
)


async def _failures_spread_over_replicas_add_up(one: Replica, two: Replica) -> None:
    # Three failures each: below min_requests (6) for either alone, enough together.
    for replica in (one, two):
        for _ in range(3):
            await replica.send(fail=True)
    assert (one.state(), two.state()) == (BreakerState.CLOSED, BreakerState.CLOSED)

    await one.shared.sync()
    assert one.state() is BreakerState.CLOSED  # the window holds three so far
    await two.shared.sync()
    assert two.state() is BreakerState.OPEN
    await one.shared.sync()
    assert one.state() is BreakerState.OPEN


test_failures_spread_over_replicas_add_up_in_the_shared_window = in_replicas(
    _failures_spread_over_replicas_add_up
)


async def _successes_keep_it_closed(one: Replica, two: Replica) -> None:
    for replica in (one, two):
        for fail in (True, False, False, False):
            await replica.send(fail=fail)
        await replica.shared.sync()
    # 2 failures in 8 calls: under the ratio.
    assert (one.state(), two.state()) == (BreakerState.CLOSED, BreakerState.CLOSED)


test_a_healthy_upstream_with_a_few_failures_stays_closed_everywhere = in_replicas(
    _successes_keep_it_closed
)


async def _one_probe_at_a_time(one: Replica, two: Replica) -> None:
    for _ in range(6):
        await one.send(fail=True)
    await one.settle()
    await two.shared.sync()
    for replica in (one, two):
        replica.clock.now += BREAKER.open_s  # both see the interval over
    assert one.state() is BreakerState.HALF_OPEN

    # One's probe hangs; meanwhile two may not probe too.
    one.upstream.never_answer = True
    one.upstream.called = asyncio.Event()
    probe = asyncio.create_task(one.send(fail=False))
    await one.upstream.called.wait()
    refused = await two.send(fail=False)
    assert isinstance(refused, ServiceUnavailable)
    assert len(two.upstream.calls) == 0

    # The probe succeeds: the claim is freed; two's next call is its own probe, and closes.
    one.upstream.never_answer = False
    probe.cancel()
    await asyncio.gather(probe, return_exceptions=True)
    await one.settle()
    assert await two.send(fail=False) is None
    assert two.state() is BreakerState.CLOSED


test_only_one_replica_probes_a_half_open_upstream_at_a_time = in_replicas(_one_probe_at_a_time)


async def _successful_probe_closes(one: Replica, two: Replica) -> None:
    for _ in range(6):
        await one.send(fail=True)
    await one.settle()
    one.clock.now += BREAKER.open_s
    assert await one.send(fail=False) is None  # the probe
    await one.settle()
    assert one.state() is BreakerState.CLOSED

    # The shared marker is gone: a replica syncing now does not open again.
    await two.shared.sync()
    assert two.state() is BreakerState.CLOSED


test_a_successful_probe_clears_the_shared_breaker = in_replicas(_successful_probe_closes)


def test_without_redis_each_replica_decides_alone(caplog: pytest.LogCaptureFixture) -> None:
    async def body() -> None:
        replica = Replica("lgtest:unreachable:")
        replica.shared = SharedBreakers(
            "redis://127.0.0.1:1/0", lambda: replica.dispatcher.breakers, BREAKER
        )
        replica.dispatcher.share_breakers(replica.shared)
        try:
            for _ in range(6):
                await replica.send(fail=True)
            await replica.settle()
            await replica.shared.sync()
            assert replica.state() is BreakerState.OPEN  # its own breaker still works
            replica.clock.now += BREAKER.open_s
            assert await replica.send(fail=False) is None  # and may probe
            await replica.settle()
            assert replica.state() is BreakerState.CLOSED
        finally:
            await replica.shared.close()

    asyncio.run(body())
    assert "Redis unreachable" in caplog.text
