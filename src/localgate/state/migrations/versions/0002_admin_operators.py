"""The admin API's operators: its API tokens and local users, and their change counter."""

from __future__ import annotations

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

STATEMENTS = [
    """
    CREATE TABLE admin_tokens (
        token_id   TEXT PRIMARY KEY,
        role       TEXT NOT NULL,
        tenant     TEXT,
        label      TEXT NOT NULL DEFAULT '',
        digest     BYTEA NOT NULL,
        created_at TEXT NOT NULL,
        expires_at TEXT,
        revoked_at TEXT,
        position   BIGINT GENERATED ALWAYS AS IDENTITY
    )
    """,
    """
    CREATE TABLE admin_users (
        name          TEXT PRIMARY KEY,
        role          TEXT NOT NULL,
        tenant        TEXT,
        password_hash TEXT NOT NULL,
        created_at    TEXT NOT NULL,
        disabled_at   TEXT
    )
    """,
    # As for api_keys: any change to either table, by a gateway, the CLI or by hand, bumps
    # one counter in the same transaction; replicas poll it and drop what they cached.
    "INSERT INTO state_generations (name, generation) VALUES ('admin_operators', 0)",
    """
    CREATE FUNCTION localgate_admin_operators_changed() RETURNS trigger AS $$
    BEGIN
        UPDATE state_generations SET generation = generation + 1
            WHERE name = 'admin_operators';
        RETURN NULL;
    END
    $$ LANGUAGE plpgsql
    """,
    """CREATE TRIGGER admin_tokens_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE
       ON admin_tokens FOR EACH STATEMENT EXECUTE FUNCTION localgate_admin_operators_changed()""",
    """CREATE TRIGGER admin_users_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE
       ON admin_users FOR EACH STATEMENT EXECUTE FUNCTION localgate_admin_operators_changed()""",
]


def upgrade() -> None:
    """Create the tables, the counter's row and the triggers."""
    for statement in STATEMENTS:
        op.execute(statement)


def downgrade() -> None:
    """State is not downgraded: a newer gateway's rows stay readable."""
    raise NotImplementedError("the state schema is not downgraded")
