"""runtime: metadata definitions with active pointers, apply journal, schema-owner journal.

Revision ID: runtime_0003
Revises: runtime_0002
Create Date: 2026-11-29
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "runtime_0003"
down_revision: str | None = "runtime_0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "runtime_org_state",
        sa.Column("org_id", sa.String(18), primary_key=True),
        sa.Column("schema_generation", sa.BigInteger, nullable=False),
        sa.Column("metadata_revision", sa.BigInteger, nullable=False),
    )
    op.create_table(
        "runtime_definition",
        sa.Column("org_id", sa.String(18), primary_key=True),
        sa.Column("kind", sa.String(32), primary_key=True),
        sa.Column("name", sa.String(80), primary_key=True),
        sa.Column("version", sa.Integer, primary_key=True),
        sa.Column("body", sa.Text, nullable=False),
        sa.Column("digest", sa.String(64), nullable=False),
        sa.Column("apply_id", sa.String(36), nullable=False),
        sa.Column("created_at_ms", sa.BigInteger, nullable=False),
    )
    op.create_table(
        "runtime_active_definition",
        sa.Column("org_id", sa.String(18), primary_key=True),
        sa.Column("kind", sa.String(32), primary_key=True),
        sa.Column("name", sa.String(80), primary_key=True),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("activated_at_ms", sa.BigInteger, nullable=False),
    )
    op.create_table(
        "runtime_metadata_apply",
        sa.Column("org_id", sa.String(18), primary_key=True),
        sa.Column("apply_id", sa.String(36), primary_key=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("definitions", sa.Text, nullable=False),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("created_at_ms", sa.BigInteger, nullable=False),
        sa.Column("updated_at_ms", sa.BigInteger, nullable=False),
    )
    op.create_index("ix_metadata_apply_state", "runtime_metadata_apply", ["org_id", "state"])
    op.create_table(
        "runtime_schema_operation",
        sa.Column("org_id", sa.String(18), primary_key=True),
        sa.Column("operation_id", sa.String(36), primary_key=True),
        sa.Column("apply_id", sa.String(36), nullable=False),
        sa.Column("table_name", sa.String(64), nullable=False),
        sa.Column("desired_spec", sa.Text, nullable=False),
        sa.Column("desired_fingerprint", sa.String(64), nullable=False),
        sa.Column("actual_fingerprint", sa.String(64), nullable=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("created_at_ms", sa.BigInteger, nullable=False),
        sa.Column("applied_at_ms", sa.BigInteger, nullable=True),
    )
    op.create_index("ix_schema_operation_apply", "runtime_schema_operation", ["org_id", "apply_id"])


def downgrade() -> None:
    for table in (
        "runtime_schema_operation",
        "runtime_metadata_apply",
        "runtime_active_definition",
        "runtime_definition",
        "runtime_org_state",
    ):
        op.drop_table(table)
