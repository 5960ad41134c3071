"""Which one process signs checkpoints (``audit.checkpoint_signer: auto``).

Exactly one holder at a time, and another takes over when it dies, without any heartbeat
of ours: the lock belongs to something the operating system or the database releases when
the holder goes.

- PostgreSQL: a session-level advisory lock on a connection of the elector's own; the
  server releases it when that connection ends (a replica killed, its host gone).
- SQLite: ``flock`` on a lock file beside the database; the kernel releases it when the
  process exits, however it exits. It serves the worker processes of one host sharing
  one data directory (SQLite is not shared between hosts).

Every checkpoint round asks again: a replica that lost its lock (its database connection
was cut) stops signing, and a standby takes the lock as soon as it is free.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from localgate.audit.database import Database

__all__ = ["FileElection", "PostgresElection", "SignerElection"]

logger = logging.getLogger("localgate.audit")


class SignerElection(Protocol):
    """Whether this process is the elected checkpoint signer now."""

    def lead(self) -> bool:
        """True if this process holds (or has just taken) the signer's lock."""
        ...

    def close(self) -> None:
        """Give the lock up."""
        ...


class PostgresElection:
    """A session-level advisory lock, one per log name."""

    def __init__(self, connect: Callable[[], Database], log_name: str) -> None:
        self._connect = connect
        self._log_name = log_name
        self._db: Database | None = None
        self._held = False

    def lead(self) -> bool:
        """Take the lock if free; check that a held one still is ours."""
        try:
            if self._db is None:
                self._db = self._connect()
                self._held = False
            if self._held:
                # The connection is the lock: one that still answers still holds it.
                self._db.execute("SELECT 1").fetchone()
                return True
            row = self._db.execute(
                # Advisory locks are per database: the schema is part of the name, so
                # deployments in separate schemas of one database elect their own.
                "SELECT pg_try_advisory_lock(hashtextextended(? || current_schema(), 7466130819))",
                (f"localgate-checkpoint-signer:{self._log_name}:",),
            ).fetchone()
        except Exception as exc:  # noqa: BLE001 - any failure: not (or no longer) the signer
            logger.warning("audit: checkpoint signer election: %s", type(exc).__name__)
            self._drop()
            return False
        self._held = bool(row[0])
        if self._held:
            logger.info("audit: this process is the checkpoint signer now")
        return self._held

    def close(self) -> None:
        """Close the connection, which releases the lock."""
        self._drop()

    def _drop(self) -> None:
        if self._db is not None:
            with contextlib.suppress(Exception):
                self._db.close()
        self._db = None
        self._held = False


class FileElection:
    """``flock`` on a file beside the SQLite database."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._descriptor: int | None = None

    def lead(self) -> bool:
        """Take the lock if no other process holds it."""
        if self._descriptor is not None:
            return True
        self._path.parent.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(descriptor)
            return False
        self._descriptor = descriptor
        logger.info("audit: this process is the checkpoint signer now")
        return True

    def close(self) -> None:
        """Release the lock."""
        if self._descriptor is not None:
            os.close(self._descriptor)
            self._descriptor = None
