"""A database administrator tampering with the audit trail, and what catches each attack.

Every test plays the DBA: it opens the database directly (SQLite file, or PostgreSQL
with the append-only triggers switched off, as a superuser can), edits rows, and then
runs ``localgate audit verify`` (and ``purge``) as an operator would, through the CLI.
Each runs on SQLite and on PostgreSQL. docs/audit.md has the threat table these
tests back.

PostgreSQL: LOCALGATE_TEST_POSTGRES_DSN (default: the local server, database ``test``);
skipped when none answers, except under CI=true.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from localgate.audit.anchor import TenantList, read_anchor
from localgate.audit.checkpoint import Checkpoint, CheckpointSigner
from localgate.audit.checkpointing import Checkpointer, origin_of
from localgate.audit.crypto import CipherSuite
from localgate.audit.merkle import Frontier
from localgate.audit.records import PendingRecord, canonical, parse_header
from localgate.audit.store import AuditReader, AuditStore
from localgate.audit.trail import database, key_problems, master_key, signer
from localgate.audit.verify import verify_all
from localgate.cli import main
from localgate.config import Settings, load_settings
from tests.audit.conftest import postgres_schema

SIGNED = 10  # records per tenant under the signed checkpoint
TAIL = 4  # records per tenant written after it (not yet signed)
LATER = "2031-06-01T00:00:00"  # past the default metadata retention of every record


@dataclass
class Trail:
    """A two-tenant audit trail, its configuration, and the DBA's raw access to it."""

    backend: str
    settings: Settings
    config: Path
    anchor: Path
    dsn: str | None

    def store(self) -> AuditStore:
        suite = CipherSuite("standard")
        return AuditStore(database(self.settings), master_key(self.settings, create=True), suite)

    def signer(self) -> CheckpointSigner:
        key = signer(self.settings, create=True)
        assert key is not None
        return key

    def checkpoint(self) -> list[tuple[str, int]]:
        reader = AuditReader(database(self.settings)())
        made = Checkpointer(
            reader, CipherSuite("standard").tree_hasher(), self.signer(), "localgate", self.anchor
        ).run()
        reader.close()
        return made

    def append(self, tenant: str, numbers: range) -> None:
        store = self.store()
        store.start()
        for number in numbers:
            store.submit(
                PendingRecord(
                    tenant,
                    "request" if number % 2 == 0 else "answer",
                    f"{tenant}-{number // 2}",
                    {"n": number},
                    payload=f"payload {number}".encode(),
                )
            ).result(timeout=30)
        store.close()

    def dba(self, statement: str, *params: object) -> list[tuple[Any, ...]]:
        """Run one statement as the DBA: straight at the database, past any trigger."""
        if self.dsn is None:
            with sqlite3.connect(self.settings.audit_db_path) as db:
                return db.execute(statement, params).fetchall()
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True) as db:
            db.execute("SET session_replication_role = replica")  # skips the triggers
            cursor = db.execute(statement.replace("?", "%s"), params)
            return cursor.fetchall() if cursor.description else []

    def cli(self, *args: str) -> Result:
        return CliRunner().invoke(main, ["audit", "--config", str(self.config), *args])

    def rewrite(self, tenant: str, seq: int, **fields: object) -> None:
        """Change a header consistently: new leaf hash, recorded_at, and a recomputed head."""
        raw = self.dba("SELECT header FROM audit_log WHERE tenant=? AND seq=?", tenant, seq)[0][0]
        header = {**parse_header(bytes(raw)), **fields}
        forged = canonical(header)
        leaf = CipherSuite("standard").tree_hasher().hash_leaf(forged)
        self.dba(
            "UPDATE audit_log SET header=?, leaf_hash=?, recorded_at=? WHERE tenant=? AND seq=?",
            forged,
            leaf,
            header["time"],
            tenant,
            seq,
        )
        self.recompute_head(tenant)

    def recompute_head(self, tenant: str) -> None:
        """What a careful DBA does after editing rows: make the writer's head match them."""
        frontier = Frontier(CipherSuite("standard").tree_hasher())
        for (leaf,) in self.dba(
            "SELECT leaf_hash FROM audit_log WHERE tenant=? ORDER BY seq", tenant
        ):
            frontier.append(bytes(leaf))
        self.dba(
            "UPDATE audit_frontier SET size=?, state=? WHERE tenant=?",
            frontier.size,
            frontier.to_bytes(),
            tenant,
        )


@pytest.fixture(params=["sqlite", "postgres"])
def trail(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Trail]:
    """acme and globex: 10 records each under a signed, exported checkpoint, then 4 more."""
    for name in ("LOCALGATE_DATA_DIR", "LOCALGATE_CONFIG", "LOCALGATE_AUDIT_MASTER_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("LOCALGATE_AUDIT_POSTGRES_DSN", raising=False)
    anchor = tmp_path / "worm"
    with _database(request.param) as dsn:
        config = tmp_path / "localgate.yaml"
        store = f"  store: postgres\n  postgres_dsn: '{dsn}'\n" if dsn else ""
        config.write_text(
            f"data_dir: {tmp_path / 'data'}\naudit:\n  log_name: localgate\n{store}"
            f"  checkpoint_export_dir: {anchor}\n"
        )
        settings, _ = load_settings(config, {})
        built = Trail(request.param, settings, config, anchor, dsn)
        for tenant in ("acme", "globex"):
            built.append(tenant, range(SIGNED))
        assert sorted(built.checkpoint()) == [("acme", SIGNED), ("globex", SIGNED)]
        for tenant in ("acme", "globex"):
            built.append(tenant, range(SIGNED, SIGNED + TAIL))
        yield built


@contextlib.contextmanager
def _database(backend: str) -> Iterator[str | None]:
    """None for SQLite; for PostgreSQL a DSN into a schema of this test's own."""
    if backend == "sqlite":
        yield None
        return
    with postgres_schema() as dsn:
        yield dsn


def failed(result: Result, line: str) -> None:
    """The command exited 1 and printed ``line``."""
    assert result.exit_code == 1, result.output
    assert line in result.output, result.output


def ok(result: Result) -> None:
    assert result.exit_code == 0, result.output
    assert "FAILED" not in result.output, result.output


def headers_left(trail: Trail, tenant: str) -> int:
    rows = trail.dba(
        "SELECT COUNT(*) FROM audit_log WHERE tenant=? AND header IS NOT NULL AND kind <> 'purge'",
        tenant,
    )
    return int(rows[0][0])


def test_an_untouched_trail_verifies_against_its_anchor(trail: Trail) -> None:
    result = trail.cli("verify")

    ok(result)
    assert f"acme: OK ({SIGNED + TAIL} records, 1 checkpoints)" in result.output
    assert f"globex: OK ({SIGNED + TAIL} records, 1 checkpoints)" in result.output


def test_verify_lists_every_request_without_a_completion_record(trail: Trail) -> None:
    # A request record with no answer after it: in flight, or cut off by a crash.
    trail.append("acme", range(SIGNED + TAIL, SIGNED + TAIL + 5, 2))

    result = trail.cli("verify")

    ok(result)
    assert "3 request(s) without a completion record:" in result.output
    for number in (7, 8, 9):
        assert f"    acme-{number}\n" in result.output


# -- the writer's head: its size and its hashes ---------------------------------------------


def test_rows_deleted_after_the_last_checkpoint_and_the_size_lowered(trail: Trail) -> None:
    trail.dba("DELETE FROM audit_log WHERE tenant='acme' AND seq >= 12")
    trail.dba("UPDATE audit_frontier SET size = 12 WHERE tenant='acme'")

    failed(
        trail.cli("verify", "--tenant", "acme"),
        "acme: FAILED: record 12: deleted: the gateway wrote 14 records but the log holds 12",
    )


def test_a_forged_row_appended_and_the_size_raised(trail: Trail) -> None:
    time = datetime.now(UTC).isoformat(timespec="microseconds")
    forged = canonical(
        {"tenant": "acme", "seq": 14, "kind": "request", "request_id": "forged", "time": time}
    )
    leaf = CipherSuite("standard").tree_hasher().hash_leaf(forged)
    trail.dba(
        "INSERT INTO audit_log (tenant, seq, kind, request_id, recorded_at, header, leaf_hash)"
        " VALUES ('acme', 14, 'request', 'forged', ?, ?, ?)",
        time,
        forged,
        leaf,
    )
    trail.dba("UPDATE audit_frontier SET size = 15 WHERE tenant='acme'")

    failed(
        trail.cli("verify"),
        "acme: FAILED: record 14: inserted: the gateway wrote 14 records but the log holds 15",
    )


def test_an_unsigned_record_rewritten_without_its_head(trail: Trail) -> None:
    raw = trail.dba("SELECT header FROM audit_log WHERE tenant='acme' AND seq=12")[0][0]
    forged = canonical({**parse_header(bytes(raw)), "n": 1200})
    leaf = CipherSuite("standard").tree_hasher().hash_leaf(forged)
    trail.dba(
        "UPDATE audit_log SET header=?, leaf_hash=? WHERE tenant='acme' AND seq=12", forged, leaf
    )

    failed(
        trail.cli("verify"),
        "acme: FAILED: the log: rewritten: the writer's stored head of 14 records is not the "
        "tree of the records",
    )


def test_the_installed_command_exits_1_and_names_the_attack(trail: Trail) -> None:
    trail.dba("DELETE FROM audit_log WHERE tenant='acme' AND seq >= 12")
    trail.dba("UPDATE audit_frontier SET size = 12 WHERE tenant='acme'")
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}

    done = subprocess.run(  # noqa: S603 - this interpreter running localgate itself
        [sys.executable, "-m", "localgate", "audit", "--config", str(trail.config), "verify"],
        capture_output=True,
        text=True,
        timeout=120,
        env=environment,
        check=False,
    )

    assert done.returncode == 1, done.stdout + done.stderr
    assert "acme: FAILED: record 12: deleted: the gateway wrote 14 records" in done.stdout
    assert "globex: OK (14 records, 1 checkpoints)" in done.stdout


def test_the_size_column_alone_edited(trail: Trail) -> None:
    trail.dba("UPDATE audit_frontier SET size = 99 WHERE tenant='globex'")

    failed(
        trail.cli("verify"),
        "globex: FAILED: the log: modified: audit_frontier.size says 99 but the writer's "
        "stored head counts 14",
    )


# -- times: retention decides from verified, signed times only -----------------------------


def test_recorded_at_edited_is_caught_and_purge_erases_nothing(trail: Trail) -> None:
    trail.dba("UPDATE audit_log SET recorded_at = '2001-01-01T00:00:00+00:00' WHERE tenant='acme'")

    purged = trail.cli("purge")
    verified = trail.cli("verify")

    assert purged.exit_code == 0, purged.output
    assert "nothing past the retention period" in purged.output
    assert headers_left(trail, "acme") == SIGNED + TAIL
    failed(
        verified,
        "acme: FAILED: record 0: modified: the recorded_at column differs from the header's time",
    )


def test_purge_refuses_a_tenant_whose_log_does_not_verify(trail: Trail) -> None:
    trail.dba("UPDATE audit_log SET recorded_at = '2001-01-01T00:00:00+00:00' WHERE tenant='acme'")

    purged = trail.cli("purge", "--now", LATER)

    failed(
        purged,
        "acme: NOT PURGED: its log does not verify (record 0: modified: the recorded_at column "
        "differs from the header's time); run `localgate audit verify`",
    )
    assert "globex: metadata of records 0..9 purged" in purged.output
    assert headers_left(trail, "acme") == SIGNED + TAIL
    assert headers_left(trail, "globex") == TAIL


def test_purge_stops_at_the_newest_checkpoint_signed_before_the_cutoff(trail: Trail) -> None:
    purged = trail.cli("purge", "--now", LATER)

    assert purged.exit_code == 0, purged.output
    # The 4 records after the checkpoint are old by their headers, but no signature
    # vouches that they existed before the cutoff: they stay.
    assert "acme: metadata of records 0..9 purged" in purged.output
    assert headers_left(trail, "acme") == TAIL
    ok(trail.cli("verify"))


def test_a_back_dated_record_that_got_signed_is_caught_and_not_purged(trail: Trail) -> None:
    # The DBA back-dates the unsigned records consistently (leaf, column, head) before
    # the gateway signs them: the tree cannot tell, since the forgery is what got signed.
    for seq in range(SIGNED, SIGNED + TAIL):
        trail.rewrite("acme", seq, time="2001-01-01T00:00:00.000000+00:00")
    assert trail.checkpoint() == [("acme", SIGNED + TAIL), ("globex", SIGNED + TAIL)]

    verified = trail.cli("verify")
    purged = trail.cli("purge")

    # But record 10 follows the checkpoint of 10 records, signed minutes ago.
    failed(
        verified,
        "acme: FAILED: record 10: modified: its time 2001-01-01T00:00:00.000000+00:00 is "
        "before the checkpoint of 10 records signed at",
    )

    # Records 10-13 look 25 years old, but the checkpoint vouching for them was signed now.
    assert purged.exit_code == 0, purged.output
    assert "nothing past the retention period" in purged.output
    assert headers_left(trail, "acme") == SIGNED + TAIL


def test_a_back_dated_signed_record_is_refused_by_purge(trail: Trail) -> None:
    trail.rewrite("acme", 3, time="2001-01-01T00:00:00.000000+00:00")

    purged = trail.cli("purge", "--now", LATER)

    failed(purged, "acme: NOT PURGED: its log does not verify (the log: rewritten: the first 10")
    assert headers_left(trail, "acme") == SIGNED + TAIL


# -- a whole tenant, and the checkpoints: the tenant list and the anchor ---------------------


def test_a_whole_tenant_deleted_is_named_by_the_signed_tenant_list(trail: Trail) -> None:
    for table in ("audit_log", "audit_frontier", "audit_checkpoints"):
        trail.dba(f"DELETE FROM {table} WHERE tenant='globex'")  # noqa: S608 - fixed names
    shutil.rmtree(trail.anchor)
    reader = AuditReader(database(trail.settings)())
    found = verify_all(reader, CipherSuite("standard"), trail.signer().verifier())
    reader.close()

    result = trail.cli("verify", "--checkpoints", str(trail.anchor.with_name("elsewhere")))
    without_anchor = CliRunner().invoke(
        main, ["audit", "--config", str(_without_anchor(trail)), "verify"]
    )

    assert [report.tenant for report in found.reports] == ["acme", "globex"]
    assert found.reports[1].problem is not None
    assert "the whole log is missing, but the tenant list signed at" in str(
        found.reports[1].problem
    )
    failed(result, "anchor: FAILED: the checkpoint folder")
    failed(
        without_anchor,
        "globex: FAILED: the log: deleted: the whole log is missing, but the tenant list signed at",
    )
    assert "acme: OK (14 records, 1 checkpoints)" in without_anchor.output


def test_a_whole_tenant_and_every_tenant_list_deleted(trail: Trail) -> None:
    for table in ("audit_log", "audit_frontier", "audit_checkpoints"):
        trail.dba(f"DELETE FROM {table} WHERE tenant='globex'")  # noqa: S608 - fixed names
    trail.dba("DELETE FROM audit_tenant_lists")

    inside = CliRunner().invoke(main, ["audit", "--config", str(_without_anchor(trail)), "verify"])
    anchored = trail.cli("verify")

    # acme's own signatures show that a signed list existed.
    failed(
        inside,
        "acme: FAILED: the log: deleted: the log has signed checkpoints but is not in the "
        "newest signed tenant list (the database holds none)",
    )
    failed(anchored, "globex: FAILED: the log: deleted: the whole log is missing, but a checkpoint")


def test_the_signer_names_a_deleted_tenant_again_from_the_anchor(trail: Trail) -> None:
    for table in ("audit_log", "audit_frontier", "audit_checkpoints"):
        trail.dba(f"DELETE FROM {table} WHERE tenant='globex'")  # noqa: S608 - fixed names
    trail.dba("DELETE FROM audit_tenant_lists")

    trail.checkpoint()  # a restarted signer: it remembers nothing, but reads the anchor
    inside = CliRunner().invoke(main, ["audit", "--config", str(_without_anchor(trail)), "verify"])

    failed(
        inside,
        "globex: FAILED: the log: deleted: the whole log is missing, but the tenant list signed at",
    )


def test_purge_refuses_with_a_forged_file_in_the_anchor(trail: Trail) -> None:
    intruder = CheckpointSigner.generate("localgate")
    root = Frontier(CipherSuite("standard").tree_hasher()).root()
    forged = intruder.sign(Checkpoint(origin_of("localgate", "acme"), 0, root, datetime.now(UTC)))
    (trail.anchor / "acme" / "000000000000.note").write_text(forged)

    purged = trail.cli("purge", "--now", LATER)

    failed(
        purged,
        "acme: NOT PURGED: its log does not verify (the log: unsigned: the anchor's "
        "acme/000000000000.note does not verify",
    )
    assert headers_left(trail, "acme") == SIGNED + TAIL


def test_every_checkpoint_of_a_tenant_deleted_is_caught_by_the_configured_anchor(
    trail: Trail,
) -> None:
    trail.dba("DELETE FROM audit_checkpoints WHERE tenant='acme'")

    failed(
        trail.cli("verify"),  # no --checkpoints: the export directory of the configuration
        "acme: FAILED: the log: deleted: the anchor's checkpoint of 10 records signed at",
    )


def test_checkpoints_deleted_and_history_rewritten_is_caught_by_the_anchor(trail: Trail) -> None:
    trail.dba("DELETE FROM audit_checkpoints WHERE tenant='acme'")
    trail.rewrite("acme", 2, n=200)

    failed(
        trail.cli("verify"),
        "acme: FAILED: the log: rewritten: the first 10 records do not match the checkpoint",
    )


# -- other routes ---------------------------------------------------------------------------


def test_a_checkpoint_replaced_by_an_older_valid_one(trail: Trail) -> None:
    assert trail.checkpoint() == [("acme", 14), ("globex", 14)]
    older = trail.dba("SELECT note FROM audit_checkpoints WHERE tenant='acme' AND size=10")[0][0]
    trail.dba("UPDATE audit_checkpoints SET note=? WHERE tenant='acme' AND size=14", older)

    failed(
        trail.cli("verify"),
        "acme: FAILED: the log: modified: the checkpoint row of 14 records holds the "
        "checkpoint of 10",
    )


def test_another_tenants_checkpoint_stored_as_this_logs(trail: Trail) -> None:
    assert trail.checkpoint() == [("acme", 14), ("globex", 14)]
    theirs = trail.dba("SELECT note FROM audit_checkpoints WHERE tenant='globex' AND size=14")
    trail.dba("UPDATE audit_checkpoints SET note=? WHERE tenant='acme' AND size=14", theirs[0][0])

    failed(
        trail.cli("verify"),
        "acme: FAILED: the log: modified: a checkpoint of 'localgate/audit/globex' is stored as "
        "this log's",
    )


def test_the_newest_checkpoint_and_its_records_removed_is_caught_by_the_anchor(
    trail: Trail,
) -> None:
    assert trail.checkpoint() == [("acme", 14), ("globex", 14)]
    trail.dba("DELETE FROM audit_checkpoints WHERE tenant='acme' AND size=14")
    trail.dba("DELETE FROM audit_log WHERE tenant='acme' AND seq >= 10")
    trail.recompute_head("acme")

    failed(
        trail.cli("verify"),
        "acme: FAILED: record 10: truncated: a checkpoint covers 14 records but the log has 10",
    )


def test_a_checkpoint_forged_with_another_key(trail: Trail) -> None:
    intruder = CheckpointSigner.generate("localgate")
    root = Frontier(CipherSuite("standard").tree_hasher()).root()
    forged = intruder.sign(Checkpoint(origin_of("localgate", "acme"), 0, root, datetime.now(UTC)))
    trail.dba(
        "INSERT INTO audit_checkpoints (tenant, size, note, created_at) VALUES ('acme', 0, ?, 'x')",
        forged,
    )
    (trail.anchor / "globex" / "000000000000.note").write_text(forged)

    result = trail.cli("verify")

    # In the database it anchors nothing and is reported; the valid checkpoints still
    # anchor acme's log. In the anchor, where the DBA cannot write, it is a failure.
    failed(
        result,
        "  foreign checkpoint (ignored, anchors nothing): the checkpoint row of 0 records "
        "does not verify: the note is not signed by",
    )
    assert "acme: OK" in result.output
    assert (
        "globex: FAILED: the log: unsigned: the anchor's globex/000000000000.note does not "
        "verify: the note is not signed by"
    ) in result.output


def test_a_forged_newest_file_in_the_anchor_is_reported_not_trusted(trail: Trail) -> None:
    intruder = CheckpointSigner.generate("localgate")
    root = Frontier(CipherSuite("standard").tree_hasher()).root()
    forged = intruder.sign(Checkpoint(origin_of("localgate", "acme"), 99, root, datetime.now(UTC)))
    (trail.anchor / "acme" / "000000000099.note").write_text(forged)
    trail.rewrite("acme", 2, n=200)  # the older, genuine anchor checkpoint still catches this
    trail.dba("DELETE FROM audit_checkpoints WHERE tenant='acme'")

    result = trail.cli("verify")

    failed(result, "anchor: FAILED: acme/000000000099.note: the note is not signed by")
    assert "acme: FAILED: the log: rewritten: the first 10 records do not match" in result.output


def test_the_anchors_newest_file_deleted_is_a_warning(trail: Trail) -> None:
    assert trail.checkpoint() == [("acme", 14), ("globex", 14)]
    (trail.anchor / "acme" / "000000000014.note").unlink()

    result = trail.cli("verify")

    ok(result)
    assert (
        "warning: 1 checkpoint(s) in the database are not in the anchor "
        f"{trail.anchor} (newest: 14 records)"
    ) in result.output


def test_the_anchor_folder_gone_fails(trail: Trail) -> None:
    shutil.rmtree(trail.anchor)

    failed(trail.cli("verify"), f"anchor: FAILED: the checkpoint folder {trail.anchor} does not")


def test_the_anchor_holds_what_the_checkpointer_signed(trail: Trail) -> None:
    anchor = read_anchor(trail.anchor, trail.signer().verifier(), "localgate")

    assert {tenant: [c.size for c in found] for tenant, found in anchor.checkpoints.items()} == {
        "acme": [10],
        "globex": [10],
    }
    assert [sorted(item.tenants) for item in anchor.lists] == [["acme", "globex"]]
    assert anchor.bad == []


def test_a_log_from_before_tenant_lists_is_adopted_by_one_checkpoint_run(trail: Trail) -> None:
    trail.dba("DROP TABLE audit_tenant_lists")
    trail.dba("UPDATE alembic_version SET version_num = '0001'")
    for note in trail.anchor.glob("tenants-*.note"):
        note.unlink()

    before = trail.cli("verify")
    signed = trail.cli("checkpoint")
    after = trail.cli("verify")

    failed(before, "run `localgate audit checkpoint` once")
    assert signed.exit_code == 0, signed.output
    ok(after)
    assert "acme: OK (14 records, 2 checkpoints)" in after.output


def _without_anchor(trail: Trail) -> Path:
    config = trail.config.with_name("no-anchor.yaml")
    config.write_text(
        "\n".join(
            line
            for line in trail.config.read_text().splitlines()
            if "checkpoint_export_dir" not in line
        )
        + "\n"
    )
    return config


def test_a_stray_checkpoint_inserted_by_an_insider_is_reported_and_signing_goes_on(
    trail: Trail,
) -> None:
    # An insider (or a replica with another signing key) stores a checkpoint claiming the
    # log is larger than it is, and one at the very size the signer will sign next.
    intruder = CheckpointSigner.generate("localgate")
    root = Frontier(CipherSuite("standard").tree_hasher()).root()
    for size in (SIGNED + TAIL, 999):
        forged = intruder.sign(
            Checkpoint(origin_of("localgate", "acme"), size, root, datetime.now(UTC))
        )
        trail.dba(
            "INSERT INTO audit_checkpoints (tenant, size, note, created_at) "
            "VALUES ('acme', ?, ?, 'x')",
            size,
            forged,
        )

    first = trail.cli("verify")
    # The row it took is kept (append-only): the signer's own note for that size is neither
    # stored nor exported; it signs the next size once the log grows.
    assert trail.checkpoint() == [("globex", SIGNED + TAIL)]
    trail.append("acme", range(SIGNED + TAIL, SIGNED + TAIL + 2))
    assert trail.checkpoint() == [("acme", SIGNED + TAIL + 2)]
    second = trail.cli("verify")

    for result in (first, second):
        assert result.exit_code == 0, result.output
        assert "acme: OK" in result.output
        assert result.output.count("foreign checkpoint (ignored, anchors nothing)") == 2
        assert "the checkpoint row of 999 records does not verify" in result.output
    assert "acme: OK (16 records, 2 checkpoints)" in second.output
    # Replicas still start: the store's signing key is remembered, not read off the newest
    # checkpoint.
    reader = AuditReader(database(trail.settings)())
    try:
        assert (
            key_problems(
                reader.db,
                master_key(trail.settings, create=False),
                trail.signer(),
                CipherSuite("standard"),
            )
            == []
        )
    finally:
        reader.close()


def test_a_stray_checkpoint_does_not_hide_a_rewrite(trail: Trail) -> None:
    # The valid checkpoints still anchor the log: rewriting it under a stray checkpoint of
    # the forged history is caught.
    trail.rewrite("acme", 3, status=500)
    intruder = CheckpointSigner.generate("localgate")
    leaves = [
        bytes(row[0])
        for row in trail.dba("SELECT leaf_hash FROM audit_log WHERE tenant='acme' ORDER BY seq")
    ]
    frontier = Frontier(CipherSuite("standard").tree_hasher())
    for leaf in leaves:
        frontier.append(leaf)
    forged = intruder.sign(
        Checkpoint(
            origin_of("localgate", "acme"), frontier.size, frontier.root(), datetime.now(UTC)
        )
    )
    trail.dba(
        "INSERT INTO audit_checkpoints (tenant, size, note, created_at) VALUES ('acme', ?, ?, 'x')",
        frontier.size,
        forged,
    )

    result = trail.cli("verify")

    failed(result, "acme: FAILED: the log: rewritten: the first 10 records do not match")
    assert "foreign checkpoint (ignored, anchors nothing)" in result.output


def test_a_stray_tenant_list_is_reported_and_names_nothing(trail: Trail) -> None:
    # Signed by another key, newer than every genuine list, and naming a tenant that
    # never existed while leaving out globex: it must neither hide globex nor invent one.
    intruder = CheckpointSigner.generate("localgate")
    later = datetime.now(UTC).replace(microsecond=0) + timedelta(days=1)
    for extra in range(6):  # more than the checkpointer reads as "the newest"
        forged = TenantList(
            "localgate", frozenset({"acme", "ghost"}), later + timedelta(seconds=extra)
        ).sign(intruder)
        trail.dba(
            "INSERT INTO audit_tenant_lists (digest, note, created_at) VALUES (?, ?, ?)",
            hashlib.sha256(forged.encode()).hexdigest(),
            forged,
            (later + timedelta(seconds=extra)).isoformat(),
        )

    result = trail.cli("verify")

    assert result.exit_code == 0, result.output
    assert "acme: OK" in result.output
    assert "globex: OK" in result.output
    assert "ghost" not in result.output.replace("a tenant list in the database", "")
    assert "foreign tenant list (ignored, anchors nothing): a tenant list in the database" in (
        result.output
    )
    # The checkpointer keeps building on the genuine lists.
    trail.append("globex", range(SIGNED + TAIL, SIGNED + TAIL + 2))
    assert trail.checkpoint() == [("acme", SIGNED + TAIL), ("globex", SIGNED + TAIL + 2)]
    assert trail.cli("verify").exit_code == 0
