"""Runtime's metadata and schema-owner tables: definitions, their active versions, applies
and schema operations. Every key starts with `org_id`."""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, Index, Integer, String, Table, Text

from nexus.runtime.tables import metadata

org_state = Table(
    "runtime_org_state",
    metadata,
    Column("org_id", String(18), primary_key=True),
    Column("schema_generation", BigInteger, nullable=False),
    Column("metadata_revision", BigInteger, nullable=False),
)


definition = Table(
    "runtime_definition",
    metadata,
    Column("org_id", String(18), primary_key=True),
    Column("kind", String(32), primary_key=True),
    Column("name", String(80), primary_key=True),
    Column("version", Integer, primary_key=True),
    Column("body", Text, nullable=False),
    Column("digest", String(64), nullable=False),
    Column("apply_id", String(36), nullable=False),
    Column("created_at_ms", BigInteger, nullable=False),
)


active_definition = Table(
    "runtime_active_definition",
    metadata,
    Column("org_id", String(18), primary_key=True),
    Column("kind", String(32), primary_key=True),
    Column("name", String(80), primary_key=True),
    Column("version", Integer, nullable=False),
    Column("activated_at_ms", BigInteger, nullable=False),
)


metadata_apply = Table(
    "runtime_metadata_apply",
    metadata,
    Column("org_id", String(18), primary_key=True),
    Column("apply_id", String(36), primary_key=True),
    Column("state", String(16), nullable=False),  # staged | active | failed
    Column("definitions", Text, nullable=False),  # JSON [[kind, name, version], ...]
    Column("error", Text, nullable=True),
    Column("created_at_ms", BigInteger, nullable=False),
    Column("updated_at_ms", BigInteger, nullable=False),
    Index("ix_metadata_apply_state", "org_id", "state"),
)


schema_operation = Table(
    "runtime_schema_operation",
    metadata,
    Column("org_id", String(18), primary_key=True),
    Column("operation_id", String(36), primary_key=True),
    Column("apply_id", String(36), nullable=False),
    Column("table_name", String(64), nullable=False),
    Column("desired_spec", Text, nullable=False),
    Column("desired_fingerprint", String(64), nullable=False),
    Column("actual_fingerprint", String(64), nullable=True),
    Column("state", String(16), nullable=False),  # pending | applied | failed
    Column("attempts", Integer, nullable=False),
    Column("error", Text, nullable=True),
    Column("created_at_ms", BigInteger, nullable=False),
    Column("applied_at_ms", BigInteger, nullable=True),
    Index("ix_schema_operation_apply", "org_id", "apply_id"),
)
