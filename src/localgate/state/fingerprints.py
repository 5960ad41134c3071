"""The fingerprints of the keys every replica must share, remembered in the database.

The first replica to start records each key's fingerprint; every later one compares. A
replica started with another key refuses to start, in one line naming the key, before it
writes what the others cannot read (or seals what they cannot open).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

__all__ = ["KeyMismatch", "remember_fingerprint", "replace_fingerprint"]


class KeyMismatch(Exception):
    """This replica holds another key than the one the database remembers."""

    def __init__(self, name: str, remembered: str, held: str) -> None:
        super().__init__(name)
        self.name = name
        self.remembered = remembered
        self.held = held


def remember_fingerprint(db: Any, name: str, fingerprint: str) -> None:
    """Record ``fingerprint`` as key ``name``'s if none is; ``KeyMismatch`` if another is.

    ``db`` is an autocommit psycopg connection to the state database.
    """
    db.execute(
        "INSERT INTO shared_key_fingerprints (name, fingerprint, recorded_at) "
        "VALUES (%s, %s, %s) ON CONFLICT (name) DO NOTHING",
        (name, fingerprint, datetime.now(UTC).isoformat(timespec="seconds")),
    )
    row = db.execute(
        "SELECT fingerprint FROM shared_key_fingerprints WHERE name = %s", (name,)
    ).fetchone()
    if row is not None and row[0] != fingerprint:
        raise KeyMismatch(name, str(row[0]), fingerprint)


def replace_fingerprint(db: Any, name: str, fingerprint: str) -> None:
    """Record a rotated key's fingerprint (after every replica has been given the key)."""
    db.execute(
        "INSERT INTO shared_key_fingerprints (name, fingerprint, recorded_at) "
        "VALUES (%s, %s, %s) ON CONFLICT (name) DO UPDATE SET fingerprint = excluded.fingerprint,"
        " recorded_at = excluded.recorded_at",
        (name, fingerprint, datetime.now(UTC).isoformat(timespec="seconds")),
    )
