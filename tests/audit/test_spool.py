"""Completion records survive a store that refuses them: spooled encrypted, retried in order."""

from __future__ import annotations

import asyncio
import errno
import os
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from localgate.audit.crypto import CipherSuite, MasterKey
from localgate.audit.database import sqlite_at
from localgate.audit.records import PendingRecord, parse_header
from localgate.audit.spool import Spool
from localgate.audit.stage import TrailAudit
from localgate.audit.store import AuditStore, Receipt
from localgate.errors import ServiceUnavailable
from localgate.exchange.context import RequestContext
from localgate.exchange.outcome import Outcome
from localgate.gemini.routes import match_route
from localgate.identity import Principal
from localgate.observability.metrics import GatewayMetrics
from tests.conftest import wait_until


def context(request_id: str) -> RequestContext:
    ctx = RequestContext(request_id, match_route("POST", "/v1beta/models/m:generateContent"))
    ctx.principal = Principal("acme", "k1")
    ctx.answer_events = [b'{"candidates":[]}']
    return ctx


def audit_store(tmp_path: Path) -> tuple[MasterKey, AuditStore]:
    """A new master key and an audit store on a SQLite file under ``tmp_path``, not started
    (a test may replace its writer first)."""
    master = MasterKey(MasterKey.generate())
    return master, AuditStore(sqlite_at(tmp_path / "audit.db"), master, CipherSuite("standard"))


def test_refused_completion_is_spooled_encrypted_and_written_later(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    master, store = audit_store(tmp_path)
    store.start()
    spool = Spool(tmp_path / "audit.spool", master)
    stage = TrailAudit(store, spool)
    working = store.append

    def refusing(
        record: PendingRecord, waiter: asyncio.Future[Receipt] | None = None
    ) -> asyncio.Future[Receipt]:
        return refused(OSError("database is locked"), waiter)

    async def scenario() -> int:
        monkeypatch.setattr(store, "append", refusing)
        await stage.record_outcome(context("r1"), Outcome.FORWARDED, 200)
        await stage.record_outcome(context("r2"), Outcome.UPSTREAM_ERROR, 503)
        monkeypatch.setattr(store, "append", working)
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


class FullDisk:
    """The spool's disk: full (ENOSPC) until ``free``."""

    def __init__(self) -> None:
        self.full = True

    def append(self, spool: Spool, line: bytes) -> None:
        if self.full:
            raise OSError(errno.ENOSPC, "No space left on device")
        Spool._append(spool, line)

    def free(self) -> None:
        self.full = False


def refusing(
    record: PendingRecord, waiter: asyncio.Future[Receipt] | None = None
) -> asyncio.Future[Receipt]:
    return refused(sqlite3.OperationalError("database or disk is full"), waiter)


def refused(error: Exception, waiter: asyncio.Future[Receipt] | None) -> asyncio.Future[Receipt]:
    """What ``AuditStore.append`` answers when the store refuses a record: its future
    failed, and the caller's ``waiter`` with it."""
    future: asyncio.Future[Receipt] = asyncio.get_running_loop().create_future()
    future.set_exception(error)
    if waiter is not None:
        waiter.set_exception(error)
    return future


def metric(metrics: GatewayMetrics, name: str) -> float:
    value = metrics.registry.get_sample_value(name)
    assert value is not None
    return value


def test_a_completion_written_nowhere_withholds_the_answer_and_refuses_requests_until_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    master, store = audit_store(tmp_path)
    store.start()
    spool = Spool(tmp_path / "audit.spool", master)
    disk = FullDisk()
    monkeypatch.setattr(spool, "_append", lambda line: disk.append(spool, line))
    metrics = GatewayMetrics()
    stage = TrailAudit(store, spool, metrics=metrics)
    working = store.append

    async def scenario() -> None:
        await stage.record_request(context("r1"))
        monkeypatch.setattr(store, "append", refusing)
        with pytest.raises(ServiceUnavailable, match="withheld"):
            await stage.record_outcome(context("r1"), Outcome.FORWARDED, 200)
        assert stage.held == 1
        assert metric(metrics, "localgate_audit_completions_unrecorded_total") == 1
        assert metric(metrics, "localgate_audit_completions_held") == 1
        monkeypatch.setattr(store, "append", working)  # the database has room again ...
        with pytest.raises(ServiceUnavailable, match="refusing requests"):
            await stage.record_request(context("r2"))  # ... but r1's completion waits
        assert await stage.retry_held() == 1
        await stage.record_request(context("r2"))

    asyncio.run(scenario())
    reader = store.reader()
    kept = [(r.request_id, parse_header(r.header or b"{}")) for r in reader.records("acme")]
    reader.close()
    store.close()

    assert [(rid, header["kind"]) for rid, header in kept] == [
        ("r1", "request"),
        ("r1", "answer"),
        ("r2", "request"),
    ]
    answer = kept[1][1]
    assert answer["outcome"] == "withheld: audit trail unavailable"
    assert answer["status"] == 503
    assert (answer["answer_outcome"], answer["answer_status"]) == ("forwarded", 200)
    assert metric(metrics, "localgate_audit_completions_held") == 0
    assert not spool.path.exists()


def test_a_stream_completion_written_nowhere_is_held_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    master, store = audit_store(tmp_path)
    store.start()
    spool = Spool(tmp_path / "audit.spool", master)
    disk = FullDisk()
    monkeypatch.setattr(spool, "_append", lambda line: disk.append(spool, line))
    stage = TrailAudit(store, spool)
    working = store.append

    async def scenario() -> int:
        monkeypatch.setattr(store, "append", refusing)
        # Every event has gone out already: nothing to withhold, nothing raised.
        await stage.record_outcome(context("s1"), Outcome.FORWARDED, 200, answer_sent=True)
        assert stage.held == 1
        disk.free()  # the spool's disk has room before the database does
        written = await stage.retry_held()
        assert stage.held == 0
        monkeypatch.setattr(store, "append", working)
        return written + await stage.retry_spooled()

    assert asyncio.run(scenario()) == 2
    reader = store.reader()
    kept = [parse_header(r.header or b"{}") for r in reader.records("acme")]
    reader.close()
    store.close()

    assert [(h["request_id"], h["outcome"], h["status"]) for h in kept] == [
        ("s1", "forwarded", 200)
    ]


def test_record_outcome_returns_once_the_completion_is_on_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    master, store = audit_store(tmp_path)
    writer = GatedWriter(store)  # a slow disk: the commit waits until the test opens it
    monkeypatch.setattr(store, "_write", writer.write)
    store.start()
    stage = TrailAudit(store, Spool(tmp_path / "audit.spool", master))

    async def scenario() -> bool:
        task = asyncio.create_task(stage.record_outcome(context("r1"), Outcome.FORWARDED, 200))
        await asyncio.to_thread(writer.entered.wait, 30)
        returned_before_commit = task.done()
        writer.open()
        await task
        return returned_before_commit

    returned_before_commit = asyncio.run(scenario())
    reader = store.reader()
    kept = [(r.request_id, r.kind) for r in reader.by_request("r1")]
    reader.close()
    store.close()

    assert not returned_before_commit
    assert kept == [("r1", "answer")]


def test_a_torn_spool_append_on_a_full_disk_leaves_no_partial_line(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "audit.spool", MasterKey(MasterKey.generate()))
    spool.add(PendingRecord("acme", "answer", "r1", {}))
    before = spool.path.read_bytes()
    real_write = os.write

    def short_write(descriptor: int, data: bytes) -> int:
        return real_write(descriptor, data[: len(data) // 2])  # the disk filled mid-line

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("localgate.audit.spool.os.write", short_write)
        with pytest.raises(OSError, match="short write"):
            spool.add(PendingRecord("acme", "answer", "r2", {}))

    assert spool.path.read_bytes() == before
    assert [record.request_id for record in spool.take()] == ["r1"]


class GatedWriter:
    """Holds the store's writer inside its first batch until ``open``."""

    def __init__(self, store: AuditStore) -> None:
        self.entered = threading.Event()
        self._gate = threading.Event()
        self._write = store._write

    def write(self, batch: list[tuple[PendingRecord, Any]]) -> None:
        self.entered.set()
        self._gate.wait(timeout=30)
        self._write(batch)

    def open(self) -> None:
        self._gate.set()


def test_a_cancelled_request_still_gets_its_completion_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    master, store = audit_store(tmp_path)
    writer = GatedWriter(store)
    monkeypatch.setattr(store, "_write", writer.write)
    store.start()
    stage = TrailAudit(store, Spool(tmp_path / "audit.spool", master))

    def answers() -> list[str]:
        reader = store.reader()
        try:
            return [r.request_id for r in reader.records("acme") if r.kind == "answer"]
        finally:
            reader.close()

    async def scenario() -> None:
        task = asyncio.create_task(stage.record_outcome(context("r1"), Outcome.FORWARDED, 200))
        await asyncio.to_thread(writer.entered.wait, 30)
        task.cancel()  # the server shuts down while the record is being written
        with pytest.raises(asyncio.CancelledError):
            await task
        writer.open()
        await asyncio.to_thread(wait_until, lambda: answers() == ["r1"])

    asyncio.run(scenario())
    store.close()


@pytest.mark.parametrize("spool_works", [True, False])
def test_a_cancelled_request_whose_completion_the_store_refuses_is_spooled_or_held(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spool_works: bool
) -> None:
    # The stage awaits a waiter the store settles with its own future (no task around
    # it): when the request's task is cancelled and the store refuses the record
    # afterwards, nobody awaits it any more, and the record must still reach the spool,
    # else the held list.
    master, store = audit_store(tmp_path)
    store.start()
    spool = Spool(tmp_path / "audit.spool", master)
    stage = TrailAudit(store, spool)
    pending: list[asyncio.Future[Receipt]] = []
    appended = asyncio.Event()

    def queued(
        record: PendingRecord, waiter: asyncio.Future[Receipt] | None = None
    ) -> asyncio.Future[Receipt]:
        # The first record waits for the test to refuse it (its waiter is cancelled with
        # the request first); any later one (the last retry at close) is refused at once.
        if pending:
            future = refused(OSError("database is locked"), waiter)
        else:
            future = asyncio.get_running_loop().create_future()
        pending.append(future)
        appended.set()
        return future

    def full_disk(record: PendingRecord) -> None:
        raise OSError("no space left on device")

    monkeypatch.setattr(store, "append", queued)
    if not spool_works:
        monkeypatch.setattr(spool, "add", full_disk)

    async def scenario() -> None:
        task = asyncio.create_task(stage.record_outcome(context("r1"), Outcome.FORWARDED, 200))
        await appended.wait()
        task.cancel()  # the server shuts down while the record is being written
        with pytest.raises(asyncio.CancelledError):
            await task
        pending[0].set_exception(OSError("database is locked"))  # then the store refuses it
        await asyncio.sleep(0)  # one turn of the loop: the future's callbacks run
        await stage.close()  # waits for what is on its way to the spool or the held list

    asyncio.run(scenario())
    store.close()

    if spool_works:
        assert [record.request_id for record in spool.take()] == ["r1"]
        assert stage.held == 0
    else:
        assert len(spool) == 0
        assert stage.held == 1  # and every new request is refused until it is written


def test_a_waiter_that_gave_up_does_not_stop_the_writer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, store = audit_store(tmp_path)
    writer = GatedWriter(store)
    monkeypatch.setattr(store, "_write", writer.write)
    store.start()

    first = store.submit(PendingRecord("acme", "request", "r1", {}))
    assert writer.entered.wait(timeout=30)
    abandoned = store.submit(PendingRecord("acme", "request", "r2", {}))
    assert abandoned.cancel()  # its request was cancelled while the record waited
    writer.open()
    later = store.submit(PendingRecord("acme", "request", "r3", {})).result(timeout=30)
    reader = store.reader()
    kept = [r.request_id for r in reader.records("acme")]
    reader.close()
    store.close()

    assert first.result(timeout=1).seq == 0
    assert later.seq == 2
    assert kept == ["r1", "r2", "r3"]  # asked for, so written, even if nobody waits


def test_a_loop_waiter_that_gave_up_does_not_stop_the_writer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, store = audit_store(tmp_path)
    writer = GatedWriter(store)
    monkeypatch.setattr(store, "_write", writer.write)
    store.start()

    async def scenario() -> tuple[Receipt, Receipt, Receipt]:
        first = store.append(PendingRecord("acme", "request", "r1", {}))
        await asyncio.to_thread(writer.entered.wait, 30)
        abandoned = store.append(PendingRecord("acme", "request", "r2", {}))
        also_written = store.append(PendingRecord("acme", "request", "r3", {}))
        abandoned.cancel()  # its request was cancelled while the record waited
        writer.open()
        later = await store.append(PendingRecord("acme", "request", "r4", {}))
        return await first, await also_written, later

    first, also_written, later = asyncio.run(scenario())
    reader = store.reader()
    kept = [r.request_id for r in reader.records("acme")]
    reader.close()
    store.close()

    assert (first.seq, also_written.seq, later.seq) == (0, 2, 3)
    assert kept == ["r1", "r2", "r3", "r4"]  # asked for, so written, even if nobody waits


APPENDER = """
import sys
from pathlib import Path
from typing import Any
from localgate.audit.crypto import MasterKey
from localgate.audit.records import PendingRecord
from localgate.audit.spool import Spool
from localgate.secret import Secret

path, key, name = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
spool = Spool(path, MasterKey(Secret(key)))
for n in range(100):
    spool.add(PendingRecord("acme", "answer", f"{name}-{n}", {"n": n}))
"""


def test_processes_sharing_a_spool_lose_no_record_and_drain_it_one_at_a_time(
    tmp_path: Path,
) -> None:
    key = MasterKey.generate()
    path = tmp_path / "audit.db.spool"
    spool, other = Spool(path, MasterKey(key)), Spool(path, MasterKey(key))
    with spool.draining() as first, other.draining() as second:
        assert first
        assert not second
    appenders = [
        subprocess.Popen(  # noqa: S603 - this test's own script
            [sys.executable, "-c", APPENDER, str(path), key.reveal(), f"p{n}"],
            stderr=subprocess.PIPE,
        )
        for n in range(3)
    ]
    drained: list[str] = []
    # Drain while they append: each rewrite of the file must keep what they appended.
    while any(appender.poll() is None for appender in appenders):
        taken = spool.take()
        drained += [record.request_id for record in taken]
        spool.clear(len(taken))
    for appender in appenders:
        _, errors = appender.communicate(timeout=60)
        assert appender.returncode == 0, errors.decode()
    drained += [record.request_id for record in spool.take()]

    assert sorted(drained) == sorted(f"p{p}-{n}" for p in range(3) for n in range(100))
