"""The request as the ASGI server hands it over: the headers the gateway reads, the
query string, and the body (size and media type first, then one JSON parse).

Read straight from the ASGI scope, in one pass over the headers: the hot path reads
a handful of them, and a general request object costs more to build than that.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl

import orjson
from starlette.types import Receive, Scope

from localgate.errors import (
    ClientClosedRequest,
    InvalidArgument,
    PayloadTooLarge,
    RequestTimeout,
    UnsupportedMediaType,
)

__all__ = ["BODY_TIMED_OUT", "MAX_DEPTH", "IncomingRequest"]

# Set in the scope by the connection (frontdoor.protocol) when the body stopped arriving
# before server.body_timeout_s: the disconnect that follows is a timeout, not the client
# leaving.
BODY_TIMED_OUT = "localgate.body_timed_out"

# Google's own limit on nesting is about 100; anything deeper is refused here, well
# before the JSON writer's own limit.
MAX_DEPTH = 100
# The only request headers the gateway reads (forwarded ones included).
_READ_HEADERS = frozenset(
    {
        b"authorization",
        b"content-length",
        b"content-type",
        b"traceparent",  # W3C trace context, used only when tracing is on
        b"tracestate",
        b"x-goog-api-key",
        b"x-localgate-cache",
        b"x-localgate-rag-collection",
        b"x-localgate-user",
        b"x-server-timeout",
    }
)


class IncomingRequest:
    """One HTTP request on a Gemini route, read from its ASGI scope."""

    __slots__ = ("_query", "_receive", "_scope", "headers", "method", "path", "query_string")

    def __init__(self, scope: Scope, receive: Receive) -> None:
        self._scope = scope
        self.method: str = scope["method"]
        self.path: str = scope["path"]
        self.query_string: bytes = scope.get("query_string", b"")
        self._receive = receive
        self._query: list[tuple[str, str]] | None = None
        headers: dict[str, str] = {}
        for name, value in scope["headers"]:
            # ASGI servers give names in lower case; the first of repeated headers wins.
            if name in _READ_HEADERS:
                key = name.decode("latin-1")
                if key not in headers:
                    headers[key] = value.decode("latin-1")
        self.headers = headers

    @property
    def scope(self) -> Scope:
        """The request's ASGI scope."""
        return self._scope

    def header(self, name: str) -> str:
        """The value of one of the headers the gateway reads, stripped; "" if absent."""
        return self.headers.get(name, "").strip()

    @property
    def query(self) -> list[tuple[str, str]]:
        """The query parameters in order, repeated ones repeated."""
        if self._query is None:
            self._query = (
                parse_qsl(self.query_string.decode("latin-1"), keep_blank_values=True)
                if self.query_string
                else []
            )
        return self._query

    def query_value(self, name: str, default: str = "") -> str:
        """The first value of a query parameter."""
        for key, value in self.query:
            if key == name:
                return value
        return default

    def check_declared_size(self, limit: int) -> None:
        """Refuse with 413 before reading anything when Content-Length exceeds the limit."""
        declared = self.headers.get("content-length")
        if declared is None:
            return
        try:
            size = int(declared)
        except ValueError as exc:
            raise InvalidArgument("Invalid Content-Length header.") from exc
        if size > limit:
            raise _too_large(limit)

    def check_content_type(self) -> None:
        """Refuse with 415 a body declared as anything but JSON (none declared is JSON)."""
        declared = self.headers.get("content-type")
        if declared is None or declared == "application/json":
            return  # what the SDK and curl -H send: the one-comparison path
        media_type = declared.partition(";")[0].strip().lower()
        if media_type and media_type != "application/json":
            raise UnsupportedMediaType(
                f"Unsupported Content-Type {media_type[:100]!r}: the request body must be "
                "JSON; send 'Content-Type: application/json'."
            )

    async def read_json(self, limit: int) -> tuple[Any, bytes]:
        """Read at most ``limit`` bytes and parse them as JSON; returns it and the bytes.

        An empty body is ``{}``. Raises ``ClientClosedRequest`` if the client goes away, and
        ``RequestTimeout`` if the connection cut the body off for arriving too slowly.
        """
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await self._receive()
            if message["type"] == "http.disconnect":
                if self._scope.get(BODY_TIMED_OUT):
                    raise RequestTimeout(
                        "The request body did not arrive in time (server.body_timeout_s)."
                    )
                raise ClientClosedRequest(
                    "The client closed the connection while sending the request body."
                )
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise _too_large(limit)
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        raw = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        if not raw.strip():
            return {}, raw
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise InvalidArgument(
                f"Invalid JSON payload received: {exc.msg} at line {exc.lineno}, "
                f"column {exc.colno} (byte {exc.pos})."
            ) from exc
        # Each level opens a bracket: with no more brackets than the limit, the body
        # cannot nest deeper, and the (Python) walk is skipped.
        if raw.count(b"[") + raw.count(b"{") > MAX_DEPTH and _deeper_than(body, MAX_DEPTH):
            raise InvalidArgument(
                f"Invalid JSON payload received: nested deeper than {MAX_DEPTH} levels."
            )
        return body, raw


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether ``value`` nests more than ``limit`` levels, checked without recursion."""
    level: list[Any] = [value]
    for _ in range(limit):
        level = [
            child
            for item in level
            if isinstance(item, dict | list)
            for child in (item.values() if isinstance(item, dict) else item)
            if isinstance(child, dict | list)
        ]
        if not level:
            return False
    return True


def _too_large(limit: int) -> PayloadTooLarge:
    return PayloadTooLarge(
        f"Request payload size exceeds the limit of {limit} bytes (server.max_body_bytes)."
    )
