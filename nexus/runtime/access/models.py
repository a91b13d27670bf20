"""Permission-set assignments (who holds which set)."""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, String, Table

from nexus.runtime.tables import metadata

permission_assignment = Table(
    "runtime_permission_assignment",
    metadata,
    Column("org_id", String(18), primary_key=True),
    Column("user_id", String(18), primary_key=True),
    Column("permission_set", String(80), primary_key=True),
    Column("assigned_at_ms", BigInteger, nullable=False),
)
