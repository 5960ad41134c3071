"""The interface every upstream adapter implements."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from localgate.exchange.replies import StreamReply, UnaryReply, UpstreamCall

__all__ = [
    "Catalogued",
    "StreamReply",
    "UnaryReply",
    "Upstream",
    "UpstreamCall",
    "needs_redaction",
]


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


@runtime_checkable
class Catalogued(Protocol):
    """An upstream with a model list of its own, merged into ``models.list`` for the
    tenants that may reach it, and a health probe shown in ``/readyz``."""

    name: str

    async def catalogue(self) -> list[dict[str, Any]]:
        """Its models as Gemini ``Model`` objects."""
        ...

    async def probe(self) -> str | None:
        """None when it answers, else what went wrong."""
        ...


def needs_redaction(upstream: Upstream) -> bool:
    """Whether requests sent to ``upstream`` must be redacted: every upstream's unless it
    says ``redaction = False`` (an in-house server configured so); fails closed."""
    return getattr(upstream, "redaction", True) is not False
