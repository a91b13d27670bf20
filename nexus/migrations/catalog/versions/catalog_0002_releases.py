"""catalog: releases, installations, ownership, the release job journal, revisions and
snapshots (docs/adr/0023).

Revision ID: catalog_0002
Revises: catalog_0001
Create Date: 2026-11-29
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "catalog_0002"
down_revision: str | None = "catalog_0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "catalog_release",
        sa.Column("app_id", sa.String(40), primary_key=True),
        sa.Column("version", sa.String(64), primary_key=True),
        sa.Column("digest", sa.String(71), nullable=False, unique=True),
        sa.Column("body", sa.Text, nullable=False),
        sa.Column("created_at_ms", sa.BigInteger, nullable=False),
    )
    op.create_table(
        "catalog_org",
        sa.Column("org_id", sa.String(18), primary_key=True),
        sa.Column("catalog_revision", sa.Integer, nullable=False),
        sa.Column("active_revision", sa.Integer, nullable=False),
        sa.Column("writer_token", sa.Integer, nullable=False),
        sa.Column("writer_job", sa.String(36), nullable=True),
        sa.Column("writer_until_ms", sa.BigInteger, nullable=True),
        sa.Column("updated_at_ms", sa.BigInteger, nullable=False),
    )
    op.create_table(
        "catalog_job",
        sa.Column("org_id", sa.String(18), primary_key=True),
        sa.Column("job_id", sa.String(36), primary_key=True),
        sa.Column("operation", sa.String(16), nullable=False),
        sa.Column("app_id", sa.String(40), nullable=False),
        sa.Column("version", sa.String(64), nullable=True),
        sa.Column("digest", sa.String(71), nullable=True),
        sa.Column("previous_digest", sa.String(71), nullable=True),
        sa.Column("state", sa.String(24), nullable=False),
        sa.Column("fencing_token", sa.Integer, nullable=True),
        sa.Column("catalog_revision", sa.Integer, nullable=True),
        sa.Column("schema_generation", sa.Integer, nullable=True),
        sa.Column("security_epoch", sa.Integer, nullable=True),
        sa.Column("error", sa.String(1000), nullable=True),
        sa.Column("created_at_ms", sa.BigInteger, nullable=False),
        sa.Column("updated_at_ms", sa.BigInteger, nullable=False),
    )
    op.create_table(
        "catalog_job_step",
        sa.Column("org_id", sa.String(18), primary_key=True),
        sa.Column("job_id", sa.String(36), primary_key=True),
        sa.Column("state", sa.String(24), primary_key=True),
        sa.Column("fencing_token", sa.Integer, nullable=True),
        sa.Column("detail", sa.String(1000), nullable=True),
        sa.Column("at_ms", sa.BigInteger, nullable=False),
    )
    op.create_table(
        "catalog_installation",
        sa.Column("org_id", sa.String(18), primary_key=True),
        sa.Column("app_id", sa.String(40), primary_key=True),
        sa.Column("installation_id", sa.String(36), nullable=False),
        sa.Column("version", sa.String(64), nullable=False),
        sa.Column("digest", sa.String(71), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("catalog_revision", sa.Integer, nullable=False),
    )
    op.create_table(
        "catalog_component",
        sa.Column("org_id", sa.String(18), primary_key=True),
        sa.Column("kind", sa.String(24), primary_key=True),
        sa.Column("component_key", sa.String(160), primary_key=True),
        sa.Column("owner_app_id", sa.String(40), nullable=False),
        sa.Column("first_revision", sa.Integer, nullable=False),
    )
    op.create_table(
        "catalog_namespace",
        sa.Column("org_id", sa.String(18), primary_key=True),
        sa.Column("namespace", sa.String(40), primary_key=True),
        sa.Column("owner_app_id", sa.String(40), nullable=False),
    )
    op.create_table(
        "catalog_revision",
        sa.Column("org_id", sa.String(18), primary_key=True),
        sa.Column("catalog_revision", sa.Integer, primary_key=True),
        sa.Column("job_id", sa.String(36), nullable=False),
        sa.Column("installed", sa.Text, nullable=False),
        sa.Column("created_at_ms", sa.BigInteger, nullable=False),
    )
    op.create_table(
        "catalog_snapshot",
        sa.Column("org_id", sa.String(18), primary_key=True),
        sa.Column("catalog_revision", sa.Integer, primary_key=True),
        sa.Column("consumer", sa.String(16), primary_key=True),
        sa.Column("content", sa.Text, nullable=False),
        sa.Column("checksum", sa.String(64), nullable=False),
        sa.Column("created_at_ms", sa.BigInteger, nullable=False),
    )
    op.create_index("ix_catalog_job_state", "catalog_job", ["org_id", "state"])


def downgrade() -> None:
    op.drop_index("ix_catalog_job_state", table_name="catalog_job")
    op.drop_table("catalog_snapshot")
    op.drop_table("catalog_revision")
    op.drop_table("catalog_namespace")
    op.drop_table("catalog_component")
    op.drop_table("catalog_installation")
    op.drop_table("catalog_job_step")
    op.drop_table("catalog_job")
    op.drop_table("catalog_org")
    op.drop_table("catalog_release")
