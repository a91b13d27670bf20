"""integration: the App that owns a connector route (set when Integration applies its Catalog
snapshot, docs/adr/0033); NULL for routes applied by hand (`nexus integration apply-routes`).

Revision ID: integration_0007
Revises: integration_0006
Create Date: 2026-11-29
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "integration_0007"
down_revision: str | None = "integration_0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("integration_route", sa.Column("owner", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("integration_route") as batch:
        batch.drop_column("owner")
