"""One writer batch, on SQLite and PostgreSQL: all of it or none of it.

A batch is written in parts (open the logs and read their frontiers; the rows, the
frontiers and the COMMIT, in as few statements and round trips as the driver allows).
These tests put records of two tenants, waited for by both kinds of waiter (a thread's
future and an event loop's), into one batch, and check what is left when a row fails in
the middle of it or the process dies between its parts.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

from localgate.audit.crypto import CipherSuite, MasterKey
from localgate.audit.database import Database, PostgresDatabase, sqlite_at
from localgate.audit.records import PendingRecord
from localgate.audit.store import AuditReader, AuditStore, Receipt
from localgate.audit.verify import verify_tenant
from localgate.secret import Secret
from tests.audit.conftest import postgres_schema
from tests.conftest import INFRASTRUCTURE_TIMEOUT_S


@pytest.fixture(params=["sqlite", "postgres"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A new audit database of either kind: a SQLite file's path or a PostgreSQL DSN."""
    if request.param == "sqlite":
        yield str(tmp_path / "audit.db")
        return
    with postgres_schema() as dsn:
        yield dsn


@pytest.fixture
def connect(where: str) -> Callable[[], Database]:
    """Opens connections to that database."""
    if where.startswith("postgresql:"):
        return lambda: PostgresDatabase(where)
    return sqlite_at(Path(where))


def record(tenant: str, number: int) -> PendingRecord:
    return PendingRecord(
        tenant=tenant,
        kind="request",
        request_id=f"{tenant}-{number}",
        fields={"n": number},
        payload=f"payload {number}".encode(),
        sent=f"payload {number}".encode(),
        prompt=b"the prompt",
    )


class HeldWriter:
    """Holds the store's writer in its first batch until ``release``: what is queued
    meanwhile makes up its next batch."""

    def __init__(self, store: AuditStore) -> None:
        self.entered = threading.Event()
        self._gate = threading.Event()
        self._write = store._write
        self.batches: list[list[str]] = []

    def write(self, batch: list[tuple[PendingRecord, Any]]) -> None:
        self.batches.append([item.request_id for item, _ in batch])
        self.entered.set()
        self._gate.wait(timeout=INFRASTRUCTURE_TIMEOUT_S)
        self._write(batch)

    def release(self) -> None:
        self._gate.set()


def one_batch(
    store: AuditStore, writer: HeldWriter, records: list[PendingRecord]
) -> list[Receipt | BaseException]:
    """Write ``records`` in one batch, half of them waited for by an event loop and half
    by plain futures; what each waiter got."""

    async def scenario() -> list[Receipt | BaseException]:
        first = store.submit(record("warm", 0))
        await asyncio.to_thread(writer.entered.wait, INFRASTRUCTURE_TIMEOUT_S)
        waiters: list[asyncio.Future[Receipt] | Future[Receipt]] = [
            store.append(r) if n % 2 else store.submit(r) for n, r in enumerate(records)
        ]
        writer.release()
        await asyncio.wait_for(asyncio.wrap_future(first), INFRASTRUCTURE_TIMEOUT_S)
        outcomes: list[Receipt | BaseException] = []
        for waiter in waiters:
            pending: asyncio.Future[Receipt] = (
                waiter if isinstance(waiter, asyncio.Future) else asyncio.wrap_future(waiter)
            )
            try:
                outcomes.append(await asyncio.wait_for(pending, INFRASTRUCTURE_TIMEOUT_S))
            except Exception as exc:  # noqa: BLE001 - the outcome under test
                outcomes.append(exc)
        return outcomes

    outcomes = asyncio.run(scenario())
    assert writer.batches[1] == [r.request_id for r in records]  # one batch indeed
    return outcomes


def rows(reader: AuditReader, tenant: str) -> list[str]:
    return [r.request_id for r in reader.records(tenant)]


def test_two_tenants_in_one_batch_each_get_their_own_verified_chain(
    connect: Callable[[], Database], monkeypatch: pytest.MonkeyPatch
) -> None:
    suite = CipherSuite("standard")
    store = AuditStore(connect, MasterKey(MasterKey.generate()), suite)
    store.start()
    try:
        store.submit(record("globex", 0)).result(timeout=INFRASTRUCTURE_TIMEOUT_S)
        writer = HeldWriter(store)
        monkeypatch.setattr(store, "_write", writer.write)
        mixed = [record("acme" if n % 3 else "globex", n) for n in range(1, 10)]
        outcomes = one_batch(store, writer, mixed)
        reader = store.reader()
        try:
            reports = {t: verify_tenant(reader, t, suite, None) for t in ("acme", "globex")}
            stored = {t: rows(reader, t) for t in ("acme", "globex")}
            heads = {t: reader.frontier_size(t) for t in ("acme", "globex")}
        finally:
            reader.close()
    finally:
        store.close()

    receipts = [o for o in outcomes if isinstance(o, Receipt)]
    assert len(receipts) == len(mixed)
    assert [(r.tenant, r.seq) for r in receipts if r.tenant == "acme"] == [
        ("acme", n) for n in range(6)
    ]
    assert [r.seq for r in receipts if r.tenant == "globex"] == [1, 2, 3]
    assert stored == {
        "acme": [r.request_id for r in mixed if r.tenant == "acme"],
        "globex": ["globex-0"] + [r.request_id for r in mixed if r.tenant == "globex"],
    }
    assert heads == {"acme": 6, "globex": 4}
    assert all(report.ok for report in reports.values()), reports


def test_a_row_failing_mid_batch_leaves_nothing_and_every_waiter_gets_the_error(
    connect: Callable[[], Database], monkeypatch: pytest.MonkeyPatch
) -> None:
    suite = CipherSuite("standard")
    store = AuditStore(connect, MasterKey(MasterKey.generate()), suite)
    writer = HeldWriter(store)
    monkeypatch.setattr(store, "_write", writer.write)
    # A row someone put at acme's position 3: the batch's fourth acme row collides with it
    # (the rows before it went in, inside the transaction).
    db = connect()
    db.execute(
        "INSERT INTO audit_log (tenant, seq, kind, request_id, recorded_at, header, payload, "
        "original, leaf_hash) VALUES ('acme', 3, 'request', 'planted', 'x', ?, NULL, NULL, ?)",
        (b"{}", b"\x00" * 32),
    )
    db.close()
    store.start()
    try:
        mixed = [record("globex" if n in (1, 6) else "acme", n) for n in range(8)]
        outcomes = one_batch(store, writer, mixed)
        reader = store.reader()
        try:
            stored = {t: rows(reader, t) for t in ("acme", "globex")}
            heads = {t: reader.frontier_size(t) for t in ("acme", "globex")}
        finally:
            reader.close()
        # The writer lives on: another tenant's next batch goes in.
        later = store.submit(record("initech", 0)).result(timeout=INFRASTRUCTURE_TIMEOUT_S)
    finally:
        store.close()

    assert all(isinstance(o, Exception) for o in outcomes), outcomes
    assert len({id(o) for o in outcomes}) == 1  # the batch's one error, told to every waiter
    assert stored == {"acme": ["planted"], "globex": []}
    assert heads == {"acme": 0, "globex": 0}
    assert (later.tenant, later.seq) == ("initech", 0)
    assert store.last_failure is None


CRASHING_WRITER = """
import os, signal, sys
from pathlib import Path
from localgate.audit.crypto import CipherSuite, MasterKey
from localgate.audit.database import PostgresDatabase, SqliteDatabase, sqlite_at
from localgate.audit.records import PendingRecord
from localgate.audit.store import AuditStore
from localgate.secret import Secret

where, key, part = sys.argv[1], sys.argv[2], sys.argv[3]
postgres = where.startswith("postgresql:")
kind = PostgresDatabase if postgres else SqliteDatabase
connect = (lambda: PostgresDatabase(where)) if postgres else sqlite_at(Path(where))
store = AuditStore(connect, MasterKey(Secret(key)), CipherSuite("standard"))
store.start()
for n in range(3):
    store.submit(PendingRecord("acme", "request", f"kept-{n}", {}, payload=b"x")).result(60)
original = getattr(kind, part)

def crash(db, *args):
    result = original(db, *args) if part == "open_logs" else None
    if part == "write_and_commit":
        # The rows are in (inside the transaction), the COMMIT not yet sent.
        writes = args[0]
        for sql, rows in writes:
            for row in rows:
                db.execute(sql, row)
    os.kill(os.getpid(), signal.SIGKILL)
    return result

setattr(kind, part, crash)
futures = [
    store.submit(PendingRecord(t, "request", f"lost-{t}-{n}", {}, payload=b"y"))
    for n in range(4) for t in ("acme", "globex")
]
futures[-1].result(60)
"""


@pytest.mark.parametrize("part", ["open_logs", "write_and_commit"])
def test_a_crash_between_the_parts_of_a_batch_leaves_the_log_as_before_it(
    where: str, connect: Callable[[], Database], part: str
) -> None:
    key = MasterKey.generate()
    child = subprocess.run(  # noqa: S603 - this test's own script
        [sys.executable, "-c", CRASHING_WRITER, where, key.reveal(), part],
        capture_output=True,
        timeout=INFRASTRUCTURE_TIMEOUT_S,
        check=False,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert child.returncode == -signal.SIGKILL, child.stderr.decode()[-2000:]

    suite = CipherSuite("standard")
    store = AuditStore(connect, MasterKey(Secret(key.reveal())), suite)
    store.start()
    try:
        after = store.submit(record("acme", 9)).result(timeout=INFRASTRUCTURE_TIMEOUT_S)
        reader = store.reader()
        try:
            acme, globex = rows(reader, "acme"), rows(reader, "globex")
            report = verify_tenant(reader, "acme", suite, None)
        finally:
            reader.close()
    finally:
        store.close()

    assert acme == ["kept-0", "kept-1", "kept-2", "acme-9"]
    assert globex == []
    assert after.seq == 3
    assert report.ok, report.problem


def test_a_record_appended_to_a_store_whose_writer_stopped_fails_at_once(tmp_path: Path) -> None:
    store = AuditStore(
        sqlite_at(tmp_path / "audit.db"), MasterKey(MasterKey.generate()), CipherSuite("standard")
    )
    store.start()
    store.close()

    async def scenario() -> None:
        await store.append(record("acme", 0))

    with pytest.raises(RuntimeError, match="writer is not running"):
        asyncio.run(scenario())


def test_a_one_record_batch_whose_row_collides_leaves_the_frontier_as_it_was(
    connect: Callable[[], Database],
) -> None:
    # One record: its row and its frontier go in one statement on PostgreSQL (WITH).
    store = AuditStore(connect, MasterKey(MasterKey.generate()), CipherSuite("standard"))
    store.start()
    try:
        store.submit(record("acme", 0)).result(timeout=INFRASTRUCTURE_TIMEOUT_S)
        db = connect()
        db.execute(
            "INSERT INTO audit_log (tenant, seq, kind, request_id, recorded_at, header, "
            "payload, original, leaf_hash) VALUES ('acme', 1, 'request', 'planted', 'x', ?, "
            "NULL, NULL, ?)",
            (b"{}", b"\x00" * 32),
        )
        db.close()
        with pytest.raises(Exception, match=r"(?i)unique|duplicate"):
            store.submit(record("acme", 1)).result(timeout=INFRASTRUCTURE_TIMEOUT_S)
        reader = store.reader()
        try:
            stored, head = rows(reader, "acme"), reader.frontier_size("acme")
        finally:
            reader.close()
        later = store.submit(record("globex", 0)).result(timeout=INFRASTRUCTURE_TIMEOUT_S)
    finally:
        store.close()
    assert stored == ["acme-0", "planted"]
    assert head == 1
    assert (later.tenant, later.seq, store.last_failure) == ("globex", 0, None)
