"""The shared state: tenant keys, their change counter, the fingerprints of shared keys."""

from __future__ import annotations

from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

STATEMENTS = [
    """
    CREATE TABLE api_keys (
        key_id     TEXT PRIMARY KEY,
        tenant     TEXT NOT NULL,
        label      TEXT NOT NULL DEFAULT '',
        digest     BYTEA NOT NULL,
        created_at TEXT NOT NULL,
        revoked_at TEXT,
        position   BIGINT GENERATED ALWAYS AS IDENTITY
    )
    """,
    "CREATE INDEX api_keys_tenant ON api_keys (tenant)",
    # Every change to api_keys, by a gateway or by hand, bumps the counter in the same
    # transaction: replicas poll one row to know when their cached keys are stale.
    "CREATE TABLE state_generations (name TEXT PRIMARY KEY, generation BIGINT NOT NULL)",
    "INSERT INTO state_generations (name, generation) VALUES ('api_keys', 0)",
    """
    CREATE FUNCTION localgate_api_keys_changed() RETURNS trigger AS $$
    BEGIN
        UPDATE state_generations SET generation = generation + 1 WHERE name = 'api_keys';
        RETURN NULL;
    END
    $$ LANGUAGE plpgsql
    """,
    """CREATE TRIGGER api_keys_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE
       ON api_keys FOR EACH STATEMENT EXECUTE FUNCTION localgate_api_keys_changed()""",
    # The keys every replica must hold the same of (the first replica to start records
    # them; a replica holding another refuses to start).
    """
    CREATE TABLE shared_key_fingerprints (
        name        TEXT PRIMARY KEY,
        fingerprint TEXT NOT NULL,
        recorded_at TEXT NOT NULL
    )
    """,
]


def upgrade() -> None:
    """Create the tables, the counter and its trigger."""
    for statement in STATEMENTS:
        op.execute(statement)


def downgrade() -> None:
    """State is not downgraded: a newer gateway's rows stay readable."""
    raise NotImplementedError("the state schema is not downgraded")
