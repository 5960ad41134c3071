"""What goes to an upstream and what comes back, as every stage and upstream sees it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from localgate.gemini.routes import GeminiRoute

__all__ = ["StreamReply", "UnaryReply", "UpstreamCall"]


@dataclass(frozen=True, slots=True)
class UpstreamCall:
    """What to send: the route, the (redacted) body and the client headers worth forwarding.

    ``data``, if given, is ``body`` already serialised (``orjson.dumps``): the bytes the
    audit trail's request record has the digest of, which an upstream speaking Gemini's
    JSON sends as they are. Whoever replaces ``body`` must drop ``data`` with it.
    """

    route: GeminiRoute
    body: Any
    query: tuple[tuple[str, str], ...] = ()
    headers: tuple[tuple[str, str], ...] = ()
    data: bytes | None = None


@dataclass(slots=True)
class UnaryReply:
    """A complete answer."""

    body: Any
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class StreamReply:
    """A streamed answer: one decoded ``GenerateContentResponse`` per event.

    ``close`` must be awaited exactly once when the client is done, whether the
    stream ended, failed or was never started: it drops the upstream connection (so
    the upstream stops generating) and runs every stage's completion work.
    """

    events: AsyncIterator[Any]
    close: Callable[[], Awaitable[None]]
    headers: dict[str, str] = field(default_factory=dict)
