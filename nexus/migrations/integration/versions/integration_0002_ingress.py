"""integration: connector routes and ingress receipts (webhook ingress, docs/adr/0015).

Revision ID: integration_0002
Revises: integration_0001
Create Date: 2026-12-08
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision: str = "integration_0002"
down_revision: str | None = "integration_0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "integration_route",
        sa.Column("org_id", sa.String(18), primary_key=True),
        sa.Column("connector", sa.String(64), primary_key=True),
        sa.Column("route_key", sa.String(64), primary_key=True),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("body", sa.Text, nullable=False),
        sa.Column("digest", sa.String(64), nullable=False),
        sa.Column("active", sa.Boolean, nullable=False),
        sa.Column("updated_at_ms", sa.BigInteger, nullable=False),
    )
    op.create_table(
        "integration_ingress_receipt",
        sa.Column("org_id", sa.String(18), primary_key=True),
        sa.Column("receipt_id", sa.String(32), primary_key=True),
        sa.Column("connector", sa.String(64), nullable=False),
        sa.Column("route_key", sa.String(64), nullable=False),
        sa.Column("route_version", sa.Integer, nullable=False),
        sa.Column("provider_delivery_id", sa.String(191), nullable=False),
        sa.Column("delivery_id_source", sa.String(16), nullable=False),
        sa.Column("method", sa.String(10), nullable=False),
        sa.Column("content_type", sa.String(255), nullable=True),
        sa.Column("event_kind", sa.String(128), nullable=True),
        sa.Column("received_at_ms", sa.BigInteger, nullable=False),
        sa.Column("last_delivery_at_ms", sa.BigInteger, nullable=False),
        sa.Column("deliveries", sa.Integer, nullable=False),
        sa.Column("correlation", sa.Text, nullable=False),
        sa.Column("body_bytes", sa.Integer, nullable=False),
        sa.Column(
            "body_snapshot",
            sa.LargeBinary().with_variant(mysql.MEDIUMBLOB(), "mysql"),
            nullable=True,
        ),
        sa.Column("body_ref", sa.String(255), nullable=True),
        sa.Column("payload_sha256", sa.String(64), nullable=False),
        sa.Column("signature_scheme", sa.String(32), nullable=False),
        sa.Column("signature_verdict", sa.String(32), nullable=False),
        sa.Column("signature_key_index", sa.Integer, nullable=True),
        sa.Column("router_status", sa.String(16), nullable=False),
        sa.Column("router_attempts", sa.Integer, nullable=False),
        sa.Column("next_attempt_at_ms", sa.BigInteger, nullable=False),
        sa.Column("lease_token", sa.String(36), nullable=True),
        sa.Column("lease_owner", sa.String(128), nullable=True),
        sa.Column("lease_until_ms", sa.BigInteger, nullable=True),
        sa.Column("materialized_event_ids", sa.Text, nullable=True),
        sa.Column("error", sa.Text, nullable=True),
        sa.UniqueConstraint(
            "org_id", "connector", "provider_delivery_id", name="uq_ingress_receipt_delivery"
        ),
    )
    op.create_index(
        "ix_ingress_receipt_router",
        "integration_ingress_receipt",
        ["org_id", "router_status", "next_attempt_at_ms", "receipt_id"],
    )


def downgrade() -> None:
    op.drop_table("integration_ingress_receipt")
    op.drop_table("integration_route")
