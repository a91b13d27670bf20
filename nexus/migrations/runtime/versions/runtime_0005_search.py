"""runtime: the global search index (one row per record and searchable field).

SQLite: an FTS5 virtual table (`unicode61 remove_diacritics 2`) whose rowid is derived from
(org, record, field), so a record's rows are found by rowid, not by scanning. MariaDB/MySQL: an
InnoDB table with a FULLTEXT index on `content`. TiDB has no FULLTEXT: the same table without
it, searched with LIKE. See docs/adr/0012-global-search.md.

Revision ID: runtime_0005
Revises: runtime_0004
Create Date: 2026-12-06
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "runtime_0005"
down_revision: str | None = "runtime_0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == "sqlite":
        op.execute(
            "CREATE VIRTUAL TABLE runtime_search_index USING fts5("
            "org_id UNINDEXED, object_name UNINDEXED, record_id UNINDEXED, "
            "field_name UNINDEXED, content, tokenize = 'unicode61 remove_diacritics 2')"
        )
        return
    op.create_table(
        "runtime_search_index",
        sa.Column("org_id", sa.String(18), primary_key=True),
        sa.Column("record_id", sa.String(18), primary_key=True),
        sa.Column("field_name", sa.String(80), primary_key=True),
        sa.Column("object_name", sa.String(80), nullable=False),
        sa.Column("content", sa.Text, nullable=False),
    )
    op.create_index(
        "ix_search_index_object", "runtime_search_index", ["org_id", "object_name", "record_id"]
    )
    version = str(bind.execute(sa.text("SELECT VERSION()")).scalar() or "")
    if "tidb" not in version.lower():
        op.create_index(
            "ft_search_index_content",
            "runtime_search_index",
            ["content"],
            mysql_prefix="FULLTEXT",
        )


def downgrade() -> None:
    op.drop_table("runtime_search_index")
