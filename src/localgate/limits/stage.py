"""The limits stage: admits a request against its tenant's (and key's) limits, or refuses it.

The limits are read from the request's policy (``ctx.policy.limits``), so a reload
changes them for the next request. A token limit reserves the request's estimated tokens
at admission (``estimate.py``) and the permit settles them to the answer's usage when
the request ends; a request refused before it left is charged nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
import math
import time
import uuid
from collections.abc import Callable

from localgate.config import LimitSettings, LimitsSettings, TenantLimitSettings
from localgate.errors import LocalgateError, ResourceExhausted, ServiceUnavailable
from localgate.exchange.context import RequestContext
from localgate.exchange.outcome import Outcome
from localgate.exchange.permit import Permit, Settlement
from localgate.limits.backend import (
    LIMIT_ORDER,
    Admission,
    Limit,
    LimitBackend,
    LimitsUnavailable,
    Quota,
    ScopeLimits,
    ScopeUsage,
    Waiting,
)
from localgate.limits.estimate import estimate_tokens
from localgate.limits.memory import MemoryBackend
from localgate.limits.queue import PRIORITY_RANK, AdmissionQueue, QueueFull
from localgate.observability import GatewayMetrics

__all__ = ["PRIORITY_HEADER", "TenantLimiter"]

logger = logging.getLogger("localgate")

PRIORITY_HEADER = "x-localgate-priority"
_SCOPE_CACHE_SIZE = 10_000
# How long an unreachable backend is not asked again.
_BACKEND_RETRY_S = 1.0
_LIMITED_LABEL = ("limited",)
_UNLIMITED_LABEL = ("unlimited",)


class TenantLimiter:
    """Requests per minute, tokens per minute and per day, concurrent requests; per tenant
    and per key, counted by ``backend``; a bounded, prioritised queue for concurrency.

    With ``fail_open``, a backend that cannot be reached does not refuse requests: they
    are counted in ``fallback`` (this process only) and the degraded admissions counted
    in a metric; otherwise such a request is refused with 503.
    """

    def __init__(
        self,
        backend: LimitBackend,
        metrics: GatewayMetrics,
        *,
        fail_open: bool = False,
        max_queue: int = 100,
        poll_s: float = 0.05,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._backend = backend
        self._metrics = metrics
        self._fail_open = fail_open
        self._fallback = MemoryBackend(clock)
        self._backend_down_until = -math.inf
        self._clock = clock
        self._queue = AdmissionQueue(max_queue, poll_s)
        # Settlements handed to the backend and not yet written (or failed).
        self._settling = 0
        self._settled_all: asyncio.Future[None] | None = None
        # Reservation ids: unique across replicas (the prefix) and cheap (the counter).
        self._id_prefix = f"{uuid.uuid4().hex[:12]}-"
        self._ids = itertools.count()
        # The scopes of each (tenant policy, key): resolved once per configuration version.
        self._scope_cache: dict[
            tuple[int, str, str], tuple[TenantLimitSettings, tuple[ScopeLimits, ...]]
        ] = {}
        metrics.limits_queue_length.set_function(lambda: len(self._queue))

    @classmethod
    def open(cls, settings: LimitsSettings, metrics: GatewayMetrics) -> TenantLimiter:
        """The limiter ``limits`` configures: counted in memory or in Redis."""
        backend: LimitBackend
        if settings.backend == "redis" and settings.redis_url:
            # Imported only when used: the memory backend needs no Redis client.
            from localgate.limits.redis_backend import RedisBackend

            backend = RedisBackend(
                settings.redis_url,
                lease_s=settings.lease_s,
                prefix=f"{settings.key_prefix}limits:",
            )
            poll_s = 0.05  # slots freed by other replicas are seen this often
        else:
            backend = MemoryBackend()
            poll_s = 1.0  # every slot is freed here, and wakes the queue itself
        return cls(
            backend,
            metrics,
            fail_open=settings.on_backend_error == "open",
            max_queue=settings.max_queue,
            poll_s=poll_s,
        )

    async def admit(self, ctx: RequestContext) -> Permit:
        """Admit ``ctx`` (maybe after waiting in the queue) or raise ``ResourceExhausted``."""
        policy, principal, route = ctx.policy, ctx.principal, ctx.route
        if policy is None or principal is None or route is None:
            raise LocalgateError("The limits stage needs an authenticated request.")
        tenant_limits = policy.limits
        key_limits = tenant_limits.keys.get(principal.key_id) if tenant_limits.keys else None
        effective: LimitSettings = key_limits or tenant_limits
        scopes = self._scopes_of(principal.tenant, tenant_limits, principal.key_id, key_limits)
        if not scopes:
            self._metrics.limits_admitted.inc(_UNLIMITED_LABEL)
            return _UNLIMITED
        tokens = 0
        if any(scope.counts_tokens for scope in scopes):
            tokens = estimate_tokens(route.method, ctx.body, effective.default_output_tokens or 0)
        reservation = f"{self._id_prefix}{next(self._ids)}"
        waiting = _waiting(ctx, effective)
        slots = frozenset(scope.scope for scope in scopes if scope.concurrent_requests)
        if slots and self._queue.outranks(principal.tenant, waiting.rank, slots):
            # A higher class waits here for a slot: this request does not take it first.
            admission, backend = _OUTRANKED, self._backend
        else:
            admission, backend = await self._try(scopes, tokens, reservation, waiting)
        if admission.refused is Limit.CONCURRENT_REQUESTS and effective.queue_timeout_s:
            admission, backend = await self._queue_for_slot(
                principal.tenant, effective, scopes, slots, tokens, reservation, admission, waiting
            )
        headers = _headers(admission, scopes)
        ctx.limit_headers = headers
        if admission.refused is not None:
            self._metrics.limits_refusals.labels(admission.refused.value).inc()
            raise _refusal(admission, headers)
        self._metrics.limits_admitted.inc(_LIMITED_LABEL)
        return _LimitPermit(self, backend, principal.tenant, scopes, reservation)

    def _scopes_of(
        self,
        tenant: str,
        tenant_limits: TenantLimitSettings,
        key_id: str,
        key_limits: LimitSettings | None,
    ) -> tuple[ScopeLimits, ...]:
        cache_key = (id(tenant_limits), tenant, key_id)
        cached = self._scope_cache.get(cache_key)
        if cached is not None and cached[0] is tenant_limits:
            return cached[1]
        if len(self._scope_cache) > _SCOPE_CACHE_SIZE:
            self._scope_cache.clear()
        scopes = _scopes(tenant, tenant_limits, key_id, key_limits)
        # The policy is kept with its scopes, so its id cannot be reused while cached.
        self._scope_cache[cache_key] = (tenant_limits, scopes)
        return scopes

    async def _try(
        self,
        scopes: tuple[ScopeLimits, ...],
        tokens: int,
        reservation: str,
        waiting: Waiting | None = None,
    ) -> tuple[Admission, LimitBackend]:
        # After a failure the backend is left alone for a moment, so that an unreachable
        # store costs each request nothing rather than a connection timeout.
        if self._clock() >= self._backend_down_until:
            try:
                admission = await self._backend.admit(scopes, tokens, reservation, waiting)
                return admission, self._backend
            except LimitsUnavailable as exc:
                self._metrics.limits_backend_errors.inc()
                self._backend_down_until = self._clock() + _BACKEND_RETRY_S
                logger.warning(
                    "limits backend unreachable (%s); %s for %.0f s",
                    exc,
                    "admitting on local counts" if self._fail_open else "refusing requests",
                    _BACKEND_RETRY_S,
                )
        if not self._fail_open:
            raise ServiceUnavailable(
                "The gateway cannot check this tenant's limits right now "
                "(the limits store is unreachable); retry shortly."
            )
        self._metrics.limits_degraded.inc()
        return self._fallback.admit_now(scopes, tokens, reservation), self._fallback

    async def _queue_for_slot(
        self,
        tenant: str,
        effective: LimitSettings,
        scopes: tuple[ScopeLimits, ...],
        slots: frozenset[str],
        tokens: int,
        reservation: str,
        refused: Admission,
        waiting: Waiting,
    ) -> tuple[Admission, LimitBackend]:
        outcome: list[tuple[Admission, LimitBackend]] = [(refused, self._backend)]

        async def try_admit() -> bool:
            outcome[0] = await self._try(scopes, tokens, reservation, waiting)
            return outcome[0][0].refused is None

        started = self._clock()
        try:
            await self._queue.wait_for_slot(
                tenant,
                waiting.rank,
                slots,
                effective.queue_timeout_s or 0,
                self._clock,
                try_admit,
            )
        except QueueFull:
            pass
        finally:
            self._metrics.limits_queue_wait_seconds.observe(self._clock() - started)
            if outcome[0][0].refused is not None:
                await self._stop_waiting(scopes, reservation, waiting)
        return outcome[0]

    async def _stop_waiting(
        self, scopes: tuple[ScopeLimits, ...], reservation: str, waiting: Waiting
    ) -> None:
        """Tell the backend this request no longer waits (other replicas' lower classes
        may take slots again); if it cannot be told, the registration lapses by itself."""
        with contextlib.suppress(LimitsUnavailable):
            await self._backend.stop_waiting(scopes, reservation, waiting)

    def _release(
        self,
        backend: LimitBackend,
        tenant: str,
        scopes: tuple[ScopeLimits, ...],
        reservation: str,
        settlement: Settlement,
    ) -> None:
        # Nothing left, nothing charged: not the request, not its tokens. A request
        # answered from the cache counts as a request but used no tokens.
        refund = not settlement.forwarded and settlement.outcome is not Outcome.SERVED_FROM_CACHE
        if not settlement.forwarded:
            tokens: int | None = 0
        elif settlement.tokens is not None:
            tokens = settlement.tokens
        elif settlement.outcome is Outcome.UPSTREAM_ERROR:
            tokens = 0  # the upstream refused it; a stream cut short gives usage so far
        else:
            tokens = None  # left, no usage known (client gone mid-stream): keep the estimate
        if isinstance(backend, MemoryBackend):
            backend.settle_now(scopes, reservation, tokens, refund)
            self._queue.slot_freed(tenant)
            return
        # Written after the answer, with other requests' admissions and settlements; no
        # request waits for it.
        self._settling += 1
        backend.settle_soon(
            scopes,
            reservation,
            tokens,
            refund,
            functools.partial(self._settled, tenant, reservation),
        )

    def _settled(self, tenant: str, reservation: str, error: Exception | None) -> None:
        self._settling -= 1
        if error is not None:
            # The lease runs out instead: the slot comes back, the estimate is refunded.
            self._metrics.limits_backend_errors.inc()
            logger.warning(
                "limits settlement %s not written (lease will expire): %s", reservation, error
            )
        self._queue.slot_freed(tenant)
        if not self._settling and self._settled_all is not None:
            if not self._settled_all.done():
                self._settled_all.set_result(None)
            self._settled_all = None

    async def tenant_usage(self, tenant: str) -> ScopeUsage:
        """What the backend has counted for ``tenant`` (``LimitsUnavailable`` if it cannot
        be reached). A tenant without limits is not counted: it reads as nothing."""
        return await self._backend.usage(f"tenant:{tenant}")

    async def close_settlements(self) -> None:
        """Wait for the settlements in flight (written in the background)."""
        while self._settling:
            if self._settled_all is None:
                self._settled_all = asyncio.get_running_loop().create_future()
            await self._settled_all

    async def close(self) -> None:
        """Wait for settlements in flight, then close the backend."""
        await self.close_settlements()
        await self._backend.close()


class _LimitPermit:
    __slots__ = ("_backend", "_limiter", "_reservation", "_scopes", "_tenant")

    def __init__(
        self,
        limiter: TenantLimiter,
        backend: LimitBackend,
        tenant: str,
        scopes: tuple[ScopeLimits, ...],
        reservation: str,
    ) -> None:
        self._limiter = limiter
        self._backend = backend
        self._tenant = tenant
        self._scopes = scopes
        self._reservation = reservation

    def release(self, settlement: Settlement) -> None:
        """Settle the reservation and free the slot (the completion calls it once)."""
        self._limiter._release(
            self._backend, self._tenant, self._scopes, self._reservation, settlement
        )


class _Unlimited:
    __slots__ = ()

    def release(self, settlement: Settlement) -> None:
        return None


_UNLIMITED = _Unlimited()


def _scopes(
    tenant: str,
    tenant_limits: TenantLimitSettings,
    key_id: str,
    key_limits: LimitSettings | None,
) -> tuple[ScopeLimits, ...]:
    """The scopes with at least one limit: the tenant's, and the key's if configured."""
    found = []
    for scope, limits in ((f"tenant:{tenant}", tenant_limits), (f"key:{key_id}", key_limits)):
        if limits is None:
            continue
        values = ScopeLimits(
            scope,
            limits.requests_per_minute,
            limits.tokens_per_minute,
            limits.tokens_per_day,
            limits.concurrent_requests,
        )
        if any(value is not None for value in values.values()):
            found.append(values)
    return tuple(found)


def _headers(admission: Admission, scopes: tuple[ScopeLimits, ...]) -> dict[str, str]:
    """``x-ratelimit-*`` for the requests and tokens limits that apply; for a refusal,
    the refusing limit with nothing remaining."""
    headers: dict[str, str] = {}
    refused = admission.refused
    if refused is not None and refused is not Limit.CONCURRENT_REQUESTS:
        scope = next(s for s in scopes if s.scope == admission.refused_scope)
        value = scope.values()[LIMIT_ORDER.index(refused)] or 0
        names = _REQUESTS_HEADERS if refused is Limit.REQUESTS_PER_MINUTE else _TOKENS_HEADERS
        _quota_headers(headers, names, Quota(value, 0, admission.retry_after_s))
        return headers
    if admission.requests is not None:
        _quota_headers(headers, _REQUESTS_HEADERS, admission.requests)
    if admission.tokens is not None:
        _quota_headers(headers, _TOKENS_HEADERS, admission.tokens)
    return headers


# Every answer of a limited tenant carries them: the names are made once.
_QUOTA_HEADERS = ("limit", "remaining", "reset")
_REQUESTS_HEADERS = tuple(
    f"x-ratelimit-{what}-requests" for what in ("limit", "remaining", "reset")
)
_TOKENS_HEADERS = tuple(f"x-ratelimit-{what}-tokens" for what in ("limit", "remaining", "reset"))


def _quota_headers(headers: dict[str, str], names: tuple[str, ...], quota: Quota) -> None:
    limit, remaining, reset = names
    headers[limit] = str(quota.limit)
    headers[remaining] = str(quota.remaining) if quota.remaining > 0 else "0"
    seconds = math.ceil(quota.reset_s)
    headers[reset] = f"{seconds}s" if seconds > 0 else "0s"


def _refusal(admission: Admission, headers: dict[str, str]) -> ResourceExhausted:
    limit = admission.refused
    if limit is None:  # only called for refusals
        raise LocalgateError("no refusal to describe")
    retry = max(1, math.ceil(admission.retry_after_s))
    who = admission.refused_scope.replace(":", " ", 1)
    if admission.never_fits:
        message = (
            f"This request alone needs more tokens than the {limit.wording} limit of "
            f"{who} allows; send a shorter prompt or a smaller "
            "generationConfig.maxOutputTokens."
        )
    elif limit is Limit.CONCURRENT_REQUESTS:
        message = (
            f"Too many concurrent requests for {who} (limit: {limit.wording}); "
            f"retry when one of them has finished."
        )
    else:
        message = f"The {limit.wording} limit of {who} is reached; retry in {retry} seconds."
    return ResourceExhausted(message, {**headers, "retry-after": str(retry)})


# What a request outranked by a waiter of its own process is told: the same as a refusal
# by the concurrency limit, so it queues behind that waiter (or is refused at once).
_OUTRANKED = Admission(refused=Limit.CONCURRENT_REQUESTS, retry_after_s=1.0)


def _waiting(ctx: RequestContext, effective: LimitSettings) -> Waiting:
    """The request's class, and how long it may wait for a concurrency slot."""
    priority: str = effective.priority or "normal"
    if effective.allow_priority_header and ctx.priority in PRIORITY_RANK:
        priority = ctx.priority
    hold_s = effective.queue_timeout_s or 0
    # Registered a little longer than it waits, so that it lapses only after it gave up.
    return Waiting(PRIORITY_RANK[priority], round(hold_s * 1000) + 1000 if hold_s else 0)
