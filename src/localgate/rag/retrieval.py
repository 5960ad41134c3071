"""Retrieval at request time: passages found locally, redacted, added to the request.

A request uses a retrieval collection when its tenant's policy has ``rag.enabled`` and
either names one (``rag.collection``) or the client names one in the
``x-localgate-rag-collection`` header. The query is the last turn's text as redacted;
the top ``rag.top_k`` passages at or above ``rag.min_similarity`` are redacted again
with this request's own placeholder table (they were redacted at ingestion; this
catches anything a newer policy covers) and appended to the system instruction as one
text part::

    Context retrieved by localgate from the collection "handbook" ...
    [1] (source: leave-policy.md, page 2)
    <passage text>

The audit record of the request lists the collection and the passage ids, never text.
The answer tells the client what retrieval did, in the ``x-localgate-rag`` header:
``added; passages=N``, or ``none`` when no passage was similar enough (or the last turn
had no text); requests that retrieval does not apply to carry no such header.
"""

from __future__ import annotations

import functools
from typing import Any

from localgate.errors import PermissionDenied
from localgate.exchange.context import RequestContext
from localgate.exchange.stages import RedactionStage
from localgate.gemini.routes import GeminiMethod
from localgate.gemini.texts import last_turn_text
from localgate.observability import GatewayMetrics
from localgate.rag.library import Library, Passage
from localgate.vectorstore.store import VectorStore, check_collection_name

__all__ = ["RAG_HEADER", "LocalRetrieval", "context_text"]

RAG_HEADER = "x-localgate-rag"
_NONE = "none"

_GENERATING = frozenset({GeminiMethod.GENERATE_CONTENT, GeminiMethod.STREAM_GENERATE_CONTENT})


class LocalRetrieval:
    """The retrieval stage on the local store."""

    def __init__(self, store: VectorStore, library: Library, metrics: GatewayMetrics) -> None:
        self._store = store
        self._library = library
        self._metrics = metrics

    async def augment(self, ctx: RequestContext, redaction: RedactionStage) -> None:
        """Add the passages for this request's last turn to its system instruction."""
        route = ctx.route
        if route is None or route.method not in _GENERATING or ctx.principal is None:
            return
        if ctx.policy is None:
            return
        if not isinstance(ctx.body, dict):
            return
        tenant = ctx.principal.tenant
        policy = ctx.policy.rag
        name = ctx.rag_collection or policy.collection
        if name is None:
            return
        if not policy.enabled:
            if ctx.rag_collection is None:
                return  # a collection configured for others; this tenant does not retrieve
            raise PermissionDenied(
                f"Retrieval is not enabled for tenant {tenant!r}, so the collection named in "
                "x-localgate-rag-collection cannot be used. Ask the gateway operator to set "
                "rag.enabled for your tenant."
            )
        check_collection_name(name)
        query = last_turn_text(ctx.body)
        ctx.rag = {"collection": name, "passages": []}
        ctx.reply_headers[RAG_HEADER] = _NONE
        if not query.strip():
            return
        passages = await self._store.run(
            functools.partial(self._library.query, redacted=True),
            tenant,
            name,
            query,
            policy.top_k,
            policy.min_similarity,
        )
        if not passages:
            return
        # The source's name goes upstream too: it is redacted with the passage.
        blocks = [
            redaction.redact_added(
                ctx, _block(index, passage), f"retrieved passage {index} ({passage.id})"
            )
            for index, passage in enumerate(passages, start=1)
        ]
        _append_system_text(ctx.body, context_text(name, blocks))
        ctx.rag["passages"] = [passage.id for passage in passages]
        ctx.reply_headers[RAG_HEADER] = f"added; passages={len(passages)}"
        self._metrics.rag_passages.inc(len(passages))


def context_text(collection: str, blocks: list[str]) -> str:
    """The text part that carries the (redacted) passage blocks to the model."""
    heading = (
        f'Context retrieved by localgate from the collection "{collection}". Use it where it '
        "helps to answer, and cite passages by their number, e.g. [1]."
    )
    return "\n\n".join([heading, *blocks])


def _block(index: int, passage: Passage) -> str:
    where = passage.source  # the file's name, stored redacted
    if passage.page is not None:
        where += f", page {passage.page}"
    return f"[{index}] (source: {where})\n{passage.text}"


def _append_system_text(body: dict[str, Any], text: str) -> None:
    # The SDK may send either spelling; extend whichever the client used.
    name = "system_instruction" if "system_instruction" in body else "systemInstruction"
    instruction = body.get(name)
    if not isinstance(instruction, dict):
        body[name] = {"parts": [{"text": text}]}
        return
    parts = instruction.get("parts")
    if isinstance(parts, list):
        parts.append({"text": text})
    else:
        instruction["parts"] = [{"text": text}]
