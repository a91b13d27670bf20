"""The operator audit."""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, Index, String, Table, Text

from nexus.runtime.tables import metadata

#: Operator actions on Runtime work (replay, skip, purge): who, what, when, with what result.
operator_audit = Table(
    "runtime_operator_audit",
    metadata,
    Column("org_id", String(18), primary_key=True),
    Column("audit_id", String(32), primary_key=True),
    Column("at_ms", BigInteger, nullable=False),
    Column("actor", String(64), nullable=False),
    Column("action", String(32), nullable=False),
    Column("target", String(191), nullable=False),
    Column("outcome", String(16), nullable=False),
    Column("reason", Text, nullable=True),
    Index("ix_runtime_operator_audit_at", "org_id", "at_ms"),
)
