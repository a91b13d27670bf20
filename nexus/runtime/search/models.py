"""The global search index."""

from __future__ import annotations

from sqlalchemy import Column, Index, String, Table, Text

from nexus.runtime.tables import metadata

#: The global search index: one row per record and searchable field (see
#: `nexus.runtime.search.index`). On SQLite this name is an FTS5 virtual table with the same
#: columns (no primary key, no indexes: rows are addressed by a derived rowid).
search_index = Table(
    "runtime_search_index",
    metadata,
    Column("org_id", String(18), primary_key=True),
    Column("record_id", String(18), primary_key=True),
    Column("field_name", String(80), primary_key=True),
    Column("object_name", String(80), nullable=False),
    Column("content", Text, nullable=False),
    Index("ix_search_index_object", "org_id", "object_name", "record_id"),
    Index("ft_search_index_content", "content", mysql_prefix="FULLTEXT"),
    info={"virtual_on_sqlite": True},
)
