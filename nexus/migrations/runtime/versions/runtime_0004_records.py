"""runtime: permission-set assignments, auto-number counters, idempotency ledger, field history.

Revision ID: runtime_0004
Revises: runtime_0003
Create Date: 2026-11-29
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "runtime_0004"
down_revision: str | None = "runtime_0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "runtime_permission_assignment",
        sa.Column("org_id", sa.String(18), primary_key=True),
        sa.Column("user_id", sa.String(18), primary_key=True),
        sa.Column("permission_set", sa.String(80), primary_key=True),
        sa.Column("assigned_at_ms", sa.BigInteger, nullable=False),
    )
    op.create_table(
        "runtime_auto_number",
        sa.Column("org_id", sa.String(18), primary_key=True),
        sa.Column("object_name", sa.String(80), primary_key=True),
        sa.Column("field_name", sa.String(80), primary_key=True),
        sa.Column("next_value", sa.BigInteger, nullable=False),
    )
    op.create_table(
        "runtime_idempotency",
        sa.Column("org_id", sa.String(18), primary_key=True),
        sa.Column("idem_key", sa.String(128), primary_key=True),
        sa.Column("request_digest", sa.String(64), nullable=False),
        sa.Column("result", sa.Text, nullable=False),
        sa.Column("created_at_ms", sa.BigInteger, nullable=False),
    )
    op.create_table(
        "runtime_field_history",
        sa.Column("org_id", sa.String(18), primary_key=True),
        sa.Column("history_id", sa.String(36), primary_key=True),
        sa.Column("object_name", sa.String(80), nullable=False),
        sa.Column("record_id", sa.String(18), nullable=False),
        sa.Column("field_name", sa.String(80), nullable=False),
        sa.Column("old_value", sa.Text, nullable=True),
        sa.Column("new_value", sa.Text, nullable=True),
        sa.Column("changed_by_id", sa.String(18), nullable=False),
        sa.Column("changed_at_ms", sa.BigInteger, nullable=False),
    )
    op.create_index(
        "ix_field_history_record",
        "runtime_field_history",
        ["org_id", "record_id", "changed_at_ms"],
    )


def downgrade() -> None:
    for table in (
        "runtime_field_history",
        "runtime_idempotency",
        "runtime_auto_number",
        "runtime_permission_assignment",
    ):
        op.drop_table(table)
