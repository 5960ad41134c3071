"""The SQLite writer keeps each tenant's frontier from its last commit instead of reading
it back, while ``PRAGMA data_version`` shows that no other connection has committed since.

Each test here writes between two of a store's batches by another route (a second store
on the same file, another process, a plain ``sqlite3`` connection by hand) and checks that
the store sees it exactly as it would have by reading the frontier in every transaction.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from localgate.audit.crypto import CipherSuite, MasterKey
from localgate.audit.database import SqliteDatabase, sqlite_at
from localgate.audit.records import PendingRecord
from localgate.audit.store import AuditReader, AuditStore, Receipt
from localgate.audit.verify import verify_tenant
from localgate.secret import Secret
from tests.conftest import INFRASTRUCTURE_TIMEOUT_S

SUITE = CipherSuite("standard")


def record(tenant: str, name: str) -> PendingRecord:
    return PendingRecord(tenant, "request", name, {"n": name}, payload=name.encode())


def write(store: AuditStore, tenant: str, name: str) -> Receipt:
    return store.submit(record(tenant, name)).result(timeout=INFRASTRUCTURE_TIMEOUT_S)


@pytest.fixture
def key() -> Secret:
    return MasterKey.generate()


@pytest.fixture
def store(tmp_path: Path, key: Secret) -> Iterator[AuditStore]:
    opened = AuditStore(sqlite_at(tmp_path / "audit.db"), MasterKey(key), SUITE)
    opened.start()
    yield opened
    opened.close()


def stored(path: Path, tenant: str) -> tuple[list[tuple[int, str]], bool]:
    """(seq, request id) of a tenant's rows, and whether its log verifies."""
    reader = AuditReader(SqliteDatabase(path))
    try:
        rows = [(r.seq, r.request_id) for r in reader.records(tenant)]
        return rows, verify_tenant(reader, tenant, SUITE, None).ok
    finally:
        reader.close()


def test_data_version_moves_for_other_connections_only(tmp_path: Path) -> None:
    """What the shortcut relies on, on this SQLite: read after BEGIN IMMEDIATE, the
    version is unchanged by this connection's commits and changed by another's."""
    path = tmp_path / "audit.db"
    with sqlite3.connect(path) as setup:
        setup.execute("CREATE TABLE t (x)")
    mine = sqlite3.connect(path, isolation_level=None)
    other = sqlite3.connect(path, isolation_level=None)
    try:

        def version() -> int:
            mine.execute("BEGIN IMMEDIATE")
            value = int(mine.execute("PRAGMA data_version").fetchone()[0])
            mine.execute("INSERT INTO t VALUES (1)")
            mine.execute("COMMIT")
            return value

        first = version()
        assert version() == first  # only this connection committed in between
        other.execute("INSERT INTO t VALUES (2)")
        changed = version()
        assert changed != first
        assert version() == changed
    finally:
        mine.close()
        other.close()


def test_two_stores_on_one_file_taking_turns_write_one_chain(
    tmp_path: Path, store: AuditStore, key: Secret
) -> None:
    # Two writers of one file (as two worker processes are): each commit of one comes
    # between two of the other's, so neither may use its own copy of the frontier.
    second = AuditStore(sqlite_at(tmp_path / "audit.db"), MasterKey(key), SUITE)
    second.start()
    try:
        receipts = [
            write(writer, "acme", f"{name}-{n}")
            for n in range(5)
            for writer, name in ((store, "first"), (second, "second"))
        ]
        receipts.append(write(store, "acme", "first-again"))
        receipts.append(write(store, "acme", "first-and-again"))
    finally:
        second.close()
    assert [r.seq for r in receipts] == list(range(12))
    rows, ok = stored(tmp_path / "audit.db", "acme")
    assert ok
    assert [seq for seq, _ in rows] == list(range(12))


APPENDER = """
import sys
from pathlib import Path
from localgate.audit.crypto import CipherSuite, MasterKey
from localgate.audit.database import sqlite_at
from localgate.audit.records import PendingRecord
from localgate.audit.store import AuditStore
from localgate.secret import Secret

store = AuditStore(sqlite_at(Path(sys.argv[1])), MasterKey(Secret(sys.argv[2])),
                   CipherSuite("standard"))
store.start()
for n in range(3):
    store.submit(PendingRecord("acme", "request", f"other-{n}", {}, payload=b"x")).result(60)
store.close()
"""


def test_records_another_process_appended_between_two_batches_are_seen(
    tmp_path: Path, store: AuditStore, key: Secret
) -> None:
    before = [write(store, "acme", f"mine-{n}") for n in range(2)]
    child = subprocess.run(  # noqa: S603 - this test's own script
        [sys.executable, "-c", APPENDER, str(tmp_path / "audit.db"), key.reveal()],
        capture_output=True,
        timeout=INFRASTRUCTURE_TIMEOUT_S,
        check=False,
    )
    assert child.returncode == 0, child.stderr.decode()
    after = write(store, "acme", "mine-2")
    assert [r.seq for r in before] == [0, 1]
    assert after.seq == 5
    rows, ok = stored(tmp_path / "audit.db", "acme")
    assert ok
    assert [name for _, name in rows] == [
        "mine-0",
        "mine-1",
        "other-0",
        "other-1",
        "other-2",
        "mine-2",
    ]


def test_a_frontier_deleted_by_hand_between_two_batches_makes_the_next_fail(
    tmp_path: Path, store: AuditStore
) -> None:
    for n in range(3):
        write(store, "acme", f"r{n}")
    with sqlite3.connect(tmp_path / "audit.db") as db:
        db.execute("DELETE FROM audit_frontier WHERE tenant='acme'")
    # Read back, the frontier says the log is empty: its position 0 is taken, loudly.
    with pytest.raises(sqlite3.IntegrityError):
        write(store, "acme", "r3")
    assert store.last_failure is not None


def test_a_row_inserted_by_hand_between_two_batches_makes_the_next_fail(
    tmp_path: Path, store: AuditStore
) -> None:
    for n in range(3):
        write(store, "acme", f"r{n}")
    with sqlite3.connect(tmp_path / "audit.db") as db:
        db.execute(
            "INSERT INTO audit_log (tenant, seq, kind, request_id, recorded_at, header, "
            "payload, original, leaf_hash) VALUES ('acme', 3, 'request', 'planted', 'x', ?, "
            "NULL, NULL, ?)",
            (b"{}", b"\x00" * 32),
        )
    with pytest.raises(sqlite3.IntegrityError):
        write(store, "acme", "r3")
    rows, _ = stored(tmp_path / "audit.db", "acme")
    assert [name for _, name in rows] == ["r0", "r1", "r2", "planted"]


def test_a_failed_batch_leaves_no_uncommitted_leaf_in_the_next(
    tmp_path: Path, store: AuditStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(store, "acme", "r0")
    write(store, "globex", "g0")
    db = store._db
    original = db.write_and_commit
    failures = iter([RuntimeError("the disk went away")])

    def failing_once(writes: object) -> None:
        failure = next(failures, None)
        if failure is not None:
            raise failure  # after the frontiers took the batch's leaves in memory
        original(writes)  # type: ignore[arg-type]

    monkeypatch.setattr(db, "write_and_commit", failing_once)
    with pytest.raises(RuntimeError):
        write(store, "acme", "lost")
    assert write(store, "acme", "r1").seq == 1
    assert write(store, "globex", "g1").seq == 1
    for tenant, names in (("acme", ["r0", "r1"]), ("globex", ["g0", "g1"])):
        rows, ok = stored(tmp_path / "audit.db", tenant)
        assert ok, tenant
        assert [name for _, name in rows] == names
