"""The dispatcher's retries and fallbacks: backoff, Retry-After, budget, the stream rule.

No test waits: the dispatcher's clock, sleep and random are the test's.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from localgate.config import CircuitBreakerSettings, RetrySettings
from localgate.errors import (
    LocalgateError,
    UpstreamCredentialsRejected,
    UpstreamError,
    UpstreamTimeout,
    UpstreamUnreachable,
)
from localgate.exchange.context import RequestContext
from localgate.exchange.principal import Principal
from localgate.exchange.replies import UpstreamCall
from localgate.gemini.routes import match_route
from localgate.upstream import Router, UpstreamDispatcher
from localgate.upstream.dispatcher import UPSTREAM_HEADER
from tests.upstream.fakes import ScriptedUpstream, answer

GENERATE = match_route("POST", "/v1beta/models/gemini-2.5-flash:generateContent")
STREAM = match_route("POST", "/v1beta/models/gemini-2.5-flash:streamGenerateContent")


def upstream_error(status: int, retry_after: float | None = None) -> UpstreamError:
    body = {"error": {"code": status, "message": "no", "status": "X"}}
    return UpstreamError(status, body, retry_after=retry_after)


class FlakyUpstream(ScriptedUpstream):
    """Fails with each of ``failures`` in turn, then answers."""

    def __init__(self, name: str, failures: list[LocalgateError], **kwargs: Any) -> None:
        super().__init__(name, **kwargs)
        self.failures = list(failures)

    async def _called(self, call: UpstreamCall) -> None:
        self.error = self.failures.pop(0) if self.failures else None
        await super()._called(call)


class Clock:
    """Time that passes only when the dispatcher sleeps (or the test says so)."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def dispatcher(clock: Clock, *, jitter: float = 1.0, **retries: Any) -> UpstreamDispatcher:
    return UpstreamDispatcher(
        Router(ScriptedUpstream("default")),
        retries=RetrySettings(**retries),
        breaker=CircuitBreakerSettings(enabled=False),
        clock=clock,
        sleep=clock.sleep,
        random=lambda: jitter,
    )


def context() -> RequestContext:
    return RequestContext(request_id="r1", route=GENERATE, principal=Principal("acme", "k1"))


def call(route: Any = GENERATE) -> UpstreamCall:
    return UpstreamCall(route=route, body={"contents": [{"parts": [{"text": "[PHONE_1]"}]}]})


def test_a_transient_failure_is_retried_on_the_same_upstream_after_a_backoff() -> None:
    clock = Clock()
    flaky = FlakyUpstream("primary", [upstream_error(503), upstream_error(500)])
    ctx = context()

    reply = asyncio.run(
        dispatcher(clock, max_attempts=3, attempts_per_upstream=3).unary(ctx, (flaky,), call())
    )

    assert reply.body == flaky.events[-1]
    assert reply.headers[UPSTREAM_HEADER] == "primary"
    assert clock.slept == [0.25, 0.5]  # exponential (jitter pinned to its maximum)
    assert [(a["upstream"], a["status"]) for a in ctx.attempts] == [
        ("primary", 503),
        ("primary", 500),
        ("primary", 200),
    ]
    assert ctx.attempt == 3


def test_jitter_spreads_the_backoff_below_its_bound() -> None:
    clock = Clock()
    flaky = FlakyUpstream("primary", [UpstreamUnreachable("refused")])

    asyncio.run(dispatcher(clock, jitter=0.1).unary(context(), (flaky,), call()))

    assert clock.slept == [pytest.approx(0.025)]


def test_the_upstreams_retry_after_is_waited_for() -> None:
    clock = Clock()
    flaky = FlakyUpstream("primary", [upstream_error(429, retry_after=3.0)])

    asyncio.run(dispatcher(clock).unary(context(), (flaky,), call()))

    assert clock.slept == [3.0]


def test_a_retry_after_longer_than_max_wait_goes_to_the_fallback_at_once() -> None:
    clock = Clock()
    throttled = FlakyUpstream("primary", [upstream_error(429, retry_after=60.0)])
    backup = ScriptedUpstream("backup", events=[answer("from backup")])
    ctx = context()

    reply = asyncio.run(dispatcher(clock, max_wait_s=10).unary(ctx, (throttled, backup), call()))

    assert reply.body == answer("from backup")
    assert reply.headers[UPSTREAM_HEADER] == "backup"
    assert clock.slept == []
    assert (len(throttled.calls), ctx.upstream, ctx.attempt) == (1, "backup", 2)


def test_the_fallback_gets_the_same_redacted_call() -> None:
    clock = Clock()
    down = FlakyUpstream("primary", [UpstreamUnreachable("refused")] * 2)
    backup = ScriptedUpstream("backup")
    sent = call()

    asyncio.run(dispatcher(clock).unary(context(), (down, backup), sent))

    assert down.calls == [sent, sent]
    assert backup.calls == [sent]  # the very call built after redaction: placeholders only


@pytest.mark.parametrize(
    "error",
    [UpstreamCredentialsRejected("key refused"), upstream_error(502), upstream_error(501)],
)
def test_a_failure_that_would_repeat_skips_to_the_fallback_without_retrying(
    error: LocalgateError,
) -> None:
    clock = Clock()
    broken = FlakyUpstream("primary", [error])
    backup = ScriptedUpstream("backup")

    asyncio.run(dispatcher(clock).unary(context(), (broken, backup), call()))

    assert (len(broken.calls), len(backup.calls), clock.slept) == (1, 1, [])


def test_an_error_that_judges_the_request_is_neither_retried_nor_sent_elsewhere() -> None:
    clock = Clock()
    refusing = FlakyUpstream("primary", [upstream_error(400)])
    backup = ScriptedUpstream("backup")
    ctx = context()

    with pytest.raises(UpstreamError):
        asyncio.run(dispatcher(clock).unary(ctx, (refusing, backup), call()))

    assert (len(refusing.calls), backup.calls) == (1, [])
    assert ctx.attempts == [{"upstream": "primary", "status": 400, "latency_ms": 0.0}]


def test_max_attempts_bounds_retries_and_fallbacks_together() -> None:
    clock = Clock()
    first = FlakyUpstream("first", [upstream_error(503)] * 5)
    second = FlakyUpstream("second", [upstream_error(503)] * 5)
    third = ScriptedUpstream("third")
    ctx = context()

    with pytest.raises(UpstreamError):
        asyncio.run(
            dispatcher(clock, max_attempts=3, attempts_per_upstream=2).unary(
                ctx, (first, second, third), call()
            )
        )

    assert (len(first.calls), len(second.calls), len(third.calls)) == (2, 1, 0)
    assert ctx.attempt == 3
    assert [a["upstream"] for a in ctx.attempts] == ["first", "first", "second"]


def test_the_retry_budget_stops_retries_when_an_upstream_fails_for_everyone() -> None:
    clock = Clock()
    dispatch = dispatcher(clock, budget_ratio=0.0, budget_min_retries=2, budget_window_s=10)
    calls = []
    for _ in range(4):
        down = FlakyUpstream("primary", [UpstreamTimeout("slow")] * 2)
        with pytest.raises(UpstreamTimeout):
            asyncio.run(dispatch.unary(context(), (down,), call()))
        calls.append(len(down.calls))

    # Two retries in the window, then first attempts only; the window moves on.
    assert calls == [2, 2, 1, 1]
    clock.now += 11
    down = FlakyUpstream("primary", [UpstreamTimeout("slow")] * 2)
    with pytest.raises(UpstreamTimeout):
        asyncio.run(dispatch.unary(context(), (down,), call()))
    assert len(down.calls) == 2


def test_a_stream_that_breaks_before_its_first_event_is_tried_again() -> None:
    clock = Clock()
    breaking = ScriptedUpstream("primary", events=[], fail_mid_stream=UpstreamUnreachable("cut"))
    backup = ScriptedUpstream("backup")
    ctx = context()

    async def scenario() -> list[Any]:
        reply = await dispatcher(clock, attempts_per_upstream=1).stream(
            ctx, (breaking, backup), call(STREAM)
        )
        assert reply.headers[UPSTREAM_HEADER] == "backup"
        try:
            return [event async for event in reply.events]
        finally:
            await reply.close()

    assert asyncio.run(scenario()) == backup.events
    assert breaking.closed == 1  # its connection dropped before the next attempt
    assert [(a["upstream"], a["status"]) for a in ctx.attempts] == [
        ("primary", 502),
        ("backup", 200),
    ]


def test_a_stream_that_breaks_after_its_first_event_is_never_tried_again() -> None:
    clock = Clock()
    broken = ScriptedUpstream("primary", fail_mid_stream=UpstreamUnreachable("cut"))
    backup = ScriptedUpstream("backup")
    ctx = context()
    received: list[Any] = []

    async def scenario() -> None:
        reply = await dispatcher(clock).stream(ctx, (broken, backup), call(STREAM))
        try:
            async for event in reply.events:
                received.append(event)
        finally:
            await reply.close()

    with pytest.raises(UpstreamUnreachable):
        asyncio.run(scenario())

    assert received == broken.events
    assert (len(broken.calls), backup.calls, clock.slept) == (1, [], [])


def test_an_empty_stream_is_an_answer() -> None:
    clock = Clock()
    empty = ScriptedUpstream("primary", events=[])

    async def scenario() -> list[Any]:
        reply = await dispatcher(clock).stream(context(), (empty,), call(STREAM))
        return [event async for event in reply.events]

    assert asyncio.run(scenario()) == []
