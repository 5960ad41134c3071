"""The stages between identity and the router: their interfaces, and the pass-throughs.

Each stage has one job and a small interface. Redaction (``localgate.redaction``) and
the audit trail (``localgate.audit``) implement theirs; limits and the cache are still
pass-throughs that the pipeline calls in their final place, for the traffic-control and
vector-layer work to replace without touching the pipeline. ``NoAudit`` is what runs
with ``proxy.enable_audit: false``.
"""

from __future__ import annotations

from typing import Any, Protocol

from localgate.identity import KeyStore
from localgate.pipeline.context import RequestContext
from localgate.upstream.base import UnaryReply

__all__ = [
    "AuditStage",
    "CacheStage",
    "IdentityStage",
    "LimitsStage",
    "NoAudit",
    "NoCache",
    "NoLimits",
    "Permit",
    "RedactionStage",
]


class IdentityStage:
    """Key → tenant. Fails closed: no principal, no further stage."""

    def __init__(self, keys: KeyStore) -> None:
        self.keys = keys

    def authenticate(self, ctx: RequestContext, credential: str | None) -> None:
        """Set ``ctx.principal`` or raise ``Unauthenticated``/``PermissionDenied``."""
        ctx.principal = self.keys.authenticate(credential)


class Permit(Protocol):
    """Held while a request is in flight; released once, when its answer is complete."""

    def release(self) -> None:
        """Give the capacity back."""
        ...


class LimitsStage(Protocol):
    """Per-tenant request, token and concurrency limits."""

    async def admit(self, ctx: RequestContext) -> Permit:
        """Admit the request or raise ``RESOURCE_EXHAUSTED``."""
        ...


class RedactionStage(Protocol):
    """Replaces personal data in the request, and restores it in the answer."""

    def redact_request(self, ctx: RequestContext) -> None:
        """Rewrite ``ctx.body`` so that nothing sensitive is left in it."""
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


class CacheStage(Protocol):
    """Answers repeated (redacted) requests locally."""

    async def lookup(self, ctx: RequestContext) -> UnaryReply | None:
        """A stored answer for this request, or None."""
        ...


class AuditStage(Protocol):
    """Durable record of every call, before it leaves and when it completes."""

    # Whether the completion record stores the answer (so the pipeline keeps a copy).
    keeps_answers: bool

    async def record_request(self, ctx: RequestContext) -> None:
        """Write the request record; raise to refuse the request if it cannot be written."""
        ...

    async def record_outcome(self, ctx: RequestContext, outcome: str, status: int) -> None:
        """Write the completion record: forwarded, blocked, from cache, error, disconnected."""
        ...


class _NoPermit:
    def release(self) -> None:
        return None


class NoLimits:
    """Admits every request."""

    async def admit(self, ctx: RequestContext) -> Permit:
        """Always admitted."""
        return _NoPermit()


class NoCache:
    """Never has an answer."""

    async def lookup(self, ctx: RequestContext) -> UnaryReply | None:
        """Always a miss."""
        return None


class NoAudit:
    """Writes no records (``proxy.enable_audit: false``)."""

    keeps_answers = False

    async def record_request(self, ctx: RequestContext) -> None:
        """Nothing to write."""

    async def record_outcome(self, ctx: RequestContext, outcome: str, status: int) -> None:
        """Nothing to write."""
