"""The OpenAI-compatible endpoint: an OpenAI request through the same pipeline, and back.

The request is translated to the Gemini request it stands for (openai/) when its body is
read, after identity, so every stage — limits, redaction, retrieval, cache, audit,
routing — sees and treats it exactly as a native one; the answer, already restored by
the response stages, is translated back. Every failure leaves in OpenAI's error shape,
the shared stages' included; after a stream's 200, as one error event.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from localgate.errors import ClientClosedRequest, LocalgateError
from localgate.exchange.replies import StreamReply, UnaryReply
from localgate.frontdoor.body import IncomingRequest
from localgate.frontdoor.endpoint import (
    FrontDoor,
    GatewayServices,
    JsonResponse,
    StreamResponse,
    close_stream,
    credential,
    error_response,
)
from localgate.frontdoor.protocol import CLIENT_CERTIFICATE
from localgate.gemini.framing import dump_json
from localgate.gemini.routes import GeminiMethod, GeminiRoute, match_route
from localgate.gemini.schemas import validate_body
from localgate.openai.answers import chat_completion
from localgate.openai.chat import ChatRequest, translate_chat_request
from localgate.openai.embeddings import (
    EmbeddingsRequest,
    embeddings_answer,
    model_answer,
    models_answer,
    translate_embeddings_request,
)
from localgate.openai.errors import openai_error_body
from localgate.openai.framing import ChatStreamEncoder
from localgate.openai.routes import OpenAIOperation, OpenAIRoute, match_openai_route
from localgate.pipeline import Inbound, Outcome, RequestContext, internal_error

__all__ = ["OpenAIEndpoint"]

logger = logging.getLogger("localgate")

_UPSTREAM_HEADER = b"x-localgate-upstream"
# Until the body names the model: the route a chat completion is refused under (in the
# access log) if identity or the body refuses it.
_PENDING_CHAT = GeminiRoute("v1beta", GeminiMethod.GENERATE_CONTENT, "models", None)
# models.list answers in one page: OpenAI's list has no paging.
_ALL_MODELS = (("pageSize", "1000"),)


@dataclass(slots=True)
class _Translated:
    """What the body said, kept for translating the answer back."""

    chat: ChatRequest | None = None
    embeddings: EmbeddingsRequest | None = None


class OpenAIEndpoint(FrontDoor):
    """ASGI app serving the OpenAI-compatible routes; services from the lifespan state."""

    dialect = "openai"

    async def _handle(
        self, request: IncomingRequest, ctx: RequestContext, services: GatewayServices
    ) -> JsonResponse | StreamResponse:
        pipeline = services.pipeline
        reply: StreamReply | UnaryReply | None = None
        try:
            route = match_openai_route(request.method, request.path)
            ctx.route = _gemini_route(route)
            request.check_declared_size(services.max_body_bytes)
            translated = _Translated()
            if route.operation.http_method == "POST":
                request.check_content_type()
            inbound = self._inbound(request, route, ctx, services, translated)
            # From here the pipeline ends the request itself, however it goes.
            reply = await pipeline.run(ctx, inbound)
            chat = translated.chat
            completion_id = f"chatcmpl-{ctx.request_id}"
            if isinstance(reply, StreamReply):
                if chat is None:  # only a chat completion streams
                    raise LocalgateError("A stream answered a request that does not stream.")
                encoder = ChatStreamEncoder(
                    model=chat.model,
                    completion_id=completion_id,
                    created=int(ctx.received_at),
                    include_usage=chat.include_usage,
                )
                return StreamResponse(pipeline.completion, ctx, reply, encoder)
            body: Any
            if chat is not None:
                body = chat_completion(
                    reply.body,
                    model=chat.model,
                    completion_id=completion_id,
                    created=int(ctx.received_at),
                )
            elif translated.embeddings is not None:
                body = embeddings_answer(reply.body, translated.embeddings)
            elif route.operation is OpenAIOperation.LIST_MODELS:
                body = models_answer(reply.body)
            else:
                body = model_answer(reply.body)
            return JsonResponse(dump_json(body), 200, reply.headers, ctx.request_id)
        except ClientClosedRequest:
            return JsonResponse(b"", ClientClosedRequest.http_status, None, ctx.request_id)
        except LocalgateError as exc:
            # Refused here, before the pipeline (else the pipeline has ended it already).
            await pipeline.completion.finish(ctx, Outcome.REFUSED, exc)
            await close_stream(reply)
            response = error_response(exc, ctx.request_id, ctx.limit_headers, openai_error_body)
            if ctx.upstream:
                response.headers.append((_UPSTREAM_HEADER, ctx.upstream.encode("latin-1")))
            return response
        except Exception:
            logger.exception("request %s failed inside the gateway", ctx.request_id)
            error = internal_error(ctx.request_id)
            await pipeline.completion.finish(ctx, Outcome.INTERNAL_ERROR, error)
            await close_stream(reply)
            return error_response(error, ctx.request_id, ctx.limit_headers, openai_error_body)

    def _inbound(
        self,
        request: IncomingRequest,
        route: OpenAIRoute,
        ctx: RequestContext,
        services: GatewayServices,
        translated: _Translated,
    ) -> Inbound:
        limit = services.max_body_bytes
        drop = services.openai_drop_unsupported

        async def read_body() -> tuple[Any, int]:
            if route.operation.http_method == "GET":
                return None, 0
            body, raw = await request.read_json(limit)
            if route.operation is OpenAIOperation.CHAT_COMPLETIONS:
                chat = translate_chat_request(body, drop_unsupported=drop)
                method = (
                    GeminiMethod.STREAM_GENERATE_CONTENT
                    if chat.stream
                    else GeminiMethod.GENERATE_CONTENT
                )
                translated.chat = chat
                gemini: Any = chat.body
                user = chat.user
                ctx.route = match_route("POST", f"/v1beta/models/{chat.model}:{method.value}")
            else:
                embeddings = translate_embeddings_request(body, drop_unsupported=drop)
                translated.embeddings = embeddings
                gemini, user = embeddings.body, embeddings.user
                method = GeminiMethod.BATCH_EMBED_CONTENTS
                ctx.route = match_route("POST", f"/v1beta/models/{embeddings.model}:{method.value}")
            if user and ctx.end_user is None:
                ctx.end_user = user
            # The Gemini request's own checks (a part with nothing in it, ...).
            validate_body(method, ctx.route.model, gemini)
            return gemini, len(raw)

        return Inbound(
            credential=credential(request),
            certificate=request.scope.get(CLIENT_CERTIFICATE),
            read_body=read_body,
            query=_ALL_MODELS if route.operation is OpenAIOperation.LIST_MODELS else (),
        )


def _gemini_route(route: OpenAIRoute) -> GeminiRoute:
    """The Gemini route a request stands for, as far as its path tells."""
    if route.operation is OpenAIOperation.LIST_MODELS:
        return match_route("GET", "/v1beta/models")
    if route.operation is OpenAIOperation.GET_MODEL:
        return match_route("GET", f"/v1beta/models/{route.model_id}")
    if route.operation is OpenAIOperation.EMBEDDINGS:
        return GeminiRoute("v1beta", GeminiMethod.BATCH_EMBED_CONTENTS, "models", None)
    return _PENDING_CHAT
