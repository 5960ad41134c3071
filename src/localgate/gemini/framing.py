"""The two framings of ``streamGenerateContent``.

Upstream streams are always requested as Server-Sent Events and decoded into one
``GenerateContentResponse`` dict per event; the front door re-encodes each event in
the framing the client asked for:

- ``alt=sse``: ``data: <one line of compact JSON>\\r\\n\\r\\n`` per event, nothing else
  (no comments, no ``event:`` lines, no ``[DONE]``: the Python SDK rejects them);
- no ``alt`` (JSON array): ``[`` + elements separated by ``\\n,\\r\\n`` + ``\\n]``,
  as Google sends it to curl and the legacy SDK.

JSON is written with U+2028/U+2029 escaped, because SDKs up to 2.x split lines there.
"""

from __future__ import annotations

from collections.abc import Iterator
from enum import Enum
from typing import Any

import orjson

from localgate.errors import LocalgateError
from localgate.gemini.envelope import error_envelope

__all__ = ["Framing", "SseDecoder", "StreamEncoder", "dump_json"]

# SSE lines that carry nothing for Gemini: comments, event names, ids, retry hints.
_IGNORED_FIELDS = (b":", b"event:", b"id:", b"retry:")


def dump_json(value: Any) -> bytes:
    """Compact JSON with the line separators that old SDKs split on escaped."""
    raw = orjson.dumps(value)
    # U+2028/2029 are E2 80 A8/A9 in UTF-8, and most bodies hold no E2 byte at all: a
    # one-byte search (memchr) says so in ~30 ns, where the three-byte searches cost
    # ~3 µs per 2 KB of CJK text (its continuation bytes defeat their skip table).
    if 0xE2 in raw and (b"\xe2\x80\xa8" in raw or b"\xe2\x80\xa9" in raw):
        # Raw U+2028/2029 can only occur inside JSON strings, where the escape is equivalent.
        raw = raw.replace(b"\xe2\x80\xa8", b"\\u2028").replace(b"\xe2\x80\xa9", b"\\u2029")
    return raw


class Framing(Enum):
    """How a stream is framed on the wire."""

    SSE = "sse"
    JSON_ARRAY = "json"

    @property
    def media_type(self) -> str:
        """The Content-Type of a stream in this framing."""
        return "text/event-stream" if self is Framing.SSE else "application/json; charset=UTF-8"


class StreamEncoder:
    """Encodes events, and a final error if the stream breaks, in one framing."""

    def __init__(self, framing: Framing) -> None:
        self.framing = framing
        self.media_type = framing.media_type
        self._count = 0

    def event(self, event: Any) -> bytes:
        """The bytes for one event."""
        body = dump_json(event)
        self._count += 1
        if self.framing is Framing.SSE:
            return b"data: " + body + b"\r\n\r\n"
        return (b"[" if self._count == 1 else b"\n,\r\n") + body

    def error(self, error: LocalgateError) -> bytes:
        """The bytes for an error after the 200 has been sent; the stream ends after it."""
        return self.event(error_envelope(error))

    def close(self) -> bytes:
        """The bytes that end the stream."""
        if self.framing is Framing.SSE:
            return b""
        return b"[]" if self._count == 0 else b"\n]"


class SseDecoder:
    """Incremental Server-Sent Events parser yielding the JSON of each ``data:`` event.

    A chunk is split into lines once (``bytes.split``, in C) and its lines read in one
    loop: per event, the work is one ``orjson.loads`` and a few byte comparisons, not a
    method call and a copy of the buffer per line (a stream's events are its cost: a
    real answer comes in dozens). A line cut between two chunks waits in a buffer that
    only grows at its end, so an event sent in many small chunks costs linear time and
    about its own size in memory.
    """

    def __init__(self, max_event_bytes: int) -> None:
        self._pending = bytearray()  # the start of a line whose end has not come
        self._data: list[bytes] = []
        self._data_size = 0
        self._max = max_event_bytes

    def feed(self, chunk: bytes) -> Iterator[Any]:
        """Consume bytes; yield each complete event's parsed JSON."""
        pending = self._pending
        if b"\n" not in chunk:
            pending += chunk
            self._check_size()
            return
        lines = chunk.split(b"\n")
        if pending:
            pending += lines[0]
            lines[0] = bytes(pending)
            pending.clear()
        pending += lines.pop()
        yield from self._read(lines)
        self._check_size()

    def finish(self) -> Iterator[Any]:
        """Flush an event not followed by a blank line when the stream ends."""
        last = bytes(self._pending)
        self._pending.clear()
        yield from self._read([last, b""] if last else [b""])

    def _read(self, lines: list[bytes]) -> Iterator[Any]:
        """The events that ``lines`` (whole lines, without their newline) complete."""
        data = self._data
        for line in lines:
            line = line.rstrip(b"\r")
            if not line:
                if data:
                    payload = b"\n".join(data)
                    data.clear()
                    self._data_size = 0
                    yield orjson.loads(payload)
            elif line.startswith(b"data:"):
                value = line[6:] if line.startswith(b"data: ") else line[5:]
                data.append(value)
                self._data_size += len(value)
            elif not line.startswith(_IGNORED_FIELDS):
                # Not Server-Sent Events (e.g. a JSON array answered to an SSE request):
                # refusing is better than silently dropping the answer.
                raise ValueError("the upstream stream is not Server-Sent Events")

    def _check_size(self) -> None:
        if len(self._pending) + self._data_size > self._max:
            raise ValueError(f"an upstream stream event exceeds {self._max} bytes")
