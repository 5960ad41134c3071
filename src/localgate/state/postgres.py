"""Connecting to the shared state database (PostgreSQL): the one module importing psycopg
for it, translating the driver's errors into one line that never shows the DSN."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import psycopg

__all__ = ["StateDatabaseUnavailable", "connect", "describe"]

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
        return psycopg.connect(dsn, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S)
    except psycopg.Error as exc:
        raise StateDatabaseUnavailable(
            f"database_url: cannot connect to PostgreSQL: {describe(exc)}"
        ) from exc
