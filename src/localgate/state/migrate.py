"""Bringing the shared state database's schema up to date, with Alembic.

Its own version table (``localgate_state_version``), so the audit trail's migrations and
these can share one database. Replicas starting at once are serialised by an advisory lock.
"""

from __future__ import annotations

from pathlib import Path

from localgate.state.postgres import StateDatabaseUnavailable, describe

__all__ = ["VERSION_TABLE", "head_revision", "prepare_schema", "upgrade_schema"]

VERSION_TABLE = "localgate_state_version"
_LOCK = 7466130818  # the audit migrations take 7466130817


def upgrade_schema(dsn: str) -> None:
    """Apply every pending migration to the PostgreSQL database at ``dsn``."""
    # Imported here: 0.6 s that only start-up and `localgate keys` pay.
    from alembic import command
    from alembic.config import Config
    from sqlalchemy import create_engine, text

    config = Config()
    config.set_main_option("script_location", str(Path(__file__).parent / "migrations"))
    engine = create_engine(_sqlalchemy_url(dsn))
    try:
        with engine.begin() as connection:
            connection.execute(text(f"SELECT pg_advisory_xact_lock({_LOCK})"))
            config.attributes["connection"] = connection
            command.upgrade(config, "head")
    finally:
        engine.dispose()


def prepare_schema(dsn: str) -> None:
    """``upgrade_schema`` for a store opening on ``dsn``: any failure as one
    ``StateDatabaseUnavailable`` line naming the setting."""
    try:
        upgrade_schema(dsn)
    except Exception as exc:
        # SQLAlchemy wraps the driver's error: its first line says what failed.
        cause: BaseException = exc.__cause__ or exc
        raise StateDatabaseUnavailable(
            f"database_url: cannot prepare the state database: {describe(cause)}"
        ) from exc


def head_revision() -> str:
    """The newest migration of the state schema."""
    from alembic.script import ScriptDirectory

    head = ScriptDirectory(str(Path(__file__).parent / "migrations")).get_current_head()
    if head is None:  # the package ships its migrations
        raise RuntimeError("the state migrations are missing from the package")
    return head


def _sqlalchemy_url(dsn: str) -> str:
    for prefix in ("postgresql://", "postgres://"):
        if dsn.startswith(prefix):
            return "postgresql+psycopg://" + dsn.removeprefix(prefix)
    return dsn
