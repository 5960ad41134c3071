"""The pipeline: the stages of DESIGN.md, called in order for every request."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import orjson

from localgate.errors import LocalgateError
from localgate.exchange.context import Inbound, RequestContext
from localgate.exchange.replies import StreamReply, UnaryReply, UpstreamCall
from localgate.exchange.stages import (
    AuditStage,
    CacheStage,
    LimitsStage,
    Permit,
    RedactionStage,
    RetrievalStage,
)
from localgate.identity.stage import IdentityStage
from localgate.pipeline.stages import NoRetrieval
from localgate.upstream.router import Router

__all__ = ["CACHE_HEADER", "Pipeline", "Reply"]

# Says whether the answer came from the cache: "hit; layer=exact", "miss", "bypass", ...
CACHE_HEADER = "x-localgate-cache"

Reply = UnaryReply | StreamReply
# Bodies above this are redacted in a worker thread (about 10 ms of work and up).
_REDACT_IN_THREAD_BYTES = 32 * 1024


class Pipeline:
    """identity → limits → redaction → retrieval → cache → audit → route → upstream → response."""

    def __init__(
        self,
        *,
        identity: IdentityStage,
        limits: LimitsStage,
        redaction: RedactionStage,
        cache: CacheStage,
        audit: AuditStage,
        router: Router,
        retrieval: RetrievalStage | None = None,
    ) -> None:
        self.identity = identity
        self.limits = limits
        self.redaction = redaction
        self.retrieval = retrieval or NoRetrieval()
        self.cache = cache
        self.audit = audit
        self.router = router

    async def run(self, ctx: RequestContext, inbound: Inbound) -> Reply:
        """Take one request through every stage; raise a ``LocalgateError`` to refuse it."""
        route = ctx.route
        if route is None:  # the front door only calls with a matched route
            raise LocalgateError("The request has no route.")
        self.identity.authenticate(ctx, inbound.credential)
        # Parsed only after identity, so anonymous callers cannot make the gateway work.
        ctx.body, size = await inbound.read_body()
        permit = await self.limits.admit(ctx)
        try:
            try:
                if size > _REDACT_IN_THREAD_BYTES:
                    # Seconds of CPU for a large prompt: off the event loop, so every
                    # other request (and /healthz) keeps being served meanwhile.
                    await asyncio.to_thread(self.redaction.redact_request, ctx, inbound.query)
                else:
                    self.redaction.redact_request(ctx, inbound.query)
            except LocalgateError as exc:
                # A policy refusal is a 4xx; a failing redactor refuses with a 5xx.
                outcome = "blocked by policy" if exc.code < 500 else "refused: redaction failed"
                await self.audit.record_outcome(ctx, outcome, exc.code)
                raise
            try:
                await self.retrieval.augment(ctx, self.redaction)
            except LocalgateError as exc:
                await self.audit.record_outcome(ctx, "refused: retrieval", exc.code)
                raise
            cached = await self.cache.lookup(ctx)
            if cached is not None:
                # Every request is on record, also those the cache answers.
                await self.audit.record_request(ctx)
                if route.method.streams:
                    stored = _stored_stream(cached)
                    return _AnswerStream(self, ctx, stored, permit, "served from cache").reply()
                return await self._unary_answer(ctx, cached, permit, outcome="served from cache")
            upstream = self.router.route(route, ctx.principal)
            ctx.upstream = upstream.name
            if upstream.local:
                ctx.served_from = {"local": upstream.name}  # answered in-house: nothing leaves
            await self.audit.record_request(ctx)
            call = UpstreamCall(
                route=route, body=ctx.body, query=inbound.query, headers=inbound.headers
            )
            try:
                if route.method.streams:
                    return _AnswerStream(self, ctx, await upstream.stream(call), permit).reply()
                reply = await upstream.unary(call)
            except LocalgateError as exc:
                await self.audit.record_outcome(ctx, "upstream error", exc.code)
                raise
            return await self._unary_answer(ctx, reply, permit, "forwarded")
        except BaseException:
            permit.release()
            raise

    # -- response path --------------------------------------------------------

    async def _unary_answer(
        self, ctx: RequestContext, reply: UnaryReply, permit: Permit, outcome: str
    ) -> UnaryReply:
        self._keep(ctx, reply.body)
        reply.body = self.redaction.restore_answer(ctx, reply.body)
        _observe(ctx, reply.body)
        # Durable before the answer goes out (raises, withholding it, if it cannot be).
        await self.audit.record_outcome(ctx, outcome, 200)
        permit.release()
        if outcome == "forwarded":
            self.cache.complete(ctx)
        if ctx.cache_status is not None:
            reply.headers[CACHE_HEADER] = ctx.cache_status
        reply.headers.update(ctx.reply_headers)
        return reply

    def stream_event(self, ctx: RequestContext, event: Any) -> Any:
        """The response stages for one stream event."""
        self._keep(ctx, event)
        event = self.redaction.restore_event(ctx, event)
        _observe(ctx, event)
        return event

    def _keep(self, ctx: RequestContext, answer: Any) -> None:
        """The answer as the upstream sent it (placeholders), for the audit trail and cache."""
        if not self.audit.keeps_answers and ctx.cache is None:
            return
        raw = orjson.dumps(answer)
        if self.audit.keeps_answers:
            ctx.answer_events.append(raw)
        self.cache.keep(ctx, raw)


def _observe(ctx: RequestContext, answer: Any) -> None:
    """Note usage and model version, but no usage for a cached answer: its tokens were
    paid for once, by the request that got it from upstream."""
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
    """The response path of a stream: each event through the stages, completion once."""

    def __init__(
        self,
        pipeline: Pipeline,
        ctx: RequestContext,
        upstream: StreamReply,
        permit: Permit,
        outcome: str = "forwarded",
    ) -> None:
        self._pipeline = pipeline
        self._ctx = ctx
        self._upstream = upstream
        self._permit = permit
        self._success = outcome
        self._outcome = "client disconnected"
        self._status = 499
        self._recorded = False

    def reply(self) -> StreamReply:
        """The stream as the front door sees it."""
        headers = self._upstream.headers
        if self._ctx.cache_status is not None:
            headers = {**headers, CACHE_HEADER: self._ctx.cache_status}
        headers = {**headers, **self._ctx.reply_headers}
        return StreamReply(events=self._events(), close=self._close, headers=headers)

    async def _events(self) -> AsyncIterator[Any]:
        try:
            async for event in self._upstream.events:
                yield self._pipeline.stream_event(self._ctx, event)
            for event in self._pipeline.redaction.finish_stream(self._ctx):
                yield event
        except LocalgateError as exc:
            self._outcome, self._status = "upstream error", exc.code
            # Before the error event and the end of the response go out.
            await self._record()
            raise
        self._outcome, self._status = self._success, 200
        if self._success == "forwarded":
            self._pipeline.cache.complete(self._ctx)
        # Every event has gone out, but not the end of the response: a client that saw
        # the stream end (the closing chunk, the closing ``]``) has its completion on disk.
        await self._record()

    async def _record(self) -> None:
        """The completion record, once: at the end of the events, else at close."""
        if self._recorded:
            return
        self._recorded = True
        # The events have gone out: if it cannot be written, there is nothing to hold back.
        await self._pipeline.audit.record_outcome(
            self._ctx, self._outcome, self._status, answer_sent=True
        )

    async def _close(self) -> None:
        try:
            await self._upstream.close()
        finally:
            self._permit.release()
            await self._record()
