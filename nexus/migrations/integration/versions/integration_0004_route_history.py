"""integration: every version of each connector route (replay proves compatibility with it,
docs/adr/0020); the current versions are copied in as their first history rows.

Revision ID: integration_0004
Revises: integration_0003
Create Date: 2026-12-11
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "integration_0004"
down_revision: str | None = "integration_0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "integration_route_version",
        sa.Column("org_id", sa.String(18), primary_key=True),
        sa.Column("connector", sa.String(64), primary_key=True),
        sa.Column("route_key", sa.String(64), primary_key=True),
        sa.Column("version", sa.Integer, primary_key=True),
        sa.Column("body", sa.Text, nullable=False),
        sa.Column("digest", sa.String(64), nullable=False),
        sa.Column("applied_at_ms", sa.BigInteger, nullable=False),
    )
    op.execute(
        "INSERT INTO integration_route_version"
        " (org_id, connector, route_key, version, body, digest, applied_at_ms)"
        " SELECT org_id, connector, route_key, version, body, digest, updated_at_ms"
        " FROM integration_route"
    )


def downgrade() -> None:
    op.drop_table("integration_route_version")
