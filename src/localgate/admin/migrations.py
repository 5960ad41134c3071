"""Bringing the configured databases to this version's schema, outside the gateway.

A gateway migrates at start too; running it once beforehand (a Kubernetes Job, a compose
one-shot service) lets an operator see a failed migration before a rollout, and keeps
replicas that start together from all waiting on the same lock. The migrations themselves
live with their stores (``audit/migrate.py``, ``state/migrate.py``); this only calls them.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from localgate.audit.database import DatabaseUnavailable
from localgate.audit.migrate import head_revision, upgrade_schema
from localgate.audit.trail import database, schema_version
from localgate.config import Settings
from localgate.errors import FailedPrecondition
from localgate.identity.keys import SqliteKeyStore
from localgate.state.migrate import VERSION_TABLE
from localgate.state.migrate import head_revision as state_head_revision
from localgate.state.migrate import upgrade_schema as upgrade_schema_of_state
from localgate.state.postgres import StateDatabaseUnavailable, connect, describe

__all__ = ["CURRENT", "MigratedStore", "migrate_databases"]

# The schema "version" of a store without numbered migrations, once it is in place.
CURRENT = "current"


@dataclass(frozen=True)
class MigratedStore:
    """One store and its schema before and after (``None`` before: it was empty)."""

    name: str
    location: str
    before: str | None
    after: str


def migrate_databases(settings: Settings) -> list[MigratedStore]:
    """Apply every pending migration of the state store and the audit store.

    Raises ``FailedPrecondition`` with one line (never the DSN, which can hold a password)
    when a database cannot be reached or a migration fails.
    """
    migrated = [_state_store(settings)]
    if settings.proxy.enable_audit:
        migrated.append(_audit_store(settings))
    return migrated


def _state_store(settings: Settings) -> MigratedStore:
    if settings.database_url is not None:
        return _shared_state_store(settings.database_url)
    # The embedded key store creates its tables when opened; it has no versions yet.
    path = settings.state_db_path
    try:
        SqliteKeyStore(path).close()
    except OSError as exc:
        raise FailedPrecondition(f"state store {path}: {exc.strerror or exc}") from exc
    except sqlite3.Error as exc:
        raise FailedPrecondition(f"state store {path}: {_first_line(exc)}") from exc
    return MigratedStore("state", str(path), CURRENT, CURRENT)


def _shared_state_store(dsn: str) -> MigratedStore:
    """The shared state in PostgreSQL (``database_url``): its own Alembic migrations."""
    location = "postgres (database_url)"
    try:
        connection = connect(dsn)
    except StateDatabaseUnavailable as exc:
        raise FailedPrecondition(f"state store ({location}): {exc}") from exc
    try:
        found = connection.execute(
            "SELECT to_regclass(%s) IS NOT NULL", (VERSION_TABLE,)
        ).fetchone()
        before = None
        if found is not None and found[0]:
            # A constant of the package, not input.
            query = f"SELECT version_num FROM {VERSION_TABLE}"  # noqa: S608
            row = connection.execute(query).fetchone()
            before = str(row[0]) if row else None
    except Exception as exc:  # the driver's errors
        raise FailedPrecondition(f"state store ({location}): {describe(exc)}") from exc
    finally:
        connection.close()
    try:
        upgrade_schema_of_state(dsn)
    except Exception as exc:  # Alembic and the drivers raise their own trees
        raise FailedPrecondition(
            f"state store ({location}): migration failed: {describe(exc)}"
        ) from exc
    return MigratedStore("state", location, before, state_head_revision())


def _audit_store(settings: Settings) -> MigratedStore:
    store = settings.audit.store
    location = (
        str(settings.audit_db_path)
        if store == "sqlite" or not settings.audit.postgres_dsn
        else "postgres (audit.postgres_dsn)"
    )
    try:
        db = database(settings)()
    except DatabaseUnavailable as exc:
        raise FailedPrecondition(f"audit store ({store}): {exc}") from exc
    try:
        before = schema_version(db)
        url = db.sqlalchemy_url
    finally:
        db.close()
    try:
        upgrade_schema(url)
    except Exception as exc:  # Alembic and the drivers raise their own trees
        raise FailedPrecondition(
            f"audit store ({store}): migration failed: {_first_line(exc)}"
        ) from exc
    return MigratedStore("audit", location, before, head_revision())


def _first_line(exc: BaseException) -> str:
    # SQLAlchemy wraps the driver's error; its own first line is the driver's message.
    origin = getattr(exc, "orig", None) or exc
    lines = str(origin).strip().splitlines()
    return lines[0] if lines else type(origin).__name__
