"""The audit database behind one small interface: SQLite (embedded) or PostgreSQL (replicas).

The store, keyring, reader and retention code write SQL once, with ``?`` placeholders
and ``CAST(x AS BLOB)``; the PostgreSQL adapter translates both. What differs is how a
writer gets each tenant's log to itself:

- SQLite: ``BEGIN IMMEDIATE`` takes the database's write lock (one gateway per file);
- PostgreSQL: a transaction-scoped advisory lock per tenant, taken in a fixed order, so
  any number of gateway replicas append to one valid log per tenant; the lock is
  released at commit or rollback, and by the server if the replica dies.

In PostgreSQL the log and its checkpoints are append-only for everyone: triggers refuse
UPDATE, DELETE and TRUNCATE (the retention purge, when it comes, sets a session flag
that only it uses).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

__all__ = ["Database", "PostgresDatabase", "SqliteDatabase", "sqlite_at"]

_TABLES = """
CREATE TABLE IF NOT EXISTS audit_keys (
    key_id        TEXT PRIMARY KEY,
    tenant        TEXT NOT NULL,
    purpose       TEXT NOT NULL,
    period        TEXT NOT NULL,
    wrapped       BLOB,
    master_key_id TEXT NOT NULL,
    created_at    TEXT NOT NULL,
    destroyed_at  TEXT,
    UNIQUE (tenant, purpose, period)
);
CREATE TABLE IF NOT EXISTS audit_log (
    tenant      TEXT NOT NULL,
    seq         INTEGER NOT NULL,
    kind        TEXT NOT NULL,
    request_id  TEXT NOT NULL,
    recorded_at TEXT NOT NULL,
    header      BLOB,
    payload     BLOB,
    original    BLOB,
    leaf_hash   BLOB NOT NULL,
    PRIMARY KEY (tenant, seq)
);
CREATE INDEX IF NOT EXISTS audit_log_request ON audit_log (request_id);
CREATE TABLE IF NOT EXISTS audit_frontier (
    tenant TEXT PRIMARY KEY,
    size   INTEGER NOT NULL,
    state  BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS audit_checkpoints (
    tenant     TEXT NOT NULL,
    size       INTEGER NOT NULL,
    note       TEXT NOT NULL,
    created_at TEXT NOT NULL,
    PRIMARY KEY (tenant, size)
);
CREATE TABLE IF NOT EXISTS audit_meta (
    name  TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
"""

_POSTGRES_GUARDS = """
CREATE OR REPLACE FUNCTION localgate_audit_append_only() RETURNS trigger AS $$
BEGIN
    IF current_setting('localgate.audit_purge', true) = 'on' THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'localgate: % on % refused: the audit log is append-only',
        TG_OP, TG_TABLE_NAME;
END
$$ LANGUAGE plpgsql;
DROP TRIGGER IF EXISTS audit_log_append_only ON audit_log;
CREATE TRIGGER audit_log_append_only BEFORE UPDATE OR DELETE ON audit_log
    FOR EACH ROW EXECUTE FUNCTION localgate_audit_append_only();
DROP TRIGGER IF EXISTS audit_log_no_truncate ON audit_log;
CREATE TRIGGER audit_log_no_truncate BEFORE TRUNCATE ON audit_log
    FOR EACH STATEMENT EXECUTE FUNCTION localgate_audit_append_only();
DROP TRIGGER IF EXISTS audit_checkpoints_append_only ON audit_checkpoints;
CREATE TRIGGER audit_checkpoints_append_only BEFORE UPDATE OR DELETE ON audit_checkpoints
    FOR EACH ROW EXECUTE FUNCTION localgate_audit_append_only();
"""


class Database(Protocol):
    """One connection to the audit database."""

    dialect: str

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        """Run one statement; the result has ``fetchone``/``fetchall`` and iterates rows."""
        ...

    def begin(self) -> None:
        """Start a write transaction."""
        ...

    def commit(self) -> None:
        """Commit it."""
        ...

    def rollback(self) -> None:
        """Roll it back."""
        ...

    @property
    def in_transaction(self) -> bool:
        """Whether a transaction is open."""
        ...

    def lock_logs(self, tenants: Sequence[str]) -> None:
        """Inside a transaction: make these tenants' logs ours until it ends."""
        ...

    def close(self) -> None:
        """Close the connection."""
        ...


class SqliteDatabase:
    """The embedded default: a SQLite file in WAL mode."""

    dialect = "sqlite"

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA busy_timeout=10000")
        # Erased rows and values (shredded keys) are overwritten, not left in free pages.
        self._db.execute("PRAGMA secure_delete=ON")
        self._db.executescript(_TABLES)

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        """Run one statement."""
        return self._db.execute(sql, tuple(params))

    def begin(self) -> None:
        """``BEGIN IMMEDIATE``: the write lock of the whole file."""
        self._db.execute("BEGIN IMMEDIATE")

    def commit(self) -> None:
        """Commit."""
        self._db.execute("COMMIT")

    def rollback(self) -> None:
        """Roll back."""
        self._db.execute("ROLLBACK")

    @property
    def in_transaction(self) -> bool:
        """Whether a transaction is open."""
        return self._db.in_transaction

    def lock_logs(self, tenants: Sequence[str]) -> None:
        """Nothing more to do: ``BEGIN IMMEDIATE`` already holds the file's write lock."""

    def close(self) -> None:
        """Close the connection."""
        self._db.close()


class PostgresDatabase:
    """PostgreSQL, for several gateway replicas writing the same logs."""

    dialect = "postgres"

    def __init__(self, dsn: str) -> None:
        import psycopg

        self._db = psycopg.connect(dsn, autocommit=True)
        with self._db.transaction():
            # Two replicas starting at once must not both create the schema.
            self._db.execute("SELECT pg_advisory_xact_lock(7466130817)")
            self._db.execute(_TABLES.replace("BLOB", "BYTEA").replace("INTEGER", "BIGINT"))
            self._db.execute(_POSTGRES_GUARDS)

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        """Run one statement (``?`` and ``AS BLOB`` written the SQLite way)."""
        return self._db.execute(
            sql.replace("?", "%s").replace("AS BLOB", "AS BYTEA"),
            tuple(params),
        )

    def begin(self) -> None:
        """Start a transaction."""
        self._db.execute("BEGIN")

    def commit(self) -> None:
        """Commit."""
        self._db.execute("COMMIT")

    def rollback(self) -> None:
        """Roll back."""
        self._db.execute("ROLLBACK")

    @property
    def in_transaction(self) -> bool:
        """Whether a transaction is open."""
        return int(self._db.info.transaction_status) != 0

    def lock_logs(self, tenants: Sequence[str]) -> None:
        """Per-tenant advisory locks, in sorted order so replicas never deadlock."""
        for tenant in sorted(set(tenants)):
            self._db.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended(%s, 7466130817))", (tenant,)
            )

    def close(self) -> None:
        """Close the connection."""
        self._db.close()


def sqlite_at(path: Path) -> Callable[[], Database]:
    """Opens connections to the SQLite audit database at ``path``."""
    return lambda: SqliteDatabase(path)
