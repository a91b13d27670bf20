"""runtime: an authorization code remembers the session it opened (RFC 6749 §4.1.2).

A code presented a second time is refused, and the tokens issued from its first use are
revoked: the session it opened is found through `session_id`. Codes redeemed before this
revision have none (they expire within minutes).

Revision ID: runtime_0014
Revises: runtime_0013
Create Date: 2026-12-07
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "runtime_0014"
down_revision: str | None = "runtime_0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("identity_authorization_code") as batch:
        batch.add_column(sa.Column("session_id", sa.String(18), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("identity_authorization_code") as batch:
        batch.drop_column("session_id")
