"""The Gemini REST endpoint: from an HTTP request to the pipeline and back.

Every failure leaves as Google's error envelope with the matching HTTP status, so
the official SDK raises its usual ``ClientError``/``ServerError``. After a stream's
200 has gone out, a failure is sent as one last error event in the client's framing.
The endpoint only maps how a request ended to HTTP; the pipeline's completion writes it
down (audit, access log, metrics), also for what the endpoint refuses itself.
"""

from __future__ import annotations

import asyncio
import logging
import math
import re
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from starlette.types import Receive, Scope, Send

from localgate.errors import (
    ClientClosedRequest,
    InvalidArgument,
    LocalgateError,
    MethodNotAllowed,
    ResourceExhausted,
    UpstreamError,
)
from localgate.exchange.replies import StreamReply, UnaryReply
from localgate.frontdoor.body import IncomingRequest
from localgate.frontdoor.protocol import CLIENT_CERTIFICATE
from localgate.gemini.envelope import error_envelope
from localgate.gemini.framing import Framing, StreamEncoder, dump_json
from localgate.gemini.routes import GeminiMethod, GeminiRoute, match_route
from localgate.gemini.schemas import validate_body
from localgate.identity.keys import LOCALGATE_KEY_PREFIX
from localgate.observability import GatewayMetrics
from localgate.pipeline import (
    Completion,
    Inbound,
    Outcome,
    Pipeline,
    RequestContext,
    internal_error,
)
from localgate.requestid import new_request_id
from localgate.telemetry import Tracing

__all__ = [
    "EventEncoder",
    "GatewayServices",
    "GeminiEndpoint",
    "JsonResponse",
    "StreamResponse",
    "credential",
    "error_response",
]

logger = logging.getLogger("localgate")

JSON_MEDIA_TYPE = "application/json; charset=UTF-8"
_JSON_MEDIA_TYPE = JSON_MEDIA_TYPE.encode()
# Client headers passed on, each only in a shape that cannot carry text: free-form
# headers (user-agent, x-goog-api-client) could carry personal data around the
# redactor, and credentials never leave.
_FORWARDED_HEADERS = {"x-server-timeout": re.compile(r"[0-9]{1,6}")}
# Query parameters of models.list, likewise restricted to their own shapes.
_QUERY_SHAPES = {
    "pageSize": re.compile(r"[0-9]{1,4}"),
    "pageToken": re.compile(r"[A-Za-z0-9_=.-]{1,512}"),
    "filter": re.compile(r"[A-Za-z0-9 _.:=\"'()-]{1,200}"),
}
_FORWARDED_QUERY = {GeminiMethod.LIST_MODELS: tuple(_QUERY_SHAPES)}
_UPSTREAM_HEADER = b"x-localgate-upstream"
# The legacy REST client asks for integer enums; the only other $alt values
# (proto, media) would change the body format the gateway parses.
_INT_ENUMS = ("$alt", "json;enum-encoding=int")


@dataclass(frozen=True, slots=True)
class GatewayServices:
    """What the endpoint needs, built in the application's lifespan."""

    pipeline: Pipeline
    metrics: GatewayMetrics
    max_body_bytes: int
    # None when tracing is off (the default): then requests carry no trace at all.
    tracing: Tracing | None = None
    # openai.drop_unsupported: the OpenAI door drops parameters it cannot honour
    # instead of refusing the request.
    openai_drop_unsupported: bool = False


class FrontDoor:
    """What every dialect's door does with a request before handling it its own way: a
    context with the request's id, the localgate headers and the trace, and the in-flight
    count around the handling. The dialect's ``_handle`` does the rest.
    """

    dialect = "gemini"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = IncomingRequest(scope, receive)
        services: GatewayServices = scope["state"]["services"]
        client = scope.get("client")
        headers = request.headers
        ctx = RequestContext(
            request_id=new_request_id(),
            route=None,
            client=client[0] if client else None,
            dialect=self.dialect,
            end_user=headers.get("x-localgate-user") or None,
            cache_control=headers.get("x-localgate-cache") or None,
            rag_collection=headers.get("x-localgate-rag-collection") or None,
            priority=headers.get("x-localgate-priority") or None,
        )
        if services.tracing is not None:
            services.tracing.begin(ctx, headers)
        services.metrics.in_flight += 1
        try:
            response = await self._handle(request, ctx, services)
            await response(scope, receive, send)
        finally:
            services.metrics.in_flight -= 1

    async def _handle(
        self, request: IncomingRequest, ctx: RequestContext, services: GatewayServices
    ) -> JsonResponse | StreamResponse:
        raise NotImplementedError


class GeminiEndpoint(FrontDoor):
    """ASGI app serving every Gemini route; the services come from the lifespan state.

    It gives each request its id and the ``x-request-id`` response header itself: the
    model routes do not pass through the request-id middleware of the other routes.
    """

    async def _handle(
        self, request: IncomingRequest, ctx: RequestContext, services: GatewayServices
    ) -> JsonResponse | StreamResponse:
        pipeline = services.pipeline
        reply: StreamReply | UnaryReply | None = None
        try:
            ctx.route = route = match_route(request.method, request.path)
            request.check_declared_size(services.max_body_bytes)
            if route.method.http_method == "POST":
                request.check_content_type()
            inbound = self._inbound(request, route, services.max_body_bytes)
            # From here the pipeline ends the request itself, however it goes.
            reply = await pipeline.run(ctx, inbound)
            if isinstance(reply, StreamReply):
                framing = inbound.framing or Framing.SSE
                return StreamResponse(pipeline.completion, ctx, reply, StreamEncoder(framing))
            return JsonResponse(dump_json(reply.body), 200, reply.headers, ctx.request_id)
        except ClientClosedRequest:
            return JsonResponse(b"", ClientClosedRequest.http_status, None, ctx.request_id)
        except LocalgateError as exc:
            # Refused here, before the pipeline (else the pipeline has ended it already).
            await pipeline.completion.finish(ctx, Outcome.REFUSED, exc)
            await close_stream(reply)
            response = error_response(exc, ctx.request_id, ctx.limit_headers)
            if ctx.upstream:
                # An upstream's failure names the (last) upstream tried, like an answer.
                response.headers.append((_UPSTREAM_HEADER, ctx.upstream.encode("latin-1")))
            return response
        except Exception:
            logger.exception("request %s failed inside the gateway", ctx.request_id)
            error = internal_error(ctx.request_id)
            await pipeline.completion.finish(ctx, Outcome.INTERNAL_ERROR, error)
            await close_stream(reply)
            return error_response(error, ctx.request_id, ctx.limit_headers)

    def _inbound(self, request: IncomingRequest, route: GeminiRoute, limit: int) -> Inbound:
        async def read_body() -> tuple[Any, int]:
            if route.method.http_method == "GET":
                return None, 0
            body, raw = await request.read_json(limit)
            validate_body(route.method, route.model, body)
            return body, len(raw)

        has_query = bool(request.query_string)
        framing = None
        if route.method.streams:
            alt = request.query_value("alt", "json") if has_query else "json"
            if alt == "sse":
                framing = Framing.SSE
            elif alt == "json":
                framing = Framing.JSON_ARRAY
            else:
                raise InvalidArgument(f"Invalid value for 'alt': {alt!r}; use 'sse' or 'json'.")
        query: list[tuple[str, str]] = []
        if has_query:
            allowed = _FORWARDED_QUERY.get(route.method, ())
            items = request.query
            query = [
                (name, value)
                for name, value in items
                if name in allowed and _QUERY_SHAPES[name].fullmatch(value)
            ]
            if not route.method.streams and _INT_ENUMS in items:
                query.append(_INT_ENUMS)
        return Inbound(
            credential=credential(request),
            certificate=request.scope.get(CLIENT_CERTIFICATE),
            read_body=read_body,
            query=tuple(query),
            headers=tuple(
                (name, request.headers[name])
                for name, shape in _FORWARDED_HEADERS.items()
                if name in request.headers and shape.fullmatch(request.headers[name])
            ),
            framing=framing,
        )


class JsonResponse:
    """A JSON body with its status: the one response shape of the unary routes.

    Written straight to ASGI: Starlette's ``Response`` spends more on building its
    headers than the rest of a small answer costs.
    """

    __slots__ = ("body", "headers", "status")

    def __init__(
        self, body: bytes, status: int, headers: dict[str, str] | None, request_id: str
    ) -> None:
        self.body = body
        self.status = status
        self.headers = [
            (b"content-type", _JSON_MEDIA_TYPE),
            (b"content-length", str(len(body)).encode()),
            (b"x-request-id", request_id.encode()),
            *(
                (name.encode("latin-1"), value.encode("latin-1"))
                for name, value in (headers or {}).items()
            ),
        ]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status, "headers": self.headers})
        await send({"type": "http.response.body", "body": self.body})


def error_response(
    error: LocalgateError,
    request_id: str,
    limit_headers: dict[str, str] | None = None,
    render: Callable[[LocalgateError], Any] = error_envelope,
) -> JsonResponse:
    """The Gemini error envelope (or the body ``render`` makes, in another dialect) for
    ``error``, with its HTTP status (and the request's ``x-ratelimit-*`` headers, if the
    limits admitted or refused it)."""
    headers = dict(limit_headers) if limit_headers else {}
    if isinstance(error, MethodNotAllowed):
        headers["allow"] = ", ".join(error.allowed)
    elif isinstance(error, ResourceExhausted):
        headers.update(error.headers)
    elif isinstance(error, UpstreamError) and error.code == 429 and error.retry_after:
        # The gateway gave up on a throttled upstream: the client waits as it was told to
        # (0 means another key of the gateway's is ready: no wait to pass on).
        headers["retry-after"] = str(math.ceil(error.retry_after))
    return JsonResponse(dump_json(render(error)), error.code, headers, request_id)


def credential(request: IncomingRequest) -> str | None:
    """The presented key: the first localgate-shaped one, else the first one given.

    Apps that authenticate with ``Authorization: Bearer`` still have to give the SDK
    some ``api_key``, which it sends as ``x-goog-api-key``; the localgate key wins.
    """
    header = request.header("x-goog-api-key")
    if header.startswith(LOCALGATE_KEY_PREFIX):
        return header  # the usual case: it is first in line anyway
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    presented = [
        header,
        request.query_value("key").strip() if request.query_string else "",
        token.strip() if scheme.lower() == "bearer" else "",
    ]
    given = [value for value in presented if value]
    for value in given:
        if value.startswith(LOCALGATE_KEY_PREFIX):
            return value
    return given[0] if given else None


async def close_stream(reply: StreamReply | UnaryReply | None) -> None:
    """Close ``reply`` if it is a stream (a refused request's stream is never sent)."""
    if isinstance(reply, StreamReply):
        await reply.close()


class EventEncoder(Protocol):
    """How a stream's events reach the client: the Gemini framings, or OpenAI's chunks."""

    @property
    def media_type(self) -> str:
        """The stream's Content-Type."""
        ...

    def event(self, event: Any) -> bytes:
        """The bytes for one event (may be none)."""
        ...

    def error(self, error: LocalgateError) -> bytes:
        """The bytes for an error after the 200 has gone out; the stream ends after it."""
        ...

    def close(self) -> bytes:
        """The bytes that end the stream."""
        ...


class StreamResponse:
    """Streams events in the client's framing; the stream is closed once, however it ends.

    A client that goes away is noticed by one small task waiting on ``receive`` (the
    ASGI server reports ``http.disconnect`` there), which cancels the stream: closing it
    then drops the upstream connection and ends the request. Starlette's own streaming
    response does the same with a task group per response, which costs several times
    more per stream. Written straight to ASGI, like ``JsonResponse``, with the headers
    Starlette's would have: building its headers cost more than the rest of the object.
    """

    __slots__ = ("_completion", "_ctx", "_encoder", "_reply", "body_iterator", "raw_headers")

    def __init__(
        self,
        completion: Completion,
        ctx: RequestContext,
        reply: StreamReply,
        encoder: EventEncoder,
    ) -> None:
        self._completion = completion
        self._ctx = ctx
        self._reply = reply
        self._encoder = encoder
        self.body_iterator = self._encode()
        headers = {**reply.headers, "x-request-id": ctx.request_id}
        self.raw_headers = [
            (name.lower().encode("latin-1"), value.encode("latin-1"))
            for name, value in headers.items()
        ]
        if not any(name == b"content-type" for name, _ in self.raw_headers):
            media_type = encoder.media_type
            if media_type.startswith("text/") and "charset=" not in media_type.lower():
                media_type += "; charset=utf-8"
            self.raw_headers.append((b"content-type", media_type.encode("latin-1")))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        streaming = asyncio.current_task()
        gone = False

        async def watch() -> None:
            nonlocal gone
            while (await receive())["type"] != "http.disconnect":
                pass
            gone = True
            if streaming is not None:
                streaming.cancel()

        watcher = asyncio.create_task(watch())
        ended = False
        try:
            await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
            async for chunk in self.body_iterator:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            ended = True
        except asyncio.CancelledError:
            if not gone or streaming is None:
                raise
            streaming.uncancel()  # our own cancellation: the client left, nothing to re-raise
        finally:
            watcher.cancel()
            if ended and (streaming is None or not streaming.cancelling()):
                # The stream ran to its end: the upstream's connection went back to the pool
                # with the last byte and the completion is on disk, so closing has nothing
                # to wait for, and no task of its own to run in (the shield's, measured:
                # 56,000 instructions, 2.5% of a stream's whole cost).
                await self._reply.close()
            else:
                # Shielded: the upstream connection must be dropped even while being cancelled.
                await asyncio.shield(self._reply.close())

    async def _encode(self) -> AsyncIterator[bytes]:
        try:
            async for event in self._reply.events:
                chunk = self._encoder.event(event)
                if chunk:
                    yield chunk
        except LocalgateError as exc:
            # The pipeline has ended the request with it.
            yield self._encoder.error(exc)
        except Exception:
            logger.exception("stream %s failed inside the gateway", self._ctx.request_id)
            error = internal_error(self._ctx.request_id)
            await self._completion.finish(
                self._ctx, Outcome.INTERNAL_ERROR, error, answer_sent=True
            )
            yield self._encoder.error(error)
        yield self._encoder.close()
