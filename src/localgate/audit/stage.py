"""The audit stage: a durable record before anything leaves, another when it is done."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from dataclasses import replace
from typing import Any

import orjson

from localgate.audit.records import PendingRecord
from localgate.audit.spool import Spool
from localgate.audit.store import AuditStore, Receipt
from localgate.errors import ServiceUnavailable
from localgate.exchange.context import RequestContext
from localgate.exchange.outcome import Outcome
from localgate.observability.metrics import GatewayMetrics

__all__ = ["TrailAudit"]

logger = logging.getLogger("localgate.audit")
_RETRY_SECONDS = 2.0


class TrailAudit:
    """Writes each request's records to the tenant's tamper-evident log.

    A completion record is durable before the answer it describes goes out: in the
    store, else in the spool. One that can be written to neither is held in memory and
    retried; until it is written, the answer it describes is withheld (503) if it has
    not gone out yet, and every new request is refused (fail closed).
    """

    keeps_answers = True

    def __init__(
        self,
        store: AuditStore,
        spool: Spool,
        *,
        store_original: bool = False,
        metrics: GatewayMetrics | None = None,
        retry_s: float = _RETRY_SECONDS,
    ) -> None:
        self._store = store
        self._spool = spool
        self._store_original = store_original
        self._metrics = metrics
        self._retry_s = retry_s
        self._retry_task: asyncio.Task[None] | None = None
        # Completion records written nowhere yet, oldest first (only the event loop's
        # thread touches this list).
        self._held: list[PendingRecord] = []
        # Spool-or-hold tasks of completion records the store refused after their request
        # was cancelled (kept here so that they run to the end).
        self._rescues: set[asyncio.Task[bool]] = set()
        if metrics is not None:
            metrics.audit_completions_held.set_function(lambda: len(self._held))
            metrics.audit_spool_records.set_function(lambda: len(spool))
            store.on_batch = metrics.observe_audit_batch
            store.in_flight = lambda: metrics.in_flight

    @property
    def held(self) -> int:
        """Completion records that neither the store nor the spool has taken yet."""
        return len(self._held)

    async def start(self) -> None:
        """Begin retrying anything left in the spool by an earlier run."""
        self._retry_task = asyncio.create_task(self._retry_forever())

    async def close(self) -> None:
        """Stop retrying (the spool keeps what is left for the next start)."""
        if self._retry_task is not None:
            self._retry_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._retry_task
        if self._rescues:
            # Records of cancelled requests on their way to the spool or the held list.
            await asyncio.gather(*self._rescues, return_exceptions=True)
        if self._held:
            # Last chance: the store is still open; the spool survives the restart.
            await self.retry_held()
            for record in self._held:
                logger.error("audit completion for %s lost at shutdown", record.request_id)

    async def record_request(self, ctx: RequestContext) -> None:
        """Write the request record durably; refuse the request (503) if that fails."""
        if self._held:
            raise ServiceUnavailable(
                "The gateway is refusing requests because the audit trail could not record "
                f"how {len(self._held)} earlier request(s) ended (the audit database and its "
                "spool could not be written). Try again later; if it persists, tell the "
                "gateway operator."
            )
        # The very bytes the upstream adapter sends, serialised once by the pipeline (a
        # request answered from the cache has none: what it asked, serialised here).
        sent = ctx.sent_body if ctx.sent_body is not None else orjson.dumps(ctx.body)
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
            await self._store.append(record)
        except Exception as exc:
            logger.exception("audit record for %s could not be written", ctx.request_id)
            raise ServiceUnavailable(
                "The audit record could not be written, so the request was not forwarded "
                f"(request id {ctx.request_id}). Try again; if it persists, tell the gateway "
                "operator."
            ) from exc
        ctx.audited = True

    async def record_outcome(
        self, ctx: RequestContext, outcome: Outcome, status: int, *, answer_sent: bool = False
    ) -> None:
        """Write the completion record durably (store, else spool) before returning.

        If it can be written nowhere, it is held and retried; and unless the answer has
        already gone out (``answer_sent``: a stream's last event), the answer is withheld:
        ``ServiceUnavailable`` is raised and the held record says so.
        """
        fields: dict[str, Any] = {
            **_request_fields(ctx),
            "outcome": outcome.value,
            "status": status,
            "latency_ms": round((time.perf_counter() - ctx.started) * 1000, 3),
        }
        if ctx.upstream:
            fields["upstream"] = ctx.upstream
            if ctx.attempt > 1:
                fields["attempt"] = ctx.attempt
        if ctx.attempts:
            # Every attempt and every upstream skipped: upstream, status, latency.
            fields["attempts"] = ctx.attempts
        if ctx.model_version:
            fields["model_version"] = ctx.model_version
        if ctx.confidence is not None:
            fields["confidence"] = ctx.confidence  # docs/quality.md
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
        # Queued now, so the store writes it even if this request's task is cancelled
        # meanwhile (shutdown); should the store then refuse it, ``_rescue`` takes it to the
        # spool or the held list. This task awaits ``waiter``, which the store settles
        # with ``stored`` in the same pass; a cancellation cancels ``waiter`` only, and
        # ``stored`` keeps the verdict. (``asyncio.shield(stored)`` did the same with a
        # loop iteration and ~18k instructions more per request: callgrind, uvloop.)
        waiter: asyncio.Future[Receipt] = asyncio.get_running_loop().create_future()
        stored = self._submit(record, waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            stored.add_done_callback(functools.partial(self._rescue, record, answer_sent))
            raise
        except Exception as exc:  # noqa: BLE001 - the spool is next
            _refused(record, exc)
            if stored.done():
                stored.exception()  # failed alike: seen, so not logged as never retrieved
            recorded = await asyncio.shield(self._elsewhere(record, answer_sent=answer_sent))
        else:
            recorded = True
        if not recorded and not answer_sent:
            raise ServiceUnavailable(
                "The answer was withheld because the audit trail could not record it "
                f"(request id {ctx.request_id}). Try again later; if it persists, tell the "
                "gateway operator."
            )

    def _submit(
        self, record: PendingRecord, waiter: asyncio.Future[Receipt]
    ) -> asyncio.Future[Receipt]:
        """Queue ``record`` in the store, ``waiter`` settled with the returned future; a
        store that cannot even queue it answers with failed futures, like one that
        refuses it."""
        try:
            return self._store.append(record, waiter)
        except Exception as exc:  # noqa: BLE001 - answered as a refusal: the spool is next
            failed: asyncio.Future[Receipt] = asyncio.get_running_loop().create_future()
            failed.set_exception(exc)
            if not waiter.done():
                waiter.set_exception(exc)
            return failed

    def _rescue(
        self, record: PendingRecord, answer_sent: bool, stored: asyncio.Future[Receipt]
    ) -> None:
        """After the request of ``record`` was cancelled: if the store did not write it,
        spool or hold it all the same."""
        if not stored.cancelled():
            error = stored.exception()
            if error is None:
                return
            _refused(record, error)
        task = asyncio.ensure_future(self._elsewhere(record, answer_sent=answer_sent))
        self._rescues.add(task)
        task.add_done_callback(self._rescues.discard)

    async def _elsewhere(self, record: PendingRecord, *, answer_sent: bool) -> bool:
        """Spool, else hold ``record`` (which the store refused); whether it is durable now."""
        if await self._spool_record(record):
            return True
        if not answer_sent:
            record = _withheld(record)
        self._held.append(record)
        if self._metrics is not None:
            self._metrics.audit_completions_unrecorded.inc()
        logger.error(
            "audit completion for %s could not be written anywhere; held in memory and "
            "refusing new requests until it is",
            record.request_id,
        )
        return False

    async def _spool_record(self, record: PendingRecord) -> bool:
        try:
            await asyncio.to_thread(self._spool.add, record)
        except OSError:
            logger.exception("audit completion for %s could not be spooled", record.request_id)
            return False
        if self._metrics is not None:
            self._metrics.audit_completions_spooled.inc()
        logger.error("audit completion for %s spooled for retry", record.request_id)
        return True

    async def _retry_forever(self) -> None:
        while True:
            await asyncio.sleep(self._retry_s)
            try:
                await self.retry_held()
                await self.retry_spooled()
            except Exception:
                logger.exception("audit: retrying spooled records failed")

    async def retry_held(self) -> int:
        """Write held completion records (store, else spool), oldest first; how many went."""
        written = 0
        while self._held:
            record = self._held[0]
            try:
                await self._store.append(record)
            except Exception:  # noqa: BLE001 - try the spool, then keep holding it
                if not await self._spool_record(record):
                    break
            self._held.pop(0)
            written += 1
        if written:
            logger.warning("audit: %d held completion record(s) written", written)
        return written

    async def retry_spooled(self) -> int:
        """Write spooled records in order; returns how many went in (0 while another
        process sharing the data directory drains the spool)."""
        with self._spool.draining() as mine:
            if not mine:
                return 0
            pending = await asyncio.to_thread(self._spool.take)
            written = 0
            for record in pending:
                try:
                    await self._store.append(record)
                except Exception:  # noqa: BLE001 - keep it spooled and try again later
                    break
                written += 1
            if written:
                await asyncio.to_thread(self._spool.clear, written)
            return written


def _refused(record: PendingRecord, error: BaseException) -> None:
    logger.error(
        "audit completion for %s refused by the store: %s",
        record.request_id,
        type(error).__name__,
    )


def _withheld(record: PendingRecord) -> PendingRecord:
    """The completion record of an answer the gateway withholds: the client gets a 503."""
    fields = {
        **record.fields,
        "outcome": Outcome.WITHHELD.value,
        "status": 503,
        "answer_outcome": record.fields["outcome"],
        "answer_status": record.fields["status"],
    }
    return replace(record, fields=fields)


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
        # How the caller authenticated: key, certificate or key+certificate (mTLS).
        "auth": ctx.principal.method if ctx.principal else None,
        "client": ctx.client,
        "route": route.method.value if route else None,
        "api_version": route.version if route else None,
        "model": route.model if route else None,
        "received": ctx.received_at,
        "redaction": summary,
    }
    if ctx.principal is not None and ctx.principal.certificate is not None:
        fields["certificate"] = ctx.principal.certificate
    if ctx.dialect != "gemini":
        fields["dialect"] = ctx.dialect
    if ctx.policy is not None:
        fields["config"] = ctx.policy.config_hash
    if ctx.rag is not None:
        fields["rag"] = ctx.rag
    if ctx.served_from is not None:
        fields["served_from"] = ctx.served_from
    if ctx.redaction_skipped is not None:
        fields["redaction_skipped"] = ctx.redaction_skipped
    if ctx.trace_id is not None:
        fields["trace_id"] = ctx.trace_id
    return fields
