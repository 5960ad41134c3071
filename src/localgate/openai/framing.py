"""The chat completions stream on the wire: Server-Sent Events, as OpenAI sends them.

``data: <chunk>\\n\\n`` per chunk, ``data: [DONE]\\n\\n`` at a clean end. With
``stream_options.include_usage`` every chunk carries ``"usage": null`` and one last chunk
with no choices carries the usage. A failure after the 200 has gone out is one
``data: {"error": {...}}`` event, and no ``[DONE]``: the ``openai`` SDK raises it as an
``APIError`` rather than taking a broken answer for a complete one.
"""

from __future__ import annotations

from typing import Any

from localgate.errors import LocalgateError
from localgate.gemini.framing import dump_json
from localgate.openai.answers import ChatChunks
from localgate.openai.errors import openai_error_body

__all__ = ["ChatStreamEncoder"]


class ChatStreamEncoder:
    """Encodes a stream's Gemini events as chat completion chunks (the front door's
    encoder interface: ``event``, ``error``, ``close``)."""

    media_type = "text/event-stream"

    def __init__(
        self, *, model: str, completion_id: str, created: int, include_usage: bool
    ) -> None:
        self._chunks = ChatChunks(model=model, completion_id=completion_id, created=created)
        self._include_usage = include_usage
        self._failed = False

    def event(self, event: Any) -> bytes:
        """The bytes for one Gemini event (nothing for an event without content)."""
        out = b""
        for chunk in self._chunks.chunks(event):
            if self._include_usage:
                chunk["usage"] = None
            out += b"data: " + dump_json(chunk) + b"\n\n"
        return out

    def error(self, error: LocalgateError) -> bytes:
        """The error event; the stream ends after it, without ``[DONE]``."""
        self._failed = True
        return b"data: " + dump_json(openai_error_body(error)) + b"\n\n"

    def close(self) -> bytes:
        """The usage chunk if asked for, and ``[DONE]``; nothing after an error."""
        if self._failed:
            return b""
        out = b""
        if self._include_usage:
            usage = self._chunks.usage or {
                "prompt_tokens": 0,
                "completion_tokens": 0,
                "total_tokens": 0,
            }
            out += b"data: " + dump_json(self._chunks.chunk([], usage=usage)) + b"\n\n"
        return out + b"data: [DONE]\n\n"
