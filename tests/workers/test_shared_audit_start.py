"""Several processes opening one new audit store at once, as workers of a first start would.

`localgate serve --workers N` opens the store once in the supervisor before any worker
starts; the store must survive it anyway (the migrations take a lock file, the first-use
row is inserted once)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import INFRASTRUCTURE_TIMEOUT_S, wait_until

_OPEN_WHEN_TOLD = """
import os, sys, time
from pathlib import Path
from localgate.config import load_settings
from localgate.audit.crypto import CipherSuite
from localgate.audit.store import AuditStore
from localgate.audit.trail import database, master_key

settings, _ = load_settings(None)
key = master_key(settings, create=False)
go = Path(sys.argv[1])
Path(sys.argv[2]).touch()
while not go.exists():
    time.sleep(0.001)
AuditStore(database(settings), key, CipherSuite(settings.audit.suite)).close()
"""


def test_processes_opening_a_new_store_at_once_all_succeed(tmp_path: Path) -> None:
    data = tmp_path / "data"
    env = {"LOCALGATE_DATA_DIR": str(data), "PATH": "/usr/bin:/bin"}
    # The key made once, as `localgate serve` does before its workers start.
    from localgate.audit.crypto import load_or_create_master_key

    load_or_create_master_key(None, data / "audit-master.key", create=True)
    go = tmp_path / "go"
    processes = []
    for number in range(4):
        ready = tmp_path / f"ready-{number}"
        processes.append(
            (
                ready,
                subprocess.Popen(  # noqa: S603 - this interpreter, a fixed script
                    [sys.executable, "-c", _OPEN_WHEN_TOLD, str(go), str(ready)],
                    env={**env, "PYTHONPATH": ":".join(sys.path)},
                    stderr=subprocess.PIPE,
                ),
            )
        )
    wait_until(lambda: all(ready.exists() for ready, _ in processes))
    go.touch()
    failures = []
    for _, process in processes:
        _, error = process.communicate(timeout=INFRASTRUCTURE_TIMEOUT_S)
        if process.returncode != 0:
            failures.append(error.decode().strip())
    assert failures == []
