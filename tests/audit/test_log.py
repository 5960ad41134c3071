"""The audit log itself: appends, verification, and every kind of tampering named."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from localgate.audit.checkpoint import CheckpointSigner, CheckpointVerifier
from localgate.audit.checkpointing import Checkpointer
from localgate.audit.crypto import CipherSuite, MasterKey
from localgate.audit.database import SqliteDatabase, sqlite_at
from localgate.audit.records import PendingRecord, canonical, parse_header
from localgate.audit.store import AuditReader, AuditStore
from localgate.audit.verify import verify_tenant
from tests.conftest import INFRASTRUCTURE_TIMEOUT_S

SIGNER = CheckpointSigner.generate("test-log")


def record(tenant: str, number: int) -> PendingRecord:
    return PendingRecord(
        tenant=tenant,
        kind="request" if number % 2 == 0 else "answer",
        request_id=f"r{number // 2}",
        fields={"route": "generateContent", "n": number},
        payload=f'{{"text": "redacted {number}"}}'.encode(),
        prompt=f"prompt {number}".encode(),
    )


@pytest.fixture(params=["standard", "sm"])
def log(tmp_path: Path, request: pytest.FixtureRequest) -> tuple[Path, CipherSuite]:
    suite = CipherSuite(request.param)
    store = AuditStore(sqlite_at(tmp_path / "audit.db"), MasterKey(MasterKey.generate()), suite)
    store.start()
    futures = [store.submit(record(tenant, n)) for n in range(20) for tenant in ("acme", "globex")]
    receipts = [future.result(timeout=INFRASTRUCTURE_TIMEOUT_S) for future in futures]
    reader = store.reader()
    Checkpointer(reader, store.hasher, SIGNER, "test-log").run()
    reader.close()
    store.close()
    assert sorted(r.seq for r in receipts if r.tenant == "acme") == list(range(20))
    return tmp_path / "audit.db", suite


def verify(path: Path, suite: CipherSuite, tenant: str = "acme") -> str:
    reader = AuditReader(SqliteDatabase(path))
    report = verify_tenant(
        reader,
        tenant,
        suite,
        CheckpointVerifier.from_key_string(SIGNER.verifier_key()),
    )
    reader.close()
    return "OK" if report.ok else str(report.problem)


def sql(path: Path, statement: str, *params: object) -> None:
    with sqlite3.connect(path) as db:
        db.execute(statement, params)


def test_untouched_log_verifies(log: tuple[Path, CipherSuite]) -> None:
    path, suite = log

    assert verify(path, suite, "acme") == "OK"
    assert verify(path, suite, "globex") == "OK"


def test_modified_header(log: tuple[Path, CipherSuite]) -> None:
    path, suite = log
    with sqlite3.connect(path) as db:
        raw = db.execute("SELECT header FROM audit_log WHERE tenant='acme' AND seq=7").fetchone()[0]
        header = parse_header(raw)
        header["route"] = "countTokens"
        db.execute(
            "UPDATE audit_log SET header=? WHERE tenant='acme' AND seq=7", (canonical(header),)
        )

    assert verify(path, suite) == "record 7: modified: the header does not match its leaf hash"


def test_modified_payload(log: tuple[Path, CipherSuite]) -> None:
    path, suite = log
    sql(path, "UPDATE audit_log SET payload = payload || x'00' WHERE tenant='acme' AND seq=3")

    assert verify(path, suite) == "record 3: modified: the payload ciphertext was changed"


def test_deleted_record(log: tuple[Path, CipherSuite]) -> None:
    path, suite = log
    sql(path, "DELETE FROM audit_log WHERE tenant='acme' AND seq=5")

    assert verify(path, suite) == "record 5: deleted: records 5..5 are missing"


def test_reordered_records(log: tuple[Path, CipherSuite]) -> None:
    path, suite = log
    with sqlite3.connect(path) as db:
        rows = {
            seq: (header, payload, leaf)
            for seq, header, payload, leaf in db.execute(
                "SELECT seq, header, payload, leaf_hash FROM audit_log "
                "WHERE tenant='acme' AND seq IN (2, 4)"
            )
        }
        for seq, other in ((2, 4), (4, 2)):
            db.execute(
                "UPDATE audit_log SET header=?, payload=?, leaf_hash=? "
                "WHERE tenant='acme' AND seq=?",
                (*rows[other], seq),
            )

    assert verify(path, suite).startswith(
        "record 2: reordered: the record at this position is record 4"
    )


def test_inserted_record_at_the_end(log: tuple[Path, CipherSuite]) -> None:
    path, suite = log
    forged = canonical(
        {"tenant": "acme", "seq": 20, "kind": "request", "request_id": "forged", "time": "now"}
    )

    leaf = suite.tree_hasher().hash_leaf(forged)
    sql(
        path,
        "INSERT INTO audit_log (tenant, seq, kind, request_id, recorded_at, header, leaf_hash) "
        "VALUES ('acme', 20, 'request', 'forged', 'now', ?, ?)",
        forged,
        leaf,
    )

    assert (
        verify(path, suite)
        == "record 20: inserted: the gateway wrote 20 records but the log holds 21"
    )


def test_truncated_since_the_last_checkpoint(log: tuple[Path, CipherSuite]) -> None:
    path, suite = log
    sql(path, "DELETE FROM audit_log WHERE tenant='acme' AND seq >= 15")
    sql(path, "UPDATE audit_frontier SET size = 15 WHERE tenant='acme'")

    assert (
        verify(path, suite)
        == "record 15: truncated: a checkpoint covers 20 records but the log has 15"
    )


def test_consistently_rewritten_log_fails_against_the_signed_checkpoint(
    log: tuple[Path, CipherSuite],
) -> None:
    path, suite = log

    hasher = suite.tree_hasher()
    with sqlite3.connect(path) as db:
        raw = db.execute("SELECT header FROM audit_log WHERE tenant='acme' AND seq=1").fetchone()[0]
        header = parse_header(raw)
        header["status"] = 200
        rewritten = canonical(header)
        db.execute(
            "UPDATE audit_log SET header=?, leaf_hash=? WHERE tenant='acme' AND seq=1",
            (rewritten, hasher.hash_leaf(rewritten)),
        )

    assert verify(path, suite).startswith("the log: rewritten: the first 20 records do not match")


def test_checkpoint_signed_by_another_key_is_refused(log: tuple[Path, CipherSuite]) -> None:
    path, suite = log
    intruder = CheckpointSigner.generate("test-log")
    reader = AuditReader(SqliteDatabase(path))

    report = verify_tenant(
        reader,
        "acme",
        suite,
        CheckpointVerifier.from_key_string(intruder.verifier_key()),
    )
    reader.close()

    assert report.problem is not None
    assert report.problem.how == "unsigned"


def test_a_log_keeps_its_suite(tmp_path: Path) -> None:
    master = MasterKey(MasterKey.generate())
    AuditStore(sqlite_at(tmp_path / "a.db"), master, CipherSuite("standard")).close()

    with pytest.raises(ValueError, match="uses the 'standard' suite"):
        AuditStore(sqlite_at(tmp_path / "a.db"), master, CipherSuite("sm"))


def test_kind_and_request_id_columns_are_checked_against_the_header(
    log: tuple[Path, CipherSuite],
) -> None:
    path, suite = log
    sql(path, "UPDATE audit_log SET request_id = 'bogus' WHERE tenant='acme' AND seq=0")

    assert verify(path, suite) == (
        "record 0: modified: the kind or request_id column differs from the header"
    )


def test_the_checkpointer_refuses_to_sign_a_rewritten_history(tmp_path: Path) -> None:
    from localgate.audit.merkle import Frontier, TreeHasher

    store = AuditStore(
        sqlite_at(tmp_path / "audit.db"), MasterKey(MasterKey.generate()), CipherSuite("standard")
    )
    store.start()
    for number in range(6):
        store.submit(record("acme", number)).result(timeout=INFRASTRUCTURE_TIMEOUT_S)
    reader = store.reader()
    checkpointer = Checkpointer(reader, store.hasher, SIGNER, "test-log")
    assert checkpointer.run() == [("acme", 6)]

    # Someone with write access rewrites record 2, recomputes every hash consistently
    # and removes the checkpoints the database held.
    hasher = TreeHasher("sha256")
    with sqlite3.connect(tmp_path / "audit.db") as db:
        raw = db.execute("SELECT header FROM audit_log WHERE seq=2").fetchone()[0]
        header = parse_header(raw)
        header["n"] = 999
        forged = canonical(header)
        db.execute(
            "UPDATE audit_log SET header=?, leaf_hash=? WHERE seq=2",
            (forged, hasher.hash_leaf(forged)),
        )
        leaves = [row[0] for row in db.execute("SELECT leaf_hash FROM audit_log ORDER BY seq")]
        frontier = Frontier(hasher)
        for leaf in leaves:
            frontier.append(leaf)
        db.execute("UPDATE audit_frontier SET state=? WHERE tenant='acme'", (frontier.to_bytes(),))
        db.execute("DELETE FROM audit_checkpoints")
    store.submit(record("acme", 6)).result(timeout=INFRASTRUCTURE_TIMEOUT_S)

    assert checkpointer.run() == []
    reader.close()
    store.close()


def test_schema_is_managed_by_migrations_and_adopts_older_logs(tmp_path: Path) -> None:
    path = tmp_path / "audit.db"
    with sqlite3.connect(path) as db:  # a log created before migrations existed
        db.execute("CREATE TABLE audit_meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)")
        db.execute("INSERT INTO audit_meta VALUES ('suite', 'standard')")
    master = MasterKey(MasterKey.generate())

    AuditStore(sqlite_at(path), master, CipherSuite("standard")).close()
    AuditStore(sqlite_at(path), master, CipherSuite("standard")).close()

    with sqlite3.connect(path) as db:
        assert db.execute("SELECT version_num FROM alembic_version").fetchall() == [("0002",)]
        assert db.execute("SELECT value FROM audit_meta").fetchall() == [("standard",)]
