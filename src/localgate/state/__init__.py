"""The gateway's shared state database: where keys and the shared fingerprints live.

With ``database_url`` it is PostgreSQL, shared by every replica (schema managed by Alembic,
``migrate.py``); without, the embedded SQLite file ``data_dir/localgate.db``.
"""

from localgate.state.fingerprints import KeyMismatch, remember_fingerprint
from localgate.state.postgres import StateDatabaseUnavailable, connect

__all__ = ["KeyMismatch", "StateDatabaseUnavailable", "connect", "remember_fingerprint"]
