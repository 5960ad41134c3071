"""Bringing an audit database's schema up to date, with Alembic.

The writer runs this before it opens its connection. Several processes starting at once
are serialised: on PostgreSQL (replicas) by an advisory lock inside the migration's
transaction; on SQLite (worker processes sharing a data directory) by an ``flock`` on a
file beside the database, since SQLite's deferred transactions would let two of them read
"no version table" and the second fail creating it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

__all__ = ["head_revision", "sqlalchemy_url", "upgrade_schema"]


def upgrade_schema(url: str) -> None:
    """Apply every pending migration to the database at ``url`` (a SQLAlchemy URL)."""
    # Alembic and SQLAlchemy take 0.6 s to import: only the writer and `audit checkpoint`
    # need them, not every command that reads the audit database (or `localgate --help`).
    from alembic import command
    from alembic.config import Config
    from sqlalchemy import create_engine, text

    config = Config()
    config.set_main_option("script_location", str(Path(__file__).parent / "migrations"))
    with _sqlite_lock(url):
        engine = create_engine(url)
        try:
            with engine.begin() as connection:
                if connection.dialect.name == "postgresql":
                    connection.execute(text("SELECT pg_advisory_xact_lock(7466130817)"))
                config.attributes["connection"] = connection
                command.upgrade(config, "head")
        finally:
            engine.dispose()


@contextlib.contextmanager
def _sqlite_lock(url: str) -> Iterator[None]:
    """An exclusive ``flock`` beside a SQLite database for the migration (nothing else)."""
    if not url.startswith("sqlite:///"):
        yield
        return
    lock = Path(url.removeprefix("sqlite:///") + ".migrate.lock")
    lock.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)  # released with the descriptor
        yield
    finally:
        os.close(descriptor)


def head_revision() -> str:
    """The newest migration: the schema version a gateway of this version runs."""
    from alembic.script import ScriptDirectory

    head = ScriptDirectory(str(Path(__file__).parent / "migrations")).get_current_head()
    if head is None:  # the package ships its migrations
        raise RuntimeError("the audit migrations are missing from the package")
    return head


def sqlalchemy_url(dialect: str, location: str) -> str:
    """The SQLAlchemy URL of a SQLite path or a PostgreSQL DSN."""
    if dialect == "sqlite":
        return f"sqlite:///{location}"
    if location.startswith("postgresql://"):
        return "postgresql+psycopg://" + location.removeprefix("postgresql://")
    if location.startswith("postgres://"):
        return "postgresql+psycopg://" + location.removeprefix("postgres://")
    return location
