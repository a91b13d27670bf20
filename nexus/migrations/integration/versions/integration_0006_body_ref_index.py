"""integration: an index on receipts' body references, so the retention loop can tell which
kept body files no receipt references any more.

Revision ID: integration_0006
Revises: integration_0005
Create Date: 2026-12-13
"""

from collections.abc import Sequence

from alembic import op

revision: str = "integration_0006"
down_revision: str | None = "integration_0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_ingress_receipt_body_ref", "integration_ingress_receipt", ["body_ref"])


def downgrade() -> None:
    op.drop_index("ix_ingress_receipt_body_ref", table_name="integration_ingress_receipt")
