"""The limits stage: refusals, headers, settlement by outcome, the queue, a backend down."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from localgate.errors import ResourceExhausted, ServiceUnavailable
from localgate.exchange.outcome import Outcome
from localgate.exchange.permit import Settlement
from localgate.limits import LimitsUnavailable, MemoryBackend, ScopeLimits, TenantLimiter, Waiting
from localgate.limits.backend import Admission, ScopeUsage
from localgate.observability import GatewayMetrics
from tests.limits.conftest import Clock, request

SENT = Settlement(Outcome.FORWARDED, forwarded=True, tokens=None)


def limiter(clock: Clock | None = None, *, poll_s: float = 0.05) -> TenantLimiter:
    clock = clock or Clock()
    return TenantLimiter(MemoryBackend(clock), GatewayMetrics(), clock=clock, poll_s=poll_s)


def test_a_refusal_is_429_naming_the_limit_with_retry_after_and_headers() -> None:
    clock = Clock()
    limits = limiter(clock)

    async def scenario() -> ResourceExhausted:
        first = request({"requests_per_minute": 1})
        await limits.admit(first)
        assert first.limit_headers == {
            "x-ratelimit-limit-requests": "1",
            "x-ratelimit-remaining-requests": "0",
            "x-ratelimit-reset-requests": "60s",
        }
        clock.advance(15)
        with pytest.raises(ResourceExhausted) as refused:
            await limits.admit(request({"requests_per_minute": 1}))
        return refused.value

    error = asyncio.run(scenario())

    assert error.code == 429
    assert error.status_name == "RESOURCE_EXHAUSTED"
    assert "requests per minute limit of tenant acme" in error.message
    assert error.headers["retry-after"] == "45"
    assert error.headers["x-ratelimit-remaining-requests"] == "0"


def test_a_request_refused_before_it_left_is_charged_nothing() -> None:
    limits = limiter()

    async def scenario() -> None:
        for _ in range(5):  # e.g. blocked by the redaction policy: never forwarded
            ctx = request({"requests_per_minute": 1, "tokens_per_minute": 3000})
            permit = await limits.admit(ctx)
            permit.release(Settlement(Outcome.BLOCKED_BY_POLICY, forwarded=False, tokens=None))
        await limits.admit(request({"requests_per_minute": 1, "tokens_per_minute": 3000}))

    asyncio.run(scenario())


def test_tokens_settle_to_the_answers_usage_and_a_cache_hit_counts_the_request_only() -> None:
    limits = limiter()
    config = {"requests_per_minute": 10, "tokens_per_minute": 5000, "default_output_tokens": 2000}

    async def scenario() -> dict[str, str] | None:
        permit = await limits.admit(request(config))  # reserves 1 + 2000
        permit.release(Settlement(Outcome.FORWARDED, forwarded=True, tokens=13))
        permit = await limits.admit(request(config))
        permit.release(Settlement(Outcome.SERVED_FROM_CACHE, forwarded=False, tokens=None))
        ctx = request(config)
        await limits.admit(ctx)
        return ctx.limit_headers

    headers = asyncio.run(scenario())

    assert headers is not None
    assert headers["x-ratelimit-remaining-requests"] == "7"  # the cache hit counted
    assert headers["x-ratelimit-remaining-tokens"] == str(5000 - 13 - 2001)


def test_a_stream_cut_short_without_usage_keeps_its_reservation() -> None:
    limits = limiter()
    config = {"tokens_per_minute": 4100, "default_output_tokens": 2000}

    async def scenario() -> None:
        permit = await limits.admit(request(config))
        permit.release(Settlement(Outcome.CLIENT_DISCONNECTED, forwarded=True, tokens=None))
        await limits.admit(request(config))
        with pytest.raises(ResourceExhausted, match="tokens per minute"):
            await limits.admit(request(config))

    asyncio.run(scenario())


def test_queued_requests_are_admitted_higher_class_first() -> None:
    limits = limiter(poll_s=60)
    config = {
        "concurrent_requests": 1,
        "queue_timeout_s": 30,
        "allow_priority_header": True,
    }
    admitted: list[str] = []

    async def wait(name: str, priority: str) -> None:
        permit = await limits.admit(request(config, priority=priority))
        admitted.append(name)
        permit.release(SENT)

    async def scenario() -> None:
        holder = await limits.admit(request(config))
        low = asyncio.create_task(wait("low", "low"))
        await asyncio.sleep(0)  # lets it join the queue first
        high = asyncio.create_task(wait("high", "high"))
        await asyncio.sleep(0)
        holder.release(SENT)
        await asyncio.gather(low, high)

    asyncio.run(scenario())

    assert admitted == ["high", "low"]


def test_a_lower_class_arriving_as_a_slot_frees_does_not_take_it_from_a_waiting_higher_one() -> (
    None
):
    limits = limiter(poll_s=60)
    config = {"concurrent_requests": 1, "queue_timeout_s": 30, "allow_priority_header": True}
    admitted: list[str] = []

    async def arrive(name: str, priority: str) -> None:
        permit = await limits.admit(request(config, priority=priority))
        admitted.append(name)
        permit.release(SENT)

    async def scenario() -> None:
        holder = await limits.admit(request(config))
        high = asyncio.create_task(arrive("high", "high"))
        await asyncio.sleep(0)  # it waits in the queue
        holder.release(SENT)
        # Arrives in the same instant the slot is freed, before the waiter runs again.
        low = asyncio.create_task(arrive("low", "low"))
        await asyncio.gather(low, high)

    asyncio.run(scenario())

    assert admitted == ["high", "low"]


def test_a_waiter_for_another_keys_limit_does_not_hold_back_a_request() -> None:
    limits = limiter(poll_s=60)
    config = {
        "queue_timeout_s": 30,
        "allow_priority_header": True,
        "keys": {"k1": {"concurrent_requests": 1}},
    }

    async def scenario() -> None:
        holder = await limits.admit(request(config, key_id="k1"))
        high = asyncio.create_task(limits.admit(request(config, key_id="k1", priority="high")))
        await asyncio.sleep(0)
        # k2 has no concurrency limit: nothing it could take from the waiter.
        (await limits.admit(request(config, key_id="k2", priority="low"))).release(SENT)
        holder.release(SENT)
        (await high).release(SENT)

    asyncio.run(scenario())


def test_the_priority_header_is_ignored_unless_allowed() -> None:
    limits = limiter(poll_s=60)
    config = {"concurrent_requests": 1, "queue_timeout_s": 30}
    admitted: list[str] = []

    async def wait(name: str, priority: str) -> None:
        permit = await limits.admit(request(config, priority=priority))
        admitted.append(name)
        permit.release(SENT)

    async def scenario() -> None:
        holder = await limits.admit(request(config))
        first = asyncio.create_task(wait("first", "low"))
        await asyncio.sleep(0)
        second = asyncio.create_task(wait("second", "high"))
        await asyncio.sleep(0)
        holder.release(SENT)
        await asyncio.gather(first, second)

    asyncio.run(scenario())

    assert admitted == ["first", "second"]


def test_a_queued_request_gives_up_after_queue_timeout_and_a_full_queue_refuses_at_once() -> None:
    metrics = GatewayMetrics()
    limits = TenantLimiter(MemoryBackend(), metrics, max_queue=1, poll_s=60)
    config = {"concurrent_requests": 1, "queue_timeout_s": 0.05}

    async def scenario() -> None:
        await limits.admit(request(config))
        waiting = asyncio.create_task(limits.admit(request(config)))
        await asyncio.sleep(0)
        with pytest.raises(ResourceExhausted, match="concurrent"):
            await limits.admit(request(config))  # the queue holds one already
        with pytest.raises(ResourceExhausted, match="concurrent"):
            await waiting

    asyncio.run(scenario())

    assert metrics.registry.get_sample_value("localgate_limits_queue_wait_seconds_count") == 2
    assert metrics.registry.get_sample_value("localgate_limits_queue_length") == 0


class _Down:
    async def admit(
        self,
        scopes: tuple[ScopeLimits, ...],
        tokens: int,
        reservation: str,
        waiting: Waiting | None = None,
    ) -> Admission:
        raise LimitsUnavailable("connection refused")

    async def usage(self, scope: str) -> ScopeUsage:
        raise LimitsUnavailable("connection refused")

    async def stop_waiting(
        self, scopes: tuple[ScopeLimits, ...], reservation: str, waiting: Waiting
    ) -> None:
        raise LimitsUnavailable("connection refused")

    async def settle(
        self,
        scopes: tuple[ScopeLimits, ...],
        reservation: str,
        tokens: int | None,
        refund_request: bool,
    ) -> None:
        raise LimitsUnavailable("connection refused")

    def settle_soon(
        self,
        scopes: tuple[ScopeLimits, ...],
        reservation: str,
        tokens: int | None,
        refund_request: bool,
        done: Callable[[Exception | None], None],
    ) -> None:
        done(LimitsUnavailable("connection refused"))

    async def close(self) -> None:
        return None


def test_an_unreachable_backend_refuses_with_503_when_closed() -> None:
    limits = TenantLimiter(_Down(), GatewayMetrics())

    with pytest.raises(ServiceUnavailable, match="limits store is unreachable"):
        asyncio.run(limits.admit(request({"requests_per_minute": 5})))


def test_an_unreachable_backend_admits_on_local_counts_when_open() -> None:
    metrics = GatewayMetrics()
    limits = TenantLimiter(_Down(), metrics, fail_open=True)

    async def scenario() -> None:
        await limits.admit(request({"requests_per_minute": 2}))
        await limits.admit(request({"requests_per_minute": 2}))
        with pytest.raises(ResourceExhausted):  # still limited, by this process's counts
            await limits.admit(request({"requests_per_minute": 2}))

    asyncio.run(scenario())

    assert metrics.registry.get_sample_value("localgate_limits_degraded_admissions_total") == 3


def test_a_tenant_without_limits_is_not_counted() -> None:
    ctx = request({})
    asyncio.run(limiter().admit(ctx))

    assert ctx.limit_headers is None


def test_an_unreachable_redis_refuses_with_503_and_is_not_asked_again_at_once() -> None:
    from localgate.limits.redis_backend import RedisBackend
    from tests.gateway_process import free_port

    metrics = GatewayMetrics()
    clock = Clock()
    backend = RedisBackend(f"redis://127.0.0.1:{free_port()}/0", timeout_s=2)
    limits = TenantLimiter(backend, metrics, clock=clock)

    async def scenario() -> None:
        for _ in range(3):
            with pytest.raises(ServiceUnavailable):
                await limits.admit(request({"requests_per_minute": 5}))
        clock.advance(1)
        with pytest.raises(ServiceUnavailable):
            await limits.admit(request({"requests_per_minute": 5}))
        await limits.close()

    asyncio.run(scenario())

    assert metrics.registry.get_sample_value("localgate_limits_backend_errors_total") == 2


def test_a_released_permit_is_settled_in_redis_without_the_request_waiting(
    redis_prefix: str,
) -> None:
    from localgate.limits.redis_backend import RedisBackend
    from tests.limits.conftest import REDIS_URL

    limits = {"concurrent_requests": 1, "tokens_per_minute": 1000, "default_output_tokens": 100}

    async def scenario() -> tuple[int, str | None]:
        backend = RedisBackend(REDIS_URL, prefix=redis_prefix, timeout_s=5)
        limiter = TenantLimiter(backend, GatewayMetrics())
        try:
            permit = await limiter.admit(request(limits))
            permit.release(Settlement(Outcome.FORWARDED, forwarded=True, tokens=40))
            pending = limiter._settling  # handed to the backend, not yet written
            await limiter.close_settlements()
            ctx = request(limits)
            await limiter.admit(ctx)  # the slot is free again, 40 tokens used
            return pending, (ctx.limit_headers or {}).get("x-ratelimit-remaining-tokens")
        finally:
            await limiter.close()

    pending, remaining = asyncio.run(scenario())
    assert pending == 1
    # Each request reserves 1 prompt token and 100 of output; the first settled to 40.
    assert remaining == str(1000 - 40 - 101)
