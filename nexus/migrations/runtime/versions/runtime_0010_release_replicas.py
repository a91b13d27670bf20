"""runtime: the newest release fencing token seen per org and the release it prepared, and
each runtime-api replica's acknowledgement of the release it preloaded (docs/adr/0034).

Revision ID: runtime_0010
Revises: runtime_0009
Create Date: 2026-11-29
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "runtime_0010"
down_revision: str | None = "runtime_0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "runtime_release_fence",
        sa.Column("org_id", sa.String(18), primary_key=True),
        sa.Column("fencing_token", sa.BigInteger, nullable=False),
        sa.Column("prepared_revision", sa.BigInteger, nullable=False),
        sa.Column("updated_at_ms", sa.BigInteger, nullable=False),
    )
    op.create_table(
        "runtime_replica",
        sa.Column("replica_id", sa.String(128), primary_key=True),
        sa.Column("org_id", sa.String(18), nullable=True),
        sa.Column("prepared_revision", sa.BigInteger, nullable=False),
        sa.Column("seen_at_ms", sa.BigInteger, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("runtime_replica")
    op.drop_table("runtime_release_fence")
