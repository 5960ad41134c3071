"""/readyz and the audit trail: not ready while a request's records could not be written.

The store's writability is checked on the writer thread and cached (injected clock); a
held completion record and a stopped writer are seen at once.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path

import pytest

from localgate.audit.crypto import CipherSuite, MasterKey
from localgate.audit.database import PostgresDatabase, sqlite_at
from localgate.audit.readiness import AuditReadiness
from localgate.audit.records import PendingRecord
from localgate.audit.spool import Spool
from localgate.audit.stage import TrailAudit
from localgate.audit.store import AuditStore
from localgate.audit.trail import AuditStartupError, AuditTrail
from localgate.config import Settings
from localgate.secret import Secret
from localgate.testing import FakeGemini
from tests.conftest import run_gateway, wait_until

BODY = {"contents": [{"role": "user", "parts": [{"text": "Hello"}]}]}


class Clock:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def store(tmp_path: Path) -> Iterator[AuditStore]:
    opened = AuditStore(
        sqlite_at(tmp_path / "audit.db"), MasterKey(MasterKey.generate()), CipherSuite("standard")
    )
    opened.start()
    yield opened
    opened.close()


def readiness_of(store: AuditStore, tmp_path: Path, clock: Clock) -> AuditReadiness:
    stage = TrailAudit(store, Spool(tmp_path / "audit.spool", MasterKey(MasterKey.generate())))
    return AuditReadiness(store, stage, interval_s=5.0, clock=clock)


def record(request_id: str) -> PendingRecord:
    return PendingRecord("acme", "request", request_id, {}, payload=b"x")


def test_the_write_probe_runs_at_most_once_per_interval(
    store: AuditStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock()
    readiness = readiness_of(store, tmp_path, clock)
    probes: list[bool] = []
    real_probe = store.probe

    def counted(*, commit: bool = False) -> Future[None]:
        probes.append(commit)
        return real_probe(commit=commit)

    monkeypatch.setattr(store, "probe", counted)

    async def scenario() -> list[str | None]:
        answers = [await readiness.problem() for _ in range(20)]
        clock.now += 4.9
        answers.append(await readiness.problem())
        clock.now += 0.1
        answers.append(await readiness.problem())
        return answers

    assert asyncio.run(scenario()) == [None] * 22
    assert probes == [False, False]  # rolled back: nothing written by a healthy probe


def test_a_read_only_audit_database_is_not_ready(store: AuditStore, tmp_path: Path) -> None:
    clock = Clock()
    readiness = readiness_of(store, tmp_path, clock)
    assert asyncio.run(readiness.problem()) is None
    # As for a file the gateway may no longer write (permissions, a read-only mount).
    store._db.execute("PRAGMA query_only=ON")
    clock.now += 5

    problem = asyncio.run(readiness.problem())

    assert problem is not None
    assert "the audit database cannot be written" in problem
    assert "readonly" in problem


def test_a_stopped_writer_is_not_ready_and_refuses_at_once(
    store: AuditStore, tmp_path: Path
) -> None:
    readiness = readiness_of(store, tmp_path, Clock())
    store._queue.put(None)  # the writer thread ends as if it had died
    wait_until(lambda: not store.writer_alive)

    problem = asyncio.run(readiness.problem())
    refused = store.submit(record("r1"))

    assert problem == "the audit writer thread has stopped; restart the gateway"
    with pytest.raises(RuntimeError, match="not running"):
        refused.result(timeout=5)


def test_a_failed_batch_is_not_ready_until_a_write_succeeds_again(
    store: AuditStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock()
    readiness = readiness_of(store, tmp_path, clock)
    full = True
    real_commit = store._db.commit

    def commit() -> None:
        if full:
            raise sqlite3.OperationalError("database or disk is full")
        real_commit()

    monkeypatch.setattr(store._db, "commit", commit)
    assert asyncio.run(readiness.problem()) is None  # checked and cached: all well
    with pytest.raises(sqlite3.OperationalError):
        store.submit(record("r1")).result(timeout=10)

    # Seen at once, not when the cached check expires.
    at_once = asyncio.run(readiness.problem())
    clock.now += 5

    # A rolled-back probe would pass on a full disk: after a failed batch it commits.
    while_full = asyncio.run(readiness.problem())
    full = False
    clock.now += 5
    after = asyncio.run(readiness.problem())
    written = store.submit(record("r2")).result(timeout=10)

    assert at_once == "the last audit write failed (OperationalError: database or disk is full)"
    assert while_full == (
        "the audit database cannot be written (OperationalError: database or disk is full)"
    )
    assert after is None
    assert written.seq == 0


def test_a_read_only_postgres_session_is_not_ready(dsn: str, tmp_path: Path) -> None:
    master = MasterKey(MasterKey.generate())
    writable = AuditStore(lambda: PostgresDatabase(dsn), master, CipherSuite("standard"))
    writable.close()
    # As on a hot standby, or after a failover left the gateway on a read-only server.
    read_only = dsn + "%20-cdefault_transaction_read_only%3Don"
    store = AuditStore(lambda: PostgresDatabase(read_only), master, CipherSuite("standard"))
    store.start()
    try:
        problem = asyncio.run(readiness_of(store, tmp_path, Clock()).problem())
    finally:
        store.close()

    assert problem is not None
    assert "the audit database cannot be written" in problem
    assert "read-only transaction" in problem


def test_a_master_key_that_cannot_unwrap_the_data_keys_stops_the_trail_from_opening(
    tmp_path: Path, upstream: FakeGemini
) -> None:
    data = tmp_path / "data"
    with run_gateway(data, upstream.base_url) as gateway:
        assert gateway.generate(BODY).status_code == 200  # data keys, wrapped by key A
        old_id = MasterKey(Secret((data / "audit-master.key").read_text().strip())).key_id
    # The replica starts with another master key (a wrong secret, a mixed-up file): it
    # used to start and answer 503 to everything; now it does not start at all
    # (`localgate serve` says so in one line: tests/audit/test_replica_keys.py).
    new_key = MasterKey.generate()
    (data / "audit-master.key").write_text(new_key.reveal() + "\n")
    new_id = MasterKey(new_key).key_id

    with pytest.raises(AuditStartupError) as refused:
        AuditTrail.open(Settings(data_dir=data))

    (problem,) = refused.value.problems
    assert f"master key (id {new_id}) is not the audit store's (id {old_id})" in problem
    # A store from before fingerprints were remembered: the data keys tell.
    with sqlite3.connect(data / "audit.db") as db:
        db.execute("DELETE FROM audit_meta WHERE name = 'master_key_id'")
    with pytest.raises(AuditStartupError) as refused:
        AuditTrail.open(Settings(data_dir=data))
    (problem,) = refused.value.problems
    assert f"the audit master key (id {new_id}) cannot unwrap" in problem
    assert f"wrapped by master key {old_id}" in problem
