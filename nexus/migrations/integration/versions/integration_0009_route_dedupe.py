"""integration: a delivery is one per route, and a redelivery with another body is counted.

The receipt's dedupe key becomes (org, connector, route, provider delivery id): the same
provider id on two routes of one connector is two deliveries (the old key, without the route,
silently dropped the second). `digest_mismatches` counts redeliveries of a known delivery id
whose body digest differs from the stored one (the stored body stays the first).

Revision ID: integration_0009
Revises: integration_0008
Create Date: 2026-12-07
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "integration_0009"
down_revision: str | None = "integration_0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLE = "integration_ingress_receipt"


def upgrade() -> None:
    with op.batch_alter_table(TABLE) as batch:
        batch.add_column(
            sa.Column("digest_mismatches", sa.Integer, nullable=False, server_default="0")
        )
        batch.drop_constraint("uq_ingress_receipt_delivery", type_="unique")
        batch.create_unique_constraint(
            "uq_ingress_receipt_route_delivery",
            ["org_id", "connector", "provider_delivery_id", "route_key"],
        )


def downgrade() -> None:
    """Refused when two routes of a connector hold one delivery id (the old key cannot)."""
    with op.batch_alter_table(TABLE) as batch:
        batch.drop_constraint("uq_ingress_receipt_route_delivery", type_="unique")
        batch.create_unique_constraint(
            "uq_ingress_receipt_delivery", ["org_id", "connector", "provider_delivery_id"]
        )
        batch.drop_column("digest_mismatches")
