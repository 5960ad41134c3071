"""The disk fills up during an upstream call: the completion record cannot be written to
the audit database nor to its spool. The answer is withheld, the gateway says so (metric,
/readyz) and refuses requests until the record is written; then it serves again."""

from __future__ import annotations

import errno
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from localgate.audit.database import SqliteDatabase
from localgate.audit.spool import Spool
from localgate.testing import FakeGemini
from tests.conftest import run_gateway, wait_until

BODY = {"contents": [{"role": "user", "parts": [{"text": "Hello"}]}]}


class FullDisk:
    """The disk under one gateway's audit database and spool, filling up on cue.

    ``fill_after_next_commit``: the next commit of the audit writer (the request record)
    still fits, everything after it fails as SQLite and the OS fail when the disk is full.
    """

    def __init__(self, folder: Path) -> None:
        self._folder = str(folder)
        self._commits_left: int | None = None
        self._lock = threading.Lock()

    def fill_after_next_commit(self) -> None:
        with self._lock:
            self._commits_left = 1

    def free(self) -> None:
        with self._lock:
            self._commits_left = None

    @property
    def full(self) -> bool:
        with self._lock:
            return self._commits_left == 0

    def commit(self, real: Callable[[SqliteDatabase], None]) -> Callable[[SqliteDatabase], None]:
        def commit(db: SqliteDatabase) -> None:
            if self._folder in db.sqlalchemy_url:
                with self._lock:
                    if self._commits_left == 0:
                        raise sqlite3.OperationalError("database or disk is full")
                    if self._commits_left is not None:
                        self._commits_left -= 1
            real(db)

        return commit

    def append(self, real: Callable[[Spool, bytes], None]) -> Callable[[Spool, bytes], None]:
        def append(spool: Spool, line: bytes) -> None:
            if self.full and str(spool.path).startswith(self._folder):
                raise OSError(errno.ENOSPC, "No space left on device")
            real(spool, line)

        return append


def error_of(response: httpx.Response) -> dict[str, object]:
    envelope = response.json()
    assert set(envelope) == {"error"}
    error: dict[str, object] = envelope["error"]
    assert error["code"] == response.status_code
    return error


def test_disk_full_during_an_upstream_call_stops_the_gateway_until_the_completion_is_written(
    tmp_path: Path, upstream: FakeGemini, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    disk = FullDisk(data)
    monkeypatch.setattr(SqliteDatabase, "commit", disk.commit(SqliteDatabase.commit))
    monkeypatch.setattr(Spool, "_append", disk.append(Spool._append))

    with run_gateway(data, upstream.base_url) as gateway, gateway.client() as client:
        disk.fill_after_next_commit()
        withheld = gateway.generate(BODY)
        first_id = withheld.headers["x-request-id"]
        metrics = client.get("/metrics").text
        not_ready = client.get("/readyz")
        refused = gateway.generate(BODY)
        forwarded_while_full = len(upstream.requests)

        disk.free()
        wait_until(lambda: client.get("/readyz").status_code == 200, timeout=30)
        served = gateway.generate(BODY)
        records = gateway.audit_headers(first_id)

    assert withheld.status_code == 503
    assert error_of(withheld)["status"] == "UNAVAILABLE"
    assert "audit trail" in str(error_of(withheld)["message"])
    assert "localgate_audit_completions_unrecorded_total 1.0" in metrics
    assert "localgate_audit_completions_held 1.0" in metrics
    assert not_ready.status_code == 503
    assert not_ready.json()["status"] == "not ready"
    assert "could not be written" in not_ready.json()["checks"]["audit_trail"]
    assert refused.status_code == 503
    assert error_of(refused)["status"] == "UNAVAILABLE"
    assert "audit trail" in str(error_of(refused)["message"])
    assert forwarded_while_full == 1  # the refused request was not forwarded
    assert served.status_code == 200, served.text
    answer = next(record for record in records if record["kind"] == "answer")
    assert answer["outcome"] == "withheld: audit trail unavailable"
    assert (answer["answer_outcome"], answer["answer_status"]) == ("forwarded", 200)
