"""runtime: API requests per user per day (the dialects' daily limit, `GET limits`).

Revision ID: runtime_0007
Revises: runtime_0006
Create Date: 2026-12-12
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "runtime_0007"
down_revision: str | None = "runtime_0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "runtime_api_usage",
        sa.Column("org_id", sa.String(18), primary_key=True),
        sa.Column("user_id", sa.String(18), primary_key=True),
        sa.Column("day", sa.String(10), primary_key=True),
        sa.Column("requests", sa.BigInteger, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("runtime_api_usage")
