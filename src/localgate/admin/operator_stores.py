"""Which operator store the admin API and ``localgate admin`` use: the SQLite state
database in the data directory, or PostgreSQL with ``database_url``."""

from __future__ import annotations

from localgate.admin.operators import OperatorAdmin, OperatorStore
from localgate.admin.operators_postgres import PostgresOperatorStore
from localgate.config import Settings
from localgate.errors import ServiceUnavailable
from localgate.state import StateDatabaseUnavailable

__all__ = ["open_operator_store"]


def open_operator_store(settings: Settings, *, serving: bool = True) -> OperatorStore:
    """The configured store: PostgreSQL with ``database_url`` (a change made on one replica
    is honoured by every other within a second), else ``data_dir/localgate.db``.

    ``serving`` starts the change poller a listener needs (the CLI does not).
    ``ServiceUnavailable`` (one line) if PostgreSQL cannot be reached or migrated.
    """
    if settings.database_url is not None:
        try:
            return PostgresOperatorStore(settings.database_url, poll=serving)
        except StateDatabaseUnavailable as exc:
            raise ServiceUnavailable(str(exc)) from exc
    return OperatorAdmin(settings.state_db_path)
