"""${message}"""

from __future__ import annotations

from alembic import op

revision = ${repr(up_revision)}
down_revision = ${repr(down_revision)}
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Apply this migration."""


def downgrade() -> None:
    """State is not downgraded: a newer gateway's rows stay readable."""
    raise NotImplementedError("the state schema is not downgraded")
