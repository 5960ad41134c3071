"""What every SQLite file of the gateway shares: WAL mode, set safely by several processes."""

from __future__ import annotations

import sqlite3
import time

__all__ = ["use_wal"]

_TRIES = 200


def use_wal(db: sqlite3.Connection) -> None:
    """Switch the file to WAL mode, once. Switching needs the file to itself and SQLite does
    not wait for it (the busy timeout does not apply): several processes opening a new file
    at once (``serve --workers``, the CLI beside a gateway) get "database is locked" here.
    The mode is the file's, so the ones that lose find it set by the winner; until then
    they try again, a millisecond apart, for a fifth of a second at most."""
    for _ in range(_TRIES):
        try:
            if db.execute("PRAGMA journal_mode=WAL").fetchone()[0] == "wal":
                return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc):
                raise
        time.sleep(0.001)  # a retry's pause, bounded by _TRIES
    raise sqlite3.OperationalError("cannot switch the SQLite file to WAL mode: it stays locked")
