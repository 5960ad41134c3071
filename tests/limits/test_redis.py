"""The Redis backend against a real Redis: atomic admission, settlement, leases."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Awaitable, Callable
from typing import TypeVar

import redis.asyncio as aioredis

from localgate.limits import Limit, LimitsUnavailable, ScopeLimits, ScopeUsage, Waiting, WindowUsage
from localgate.limits.redis_backend import _APPLY, RedisBackend, _Batches
from tests.conftest import INFRASTRUCTURE_TIMEOUT_S
from tests.limits.conftest import REDIS_URL

T = TypeVar("T")


def run(prefix: str, scenario: Callable[[RedisBackend], Awaitable[T]], lease_s: float = 30) -> T:
    async def main() -> T:
        backend = RedisBackend(REDIS_URL, lease_s=lease_s, prefix=prefix, timeout_s=5)
        try:
            return await scenario(backend)
        finally:
            await backend.close()

    return asyncio.run(main())


def test_concurrent_admissions_admit_exactly_the_limit(redis_prefix: str) -> None:
    scope = ScopeLimits("tenant:acme", requests_per_minute=50)

    async def scenario(backend: RedisBackend) -> int:
        answers = await asyncio.gather(*(backend.admit((scope,), 0, f"r{n}") for n in range(200)))
        return sum(answer.refused is None for answer in answers)

    assert run(redis_prefix, scenario) == 50


def test_a_refusal_by_the_key_charges_the_tenant_nothing(redis_prefix: str) -> None:
    tenant = ScopeLimits("tenant:acme", requests_per_minute=2)
    key = ScopeLimits("key:k1", requests_per_minute=1)

    async def scenario(backend: RedisBackend) -> list[Limit | None]:
        return [
            (await backend.admit((tenant, key), 0, "a")).refused,
            (await backend.admit((tenant, key), 0, "b")).refused,
            (await backend.admit((tenant,), 0, "c")).refused,
            (await backend.admit((tenant,), 0, "d")).refused,
        ]

    assert run(redis_prefix, scenario) == [
        None,
        Limit.REQUESTS_PER_MINUTE,
        None,
        Limit.REQUESTS_PER_MINUTE,
    ]


def test_tokens_reserve_then_settle_and_the_headers_say_what_is_left(redis_prefix: str) -> None:
    scope = ScopeLimits("tenant:acme", tokens_per_minute=100, tokens_per_day=1000)

    async def scenario(backend: RedisBackend) -> tuple[Limit | None, int]:
        await backend.admit((scope,), 60, "a")
        refused = (await backend.admit((scope,), 60, "b")).refused
        await backend.settle((scope,), "a", 15, refund_request=False)
        admitted = await backend.admit((scope,), 60, "c")
        assert admitted.tokens is not None
        return refused, admitted.tokens.remaining

    assert run(redis_prefix, scenario) == (Limit.TOKENS_PER_MINUTE, 100 - 15 - 60)


def test_a_lapsed_lease_frees_the_slot_and_refunds_the_tokens(redis_prefix: str) -> None:
    scope = ScopeLimits("tenant:acme", tokens_per_minute=100, concurrent_requests=1)

    async def scenario(backend: RedisBackend) -> tuple[Limit | None, float]:
        await backend.admit((scope,), 90, "held")
        # A replica that dies stops renewing: forget the reservation here, as it would.
        backend._held.clear()
        refused = (await backend.admit((scope,), 90, "b")).refused
        loop = asyncio.get_running_loop()
        started = loop.time()
        while (await backend.admit((scope,), 90, "b")).refused is not None:
            assert loop.time() - started < INFRASTRUCTURE_TIMEOUT_S
            await asyncio.sleep(0.05)
        return refused, loop.time() - started

    refused, waited = run(redis_prefix, scenario, lease_s=1)

    assert refused is Limit.TOKENS_PER_MINUTE  # tokens are checked before slots
    assert waited < 2.0  # the lease is 1 s; the rest is slack for a loaded machine


def test_only_the_lapsed_lease_is_purged_while_another_is_renewed(redis_prefix: str) -> None:
    # Two reservations in flight, one of them abandoned (its replica died): once its lease
    # has lapsed its slot comes back, while the one renewed meanwhile keeps its own.
    scope = ScopeLimits("tenant:acme", concurrent_requests=2)

    async def scenario(backend: RedisBackend) -> Limit | None:
        await backend.admit((scope,), 0, "kept")
        await backend.admit((scope,), 0, "dropped")
        del backend._held["dropped"]  # no longer renewed
        loop = asyncio.get_running_loop()
        started = loop.time()
        while (await backend.admit((scope,), 0, "third")).refused is not None:
            assert loop.time() - started < INFRASTRUCTURE_TIMEOUT_S
            await asyncio.sleep(0.05)
        return (await backend.admit((scope,), 0, "fourth")).refused

    assert run(redis_prefix, scenario, lease_s=1) is Limit.CONCURRENT_REQUESTS


def test_a_settlement_sent_without_waiting_is_written_and_told(redis_prefix: str) -> None:
    scope = ScopeLimits("tenant:acme", tokens_per_minute=100, concurrent_requests=1)

    async def scenario(backend: RedisBackend) -> tuple[list[Exception | None], int]:
        told: list[Exception | None] = []
        await backend.admit((scope,), 90, "a")
        backend.settle_soon((scope,), "a", 30, False, told.append)
        # Sent with the next call: this admission sees the slot free and 30 tokens used.
        admitted = await backend.admit((scope,), 60, "b")
        assert admitted.tokens is not None
        return told, admitted.tokens.remaining

    assert run(redis_prefix, scenario) == ([None], 100 - 30 - 60)


def test_a_settlement_that_cannot_be_written_is_told_so() -> None:
    scope = ScopeLimits("tenant:acme", requests_per_minute=50)

    async def main() -> list[Exception | None]:
        backend = RedisBackend("redis://127.0.0.1:1/0", timeout_s=INFRASTRUCTURE_TIMEOUT_S)
        told: list[Exception | None] = []
        try:
            backend.settle_soon((scope,), "a", 0, False, told.append)
            await backend.drain()
        finally:
            await backend.close()
        return told

    [error] = asyncio.run(main())
    assert isinstance(error, LimitsUnavailable)


def test_a_lease_is_renewed_while_its_request_runs(redis_prefix: str) -> None:
    scope = ScopeLimits("tenant:acme", concurrent_requests=1)

    async def scenario(backend: RedisBackend) -> Limit | None:
        await backend.admit((scope,), 0, "held")
        await asyncio.sleep(2.5)  # two and a half leases: renewed every third of one
        return (await backend.admit((scope,), 0, "b")).refused

    assert run(redis_prefix, scenario, lease_s=1) is Limit.CONCURRENT_REQUESTS


def test_calls_made_together_are_batched_and_each_gets_its_own_answer(redis_prefix: str) -> None:
    # 200 admissions and their settlements at once: they travel in batches, yet each
    # request gets the answer of its own operation (the 50 admitted are exactly those whose
    # settlement then frees their concurrency slot: 50 slots are free again, not 51).
    scope = ScopeLimits("tenant:acme", requests_per_minute=50, concurrent_requests=200)
    slots_only = ScopeLimits("tenant:acme", concurrent_requests=50)

    async def scenario(backend: RedisBackend) -> tuple[int, list[Limit | None]]:
        answers = await asyncio.gather(*(backend.admit((scope,), 0, f"r{n}") for n in range(200)))
        admitted = [f"r{n}" for n, answer in enumerate(answers) if answer.refused is None]
        await asyncio.gather(*(backend.settle((scope,), rid, 0, False) for rid in admitted))
        again = [(await backend.admit((slots_only,), 0, f"s{n}")).refused for n in range(51)]
        return len(admitted), again

    admitted, again = run(redis_prefix, scenario)
    assert admitted == 50
    assert again == [None] * 50 + [Limit.CONCURRENT_REQUESTS]


def test_a_script_redis_does_not_know_is_loaded_and_the_call_repeated(redis_prefix: str) -> None:
    # The script with a comment of this test's own was never loaded: it stands for one Redis
    # forgot (a restart, SCRIPT FLUSH, which would disturb other tests). Alone and in a
    # batch, the operations are answered once it is loaded.
    source = _APPLY + f"\n-- {secrets.token_hex(8)}\n"
    scope = ScopeLimits("tenant:acme", requests_per_minute=10)

    async def scenario(backend: RedisBackend) -> list[int]:
        backend._batches = _Batches(backend._client, source)
        alone = [await backend.admit((scope,), 0, "a")]
        backend._batches = _Batches(backend._client, source + "-- again\n")
        together = await asyncio.gather(*(backend.admit((scope,), 0, f"r{n}") for n in range(3)))
        return [answer.requests.remaining for answer in [*alone, *together] if answer.requests]

    assert run(redis_prefix, scenario) == [9, 8, 7, 6]


def test_an_unreachable_redis_fails_every_call_of_a_batch() -> None:
    scope = ScopeLimits("tenant:acme", requests_per_minute=50)

    async def main() -> list[BaseException | object]:
        backend = RedisBackend("redis://127.0.0.1:1/0", timeout_s=INFRASTRUCTURE_TIMEOUT_S)
        try:
            return await asyncio.gather(
                *(backend.admit((scope,), 0, f"r{n}") for n in range(5)), return_exceptions=True
            )
        finally:
            await backend.close()

    answers = asyncio.run(main())
    assert all(isinstance(answer, LimitsUnavailable) for answer in answers)


def test_a_higher_class_waiting_on_one_replica_gets_the_slot_another_replica_frees(
    redis_prefix: str,
) -> None:
    scope = (ScopeLimits("tenant:acme", concurrent_requests=1),)
    high, low = Waiting(2, 30_000), Waiting(0, 30_000)

    async def main() -> list[Limit | None]:
        one = RedisBackend(REDIS_URL, prefix=redis_prefix, timeout_s=5)
        two = RedisBackend(REDIS_URL, prefix=redis_prefix, timeout_s=5)
        try:
            seen = [(await one.admit(scope, 0, "holder")).refused]
            seen.append((await two.admit(scope, 0, "h", high)).refused)  # waits on two
            await one.settle(scope, "holder", 0, False)  # the slot is free ...
            seen.append((await one.admit(scope, 0, "l", low)).refused)  # ... but not for low
            seen.append((await two.admit(scope, 0, "h", high)).refused)  # high takes it
            await two.settle(scope, "h", 0, False)
            seen.append((await one.admit(scope, 0, "l", low)).refused)  # now low's turn
            return seen
        finally:
            await one.close()
            await two.close()

    assert asyncio.run(main()) == [
        None,
        Limit.CONCURRENT_REQUESTS,
        Limit.CONCURRENT_REQUESTS,
        None,
        None,
    ]


def test_a_waiter_that_gave_up_or_lapsed_holds_no_one_back(redis_prefix: str) -> None:
    scope = (ScopeLimits("tenant:acme", concurrent_requests=1),)

    async def main() -> list[Limit | None]:
        backend = RedisBackend(REDIS_URL, prefix=redis_prefix, timeout_s=5)
        try:
            await backend.admit(scope, 0, "holder")
            await backend.admit(scope, 0, "gives-up", Waiting(2, 30_000))
            await backend.admit(scope, 0, "lapses", Waiting(2, 1))  # registered for 1 ms
            await backend.stop_waiting(scope, "gives-up", Waiting(2, 30_000))
            await backend.settle(scope, "holder", 0, False)
            client = aioredis.Redis.from_url(REDIS_URL)
            try:
                # Redis's own clock decides the lapse: let it pass the 1 ms (no sleep; the
                # admission script itself must drop the lapsed entry).
                registered = await _redis_now_ms(client)
                while await _redis_now_ms(client) <= registered + 1:
                    pass
            finally:
                await client.aclose()
            return [(await backend.admit(scope, 0, "low", Waiting(0, 30_000))).refused]
        finally:
            await backend.close()

    assert asyncio.run(main()) == [None]


async def _redis_now_ms(client: aioredis.Redis) -> int:
    seconds, micros = await client.time()
    return int(seconds) * 1000 + int(micros) // 1000


def test_usage_reads_the_windows_and_the_live_leases(redis_prefix: str) -> None:
    scope = ScopeLimits("tenant:acme", requests_per_minute=10, tokens_per_minute=500)

    async def scenario(backend: RedisBackend) -> tuple[ScopeUsage, ScopeUsage]:
        before = await backend.usage("tenant:acme")
        await backend.admit((scope,), 40, "a")
        await backend.admit((scope,), 20, "b")
        await backend.settle((scope,), "a", 30, refund_request=False)
        return before, await backend.usage("tenant:acme")

    before, after = run(redis_prefix, scenario)

    empty = WindowUsage(0, None)
    assert before == ScopeUsage(empty, empty, empty, 0)
    assert (after.requests_per_minute.used, after.tokens_per_minute.used) == (2, 50)
    assert after.tokens_per_day.used == 50  # counted even without a daily limit
    assert 0 < (after.requests_per_minute.resets_in_s or 0) <= 60
    assert 86_300 < (after.tokens_per_day.resets_in_s or 0) <= 86_400
    assert after.in_flight == 1  # "b" still runs


def test_usage_does_not_count_a_lapsed_lease_in_flight(redis_prefix: str) -> None:
    scope = ScopeLimits("tenant:acme", concurrent_requests=5)

    async def scenario(backend: RedisBackend) -> tuple[int, int]:
        await backend.admit((scope,), 0, "held")
        await backend.admit((scope,), 0, "dead")
        # A replica that dies stops renewing: "dead" is forgotten here, "held" renewed.
        del backend._held["dead"]
        before = (await backend.usage("tenant:acme")).in_flight
        loop = asyncio.get_running_loop()
        started = loop.time()
        while (await backend.usage("tenant:acme")).in_flight != 1:
            assert loop.time() - started < INFRASTRUCTURE_TIMEOUT_S
            await asyncio.sleep(0.05)
        return before, (await backend.usage("tenant:acme")).requests_per_minute.used

    before, requests = run(redis_prefix, scenario, lease_s=1)

    assert before == 2
    assert requests == 2  # reading purges nothing: both requests stay counted
