"""Completion records survive a store that refuses them: spooled encrypted, retried in order."""

from __future__ import annotations

import asyncio
from concurrent.futures import Future
from pathlib import Path

import pytest

from localgate.audit.crypto import CipherSuite, MasterKey
from localgate.audit.database import sqlite_at
from localgate.audit.records import PendingRecord
from localgate.audit.spool import Spool
from localgate.audit.stage import TrailAudit
from localgate.audit.store import AuditStore, Receipt
from localgate.frontdoor.routes import match_route
from localgate.identity import Principal
from localgate.pipeline.context import RequestContext


def context(request_id: str) -> RequestContext:
    ctx = RequestContext(request_id, match_route("POST", "/v1beta/models/m:generateContent"))
    ctx.principal = Principal("acme", "k1")
    ctx.answer_events = [b'{"candidates":[]}']
    return ctx


def test_refused_completion_is_spooled_encrypted_and_written_later(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    master = MasterKey(MasterKey.generate())
    store = AuditStore(sqlite_at(tmp_path / "audit.db"), master, CipherSuite("standard"))
    store.start()
    spool = Spool(tmp_path / "audit.spool", master)
    stage = TrailAudit(store, spool)
    working = store.submit

    def refusing(record: PendingRecord) -> Future[Receipt]:
        future: Future[Receipt] = Future()
        future.set_exception(OSError("database is locked"))
        return future

    async def scenario() -> int:
        monkeypatch.setattr(store, "submit", refusing)
        await stage.record_outcome(context("r1"), "forwarded", 200)
        await stage.record_outcome(context("r2"), "upstream error", 503)
        monkeypatch.setattr(store, "submit", working)
        return await stage.retry_spooled()

    assert asyncio.run(scenario()) == 2
    reader = store.reader()
    kept = [(r.request_id, r.kind) for r in reader.records("acme")]
    reader.close()
    store.close()

    assert kept == [("r1", "answer"), ("r2", "answer")]
    assert len(spool) == 0


def test_spool_file_holds_nothing_in_clear(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "audit.spool", MasterKey(MasterKey.generate()))

    spool.add(PendingRecord("acme", "answer", "r1", {"x": 1}, payload=b"13812345678"))

    assert b"13812345678" not in (tmp_path / "audit.spool").read_bytes()
    assert spool.take()[0].payload == b"13812345678"


def test_a_line_that_does_not_open_is_quarantined_not_blocking(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "audit.spool", MasterKey(MasterKey.generate()))
    spool.add(PendingRecord("acme", "answer", "r1", {}))
    with (tmp_path / "audit.spool").open("ab") as handle:
        handle.write(b"dG9ybiBsaW5l\n")  # a torn write
    spool.add(PendingRecord("acme", "answer", "r2", {}))

    taken = [record.request_id for record in spool.take()]

    assert taken == ["r1", "r2"]
    assert (tmp_path / "audit.quarantine").read_bytes() == b"dG9ybiBsaW5l\n"
    assert len(spool) == 2
