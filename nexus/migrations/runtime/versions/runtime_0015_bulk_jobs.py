"""runtime: Bulk API jobs and their chunks (docs/adr/0077).

`runtime_bulk_job` (one row per ingest or query job) and `runtime_bulk_chunk` (one row per
chunk of a few thousand uploaded rows with their outcomes, or per query result page). Their
work items are the `<org>/runtime.bulk` families in the outbox's work tables, created by a
job's first item (ADR 0067): nothing to create here.

Revision ID: runtime_0015
Revises: runtime_0014
Create Date: 2026-12-07
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision: str = "runtime_0015"
down_revision: str | None = "runtime_0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

LONG_TEXT = sa.Text().with_variant(mysql.LONGTEXT(), "mysql")


def upgrade() -> None:
    op.create_table(
        "runtime_bulk_job",
        sa.Column("org_id", sa.String(18), primary_key=True),
        sa.Column("job_id", sa.String(18), primary_key=True),
        sa.Column("kind", sa.String(8), nullable=False),
        sa.Column("user_id", sa.String(18), nullable=False),
        sa.Column("object_name", sa.String(80), nullable=False),
        sa.Column("operation", sa.String(16), nullable=False),
        sa.Column("external_id_field", sa.String(80), nullable=True),
        sa.Column("column_delimiter", sa.String(10), nullable=False),
        sa.Column("line_ending", sa.String(4), nullable=False),
        sa.Column("api_version", sa.String(8), nullable=False),
        sa.Column("soql", sa.Text, nullable=True),
        sa.Column("columns", sa.Text, nullable=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("error_message", sa.String(1000), nullable=True),
        sa.Column("uploaded_bytes", sa.BigInteger, nullable=False),
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
        "ix_runtime_bulk_job_list", "runtime_bulk_job", ["org_id", "kind", "created_at_ms"]
    )
    op.create_table(
        "runtime_bulk_chunk",
        sa.Column("org_id", sa.String(18), primary_key=True),
        sa.Column("job_id", sa.String(18), primary_key=True),
        sa.Column("seq", sa.Integer, primary_key=True),
        sa.Column("records", sa.Integer, nullable=False),
        sa.Column("data", LONG_TEXT, nullable=False),
        sa.Column("outcomes", LONG_TEXT, nullable=True),
        sa.Column("failed", sa.Integer, nullable=False),
        sa.Column("done", sa.Boolean, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("runtime_bulk_chunk")
    op.drop_index("ix_runtime_bulk_job_list", table_name="runtime_bulk_job")
    op.drop_table("runtime_bulk_job")
