"""The interface every upstream adapter implements."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from localgate.frontdoor.routes import GeminiRoute

__all__ = ["StreamReply", "UnaryReply", "Upstream", "UpstreamCall"]


@dataclass(frozen=True, slots=True)
class UpstreamCall:
    """What to send: the route, the (redacted) body and the client headers worth forwarding."""

    route: GeminiRoute
    body: Any
    query: tuple[tuple[str, str], ...] = ()
    headers: tuple[tuple[str, str], ...] = ()


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


class Upstream(Protocol):
    """A model API the gateway forwards to."""

    name: str
    # True for an upstream inside the gateway (the local embedder): nothing leaves.
    local: bool

    @property
    def ready(self) -> str | None:
        """None when usable, else what is missing (for ``/readyz`` and start-up)."""
        ...

    async def unary(self, call: UpstreamCall) -> UnaryReply:
        """Send ``call`` and return the whole answer, or raise a ``LocalgateError``."""
        ...

    async def stream(self, call: UpstreamCall) -> StreamReply:
        """Send ``call`` and return once the upstream accepted it (status 200)."""
        ...
