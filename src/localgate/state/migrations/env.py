"""Alembic environment: migrations run on the connection localgate hands over."""

from __future__ import annotations

from alembic import context

from localgate.state.migrate import VERSION_TABLE

connection = context.config.attributes["connection"]
context.configure(
    connection=connection,
    target_metadata=None,
    transactional_ddl=True,
    version_table=VERSION_TABLE,
)
with context.begin_transaction():
    context.run_migrations()
