"""runtime: Bulk API 1.0 batches (docs/adr/0077, "Bulk API 1.0").

`runtime_bulk_batch`: one row per batch of a Bulk API 1.0 job (a `v1ingest` or `v1query`
job of `runtime_bulk_job`), with its state and counts; its rows (or a query's result
pages) are the job's chunks numbered from `number * BATCH_STRIDE`. The job gains its
`content_type` (JSON, CSV or XML; null for Bulk API 2.0 jobs, which are CSV).

Revision ID: runtime_0016
Revises: runtime_0015
Create Date: 2026-12-07
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "runtime_0016"
down_revision: str | None = "runtime_0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("runtime_bulk_job", sa.Column("content_type", sa.String(8), nullable=True))
    op.create_table(
        "runtime_bulk_batch",
        sa.Column("org_id", sa.String(18), primary_key=True),
        sa.Column("job_id", sa.String(18), primary_key=True),
        sa.Column("batch_id", sa.String(18), primary_key=True),
        sa.Column("number", sa.Integer, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("state_message", sa.String(1000), nullable=True),
        sa.Column("columns", sa.Text, nullable=True),
        sa.Column("soql", sa.Text, nullable=True),
        sa.Column("chunks", sa.Integer, nullable=False),
        sa.Column("next_chunk", sa.Integer, nullable=False),
        sa.Column("records_processed", sa.Integer, nullable=False),
        sa.Column("records_failed", sa.Integer, nullable=False),
        sa.Column("started_at_ms", sa.BigInteger, nullable=True),
        sa.Column("processing_ms", sa.BigInteger, nullable=False),
        sa.Column("created_at_ms", sa.BigInteger, nullable=False),
        sa.Column("updated_at_ms", sa.BigInteger, nullable=False),
    )
    op.create_index(
        "ix_runtime_bulk_batch_number",
        "runtime_bulk_batch",
        ["org_id", "job_id", "number"],
        unique=True,
    )


def downgrade() -> None:
    op.drop_index("ix_runtime_bulk_batch_number", table_name="runtime_bulk_batch")
    op.drop_table("runtime_bulk_batch")
    op.drop_column("runtime_bulk_job", "content_type")
