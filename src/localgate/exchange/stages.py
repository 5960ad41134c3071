"""The interfaces of the stages between identity and the upstream.

Each stage has one job and a small interface. Redaction (``localgate.redaction``), the
audit trail (``localgate.audit``), retrieval (``localgate.rag``) and the cache
(``localgate.cache``) implement theirs; the pipeline calls them in order. They are
typing protocols: a stage implements one without importing anything from the pipeline.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from localgate.exchange.context import RequestContext
from localgate.exchange.outcome import Outcome
from localgate.exchange.permit import Permit, Settlement
from localgate.exchange.replies import UnaryReply

__all__ = [
    "AuditStage",
    "CacheStage",
    "LimitsStage",
    "Permit",
    "RedactionStage",
    "RetrievalStage",
    "Settlement",
]


class LimitsStage(Protocol):
    """Per-tenant request, token and concurrency limits."""

    async def admit(self, ctx: RequestContext) -> Permit:
        """Admit the request (reserving its estimated tokens; it may wait in the admission
        queue) or raise ``ResourceExhausted``; ``ServiceUnavailable`` if the counters
        cannot be reached and the limits fail closed."""
        ...


class RedactionStage(Protocol):
    """Replaces personal data in the request, and restores it in the answer."""

    def redact_request(self, ctx: RequestContext, query: Sequence[tuple[str, str]] = ()) -> None:
        """Rewrite ``ctx.body`` so that nothing sensitive is left in it; refuse personal
        data in what cannot be rewritten (the path's model name, forwarded ``query``)."""
        ...

    def restore_answer(self, ctx: RequestContext, answer: Any) -> Any:
        """Put the original values back into a whole answer."""
        ...

    def restore_event(self, ctx: RequestContext, event: Any) -> Any:
        """Put the original values back into one stream event (may hold back a tail)."""
        ...

    def finish_stream(self, ctx: RequestContext) -> list[Any]:
        """Events for anything still held back when the stream ends."""
        ...

    def redact_added(self, ctx: RequestContext, text: str, where: str) -> str:
        """Redact text the gateway adds to the request (retrieved passages)."""
        ...


class RetrievalStage(Protocol):
    """Adds passages retrieved locally (and redacted) to the request as context."""

    async def augment(self, ctx: RequestContext, redaction: RedactionStage) -> None:
        """Rewrite ``ctx.body`` to carry the passages; note their ids in ``ctx.rag``."""
        ...


class CacheStage(Protocol):
    """Answers repeated (redacted) requests locally."""

    async def lookup(self, ctx: RequestContext) -> UnaryReply | None:
        """A stored answer for this request (placeholders as stored), or None."""
        ...

    def keep(self, ctx: RequestContext, answer: bytes) -> None:
        """Note one upstream answer or stream event, serialised before restoration."""
        ...

    def complete(self, ctx: RequestContext) -> None:
        """The upstream's answer to this request is complete: store it if it may be."""
        ...

    async def close(self) -> None:
        """Finish any work in flight."""
        ...


class AuditStage(Protocol):
    """Durable record of every call, before it leaves and when it completes."""

    # Whether the completion record stores the answer (so the pipeline keeps a copy).
    keeps_answers: bool

    async def record_request(self, ctx: RequestContext) -> None:
        """Write the request record; raise to refuse the request if it cannot be written."""
        ...

    async def record_outcome(
        self, ctx: RequestContext, outcome: Outcome, status: int, *, answer_sent: bool = False
    ) -> None:
        """Write the completion record durably (``outcome.value`` is what it says). If it
        cannot be, raise to withhold the answer, unless it has already been sent
        (``answer_sent``: a stream's last event). Called once per request, by the
        pipeline's completion."""
        ...
