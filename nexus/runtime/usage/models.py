"""API usage counts."""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, String, Table

from nexus.runtime.tables import metadata

#: API requests per user per UTC day (database clock), reported by the dialect AppServices.
api_usage = Table(
    "runtime_api_usage",
    metadata,
    Column("org_id", String(18), primary_key=True),
    Column("user_id", String(18), primary_key=True),
    Column("day", String(10), primary_key=True),
    Column("requests", BigInteger, nullable=False),
)
