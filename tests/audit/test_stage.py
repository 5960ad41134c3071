"""The audit stage's completion record: the outcome strings it writes are part of the
record format, and the attempt record appears only when there was more than one."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from localgate.audit.crypto import CipherSuite, MasterKey
from localgate.audit.database import sqlite_at
from localgate.audit.records import parse_header
from localgate.audit.spool import Spool
from localgate.audit.stage import TrailAudit
from localgate.audit.store import AuditStore
from localgate.exchange.context import RequestContext
from localgate.exchange.outcome import Outcome
from localgate.exchange.principal import Principal
from localgate.gemini.routes import match_route

ROUTE = match_route("POST", "/v1beta/models/m:generateContent")
# What audit records have always said; readers of the trail (auditors' queries, the
# verify and export commands) match on these.
WRITTEN = {
    Outcome.FORWARDED: "forwarded",
    Outcome.SERVED_FROM_CACHE: "served from cache",
    Outcome.BLOCKED_BY_POLICY: "blocked by policy",
    Outcome.REDACTION_FAILED: "refused: redaction failed",
    Outcome.RETRIEVAL_FAILED: "refused: retrieval",
    Outcome.UPSTREAM_ERROR: "upstream error",
    Outcome.CLIENT_DISCONNECTED: "client disconnected",
    Outcome.INTERNAL_ERROR: "internal error",
}


def completions(tmp_path: Path, contexts: list[tuple[RequestContext, Outcome]]) -> list[Any]:
    """The completion records' headers after writing one per (context, outcome)."""
    master = MasterKey(MasterKey.generate())
    store = AuditStore(sqlite_at(tmp_path / "audit.db"), master, CipherSuite("standard"))
    store.start()
    stage = TrailAudit(store, Spool(tmp_path / "audit.spool", master))

    async def scenario() -> None:
        for ctx, outcome in contexts:
            await stage.record_outcome(ctx, outcome, 200)

    try:
        asyncio.run(scenario())
        reader = store.reader()
        headers = [parse_header(r.header or b"{}") for r in reader.records("acme")]
        reader.close()
    finally:
        store.close()
    return headers


def context(request_id: str, upstream: str | None = None, attempt: int = 0) -> RequestContext:
    ctx = RequestContext(request_id, ROUTE, principal=Principal("acme", "k1"))
    ctx.upstream, ctx.attempt = upstream, attempt
    return ctx


def test_each_outcome_is_written_as_the_trail_has_always_said_it(tmp_path: Path) -> None:
    written = completions(
        tmp_path, [(context(f"r{i}"), outcome) for i, outcome in enumerate(WRITTEN)]
    )

    assert [header["outcome"] for header in written] == list(WRITTEN.values())


def test_the_attempt_is_on_record_only_when_there_was_more_than_one(tmp_path: Path) -> None:
    first, second = completions(
        tmp_path,
        [
            (context("r1", "gemini", 1), Outcome.FORWARDED),
            (context("r2", "fallback", 2), Outcome.FORWARDED),
        ],
    )

    assert (first["upstream"], "attempt" in first) == ("gemini", False)
    assert (second["upstream"], second["attempt"]) == ("fallback", 2)
