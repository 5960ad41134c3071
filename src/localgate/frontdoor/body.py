"""Reading the request body: size limit first, then one JSON parse."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.requests import Request

from localgate.errors import InvalidArgument, PayloadTooLarge

__all__ = ["MAX_DEPTH", "check_declared_size", "read_json_body"]

# Google's own limit on nesting is about 100; anything deeper is refused here, well
# before the JSON writer's own limit.
MAX_DEPTH = 100


def check_declared_size(request: Request, limit: int) -> None:
    """Refuse with 413 before reading anything when Content-Length already exceeds the limit."""
    declared = request.headers.get("content-length")
    if declared is None:
        return
    try:
        size = int(declared)
    except ValueError as exc:
        raise InvalidArgument("Invalid Content-Length header.") from exc
    if size > limit:
        raise _too_large(limit)


async def read_json_body(request: Request, limit: int) -> tuple[Any, int]:
    """Read at most ``limit`` bytes and parse them as JSON; returns it and its size.

    An empty body is ``{}``.
    """
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise _too_large(limit)
        chunks.append(chunk)
    raw = b"".join(chunks)
    if not raw.strip():
        return {}, len(raw)
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidArgument(
            f"Invalid JSON payload received: {exc.msg} at line {exc.lineno}, "
            f"column {exc.colno} (byte {exc.pos})."
        ) from exc
    if _deeper_than(body, MAX_DEPTH):
        raise InvalidArgument(
            f"Invalid JSON payload received: nested deeper than {MAX_DEPTH} levels."
        )
    return body, len(raw)


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
