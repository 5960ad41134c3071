"""The upstream dispatcher: a request's candidate upstreams, tried in order.

The seam between the pipeline and the upstreams. The router names the candidates;
the dispatcher makes the attempts, keeps the attempt record on the request's context
(the upstream of the latest attempt and how many were made, for the audit trail and
the access log) and decides after a failure whether another attempt may be made.
The policy today is one attempt, no retry: traffic control (retries, fallback chains,
circuit breakers) fills in the policy here, without touching the pipeline.
"""

from __future__ import annotations

import logging

from localgate import telemetry
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
from localgate.policy.snapshot import TenantPolicy
from localgate.upstream.base import Upstream
from localgate.upstream.router import Router

__all__ = ["UpstreamDispatcher", "retryable"]

logger = logging.getLogger("localgate")

# Failures of the upstream itself, whatever the request: unreachable, too slow, an answer
# that is not Gemini's, the gateway's key refused, no key configured.
_UPSTREAM_FAILURES = (
    UpstreamUnreachable,
    UpstreamTimeout,
    UpstreamBadResponse,
    UpstreamCredentialsRejected,
    ServiceUnavailable,
)


def retryable(error: LocalgateError) -> bool:
    """Whether another upstream may be tried after ``error``.

    Only for failures of the upstream, not of the request: those above, and an upstream
    error envelope saying it is overloaded or failing (429, 5xx). A 4xx that judges the
    request (invalid, not found, too large) would be the same anywhere, and so are the
    refusals of an in-house upstream. Asked only while nothing of the answer exists: a
    unary answer that failed, or a stream the upstream has not accepted. Every route the
    gateway forwards is a read or a generation with no effect upstream, so sending it
    again is safe; once a stream is accepted its events may be on their way to the
    client, and a second upstream would start a second answer.
    """
    if isinstance(error, UpstreamError):
        return error.code == 429 or error.code >= 500
    return isinstance(error, _UPSTREAM_FAILURES)


class UpstreamDispatcher:
    """Sends a call to its candidate upstreams in order, at most ``max_attempts`` of them.

    ``max_attempts`` is 1 in the gateway today (one attempt, no retry).
    """

    def __init__(self, router: Router, *, max_attempts: int = 1) -> None:
        self.router = router
        self._max_attempts = max_attempts

    def candidates(self, route: GeminiRoute, policy: TenantPolicy | None) -> tuple[Upstream, ...]:
        """The router's candidates for ``route`` under the tenant's ``policy``, first choice
        first."""
        return self.router.candidates(route, policy)

    async def unary(
        self, ctx: RequestContext, candidates: tuple[Upstream, ...], call: UpstreamCall
    ) -> UnaryReply:
        """The whole answer of the first attempt that gives one; else the last failure."""
        attempt = 0
        while True:
            upstream = candidates[attempt]
            attempt += 1
            ctx.upstream, ctx.attempt = upstream.name, attempt
            try:
                with telemetry.attempt(ctx, upstream, attempt) as traced:
                    return await upstream.unary(traced.carry(call))
            except LocalgateError as exc:
                if not self._try_next(exc, attempt, candidates):
                    raise

    async def stream(
        self, ctx: RequestContext, candidates: tuple[Upstream, ...], call: UpstreamCall
    ) -> StreamReply:
        """The stream of the first attempt the upstream accepts; else the last failure.

        Once accepted, the stream is the request's: a failure while its events arrive
        ends the request, never another attempt.
        """
        attempt = 0
        while True:
            upstream = candidates[attempt]
            attempt += 1
            ctx.upstream, ctx.attempt = upstream.name, attempt
            try:
                with telemetry.attempt(ctx, upstream, attempt) as traced:
                    return await upstream.stream(traced.carry(call))
            except LocalgateError as exc:
                if not self._try_next(exc, attempt, candidates):
                    raise

    def _try_next(
        self, error: LocalgateError, attempt: int, candidates: tuple[Upstream, ...]
    ) -> bool:
        """Whether to make attempt ``attempt + 1`` after ``error``."""
        if attempt >= self._max_attempts or attempt >= len(candidates) or not retryable(error):
            return False
        logger.warning(
            "upstream '%s' failed (%s %s); trying '%s'",
            candidates[attempt - 1].name,
            error.code,
            error.status_name,
            candidates[attempt].name,
        )
        return True
