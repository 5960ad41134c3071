"""The upstream dispatcher: a request's candidate upstreams, tried in order.

The seam between the pipeline and the upstreams. The router names the candidates; the
dispatcher makes the attempts and keeps their record on the request's context (the
upstream of the latest attempt, how many were made, and each one's upstream, status
and latency for the audit trail). After a failure of the upstream it tries again:
the same upstream after a backoff (exponential, full jitter, at least its Retry-After),
within its retry budget and ``attempts_per_upstream``; then the next candidate; at most
``max_attempts`` in all. Each upstream has a circuit breaker: an open one is skipped.

A stream is tried again only while nothing of it exists for the client: the dispatcher
waits for the first event before handing the stream over, so an upstream that accepts
and then breaks before its first event is retried too; once an event is handed over,
the stream is the request's answer, whatever happens next.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from localgate import telemetry
from localgate.config import CircuitBreakerSettings, RetrySettings
from localgate.errors import (
    LocalgateError,
    ServiceUnavailable,
    UpstreamBadResponse,
    UpstreamCredentialsRejected,
    UpstreamError,
    UpstreamTimeout,
    UpstreamUnreachable,
)
from localgate.exchange.context import RequestContext
from localgate.exchange.replies import StreamReply, UnaryReply, UpstreamCall
from localgate.gemini.routes import GeminiRoute
from localgate.observability import GatewayMetrics
from localgate.observability.series import PlainHistogram
from localgate.policy.snapshot import TenantPolicy
from localgate.upstream.base import Catalogued, Upstream, needs_redaction
from localgate.upstream.breaker import BreakerState, CircuitBreaker

if TYPE_CHECKING:
    # Imported only with limits.backend: redis (it imports redis).
    from localgate.upstream.shared_breakers import SharedBreakers
from localgate.upstream.budget import RetryBudget
from localgate.upstream.router import RoutePlan, Router

__all__ = ["UPSTREAM_HEADER", "UpstreamDispatcher", "retryable", "worth_repeating"]

logger = logging.getLogger("localgate")

# Names the upstream that served the answer, on every answer that has one.
UPSTREAM_HEADER = "x-localgate-upstream"

# Failures of the upstream itself, whatever the request: unreachable, too slow, an answer
# that is not Gemini's, the gateway's key refused, no key configured.
_UPSTREAM_FAILURES = (
    UpstreamUnreachable,
    UpstreamTimeout,
    UpstreamBadResponse,
    UpstreamCredentialsRejected,
    ServiceUnavailable,
)

_Result = TypeVar("_Result", UnaryReply, StreamReply)
_END = object()


def retryable(error: LocalgateError) -> bool:
    """Whether another attempt may be made after ``error``.

    Only for failures of the upstream, not of the request: those above, and an upstream
    error envelope saying it is overloaded or failing (429, 5xx). A 4xx that judges the
    request (invalid, not found, too large) would be the same anywhere, and so are the
    refusals of an in-house upstream. Asked only while nothing of the answer exists: a
    unary answer that failed, or a stream before its first event. Every route the
    gateway forwards is a read or a generation with no effect upstream, so sending it
    again is safe; once a stream's event is on its way to the client, a second attempt
    would start a second answer.
    """
    if isinstance(error, UpstreamError):
        return error.code == 429 or error.code >= 500
    return isinstance(error, _UPSTREAM_FAILURES)


# Upstream answers worth asking the same upstream again for: throttled, or failing in
# a way that passes (Google's "internal error", "overloaded", "deadline exceeded").
_TRANSIENT_STATUSES = frozenset({429, 500, 503, 504})


def worth_repeating(error: LocalgateError) -> bool:
    """Whether the same upstream may be asked again after ``error`` (else only the next
    one): a connection that failed or timed out, or 429, 500, 503, 504. A key refused,
    a redirect or a body that is not Gemini's would be the same the next time."""
    if isinstance(error, UpstreamError):
        return error.code in _TRANSIENT_STATUSES
    return isinstance(error, (UpstreamUnreachable, UpstreamTimeout))


class UpstreamDispatcher:
    """Sends a call to its candidate upstreams: retries, fallback, circuit breakers.

    ``clock``, ``sleep`` and ``random`` are injectable so tests need no real waiting.
    """

    def __init__(
        self,
        router: Router,
        *,
        retries: RetrySettings | None = None,
        breaker: CircuitBreakerSettings | None = None,
        max_attempts: int | None = None,
        attempts_per_upstream: int | None = None,
        metrics: GatewayMetrics | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        random: Callable[[], float] = random.random,
    ) -> None:
        self.router = router
        self._retries = retries = retries or RetrySettings()
        self._breaker_settings = breaker or CircuitBreakerSettings()
        self._max_attempts = max_attempts or retries.max_attempts
        self._per_upstream = attempts_per_upstream or retries.attempts_per_upstream
        self._metrics = metrics
        self._clock = clock
        self._sleep = sleep
        self._random = random
        self._breakers: dict[str, CircuitBreaker] = {}
        self._budgets: dict[str, RetryBudget] = {}
        self._shared: SharedBreakers | None = None
        for upstream in router.upstreams:
            self.breaker(upstream.name)

    def plan(
        self,
        route: GeminiRoute,
        policy: TenantPolicy | None,
        *,
        tenant: str = "",
        user: str | None = None,
    ) -> RoutePlan:
        """The router's plan for ``route`` under the tenant's ``policy``."""
        return self.router.plan(route, policy, tenant=tenant, user=user)

    def candidates(self, route: GeminiRoute, policy: TenantPolicy | None) -> tuple[Upstream, ...]:
        """The router's candidates for ``route`` under the tenant's ``policy``, first choice
        first."""
        return self.router.candidates(route, policy)

    def breaker(self, name: str) -> CircuitBreaker:
        """The circuit breaker of the upstream called ``name``."""
        breaker = self._breakers.get(name)
        if breaker is None:
            settings = self._breaker_settings
            breaker = self._breakers[name] = CircuitBreaker(
                name,
                failure_ratio=settings.failure_ratio,
                window_s=settings.window_s,
                min_requests=settings.min_requests,
                open_s=settings.open_s,
                clock=self._clock,
                on_change=self._breaker_changed,
                enabled=settings.enabled,
            )
            self._breaker_changed(name, BreakerState.CLOSED)
        return breaker

    @property
    def breakers(self) -> dict[str, CircuitBreaker]:
        """Every upstream's circuit breaker, by name."""
        return self._breakers

    def share_breakers(self, shared: SharedBreakers) -> None:
        """Keep the breakers in step with other replicas' through ``shared``."""
        self._shared = shared

    def circuits(self) -> dict[str, str]:
        """Each upstream's breaker state, for ``/readyz``."""
        return {name: b.state.name.lower() for name, b in sorted(self._breakers.items())}

    async def unary(
        self, ctx: RequestContext, candidates: tuple[Upstream, ...], call: UpstreamCall
    ) -> UnaryReply:
        """The whole answer of the first attempt that gives one; else the last failure."""
        reply = await self._attempts(ctx, candidates, call, _unary, streaming=False)
        reply.headers[UPSTREAM_HEADER] = ctx.upstream or ""
        return reply

    async def stream(
        self, ctx: RequestContext, candidates: tuple[Upstream, ...], call: UpstreamCall
    ) -> StreamReply:
        """The stream of the first attempt that gives a first event; else the last failure.

        Once its first event is handed over, the stream is the request's: a failure while
        the rest arrives ends the request, never another attempt.
        """
        chunks = self._metrics.upstream_chunk_seconds if self._metrics is not None else None

        async def first_event(upstream: Upstream, call: UpstreamCall) -> StreamReply:
            return await _first_event(upstream, call, chunks)

        reply = await self._attempts(ctx, candidates, call, first_event, streaming=True)
        reply.headers[UPSTREAM_HEADER] = ctx.upstream or ""
        return reply

    async def _attempts(
        self,
        ctx: RequestContext,
        candidates: tuple[Upstream, ...],
        call: UpstreamCall,
        send: Callable[[Upstream, UpstreamCall], Awaitable[_Result]],
        *,
        streaming: bool,
    ) -> _Result:
        limit = min(self._max_attempts, len(candidates) * self._per_upstream)
        index, on_this = 0, 0
        last: LocalgateError | None = None
        while True:
            if index >= len(candidates):
                raise last or self._all_open(candidates)
            upstream = candidates[index]
            if ctx.redaction_skipped is not None and needs_redaction(upstream):
                # The data-residency promise: a request that skipped redaction for an
                # in-house server never goes to an upstream that needs it redacted.
                ctx.attempts.append({"upstream": upstream.name, "skipped": "not redacted"})
                last = last or ServiceUnavailable(
                    f"The request was not redacted (its route is in-house only), so "
                    f"localgate does not send it to the upstream '{upstream.name}'. Nothing "
                    "was sent there."
                )
                index, on_this = index + 1, 0
                continue
            breaker = self.breaker(upstream.name)
            # Only a probe asks the other replicas (a coroutine to await): not on every call.
            if not breaker.allow() or (breaker.probing and not await self._probe_is_ours(breaker)):
                ctx.attempts.append({"upstream": upstream.name, "skipped": "circuit open"})
                index, on_this = index + 1, 0
                continue
            probing = breaker.probing
            budget = self._budget(upstream.name)
            if on_this == 0:
                budget.record_request()
            ctx.upstream, ctx.attempt = upstream.name, ctx.attempt + 1
            on_this += 1
            started = self._clock()
            try:
                with telemetry.attempt(ctx, upstream, ctx.attempt) as traced:
                    result = await send(upstream, traced.carry(call))
            except LocalgateError as exc:
                failed = retryable(exc)
                self._record(breaker, probing, ok=not failed)
                self._note(ctx, upstream, exc.code, started, streaming)
                if not failed or ctx.attempt >= limit:
                    raise
                last = exc
                delay = self._again_after(exc, on_this, budget)
                if delay is not None:
                    self._count_retry(upstream.name, "retry")
                    logger.warning(
                        "upstream '%s' failed (%s %s); trying it again in %.2fs",
                        upstream.name,
                        exc.code,
                        exc.status_name,
                        delay,
                    )
                    await self._sleep(delay)
                    continue
                index, on_this = index + 1, 0
                if index < len(candidates):
                    self._count_retry(upstream.name, "fallback")
                    logger.warning(
                        "upstream '%s' failed (%s %s); trying '%s'",
                        upstream.name,
                        exc.code,
                        exc.status_name,
                        candidates[index].name,
                    )
                continue
            except BaseException:
                breaker.abandon()
                if probing and self._shared is not None:
                    self._shared.probed(upstream.name, ok=False)
                raise
            self._record(breaker, probing, ok=True)
            self._note(ctx, upstream, 200, started, streaming)
            return result

    async def _probe_is_ours(self, breaker: CircuitBreaker) -> bool:
        """Whether the probe ``breaker`` just let through may go: with shared breakers, only
        if no other replica is probing the upstream now."""
        if not breaker.probing or self._shared is None:
            return True
        if await self._shared.claim_probe(breaker.upstream):
            return True
        breaker.abandon()
        return False

    def _record(self, breaker: CircuitBreaker, probing: bool, *, ok: bool) -> None:
        breaker.record(ok=ok)
        if probing and self._shared is not None:
            self._shared.probed(breaker.upstream, ok=ok)

    async def add_catalogues(
        self, reply: UnaryReply, upstreams: tuple[Upstream, ...], query: tuple[tuple[str, str], ...]
    ) -> None:
        """Add the model lists of ``upstreams`` to a models.list answer (on its first page
        only); one that cannot list its models now is left out, with a warning."""
        if any(name == "pageToken" for name, _ in query) or not isinstance(reply.body, dict):
            return
        models = reply.body.get("models")
        if not isinstance(models, list):
            models = reply.body["models"] = []
        listed = {m.get("name") for m in models if isinstance(m, dict)}
        for upstream in upstreams:
            if not isinstance(upstream, Catalogued):
                continue
            try:
                entries = await upstream.catalogue()
            except LocalgateError as exc:
                logger.warning(
                    "upstream '%s' left out of models.list: %s", upstream.name, exc.status_name
                )
                continue
            models.extend(e for e in entries if e["name"] not in listed)
            listed.update(e["name"] for e in entries)

    def _again_after(
        self, error: LocalgateError, on_this: int, budget: RetryBudget
    ) -> float | None:
        """The wait before trying the same upstream again, or None to move on."""
        retries = self._retries
        if on_this >= self._per_upstream or not worth_repeating(error):
            return None
        backoff = min(retries.backoff_max_s, retries.backoff_initial_s * 2.0 ** (on_this - 1))
        delay = backoff * self._random()
        asked = error.retry_after if isinstance(error, UpstreamError) else None
        if asked is not None:
            delay = max(delay, asked)
        if delay > retries.max_wait_s or not budget.try_spend():
            return None
        return delay

    def _all_open(self, candidates: tuple[Upstream, ...]) -> ServiceUnavailable:
        names = ", ".join(f"'{u.name}'" for u in candidates)
        wait = max(self.breaker(u.name).retry_in() for u in candidates)
        return ServiceUnavailable(
            f"The upstream {names} is unavailable: its circuit breaker is open after "
            f"repeated failures. Nothing was sent; try again in {wait:.0f}s."
        )

    def _budget(self, name: str) -> RetryBudget:
        budget = self._budgets.get(name)
        if budget is None:
            retries = self._retries
            budget = self._budgets[name] = RetryBudget(
                retries.budget_ratio,
                retries.budget_window_s,
                retries.budget_min_retries,
                self._clock,
            )
        return budget

    def _note(
        self,
        ctx: RequestContext,
        upstream: Upstream,
        status: int,
        started: float,
        streaming: bool,
    ) -> None:
        seconds = self._clock() - started
        ctx.attempts.append(
            {"upstream": upstream.name, "status": status, "latency_ms": round(seconds * 1000, 3)}
        )
        metrics = self._metrics
        if metrics is not None:
            metrics.upstream_attempts.inc((upstream.name, str(status)))
            timing = metrics.upstream_first_chunk_seconds if streaming else metrics.upstream_seconds
            timing.observe((upstream.name,), seconds)

    def _count_retry(self, name: str, kind: str) -> None:
        if self._metrics is not None:
            self._metrics.upstream_retries.labels(name, kind).inc()

    def _breaker_changed(self, name: str, state: BreakerState) -> None:
        if state is BreakerState.OPEN and self._shared is not None:
            self._shared.opened(name)
        if self._metrics is not None:
            self._metrics.upstream_circuit_state.labels(name).set(state.value)


def _unary(upstream: Upstream, call: UpstreamCall) -> Awaitable[UnaryReply]:
    # The upstream's own coroutine, awaited by the caller: no coroutine of its own around it.
    return upstream.unary(call)


async def _first_event(
    upstream: Upstream, call: UpstreamCall, chunks: PlainHistogram | None
) -> StreamReply:
    """The upstream's stream, once its first event (or its end) has arrived; the time
    between its later events goes to ``chunks``."""
    reply = await upstream.stream(call)
    try:
        first = await anext(reply.events, _END)
    except BaseException:
        await reply.close()
        raise
    return StreamReply(
        events=_chained(first, time.perf_counter(), reply.events, chunks, (upstream.name,)),
        close=reply.close,
        headers=reply.headers,
    )


async def _chained(
    first: Any,
    arrived: float,
    rest: AsyncIterator[Any],
    chunks: PlainHistogram | None,
    labels: tuple[str],
) -> AsyncIterator[Any]:
    if first is _END:
        return
    yield first
    if chunks is None:
        async for event in rest:
            yield event
        return
    # From one event's arrival to the next's (the semantic conventions' time per output
    # chunk); the gateway's own work on an event, done while this waits, is included.
    clock, last = time.perf_counter, arrived
    async for event in rest:
        now = clock()
        chunks.observe(labels, now - last)
        last = now
        yield event
