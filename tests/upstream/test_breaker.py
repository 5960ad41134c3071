"""Circuit breakers: open on a failure ratio, skip the upstream, one probe, close again."""

from __future__ import annotations

import asyncio

import pytest

from localgate.config import CircuitBreakerSettings, RetrySettings
from localgate.errors import ServiceUnavailable, UpstreamError, UpstreamUnreachable
from localgate.exchange.context import RequestContext
from localgate.exchange.principal import Principal
from localgate.exchange.replies import UpstreamCall
from localgate.gemini.routes import match_route
from localgate.observability import GatewayMetrics
from localgate.upstream import Router, UpstreamDispatcher
from localgate.upstream.breaker import BreakerState, CircuitBreaker
from tests.upstream.fakes import ScriptedUpstream

GENERATE = match_route("POST", "/v1beta/models/gemini-2.5-flash:generateContent")


class Clock:
    def __init__(self) -> None:
        self.now = 500.0

    def __call__(self) -> float:
        return self.now


def breaker(clock: Clock, **settings: float) -> CircuitBreaker:
    values = {"failure_ratio": 0.5, "window_s": 30.0, "min_requests": 4, "open_s": 10.0}
    values.update(settings)
    return CircuitBreaker(
        "primary",
        failure_ratio=values["failure_ratio"],
        window_s=values["window_s"],
        min_requests=int(values["min_requests"]),
        open_s=values["open_s"],
        clock=clock,
    )


def state(cut: CircuitBreaker) -> BreakerState:
    """The breaker's state, read afresh (mypy would narrow the property)."""
    return cut.state


def test_it_opens_only_with_enough_calls_and_enough_failures() -> None:
    clock = Clock()
    cut = breaker(clock)
    for ok in (True, False, False):
        cut.record(ok=ok)
    assert state(cut) is BreakerState.CLOSED  # 3 calls: below min_requests
    cut.record(ok=True)
    assert state(cut) is BreakerState.CLOSED  # 2 of 4 failed, but the last one succeeded
    cut.record(ok=False)
    assert state(cut) is BreakerState.OPEN  # 3 of 5
    assert not cut.allow()


def test_failures_outside_the_window_do_not_count() -> None:
    clock = Clock()
    cut = breaker(clock)
    for _ in range(3):
        cut.record(ok=False)
    clock.now += 31
    cut.record(ok=False)
    assert state(cut) is BreakerState.CLOSED


def test_after_the_open_interval_exactly_one_probe_goes_through() -> None:
    clock = Clock()
    cut = breaker(clock, min_requests=1)
    cut.record(ok=False)
    clock.now += 9.9
    assert not cut.allow()
    clock.now += 0.1
    assert state(cut) is BreakerState.HALF_OPEN
    assert cut.allow()
    assert not cut.allow()  # the probe is in flight: everyone else still skips


def test_a_successful_probe_closes_it_and_a_failed_one_opens_it_again() -> None:
    clock = Clock()
    cut = breaker(clock, min_requests=1)
    cut.record(ok=False)
    clock.now += 10
    assert cut.allow()
    cut.record(ok=False)
    assert state(cut) is BreakerState.OPEN
    assert cut.retry_in() == 10
    clock.now += 10
    assert cut.allow()
    cut.record(ok=True)
    assert state(cut) is BreakerState.CLOSED
    assert cut.allow()
    assert cut.allow()


def test_a_cancelled_probe_lets_the_next_one_through() -> None:
    clock = Clock()
    cut = breaker(clock, min_requests=1)
    cut.record(ok=False)
    clock.now += 10
    assert cut.allow()
    cut.abandon()
    assert cut.allow()


def make_dispatcher(
    clock: Clock, primary: ScriptedUpstream, backup: ScriptedUpstream | None = None
) -> tuple[UpstreamDispatcher, GatewayMetrics]:
    metrics = GatewayMetrics()
    named = {"backup": backup} if backup is not None else {}
    dispatch = UpstreamDispatcher(
        Router(primary, named=named),
        retries=RetrySettings(max_attempts=2, attempts_per_upstream=1),
        breaker=CircuitBreakerSettings(min_requests=2, failure_ratio=0.5, open_s=10),
        metrics=metrics,
        clock=clock,
    )
    return dispatch, metrics


def send(dispatch: UpstreamDispatcher, candidates: tuple[ScriptedUpstream, ...]) -> RequestContext:
    ctx = RequestContext(request_id="r", route=GENERATE, principal=Principal("acme", "k"))
    call = UpstreamCall(route=GENERATE, body={})
    asyncio.run(dispatch.unary(ctx, candidates, call))
    return ctx


def circuit_state(metrics: GatewayMetrics, upstream: str) -> float | None:
    return metrics.registry.get_sample_value(
        "localgate_upstream_circuit_state", {"upstream": upstream}
    )


def test_an_open_breaker_sends_requests_to_the_fallback_without_calling_the_upstream() -> None:
    clock = Clock()
    primary = ScriptedUpstream("primary", error=UpstreamUnreachable("down"))
    backup = ScriptedUpstream("backup")
    dispatch, metrics = make_dispatcher(clock, primary, backup)
    for _ in range(2):
        send(dispatch, (primary, backup))
    assert dispatch.circuits()["primary"] == "open"
    assert circuit_state(metrics, "primary") == 2

    ctx = send(dispatch, (primary, backup))

    assert len(primary.calls) == 2  # skipped this time
    assert ctx.attempts == [
        {"upstream": "primary", "skipped": "circuit open"},
        {"upstream": "backup", "status": 200, "latency_ms": 0.0},
    ]
    assert (ctx.upstream, ctx.attempt) == ("backup", 1)
    attempts = "localgate_upstream_attempts_total"
    assert (
        metrics.registry.get_sample_value(attempts, {"upstream": "primary", "status": "502"}) == 2
    )
    assert metrics.registry.get_sample_value(attempts, {"upstream": "backup", "status": "200"}) == 3


def test_with_no_fallback_an_open_breaker_answers_503_naming_the_upstream() -> None:
    clock = Clock()
    primary = ScriptedUpstream("primary", error=UpstreamError(503, {"error": {"code": 503}}))
    dispatch, _ = make_dispatcher(clock, primary)
    for _ in range(2):
        with pytest.raises(UpstreamError):
            send(dispatch, (primary,))

    with pytest.raises(ServiceUnavailable, match=r"'primary'.*circuit breaker is open") as raised:
        send(dispatch, (primary,))

    assert "try again in 10s" in raised.value.message
    assert len(primary.calls) == 2


def test_the_probe_closes_the_breaker_when_the_upstream_is_back() -> None:
    clock = Clock()
    primary = ScriptedUpstream("primary", error=UpstreamUnreachable("down"))
    dispatch, metrics = make_dispatcher(clock, primary)
    for _ in range(2):
        with pytest.raises(UpstreamUnreachable):
            send(dispatch, (primary,))
    clock.now += 10
    assert dispatch.circuits()["primary"] == "half_open"
    primary.error = None

    send(dispatch, (primary,))

    assert dispatch.circuits()["primary"] == "closed"
    assert circuit_state(metrics, "primary") == 0


def test_answers_that_judge_the_request_do_not_open_the_breaker() -> None:
    clock = Clock()
    primary = ScriptedUpstream("primary", error=UpstreamError(400, {"error": {"code": 400}}))
    dispatch, _ = make_dispatcher(clock, primary)
    for _ in range(5):
        with pytest.raises(UpstreamError):
            send(dispatch, (primary,))

    assert dispatch.circuits()["primary"] == "closed"
