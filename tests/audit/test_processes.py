"""Several gateway processes on one data directory (``--workers``): the audit chain on the
SQLite file stays one verified log per tenant, whoever writes, and one signer signs.

Real processes, started together on a fresh file (migrations, key files and all)."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import threading
from pathlib import Path

from localgate.audit.crypto import CipherSuite
from localgate.audit.database import SqliteDatabase
from localgate.audit.election import FileElection
from localgate.audit.store import AuditReader
from localgate.audit.trail import AuditTrail, signer
from localgate.audit.verify import verify_all
from localgate.config import Settings
from tests.conftest import INFRASTRUCTURE_TIMEOUT_S

WRITER = """
import asyncio, sys
from pathlib import Path
from localgate.audit.records import PendingRecord
from localgate.audit.trail import AuditTrail
from localgate.config import Settings

data, name, count = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])

async def main() -> None:
    trail = AuditTrail.open(Settings(data_dir=data))
    await trail.start()
    futures = [
        trail.store.submit(
            PendingRecord(tenant, "request", f"{name}-{tenant}-{n}", {"writer": name}, payload=b"x")
        )
        for n in range(count)
        for tenant in ("acme", "globex")
    ]
    for future in futures:
        await asyncio.wrap_future(future)
    trail._sign()  # each tries; only the elected one signs
    await trail.close()

asyncio.run(main())
"""


def test_worker_processes_on_one_data_dir_write_one_chain_per_tenant(tmp_path: Path) -> None:
    data = tmp_path / "data"
    writers = [
        subprocess.Popen(  # noqa: S603 - fixed command: this test's own writer script
            [sys.executable, "-c", WRITER, str(data), f"worker-{n}", "150"],
            stderr=subprocess.PIPE,
        )
        for n in range(4)
    ]
    for writer in writers:
        _, errors = writer.communicate(timeout=INFRASTRUCTURE_TIMEOUT_S * 2)
        assert writer.returncode == 0, errors.decode()

    settings = Settings(data_dir=data)
    key = signer(settings, create=False)
    assert key is not None  # one signing key, which every worker loaded
    reader = AuditReader(SqliteDatabase(settings.audit_db_path))
    try:
        result = verify_all(reader, CipherSuite("standard"), key.verifier())
        rows = {tenant: list(reader.records(tenant)) for tenant in ("acme", "globex")}
    finally:
        reader.close()
    assert result.ok, [str(report.problem) for report in result.reports]
    for tenant, records in rows.items():
        assert [record.seq for record in records] == list(range(600)), tenant
        assert len({record.request_id for record in records}) == 600
    assert all(report.checkpoints >= 1 and not report.foreign for report in result.reports)
    assert len(list(data.glob("*.key"))) == 2  # one master key, one signing key


def test_one_process_leads_and_another_takes_over_when_it_goes(tmp_path: Path) -> None:
    lock = tmp_path / "audit.db.signer.lock"
    first, second = FileElection(lock), FileElection(lock)
    assert first.lead()
    assert first.lead()  # still
    assert not second.lead()
    first.close()  # the process exits: the kernel drops its lock
    assert second.lead()
    second.close()


def test_a_trail_with_checkpoint_signer_never_signs_nothing(tmp_path: Path) -> None:
    settings = Settings.model_validate(
        {"data_dir": str(tmp_path), "audit": {"checkpoint_signer": "never"}}
    )
    trail = AuditTrail.open(settings)
    try:
        assert trail.checkpointer is None
        assert trail.election is None
    finally:
        trail.store.close()


def test_writers_take_turns_on_the_file_beside_the_log(tmp_path: Path) -> None:
    path = tmp_path / "audit.db"
    first, second = SqliteDatabase(path), SqliteDatabase(path)
    first.begin()  # holds the turn (and SQLite's write lock)
    began = threading.Event()

    def write() -> None:
        second.begin()
        began.set()
        second.rollback()

    writer = threading.Thread(target=write)
    writer.start()
    assert not began.wait(0.2)  # still waiting for its turn (a bounded negative check)
    first.rollback()
    assert began.wait(INFRASTRUCTURE_TIMEOUT_S)
    writer.join()
    # Given back after the rollback: another open file takes the turn at once.
    fd = os.open(tmp_path / "audit.db.write-turn", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        os.close(fd)
    first.close()
    second.close()
