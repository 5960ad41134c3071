"""The pipeline: the stages of DESIGN.md, called in order for every request."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import orjson

from localgate import telemetry
from localgate.errors import ClientClosedRequest, LocalgateError
from localgate.exchange.context import Inbound, RequestContext
from localgate.exchange.outcome import Outcome
from localgate.exchange.replies import StreamReply, UnaryReply, UpstreamCall
from localgate.exchange.stages import (
    AuditStage,
    CacheStage,
    LimitsStage,
    RedactionStage,
    RetrievalStage,
)
from localgate.identity.stage import IdentityStage
from localgate.observability import AccessLog, GatewayMetrics
from localgate.pipeline.batching import Together
from localgate.pipeline.completion import Completion, internal_error
from localgate.pipeline.stages import NoRetrieval
from localgate.quality import QualityStage
from localgate.upstream.dispatcher import UpstreamDispatcher
from localgate.upstream.router import RoutePlan

__all__ = ["CACHE_HEADER", "Pipeline", "Reply"]

logger = logging.getLogger("localgate")

# Says whether the answer came from the cache: "hit; layer=exact", "miss", "bypass", ...
CACHE_HEADER = "x-localgate-cache"

Reply = UnaryReply | StreamReply
# Bodies above this are redacted in a worker thread (about 10 ms of work and up).
_REDACT_IN_THREAD_BYTES = 32 * 1024


class Pipeline:
    """identity → limits → route plan → redaction → retrieval → cache → audit → dispatch → response.

    However a request goes, ``completion`` ends it once: a unary answer has ended when
    ``run`` returns it, a refusal when ``run`` raises, a stream when its events end or
    it is closed.
    """

    def __init__(
        self,
        *,
        identity: IdentityStage,
        limits: LimitsStage,
        redaction: RedactionStage,
        cache: CacheStage,
        audit: AuditStage,
        dispatcher: UpstreamDispatcher,
        access_log: AccessLog,
        metrics: GatewayMetrics,
        retrieval: RetrievalStage | None = None,
        quality: QualityStage | None = None,
    ) -> None:
        self.identity = identity
        self.limits = limits
        self.redaction = redaction
        self.retrieval = retrieval or NoRetrieval()
        self.cache = cache
        self.audit = audit
        self.dispatcher = dispatcher
        self.metrics = metrics
        self.quality = quality or QualityStage()
        self.completion = Completion(audit, access_log, metrics, self.quality)
        # Requests that reach redaction in one turn of the loop are redacted back to back
        # (pipeline/batching.py): detection's code and data stay in the CPU's caches. The
        # only request in flight is redacted at once.
        self._redact_together: Together[tuple[RequestContext, Inbound]] = Together(
            self._redact, alone=lambda: metrics.in_flight <= 1
        )

    def _redact(self, request: tuple[RequestContext, Inbound]) -> None:
        ctx, inbound = request
        self.redaction.redact_request(ctx, inbound.query)

    async def run(self, ctx: RequestContext, inbound: Inbound) -> Reply:
        """Take one request through every stage; raise a ``LocalgateError`` to refuse it."""
        finish = self.completion.finish
        stages = self.metrics.stages
        try:
            route = ctx.route
            if route is None:  # the front door only calls with a matched route
                raise LocalgateError("The request has no route.")
            with telemetry.stage(ctx, "identity", stages["identity"]):
                self.identity.authenticate(ctx, inbound.credential, inbound.certificate)
            # Parsed only after identity, so anonymous callers cannot make the gateway work.
            ctx.body, size = await inbound.read_body()
            # A dialect whose body names the model and whether to stream (OpenAI's) sets
            # the request's route as it reads the body.
            route = ctx.route or route
            with telemetry.stage(ctx, "limits", stages["limits"]):
                ctx.permit = await self.limits.admit(ctx)
            try:
                # Before redaction: whether the request is redacted depends on where it may
                # go (an in-house server may take it as written). The tenant's routes and
                # residency list; the model a route pins or an alias names is the one
                # looked up, recorded and sent.
                tenant = ctx.principal.tenant if ctx.principal else ""
                plan = self.dispatcher.plan(route, ctx.policy, tenant=tenant, user=ctx.end_user)
            except LocalgateError as exc:
                await finish(
                    ctx,
                    Outcome.BLOCKED_BY_POLICY if exc.code < 500 else Outcome.UPSTREAM_ERROR,
                    exc,
                )
                raise
            if plan.unredacted and ctx.policy is not None and ctx.policy.redaction.enabled:
                ctx.redaction_skipped = _skipped_because(plan)
                self.metrics.redaction_skipped.labels(plan.candidates[0].name).inc()
                # Nothing unredacted is kept in the cache, or answered from it.
                ctx.cache_control = "bypass"
            # A policy without redaction does not enter the stage (nor wait for a batch).
            redacting = ctx.policy is None or ctx.policy.redaction.enabled
            if ctx.redaction_skipped is None and redacting:
                try:
                    with telemetry.stage(ctx, "redaction", stages["redaction"]):
                        if size > _REDACT_IN_THREAD_BYTES:
                            # Seconds of CPU for a large prompt: off the event loop, so every
                            # other request (and /healthz) keeps being served meanwhile.
                            await asyncio.to_thread(
                                self.redaction.redact_request, ctx, inbound.query
                            )
                        else:
                            await self._redact_together((ctx, inbound))
                except LocalgateError as exc:
                    # A policy refusal is a 4xx; a failing redactor refuses with a 5xx.
                    blocked = exc.code < 500
                    await finish(
                        ctx,
                        Outcome.BLOCKED_BY_POLICY if blocked else Outcome.REDACTION_FAILED,
                        exc,
                    )
                    raise
            if ctx.redaction_skipped is None:
                # Prompt drift samples redacted text only (or the prompt as the policy
                # sends it, unredacted).
                self.quality.sample_prompt(ctx)
            try:
                with telemetry.stage(ctx, "retrieval", stages["retrieval"]):
                    await self.retrieval.augment(ctx, self.redaction)
            except LocalgateError as exc:
                await finish(ctx, Outcome.RETRIEVAL_FAILED, exc)
                raise
            ctx.route = route = plan.route
            self.quality.begin(
                ctx, plan.confidence or (ctx.policy.routing.confidence if ctx.policy else None)
            )
            with telemetry.stage(ctx, "cache", stages["cache"]):
                cached = await self.cache.lookup(ctx)
            if cached is not None:
                # Every request is on record, also those the cache answers.
                with telemetry.stage(ctx, "audit", stages["audit"]):
                    await self.audit.record_request(ctx)
                if route.method.streams:
                    stored = _stored_stream(cached)
                    return _AnswerStream(self, ctx, stored, Outcome.SERVED_FROM_CACHE).reply()
                return await self._unary_answer(ctx, cached, Outcome.SERVED_FROM_CACHE)
            candidates = plan.candidates
            if candidates[0].local:  # candidates are all local or all remote
                ctx.served_from = {"local": candidates[0].name}  # answered in-house
            # Serialised once: the request record's digest covers the very bytes sent.
            ctx.sent_body = sent = orjson.dumps(ctx.body)
            with telemetry.stage(ctx, "audit", stages["audit"]):
                await self.audit.record_request(ctx)
            call = UpstreamCall(
                route=route, body=ctx.body, query=inbound.query, headers=inbound.headers, data=sent
            )
            try:
                if route.method.streams:
                    with stages["upstream"]():
                        stream = await self.dispatcher.stream(ctx, candidates, call)
                    return _AnswerStream(self, ctx, stream, Outcome.FORWARDED).reply()
                with stages["upstream"]():
                    reply = await self.dispatcher.unary(ctx, candidates, call)
                if plan.catalogues:
                    await self.dispatcher.add_catalogues(reply, plan.catalogues, inbound.query)
            except LocalgateError as exc:
                await finish(ctx, Outcome.UPSTREAM_ERROR, exc)
                raise
            reply = await self._confident(ctx, call, reply)
            return await self._unary_answer(ctx, reply, Outcome.FORWARDED)
        except ClientClosedRequest as exc:
            await finish(ctx, Outcome.CLIENT_DISCONNECTED, exc)
            raise
        except LocalgateError as exc:
            # Refused before a stage that knows better ended it (route, credential, body,
            # limits, the audit trail declining the request record); else a no-op.
            await finish(ctx, Outcome.REFUSED, exc)
            raise
        except Exception as exc:
            logger.exception("request %s failed inside the gateway", ctx.request_id)
            error = internal_error(ctx.request_id)
            await finish(ctx, Outcome.INTERNAL_ERROR, error)
            raise error from exc
        except BaseException:
            # Cancelled: the gateway is shutting down and gives up on it, as on a stream.
            await finish(ctx, Outcome.CLIENT_DISCONNECTED)
            raise

    # -- response path --------------------------------------------------------

    async def _confident(
        self, ctx: RequestContext, call: UpstreamCall, reply: UnaryReply
    ) -> UnaryReply:
        """The upstream's answer; or, if it is below its route's confidence threshold and
        the route names a stronger model, that model's answer (docs/quality.md). If the
        stronger model cannot answer, the first answer stands, marked low."""
        self.quality.observe_answer(ctx, reply.body)
        model = self.quality.retry_model(ctx)
        if model is None or ctx.route is None:
            return reply
        tenant = ctx.principal.tenant if ctx.principal else ""
        try:
            # Routed like any request for that model: its route, alias and residency.
            plan = self.dispatcher.plan(
                dataclasses.replace(ctx.route, model_id=model),
                ctx.policy,
                tenant=tenant,
                user=ctx.end_user,
            )
            self.quality.retrying(ctx, plan.route.model_id or model)
            stronger = await self.dispatcher.unary(
                ctx, plan.candidates, dataclasses.replace(call, route=plan.route)
            )
        except LocalgateError as exc:
            logger.warning(
                "request %s: asking %s again after a low-confidence answer failed (%s %s); "
                "the first answer is sent",
                ctx.request_id,
                model,
                exc.code,
                exc.status_name,
            )
            self.quality.retry_failed(ctx)
            return reply
        self.quality.observe_answer(ctx, stronger.body)
        return stronger

    async def _unary_answer(
        self, ctx: RequestContext, reply: UnaryReply, outcome: Outcome
    ) -> UnaryReply:
        if outcome is not Outcome.FORWARDED:  # forwarded ones were seen by _confident
            self.quality.observe_answer(ctx, reply.body)
        self._keep(ctx, reply.body)
        reply.body = self.redaction.restore_answer(ctx, reply.body)
        _observe(ctx, reply.body)
        telemetry.answer(ctx, reply.body)
        # Durable before the answer goes out (raises, withholding it, if it cannot be).
        await self.completion.finish(ctx, outcome)
        if outcome is Outcome.FORWARDED:
            self.cache.complete(ctx)
        if ctx.cache_status is not None:
            reply.headers[CACHE_HEADER] = ctx.cache_status
        reply.headers.update(ctx.reply_headers)
        if ctx.limit_headers:
            reply.headers.update(ctx.limit_headers)
        return reply

    def stream_event(self, ctx: RequestContext, event: Any) -> Any:
        """The response stages for one stream event."""
        self._keep(ctx, event)
        self.quality.observe_event(ctx, event)
        event = self.redaction.restore_event(ctx, event)
        _observe(ctx, event)
        telemetry.answer(ctx, event)
        return event

    def _keep(self, ctx: RequestContext, answer: Any) -> None:
        """The answer as the upstream sent it (placeholders), for the audit trail and cache."""
        if not self.audit.keeps_answers and ctx.cache is None:
            return
        raw = orjson.dumps(answer)
        if self.audit.keeps_answers:
            ctx.answer_events.append(raw)
        self.cache.keep(ctx, raw)


def _skipped_because(plan: RoutePlan) -> str:
    names = ", ".join(upstream.name for upstream in plan.candidates)
    return (
        f"upstream policy: every upstream this request may reach ({names}) is in-house "
        "with redaction: false"
    )


def _observe(ctx: RequestContext, answer: Any) -> None:
    """Note usage and model version, but no usage for a cached answer: its tokens were
    paid for once, by the request that got it from upstream."""
    if ctx.first_answer_at is None:
        ctx.first_answer_at = time.perf_counter()
    if ctx.served_from is None or "cache" not in ctx.served_from:
        ctx.observe_answer(answer)
        return
    version = answer.get("modelVersion") if isinstance(answer, dict) else None
    if isinstance(version, str):
        ctx.model_version = version


def _stored_stream(cached: UnaryReply) -> StreamReply:
    """A stored answer as a stream: one event carrying all of it."""

    async def events() -> AsyncIterator[Any]:
        yield cached.body

    async def close() -> None:
        return None

    return StreamReply(events=events(), close=close, headers=cached.headers)


class _AnswerStream:
    """The response path of a stream: each event through the stages; the request ends
    after the last event (before the stream's end goes out), else when it is closed."""

    __slots__ = ("_ctx", "_pipeline", "_success", "_upstream")

    def __init__(
        self, pipeline: Pipeline, ctx: RequestContext, upstream: StreamReply, success: Outcome
    ) -> None:
        self._pipeline = pipeline
        self._ctx = ctx
        self._upstream = upstream
        self._success = success

    def reply(self) -> StreamReply:
        """The stream as the front door sees it."""
        headers = self._upstream.headers
        if self._ctx.cache_status is not None:
            headers = {**headers, CACHE_HEADER: self._ctx.cache_status}
        headers = {**headers, **self._ctx.reply_headers}
        if self._ctx.limit_headers:
            headers = {**headers, **self._ctx.limit_headers}
        return StreamReply(events=self._events(), close=self._close, headers=headers)

    async def _events(self) -> AsyncIterator[Any]:
        pipeline, ctx = self._pipeline, self._ctx
        # The events have gone out: if the completion record cannot be written, there is
        # nothing to hold back (``answer_sent``).
        try:
            async for event in self._upstream.events:
                yield pipeline.stream_event(ctx, event)
            for event in pipeline.redaction.finish_stream(ctx):
                yield event
        except LocalgateError as exc:
            # Before the error event and the end of the response go out.
            await pipeline.completion.finish(ctx, Outcome.UPSTREAM_ERROR, exc, answer_sent=True)
            raise
        except Exception as exc:
            logger.exception("stream %s failed inside the gateway", ctx.request_id)
            error = internal_error(ctx.request_id)
            await pipeline.completion.finish(ctx, Outcome.INTERNAL_ERROR, error, answer_sent=True)
            raise error from exc
        if self._success is Outcome.FORWARDED:
            pipeline.cache.complete(ctx)
        # Every event has gone out, but not the end of the response: a client that saw
        # the stream end (the closing chunk, the closing ``]``) has its completion on disk.
        await pipeline.completion.finish(ctx, self._success, answer_sent=True)

    async def _close(self) -> None:
        try:
            await self._upstream.close()
        finally:
            # Unless the events ended it: the client left (or the stream never started).
            await self._pipeline.completion.finish(
                self._ctx, Outcome.CLIENT_DISCONNECTED, answer_sent=True
            )
