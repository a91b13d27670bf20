"""runtime: CSV import jobs and their rows (ADR 0040).

Revision ID: runtime_0009
Revises: runtime_0008
Create Date: 2026-12-13
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "runtime_0009"
down_revision: str | None = "runtime_0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "runtime_import_job",
        sa.Column("org_id", sa.String(18), primary_key=True),
        sa.Column("job_id", sa.String(32), primary_key=True),
        sa.Column("user_id", sa.String(18), nullable=False),
        sa.Column("object_name", sa.String(80), nullable=False),
        sa.Column("mode", sa.String(8), nullable=False),
        sa.Column("external_id_field", sa.String(80), nullable=True),
        sa.Column("mapping", sa.Text, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("total", sa.Integer, nullable=False),
        sa.Column("processed", sa.Integer, nullable=False),
        sa.Column("succeeded", sa.Integer, nullable=False),
        sa.Column("failed", sa.Integer, nullable=False),
        sa.Column("error", sa.String(300), nullable=True),
        sa.Column("lease_owner", sa.String(64), nullable=True),
        sa.Column("lease_until", sa.BigInteger, nullable=True),
        sa.Column("created_at_ms", sa.BigInteger, nullable=False),
        sa.Column("updated_at_ms", sa.BigInteger, nullable=False),
    )
    op.create_index("ix_runtime_import_job_state", "runtime_import_job", ["state", "lease_until"])
    op.create_table(
        "runtime_import_row",
        sa.Column("org_id", sa.String(18), primary_key=True),
        sa.Column("job_id", sa.String(32), primary_key=True),
        sa.Column("row_no", sa.Integer, primary_key=True),
        sa.Column("fields", sa.Text, nullable=True),
        sa.Column("error", sa.String(300), nullable=True),
    )


def downgrade() -> None:
    op.drop_table("runtime_import_row")
    op.drop_index("ix_runtime_import_job_state", table_name="runtime_import_job")
    op.drop_table("runtime_import_job")
