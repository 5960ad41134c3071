"""The stages that run when a feature is switched off."""

from __future__ import annotations

from localgate.exchange.context import RequestContext
from localgate.exchange.outcome import Outcome
from localgate.exchange.replies import UnaryReply
from localgate.exchange.stages import Permit, RedactionStage, Settlement

__all__ = ["NoAudit", "NoCache", "NoLimits", "NoRetrieval"]


class _NoPermit:
    def release(self, settlement: Settlement) -> None:
        return None


class NoLimits:
    """Admits every request (pipelines built without limits, e.g. in tests)."""

    async def admit(self, ctx: RequestContext) -> Permit:
        """Always admitted."""
        return _NoPermit()


class NoRetrieval:
    """Adds nothing."""

    async def augment(self, ctx: RequestContext, redaction: RedactionStage) -> None:
        """Nothing to add."""


class NoCache:
    """Never has an answer."""

    async def lookup(self, ctx: RequestContext) -> UnaryReply | None:
        """Always a miss."""
        return None

    def keep(self, ctx: RequestContext, answer: bytes) -> None:
        """Nothing is kept."""

    def complete(self, ctx: RequestContext) -> None:
        """Nothing is stored."""

    async def close(self) -> None:
        """Nothing in flight."""


class NoAudit:
    """Writes no records (``proxy.enable_audit: false``)."""

    keeps_answers = False

    async def record_request(self, ctx: RequestContext) -> None:
        """Nothing to write."""

    async def record_outcome(
        self, ctx: RequestContext, outcome: Outcome, status: int, *, answer_sent: bool = False
    ) -> None:
        """Nothing to write."""
