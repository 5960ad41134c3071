"""Connecting to the shared state database (PostgreSQL): the one module importing psycopg
for it, translating the driver's errors into one line that never shows the DSN."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import psycopg

__all__ = ["StateConnection", "StateDatabaseUnavailable", "connect", "describe"]

# Seconds a connection attempt may take: an unreachable database is a start-up error, not a
# hang (and on the request path, a 503 rather than a stalled event loop).
CONNECT_TIMEOUT_S = 5


class StateDatabaseUnavailable(Exception):
    """The state database cannot be reached or used; the message says why, in one line."""


def describe(exc: BaseException) -> str:
    """A driver error's first line (refused, bad password, no such database), never the DSN."""
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def connect(dsn: str) -> psycopg.Connection[tuple[object, ...]]:
    """An autocommit connection to ``dsn``; ``StateDatabaseUnavailable`` in one line."""
    import psycopg

    try:
        connection = psycopg.connect(
            dsn,
            autocommit=True,
            connect_timeout=CONNECT_TIMEOUT_S,
            # A key looked up on the request path must not hang the event loop on a database
            # that stopped answering (a network partition sends no reset): the kernel gives
            # up on unacknowledged data, and the server on a statement, within seconds.
            tcp_user_timeout=CONNECT_TIMEOUT_S * 1000,
            keepalives=1,
            keepalives_idle=CONNECT_TIMEOUT_S,
            keepalives_interval=1,
            keepalives_count=3,
        )
        connection.execute(f"SET statement_timeout = {CONNECT_TIMEOUT_S * 1000}")
        return connection
    except psycopg.Error as exc:
        raise StateDatabaseUnavailable(
            f"database_url: cannot connect to PostgreSQL: {describe(exc)}"
        ) from exc


class StateConnection:
    """One autocommit connection used by one thread at a time, reconnected once per
    statement if it was lost; every driver error as ``StateDatabaseUnavailable``."""

    def __init__(self, dsn: str) -> None:
        self._dsn = dsn
        self._db = connect(dsn)

    def run(self, sql: str, params: tuple[Any, ...] = ()) -> Any:
        """One statement; its cursor."""
        import psycopg

        for attempt in (1, 2):
            try:
                return self._db.execute(sql, params)
            except psycopg.OperationalError as exc:
                if attempt == 2 or not (self._db.broken or self._db.closed):
                    raise StateDatabaseUnavailable(describe(exc)) from exc
                self._db = connect(self._dsn)
            except psycopg.Error as exc:
                raise StateDatabaseUnavailable(describe(exc)) from exc
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises

    def close(self) -> None:
        """Close the connection."""
        self._db.close()
