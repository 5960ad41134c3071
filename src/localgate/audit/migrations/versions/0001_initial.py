"""The initial audit schema: log, frontier, checkpoints, keys, meta; append-only guards."""

from __future__ import annotations

from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

TABLES = """
CREATE TABLE IF NOT EXISTS audit_keys (
    key_id        TEXT PRIMARY KEY,
    tenant        TEXT NOT NULL,
    purpose       TEXT NOT NULL,
    period        TEXT NOT NULL,
    wrapped       BLOB,
    master_key_id TEXT NOT NULL,
    created_at    TEXT NOT NULL,
    destroyed_at  TEXT,
    UNIQUE (tenant, purpose, period)
);
CREATE TABLE IF NOT EXISTS audit_log (
    tenant      TEXT NOT NULL,
    seq         INTEGER NOT NULL,
    kind        TEXT NOT NULL,
    request_id  TEXT NOT NULL,
    recorded_at TEXT NOT NULL,
    header      BLOB,
    payload     BLOB,
    original    BLOB,
    leaf_hash   BLOB NOT NULL,
    PRIMARY KEY (tenant, seq)
);
CREATE INDEX IF NOT EXISTS audit_log_request ON audit_log (request_id);
CREATE TABLE IF NOT EXISTS audit_frontier (
    tenant TEXT PRIMARY KEY,
    size   INTEGER NOT NULL,
    state  BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS audit_checkpoints (
    tenant     TEXT NOT NULL,
    size       INTEGER NOT NULL,
    note       TEXT NOT NULL,
    created_at TEXT NOT NULL,
    PRIMARY KEY (tenant, size)
);
CREATE TABLE IF NOT EXISTS audit_meta (
    name  TEXT PRIMARY KEY,
    value TEXT NOT NULL
)
"""

POSTGRES_GUARDS = [
    """
    CREATE OR REPLACE FUNCTION localgate_audit_append_only() RETURNS trigger AS $$
    BEGIN
        IF current_setting('localgate.audit_purge', true) = 'on' THEN
            RETURN OLD;
        END IF;
        RAISE EXCEPTION 'localgate: % on % refused: the audit log is append-only',
            TG_OP, TG_TABLE_NAME;
    END
    $$ LANGUAGE plpgsql
    """,
    "DROP TRIGGER IF EXISTS audit_log_append_only ON audit_log",
    """CREATE TRIGGER audit_log_append_only BEFORE UPDATE OR DELETE ON audit_log
       FOR EACH ROW EXECUTE FUNCTION localgate_audit_append_only()""",
    "DROP TRIGGER IF EXISTS audit_log_no_truncate ON audit_log",
    """CREATE TRIGGER audit_log_no_truncate BEFORE TRUNCATE ON audit_log
       FOR EACH STATEMENT EXECUTE FUNCTION localgate_audit_append_only()""",
    "DROP TRIGGER IF EXISTS audit_checkpoints_append_only ON audit_checkpoints",
    """CREATE TRIGGER audit_checkpoints_append_only BEFORE UPDATE OR DELETE
       ON audit_checkpoints FOR EACH ROW EXECUTE FUNCTION localgate_audit_append_only()""",
]


def upgrade() -> None:
    """Create the tables (idempotent, so logs created before migrations adopt them)."""
    postgres = op.get_bind().dialect.name == "postgresql"
    for statement in TABLES.split(";"):
        if statement.strip():
            sql = statement.replace("BLOB", "BYTEA").replace("INTEGER", "BIGINT")
            op.execute(sql if postgres else statement)
    if postgres:
        for statement in POSTGRES_GUARDS:
            op.execute(statement)


def downgrade() -> None:
    """Audit logs are append-only: no downgrades."""
    raise NotImplementedError("the audit schema is not downgraded")
