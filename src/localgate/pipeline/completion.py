"""The one place a request ends: audit completion record, access-log line, metrics, permit.

Every way a request can end passes through ``Completion.finish``, once: a unary answer
(before it goes out), a stream (after its last event, before its end goes out; or when
it is closed early), a refusal at any stage, a cache hit, an internal error, a client
that left. The first ending counts; later calls are no-ops, so whoever notices an ending
may report it. Tracing wraps this one method.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from localgate import telemetry
from localgate.errors import LocalgateError
from localgate.exchange.context import RequestContext
from localgate.exchange.outcome import Outcome
from localgate.exchange.permit import Settlement
from localgate.exchange.stages import AuditStage
from localgate.observability import AccessLog, GatewayMetrics
from localgate.quality import QualityStage

__all__ = ["Completion", "internal_error"]

logger = logging.getLogger("localgate")

_CLIENT_CLOSED = 499


def internal_error(request_id: str) -> LocalgateError:
    """What the client is told when a defect in the gateway ended its request."""
    return LocalgateError(
        f"Internal error in localgate (request id {request_id}); the request was "
        "refused. The gateway log has the details under this id."
    )


class Completion:
    """Ends requests: writes how each one ended, once, and gives its permit back."""

    def __init__(
        self,
        audit: AuditStage,
        access_log: AccessLog,
        metrics: GatewayMetrics,
        quality: QualityStage | None = None,
    ) -> None:
        self._audit = audit
        self._access_log = access_log
        self._metrics = metrics
        self._quality = quality or QualityStage()

    async def finish(
        self,
        ctx: RequestContext,
        outcome: Outcome,
        error: LocalgateError | None = None,
        *,
        answer_sent: bool = False,
    ) -> None:
        """End the request as ``outcome`` (with ``error``, what the client was told).

        Writes the audit completion record (for a request the limits admitted, unless it
        was ``REFUSED`` before the trail held anything of it), releases the permit, then
        writes the access-log line and counts the request. If the completion record
        cannot be written durably, the ending is logged as that failure and the failure
        is raised: an answer not yet sent (``answer_sent`` false) must be withheld.
        """
        if ctx.outcome is not None:
            return
        ctx.outcome = outcome
        if error is not None:
            status, error_status = error.code, error.status_name
        elif outcome is Outcome.CLIENT_DISCONNECTED:
            status, error_status = _CLIENT_CLOSED, "CANCELLED"
        else:
            status, error_status = 200, None
        permit = ctx.permit
        try:
            # The answer's confidence goes into the completion record; drift counts it.
            self._quality.finish(ctx, outcome)
        except Exception:  # a signal, never a reason to fail the request
            logger.exception("quality signals for %s failed", ctx.request_id)
        try:
            if permit is not None and outcome is not Outcome.REFUSED:
                await self._audit.record_outcome(ctx, outcome, status, answer_sent=answer_sent)
        except LocalgateError as exc:
            status, error_status = exc.code, exc.status_name
            if not answer_sent:
                ctx.outcome = Outcome.WITHHELD
            raise
        except Exception as exc:
            logger.exception("audit completion for %s failed", ctx.request_id)
            failure = internal_error(ctx.request_id)
            status, error_status = failure.code, failure.status_name
            if not answer_sent:
                ctx.outcome = Outcome.WITHHELD
            raise failure from exc
        finally:
            if permit is not None:
                ctx.permit = None
                usage = ctx.usage
                tokens = usage.total if usage else None
                # A low-confidence first answer asked again elsewhere used tokens too.
                extra = self._quality.extra_tokens(ctx)
                if extra:
                    tokens = (tokens or 0) + extra
                permit.release(Settlement(outcome, ctx.attempt > 0, tokens))
            self._log(ctx, status, error_status)
            telemetry.end_request(ctx, status, error_status)

    def _log(self, ctx: RequestContext, status: int, error_status: str | None) -> None:
        """Metrics and the access-log line."""
        elapsed = time.perf_counter() - ctx.started
        route = ctx.route
        route_name = route.method.value if route else "unknown"
        model = route.model if route else None
        # Only authenticated callers name metric label values: anonymous requests could
        # otherwise use up the bounded set of model labels.
        metrics = self._metrics
        principal = ctx.principal
        metrics.observe(route_name, model if principal else None, status, elapsed)
        policy = ctx.policy
        if principal is not None and policy is not None and route is not None:
            usage = ctx.usage
            first = ctx.first_answer_at
            metrics.observe_answer(
                route_name,
                model,
                policy.metrics_tenant,
                remote=ctx.attempt > 0 and ctx.served_from is None,
                error=error_status,
                seconds=elapsed,
                first_chunk=first - ctx.started if first and route.method.streams else None,
                usage=(usage.prompt, usage.candidates, usage.thoughts, usage.cached)
                if usage
                else None,
            )
        record: dict[str, Any] = {
            "time": _utc(ctx.received_at),
            "request_id": ctx.request_id,
            "tenant": principal.tenant if principal else None,
            "key_id": principal.key_id if principal else None,
            "client": ctx.client,
            "route": route_name,
            "api_version": route.version if route else None,
            "model": model,
            "status": status,
            "latency_ms": round(elapsed * 1000, 3),
        }
        if principal is not None and principal.method != "key":
            record["auth"] = principal.method  # a client certificate (mTLS) took part
        if ctx.dialect != "gemini":
            record["dialect"] = ctx.dialect
        if error_status:
            record["error"] = error_status
        if ctx.trace_id:
            record["trace_id"] = ctx.trace_id
        if ctx.policy is not None:
            record["config"] = ctx.policy.config_hash
        if ctx.upstream:
            record["upstream"] = ctx.upstream
            if ctx.attempt > 1:
                record["attempt"] = ctx.attempt
            if len(ctx.attempts) > 1:
                record["attempts"] = ctx.attempts
        if ctx.cache_status:
            record["cache"] = ctx.cache_status
        if ctx.redaction_skipped is not None:
            record["redaction"] = "skipped"  # the audit record says why
        if ctx.model_version:
            record["model_version"] = ctx.model_version
        if ctx.confidence is not None:
            record["confidence"] = ctx.confidence
        usage = ctx.usage
        if usage:
            record["usage"] = {
                "prompt_tokens": usage.prompt,
                "candidates_tokens": usage.candidates,
                "thoughts_tokens": usage.thoughts,
                "total_tokens": usage.total,
            }
        self._access_log.write(record)


_second: list[Any] = [-1, ""]


def _utc(timestamp: float) -> str:
    """ISO 8601 UTC with milliseconds, e.g. 2026-11-29T22:13:33.123Z."""
    whole = int(timestamp)
    if whole != _second[0]:  # formatted once per second
        _second[:] = [whole, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole))]
    return f"{_second[1]}.{int((timestamp - whole) * 1000):03d}Z"
