"""Signed tenant lists (a deleted tenant stays named); the purge can erase on PostgreSQL."""

from __future__ import annotations

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

TABLE = """
CREATE TABLE IF NOT EXISTS audit_tenant_lists (
    digest     TEXT PRIMARY KEY,
    note       TEXT NOT NULL,
    created_at TEXT NOT NULL
)
"""

POSTGRES_GUARDS = [
    # 0001's guard returned OLD for the purge's UPDATE too, which in a BEFORE UPDATE
    # trigger keeps the old row: on PostgreSQL the purge erased nothing. NEW lets it.
    """
    CREATE OR REPLACE FUNCTION localgate_audit_append_only() RETURNS trigger AS $$
    BEGIN
        IF current_setting('localgate.audit_purge', true) = 'on' THEN
            IF TG_OP = 'UPDATE' THEN
                RETURN NEW;
            END IF;
            RETURN OLD;
        END IF;
        RAISE EXCEPTION 'localgate: % on % refused: the audit log is append-only',
            TG_OP, TG_TABLE_NAME;
    END
    $$ LANGUAGE plpgsql
    """,
    "DROP TRIGGER IF EXISTS audit_tenant_lists_append_only ON audit_tenant_lists",
    """CREATE TRIGGER audit_tenant_lists_append_only BEFORE UPDATE OR DELETE
       ON audit_tenant_lists FOR EACH ROW EXECUTE FUNCTION localgate_audit_append_only()""",
    "DROP TRIGGER IF EXISTS audit_tenant_lists_no_truncate ON audit_tenant_lists",
    """CREATE TRIGGER audit_tenant_lists_no_truncate BEFORE TRUNCATE ON audit_tenant_lists
       FOR EACH STATEMENT EXECUTE FUNCTION localgate_audit_append_only()""",
    # 0001 guarded the checkpoints against UPDATE and DELETE but not TRUNCATE.
    "DROP TRIGGER IF EXISTS audit_checkpoints_no_truncate ON audit_checkpoints",
    """CREATE TRIGGER audit_checkpoints_no_truncate BEFORE TRUNCATE ON audit_checkpoints
       FOR EACH STATEMENT EXECUTE FUNCTION localgate_audit_append_only()""",
]


def upgrade() -> None:
    """Create the table; on PostgreSQL it is append-only like the log."""
    op.execute(TABLE)
    if op.get_bind().dialect.name == "postgresql":
        for statement in POSTGRES_GUARDS:
            op.execute(statement)


def downgrade() -> None:
    """Audit logs are append-only: no downgrades."""
    raise NotImplementedError("the audit schema is not downgraded")
