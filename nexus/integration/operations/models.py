"""Operations tables: the operator audit."""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Column,
    Index,
    String,
    Table,
    Text,
)

from nexus.integration.tables import metadata

#: Operator actions (replay, skip, purge): who, what, when, with what result. Never payloads.
operator_audit = Table(
    "integration_operator_audit",
    metadata,
    Column("org_id", String(18), primary_key=True),
    Column("audit_id", String(32), primary_key=True),
    Column("at_ms", BigInteger, nullable=False),
    Column("actor", String(64), nullable=False),
    Column("action", String(32), nullable=False),
    Column("target", String(191), nullable=False),
    Column("outcome", String(16), nullable=False),
    Column("reason", Text, nullable=True),
    Index("ix_integration_operator_audit_at", "org_id", "at_ms"),
)
