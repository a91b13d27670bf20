"""Record bookkeeping beside the record tables: auto numbers, idempotency keys, field history."""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, Index, String, Table, Text

from nexus.platform.db.backend import exact_key
from nexus.runtime.tables import metadata

auto_number = Table(
    "runtime_auto_number",
    metadata,
    Column("org_id", String(18), primary_key=True),
    Column("object_name", String(80), primary_key=True),
    Column("field_name", String(80), primary_key=True),
    Column("next_value", BigInteger, nullable=False),
)


idempotency = Table(
    "runtime_idempotency",
    metadata,
    Column("org_id", String(18), primary_key=True),
    Column("idem_key", exact_key(128), primary_key=True),
    Column("request_digest", String(64), nullable=False),
    Column("result", Text, nullable=False),
    Column("created_at_ms", BigInteger, nullable=False),
    Index("ix_runtime_idempotency_created", "created_at_ms"),  # retention
)


field_history = Table(
    "runtime_field_history",
    metadata,
    Column("org_id", String(18), primary_key=True),
    Column("history_id", String(36), primary_key=True),
    Column("object_name", String(80), nullable=False),
    Column("record_id", String(18), nullable=False),
    Column("field_name", String(80), nullable=False),
    Column("old_value", Text, nullable=True),
    Column("new_value", Text, nullable=True),
    Column("changed_by_id", String(18), nullable=False),
    Column("changed_at_ms", BigInteger, nullable=False),
    Index("ix_field_history_record", "org_id", "record_id", "changed_at_ms"),
)
