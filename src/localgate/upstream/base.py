"""The interface every upstream adapter implements."""

from __future__ import annotations

from typing import Protocol

from localgate.exchange.replies import StreamReply, UnaryReply, UpstreamCall

__all__ = ["StreamReply", "UnaryReply", "Upstream", "UpstreamCall"]


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
