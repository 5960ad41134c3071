"""The in-process backend: windows, atomic admission across scopes, reserve and settle."""

from __future__ import annotations

import asyncio

from localgate.limits import (
    Admission,
    Limit,
    MemoryBackend,
    ScopeLimits,
    ScopeUsage,
    WindowUsage,
)
from tests.limits.conftest import Clock

TENANT = ScopeLimits("tenant:acme", requests_per_minute=3, tokens_per_minute=100)
KEY = ScopeLimits("key:k1", requests_per_minute=1)


def admit(
    backend: MemoryBackend, *scopes: ScopeLimits, tokens: int = 10, rid: str = "r"
) -> Admission:
    return asyncio.run(backend.admit(scopes, tokens, rid))


def test_a_minute_admits_its_limit_then_refuses_until_the_window_has_passed() -> None:
    clock = Clock()
    backend = MemoryBackend(clock)
    for n in range(3):
        assert admit(backend, TENANT, rid=f"r{n}").refused is None
    clock.advance(20)

    refused = admit(backend, TENANT, rid="r4")

    assert refused.refused is Limit.REQUESTS_PER_MINUTE
    assert refused.retry_after_s == 40  # the window opened with the first request
    clock.advance(40)
    assert admit(backend, TENANT, rid="r5").refused is None


def test_admission_is_all_or_nothing_across_the_tenant_and_its_key() -> None:
    backend = MemoryBackend(Clock())
    assert admit(backend, TENANT, KEY, rid="a").refused is None

    refused = admit(backend, TENANT, KEY, rid="b")

    assert (refused.refused, refused.refused_scope) == (Limit.REQUESTS_PER_MINUTE, "key:k1")
    # The key's refusal charged the tenant nothing: two more fit in its minute.
    assert admit(backend, TENANT, rid="c").refused is None
    assert admit(backend, TENANT, rid="d").refused is None
    assert admit(backend, TENANT, rid="e").refused is Limit.REQUESTS_PER_MINUTE


def test_tokens_are_reserved_at_admission_and_settled_to_what_was_used() -> None:
    backend = MemoryBackend(Clock())
    assert admit(backend, TENANT, tokens=60, rid="a").refused is None
    # 60 reserved: another 60 does not fit.
    assert admit(backend, TENANT, tokens=60, rid="b").refused is Limit.TOKENS_PER_MINUTE

    asyncio.run(backend.settle((TENANT,), "a", 20, refund_request=False))

    admitted = admit(backend, TENANT, tokens=60, rid="c")
    assert admitted.refused is None
    assert admitted.tokens is not None
    assert admitted.tokens.remaining == 100 - 20 - 60


def test_a_debit_beyond_the_estimate_is_charged_and_a_second_settlement_is_ignored() -> None:
    backend = MemoryBackend(Clock())
    admit(backend, TENANT, tokens=10, rid="a")
    asyncio.run(backend.settle((TENANT,), "a", 90, refund_request=False))
    asyncio.run(backend.settle((TENANT,), "a", 0, refund_request=True))

    refused = admit(backend, TENANT, tokens=20, rid="b")

    assert refused.refused is Limit.TOKENS_PER_MINUTE


def test_a_request_larger_than_the_limit_is_refused_as_never_fitting() -> None:
    refused = admit(MemoryBackend(Clock()), TENANT, tokens=101)

    assert refused.refused is Limit.TOKENS_PER_MINUTE
    assert refused.never_fits


def test_concurrency_counts_requests_in_flight_until_settled() -> None:
    backend = MemoryBackend(Clock())
    slots = ScopeLimits("tenant:acme", concurrent_requests=2)
    assert admit(backend, slots, rid="a").refused is None
    assert admit(backend, slots, rid="b").refused is None
    assert admit(backend, slots, rid="c").refused is Limit.CONCURRENT_REQUESTS

    asyncio.run(backend.settle((slots,), "a", None, refund_request=False))

    assert admit(backend, slots, rid="c").refused is None


def test_usage_reads_the_open_windows_and_the_requests_in_flight() -> None:
    clock = Clock()
    backend = MemoryBackend(clock)
    scope = ScopeLimits("tenant:acme", requests_per_minute=10, tokens_per_day=1000)
    empty = WindowUsage(0, None)
    assert asyncio.run(backend.usage("tenant:acme")) == ScopeUsage(empty, empty, empty, 0)
    admit(backend, scope, tokens=40, rid="a")
    clock.advance(15)
    admit(backend, scope, tokens=20, rid="b")
    asyncio.run(backend.settle((scope,), "a", 30, refund_request=False))

    usage = asyncio.run(backend.usage("tenant:acme"))

    assert usage == ScopeUsage(
        WindowUsage(2, 45), WindowUsage(50, 45), WindowUsage(50, 86_385), in_flight=1
    )
    clock.advance(45)  # the minute has passed; the day has not
    later = asyncio.run(backend.usage("tenant:acme"))
    assert (later.requests_per_minute, later.tokens_per_minute) == (empty, empty)
    assert later.tokens_per_day == WindowUsage(50, 86_340)
