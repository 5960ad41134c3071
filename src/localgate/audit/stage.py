"""The audit stage: a durable record before anything leaves, another when it is done."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from concurrent.futures import Future
from typing import Any

import orjson

from localgate.audit.records import PendingRecord
from localgate.audit.spool import Spool
from localgate.audit.store import AuditStore, Receipt
from localgate.errors import ServiceUnavailable
from localgate.framing import dump_json
from localgate.pipeline.context import RequestContext

__all__ = ["TrailAudit"]

logger = logging.getLogger("localgate.audit")
_RETRY_SECONDS = 2.0


class TrailAudit:
    """Writes each request's records to the tenant's tamper-evident log."""

    keeps_answers = True

    def __init__(self, store: AuditStore, spool: Spool, *, store_original: bool = False) -> None:
        self._store = store
        self._spool = spool
        self._store_original = store_original
        self._retry_task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Begin retrying anything left in the spool by an earlier run."""
        self._retry_task = asyncio.create_task(self._retry_forever())

    async def close(self) -> None:
        """Stop retrying (the spool keeps what is left for the next start)."""
        if self._retry_task is not None:
            self._retry_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._retry_task

    async def record_request(self, ctx: RequestContext) -> None:
        """Write the request record durably; refuse the request (503) if that fails."""
        # The very bytes the upstream adapter sends (dump_json escapes U+2028/2029).
        sent = dump_json(ctx.body)
        texts = [text.encode() for text in ctx.original_texts]
        record = PendingRecord(
            tenant=_tenant(ctx),
            kind="request",
            request_id=ctx.request_id,
            fields=_request_fields(ctx),
            payload=sent,
            # Answered from the local cache: this is what was asked, nothing was sent.
            sent=sent if ctx.served_from is None else None,
            prompt=b"\n".join(texts) if texts else None,
            original=orjson.dumps(ctx.original_texts) if self._store_original else None,
            user=ctx.end_user,
        )
        try:
            await asyncio.wrap_future(self._store.submit(record))
        except Exception as exc:
            logger.exception("audit record for %s could not be written", ctx.request_id)
            raise ServiceUnavailable(
                "The audit record could not be written, so the request was not forwarded "
                f"(request id {ctx.request_id}). Try again; if it persists, tell the gateway "
                "operator."
            ) from exc
        ctx.audited = True

    async def record_outcome(self, ctx: RequestContext, outcome: str, status: int) -> None:
        """Write the completion record; if the store refuses it, spool it for later."""
        fields: dict[str, Any] = {
            **_request_fields(ctx),
            "outcome": outcome,
            "status": status,
            "latency_ms": round((time.perf_counter() - ctx.started) * 1000, 3),
        }
        if ctx.upstream:
            fields["upstream"] = ctx.upstream
        if ctx.model_version:
            fields["model_version"] = ctx.model_version
        usage = ctx.usage
        if usage is not None:
            fields["usage"] = {
                "prompt": usage.prompt,
                "candidates": usage.candidates,
                "thoughts": usage.thoughts,
                "total": usage.total,
            }
        answer = b"[" + b",".join(ctx.answer_events) + b"]" if ctx.answer_events else None
        record = PendingRecord(
            tenant=_tenant(ctx),
            kind="answer",
            request_id=ctx.request_id,
            fields=fields,
            payload=answer,
        )
        # Not awaited: the client need not wait for it. If the store refuses it, it goes
        # to the spool (from the writer thread) and is retried; it is never dropped.
        self._store.submit(record).add_done_callback(
            lambda future: self._spool_if_failed(future, record)
        )

    def _spool_if_failed(self, future: Future[Receipt], record: PendingRecord) -> None:
        if future.exception() is None:
            return
        logger.error("audit completion for %s spooled for retry", record.request_id)
        try:
            self._spool.add(record)
        except OSError:
            logger.exception("audit completion for %s could not be spooled", record.request_id)

    async def _retry_forever(self) -> None:
        while True:
            await asyncio.sleep(_RETRY_SECONDS)
            try:
                await self.retry_spooled()
            except Exception:
                logger.exception("audit: retrying spooled records failed")

    async def retry_spooled(self) -> int:
        """Write spooled records in order; returns how many went in."""
        pending = self._spool.take()
        written = 0
        for record in pending:
            try:
                await asyncio.wrap_future(self._store.submit(record))
            except Exception:  # noqa: BLE001 - keep it spooled and try again later
                break
            written += 1
        if written:
            self._spool.clear(written)
        return written


def _tenant(ctx: RequestContext) -> str:
    if ctx.principal is None:
        raise ServiceUnavailable("The audit trail needs an authenticated request.")
    return ctx.principal.tenant


def _request_fields(ctx: RequestContext) -> dict[str, Any]:
    route = ctx.route
    summary: dict[str, dict[str, int]] = {}
    for (entity_type, action), count in sorted(ctx.redaction_summary.items()):
        summary.setdefault(entity_type, {})[action] = count
    fields = {
        "key_id": ctx.principal.key_id if ctx.principal else None,
        "client": ctx.client,
        "route": route.method.value if route else None,
        "api_version": route.version if route else None,
        "model": route.model if route else None,
        "received": ctx.received_at,
        "redaction": summary,
    }
    if ctx.rag is not None:
        fields["rag"] = ctx.rag
    if ctx.served_from is not None:
        fields["served_from"] = ctx.served_from
    return fields
