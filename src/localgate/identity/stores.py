"""Which key store a gateway uses: the SQLite file in its data directory, or PostgreSQL."""

from __future__ import annotations

from localgate.config import Settings
from localgate.identity.keys import SqliteKeyStore
from localgate.identity.postgres import PostgresKeyStore

__all__ = ["AdminKeyStore", "open_key_store"]

AdminKeyStore = SqliteKeyStore | PostgresKeyStore


def open_key_store(settings: Settings, *, serving: bool = True) -> AdminKeyStore:
    """The configured key store: PostgreSQL with ``database_url``, else ``localgate.db``.

    ``serving`` starts the change poller a gateway needs (the CLI does not).
    ``StateDatabaseUnavailable`` (one line) if PostgreSQL cannot be reached.
    """
    if settings.database_url is not None:
        return PostgresKeyStore(settings.database_url, poll=serving)
    return SqliteKeyStore(settings.state_db_path)
