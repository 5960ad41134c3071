"""embedContent and batchEmbedContents answered in-house, so the text never leaves.

An upstream like any other to the router, chosen for the tenants whose policy says
``local_embeddings: true``. Like everything past the redaction stage it sees the
redacted text, so the vectors a client stores elsewhere carry no personal data
either. The answer has Gemini's shape; the ``x-localgate-embedding-model`` header says
which model produced it (its vectors are not Gemini's: do not mix the two in one index).
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from localgate.errors import InvalidArgument
from localgate.exchange.replies import StreamReply, UnaryReply, UpstreamCall
from localgate.gemini.routes import GeminiMethod
from localgate.vectorstore.embedders import Embedder

__all__ = ["EMBEDDING_MODEL_HEADER", "LocalEmbeddings"]

EMBEDDING_MODEL_HEADER = "x-localgate-embedding-model"


class LocalEmbeddings:
    """The configured local embedder behind Gemini's embedding routes."""

    name = "local-embedder"
    local = True
    ready: str | None = None

    def __init__(self, embedder: Embedder) -> None:
        self._embedder = embedder
        # A thread of its own: embedding never waits on the vector store.
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="localgate-embed")

    async def unary(self, call: UpstreamCall) -> UnaryReply:
        """Embed the request's texts and answer in Gemini's format."""
        body = call.body if isinstance(call.body, dict) else {}
        if call.route.method is GeminiMethod.BATCH_EMBED_CONTENTS:
            requests = body.get("requests") or []
            texts = [
                self._text(request, f"requests[{index}]") for index, request in enumerate(requests)
            ]
        elif call.route.method is GeminiMethod.EMBED_CONTENT:
            texts = [self._text(body, "")]
        else:
            raise InvalidArgument(
                f"The local embedder answers embedContent and batchEmbedContents, "
                f"not {call.route.method.value}."
            )
        loop = asyncio.get_running_loop()
        vectors = await loop.run_in_executor(self._executor, self._embedder.embed, texts)
        embeddings = [{"values": [float(value) for value in row]} for row in vectors]
        answer: dict[str, Any] = (
            {"embeddings": embeddings}
            if call.route.method is GeminiMethod.BATCH_EMBED_CONTENTS
            else {"embedding": embeddings[0]}
        )
        return UnaryReply(body=answer, headers={EMBEDDING_MODEL_HEADER: self._embedder.name})

    def close(self) -> None:
        """Stop the embedding thread."""
        self._executor.shutdown(wait=False, cancel_futures=True)

    async def stream(self, call: UpstreamCall) -> StreamReply:
        """Embedding routes do not stream."""
        raise InvalidArgument("The local embedder does not stream.")

    def _text(self, request: Any, where: str) -> str:
        prefix = f"{where}." if where else ""
        if not isinstance(request, dict):
            raise InvalidArgument(f"{where or 'the body'} must be an object.")
        dimensions = request.get("outputDimensionality", request.get("output_dimensionality"))
        if dimensions is not None and dimensions != self._embedder.dimensions:
            raise InvalidArgument(
                f"{prefix}outputDimensionality is {dimensions}, but embeddings are computed "
                f"locally by {self._embedder.name}, which produces {self._embedder.dimensions} "
                "dimensions. Leave it out or ask for that number."
            )
        content = request.get("content")
        parts = content.get("parts") if isinstance(content, dict) else None
        if not isinstance(parts, list):
            raise InvalidArgument(f"{prefix}content.parts: required for an embedding.")
        texts = []
        for index, part in enumerate(parts):
            if not isinstance(part, dict) or not isinstance(part.get("text"), str):
                raise InvalidArgument(
                    f"{prefix}content.parts[{index}]: the local embedder embeds text only."
                )
            texts.append(part["text"])
        return "\n".join(texts)
