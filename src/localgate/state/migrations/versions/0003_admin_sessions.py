"""The admin console's sessions, failed logins and OIDC logins under way, shared so that
any replica behind the load balancer serves a login made on another, and throttles it as one."""

from __future__ import annotations

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

STATEMENTS = [
    # By the SHA-256 digest of the session id: the id itself is only in the cookie.
    """
    CREATE TABLE admin_sessions (
        digest     BYTEA PRIMARY KEY,
        user_name  TEXT NOT NULL,
        operator   TEXT NOT NULL,
        role       TEXT NOT NULL,
        tenant     TEXT,
        local      BOOLEAN NOT NULL,
        csrf_token TEXT NOT NULL,
        expires_at DOUBLE PRECISION NOT NULL
    )
    """,
    "CREATE INDEX admin_sessions_expiry ON admin_sessions (expires_at)",
    """
    CREATE TABLE admin_login_failures (
        user_name TEXT NOT NULL,
        address   TEXT NOT NULL,
        first_at  DOUBLE PRECISION NOT NULL,
        failures  INTEGER NOT NULL,
        PRIMARY KEY (user_name, address)
    )
    """,
    "CREATE INDEX admin_login_failures_first ON admin_login_failures (first_at)",
    # OIDC logins under way, by the digest of their state: the provider's redirect may
    # come back to any replica.
    """
    CREATE TABLE admin_oidc_pending (
        state_digest BYTEA PRIMARY KEY,
        verifier     TEXT NOT NULL,
        nonce        TEXT NOT NULL,
        expires_at   DOUBLE PRECISION NOT NULL
    )
    """,
]


def upgrade() -> None:
    """Create the tables."""
    for statement in STATEMENTS:
        op.execute(statement)


def downgrade() -> None:
    """State is not downgraded: a newer gateway's rows stay readable."""
    raise NotImplementedError("the state schema is not downgraded")
