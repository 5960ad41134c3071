"""The audit database behind one small interface: SQLite (embedded) or PostgreSQL (replicas).

The store, keyring, reader and retention code write SQL once, with ``?`` placeholders
and ``CAST(x AS BLOB)``; the PostgreSQL adapter translates both. What differs is how a
writer gets each tenant's log to itself:

- SQLite: ``BEGIN IMMEDIATE`` takes the database's write lock (one gateway per file);
- PostgreSQL: a transaction-scoped advisory lock per tenant, taken in a fixed order, so
  any number of gateway replicas append to one valid log per tenant; the lock is
  released at commit or rollback, and by the server if the replica dies.

In PostgreSQL the log and its checkpoints are append-only for everyone: triggers refuse
UPDATE, DELETE and TRUNCATE (the retention purge sets a transaction-local flag that only
it uses). The schema itself is managed by Alembic migrations (``migrate.py``).
"""

from __future__ import annotations

import fcntl
import functools
import os
import sqlite3
import time
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Any, Protocol

from localgate.audit.migrate import sqlalchemy_url
from localgate.sqlitefile import use_wal

__all__ = ["Database", "DatabaseUnavailable", "PostgresDatabase", "SqliteDatabase", "sqlite_at"]


class Database(Protocol):
    """One connection to the audit database."""

    dialect: str
    # Where the schema is migrated (Alembic takes a SQLAlchemy URL).
    sqlalchemy_url: str

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        """Run one statement; the result has ``fetchone``/``fetchall`` and iterates rows."""
        ...

    def open_logs(
        self, tenants: Sequence[str], known: Collection[str] = ()
    ) -> tuple[bool, dict[str, bytes]]:
        """Start a write transaction, make these tenants' logs ours until it ends, and
        read their stored frontiers (tenant -> state; a tenant without a log is absent).

        ``known``: tenants whose frontiers the caller holds as this connection last
        committed them. True first if the database shows that no other connection has
        committed since this connection's previous ``open_logs``: those tenants' frontiers
        are then not read (the caller's copies are current). False otherwise (or when the
        database cannot tell): every frontier is read and the caller drops its copies."""
        ...

    def write_and_commit(self, writes: Sequence[tuple[str, Sequence[Sequence[Any]]]]) -> None:
        """Run each ``INSERT ... VALUES (?,...)`` statement once per row of its rows, then
        commit: in as few statements and round trips as the driver allows. On an error
        nothing is committed (the transaction stays open for ``rollback``)."""
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
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        except (OSError, sqlite3.Error) as exc:
            raise DatabaseUnavailable(f"cannot open the SQLite file {path}: {exc}") from exc
        # The timeout first: worker processes opening the file at once wait for each other.
        self._db.execute("PRAGMA busy_timeout=10000")
        use_wal(self._db)
        self._turn = _WriterTurn(path.with_name(path.name + ".write-turn"))
        # The file's data_version at the previous open_logs (see there).
        self._data_version: int | None = None
        self.sqlalchemy_url = sqlalchemy_url("sqlite", str(path))

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        """Run one statement."""
        return self._db.execute(sql, tuple(params))

    def open_logs(
        self, tenants: Sequence[str], known: Collection[str] = ()
    ) -> tuple[bool, dict[str, bytes]]:
        """``begin`` (the file's write lock), then the frontiers not ``known`` in one query.

        ``PRAGMA data_version`` (read inside the transaction, so after the lock) changes
        whenever another connection, of this process or another, has committed to the
        file; it stays the same for this connection's own commits. Unchanged since the
        previous call, nobody else can have touched a frontier (nor inserted a row by
        hand) since this connection last wrote it, so the caller's copies are current.
        """
        self.begin()
        version = self._db.execute("PRAGMA data_version").fetchone()[0]
        current = version == self._data_version
        self._data_version = version
        wanted = sorted(set(tenants).difference(known) if current else set(tenants))
        if not wanted:
            return current, {}
        rows = self._db.execute(
            "SELECT tenant, state FROM audit_frontier WHERE tenant IN "  # noqa: S608 - only placeholders are added
            f"({','.join('?' * len(wanted))})",
            wanted,
        ).fetchall()
        return current, {str(tenant): bytes(state) for tenant, state in rows}

    def write_and_commit(self, writes: Sequence[tuple[str, Sequence[Sequence[Any]]]]) -> None:
        """Many rows per statement (``_ROWS_PER_INSERT``), not ``executemany``, then
        ``commit``.

        ``executemany`` steps a statement once per row and releases the GIL around every
        step: under CPU load each release can cost the writer a whole switch interval
        (5 ms) before it runs again.
        """
        execute = self._db.execute
        for sql, rows in writes:
            if len(rows) == 1:  # the usual batch with one request in flight
                execute(sql, rows[0])
                continue
            for start in range(0, len(rows), _ROWS_PER_INSERT):
                chunk = rows[start : start + _ROWS_PER_INSERT]
                execute(_multi_row(sql, len(chunk)), [value for row in chunk for value in row])
        self.commit()

    def begin(self) -> None:
        """``BEGIN IMMEDIATE``: the write lock of the whole file, taken in turn with the
        other processes writing it (``_WriterTurn``)."""
        self._turn.take()
        try:
            self._db.execute("BEGIN IMMEDIATE")
        except BaseException:
            self._turn.give_back()
            raise

    def commit(self) -> None:
        """Commit."""
        try:
            self._db.execute("COMMIT")
        finally:
            if not self._db.in_transaction:
                self._turn.give_back()

    def rollback(self) -> None:
        """Roll back."""
        try:
            self._db.execute("ROLLBACK")
        finally:
            self._turn.give_back()

    @property
    def in_transaction(self) -> bool:
        """Whether a transaction is open."""
        return self._db.in_transaction

    def lock_logs(self, tenants: Sequence[str]) -> None:
        """Nothing more to do: ``BEGIN IMMEDIATE`` already holds the file's write lock."""

    def close(self) -> None:
        """Close the connection."""
        self._db.close()
        self._turn.close()


@functools.lru_cache(maxsize=512)
def _multi_row(sql: str, count: int) -> str:
    """``INSERT ... VALUES (?,?) ON CONFLICT ...`` with the row's group ``count`` times
    (made once per statement and row count: the same few recur batch after batch)."""
    head, rest = sql.split(" VALUES ", 1)
    end = rest.index(")") + 1
    group, tail = rest[:end], rest[end:]
    return f"{head} VALUES {','.join([group] * count)}{tail}"


class _WriterTurn:
    """Processes writing one SQLite file take turns through a lock on a file beside it.

    SQLite's own wait for a busy file sleeps in growing steps (up to 100 ms) and does not
    wake when the lock is freed: with several worker processes writing the audit trail,
    a writer often slept long after the other's short transaction ended. The turn is an
    ``flock`` tried every fraction of a millisecond instead, for as long as SQLite would
    have waited; then SQLite's own timeout applies as before.
    """

    def __init__(self, path: Path) -> None:
        self._path = path
        self._fd: int | None = None
        self._held = False

    def take(self) -> None:
        if self._fd is None:
            try:  # opened on the first write: a read-only copy of the log never needs it
                self._fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o600)
            except OSError:
                return  # no turn to take (a read-only directory): SQLite's own lock decides
        fd = self._fd
        deadline = time.monotonic() + _TURN_WAIT_S
        pause = 0.0001
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if time.monotonic() > deadline:
                    return  # SQLite's busy timeout decides from here
                time.sleep(pause)  # a retry's pause, bounded by the deadline
                pause = min(pause * 2, 0.001)
                continue
            self._held = True
            return

    def give_back(self) -> None:
        if self._held and self._fd is not None:
            self._held = False
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def close(self) -> None:
        self.give_back()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


# As long as SQLite's busy timeout (PRAGMA busy_timeout above).
_TURN_WAIT_S = 10.0
# Rows per INSERT statement: the audit log's 9 parameters each stay well under SQLite's
# 32,766 parameters per statement.
_ROWS_PER_INSERT = 256


class DatabaseUnavailable(Exception):
    """The audit database cannot be opened; the message says why, in one line."""


class PostgresDatabase:
    """PostgreSQL, for several gateway replicas writing the same logs."""

    dialect = "postgres"

    def __init__(self, dsn: str) -> None:
        import psycopg

        try:
            self._db = psycopg.connect(dsn, autocommit=True)
        except psycopg.Error as exc:
            # The driver's first line says what failed (refused, bad password, no such
            # database); never the DSN, which can hold the password.
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise DatabaseUnavailable(f"cannot connect to PostgreSQL: {reason}") from exc
        self.sqlalchemy_url = sqlalchemy_url("postgres", dsn)
        # Each tenant's advisory lock key and SQL literal, as the server makes them (``_learn``).
        self._tenants: dict[str, tuple[int, str]] = {}

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        """Run one statement (``?`` and ``AS BLOB`` written the SQLite way)."""
        return self._db.execute(
            sql.replace("?", "%s").replace("AS BLOB", "AS BYTEA"),
            tuple(params),
        )

    def open_logs(
        self, tenants: Sequence[str], known: Collection[str] = ()
    ) -> tuple[bool, dict[str, bytes]]:
        """BEGIN, the advisory locks (``lock_logs``), then the frontiers in one SELECT:
        all of them, ``known`` or not (other replicas write the same logs, unseen).

        All three in one round trip: one simple query of several statements, in which each
        statement takes its own snapshot when it starts (read committed), so the SELECT,
        which starts once the locks are held, sees what the previous holder of a lock
        committed. Not in a pipeline: psycopg's pipeline costs more CPU than the round
        trips it saves on one machine.
        """
        wanted = sorted(set(tenants))
        names = ", ".join(self._tenants[tenant][1] for tenant in self._learn(wanted))
        # Only numbers and literals the server quoted (quote_literal) go into the text.
        select = f"SELECT tenant, state FROM audit_frontier WHERE tenant IN ({names})"  # noqa: S608
        cursor = self._db.execute(f"BEGIN; {self._locking(wanted)}; {select}")
        while cursor.nextset():
            pass  # to the last statement's rows
        rows = cursor.fetchall()
        return False, {str(tenant): bytes(state) for tenant, state in rows}

    def write_and_commit(self, writes: Sequence[tuple[str, Sequence[Sequence[Any]]]]) -> None:
        """Several rows of a statement with ``executemany`` (one prepared statement, the
        rows in one pipeline), a single row with ``execute``, then COMMIT; one row of each
        statement (one record in the batch) in one statement (``_chained``).

        Not multi-row statements: psycopg parses a statement of more than 50 parameters
        afresh every time, which cost the writer more CPU than all else it does for a
        batch. Nor one pipeline for everything: for the usual one or two rows, psycopg's
        pipeline costs more CPU than the round trips it saves.
        """
        present = [(sql, rows) for sql, rows in writes if rows]
        if len(present) > 1 and all(len(rows) == 1 for _, rows in present):
            # One row each (the usual batch with one request in flight): one statement,
            # the others as data-modifying WITH clauses, all of it or none of it.
            self._db.execute(
                _chained(tuple(sql for sql, _ in present)),
                tuple(value for _, rows in present for value in rows[0]),
            )
            present = []
        for sql, rows in present:
            statement = sql.replace("?", "%s")
            if len(rows) == 1:
                self._db.execute(statement, tuple(rows[0]))
            else:
                with self._db.cursor() as cursor:
                    cursor.executemany(statement, rows)
        self.commit()

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
        if tenants:
            self._db.execute(self._locking(sorted(set(tenants))))

    def _locking(self, tenants: list[str]) -> str:
        """The statements that take these tenants' locks, in this order.

        A tenant's lock is ``pg_advisory_xact_lock(hashtextextended(tenant, 7466130817))``
        (what every replica takes); the key is asked of the server once per tenant
        (``_learn``), so the statements carry only numbers and can go with BEGIN in one
        simple query.
        """
        return "; ".join(
            f"SELECT pg_advisory_xact_lock({self._tenants[tenant][0]})"
            for tenant in self._learn(tenants)
        )

    def _learn(self, tenants: list[str]) -> list[str]:
        """``tenants``, each one's lock key and SQL literal known (asked of the server the
        first time: ``hashtextextended`` and ``quote_literal``, so nothing is quoted here)."""
        for tenant in tenants:
            if tenant not in self._tenants:
                ((key, literal),) = self._db.execute(
                    "SELECT hashtextextended(%s, 7466130817), quote_literal(%s)",
                    (tenant, tenant),
                ).fetchall()
                self._tenants[tenant] = (int(key), str(literal))
        return tenants

    def close(self) -> None:
        """Close the connection."""
        self._db.close()


@functools.lru_cache(maxsize=16)
def _chained(statements: tuple[str, ...]) -> str:
    """PostgreSQL: ``WITH w0 AS (first), w1 AS (second) last`` for one round trip (the
    parameters in the statements' order)."""
    *first, last = (sql.replace("?", "%s") for sql in statements)
    clauses = ", ".join(f"w{n} AS ({sql})" for n, sql in enumerate(first))
    return f"WITH {clauses} {last}"


def sqlite_at(path: Path) -> Callable[[], Database]:
    """Opens connections to the SQLite audit database at ``path``."""
    return lambda: SqliteDatabase(path)
