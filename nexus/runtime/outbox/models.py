"""The outbox of after-save actions (work-engine tables) and outbound webhook endpoints."""

from __future__ import annotations

from sqlalchemy import BigInteger, Boolean, Column, String, Table

from nexus.platform.workqueue.tables import work_tables
from nexus.runtime.tables import metadata

outbox = work_tables(metadata, "runtime_outbox")


#: Outbound webhook endpoints (operator-controlled bindings; flows name them, never URLs).
#: The signing secret lives in the secrets store under `secret_ref`.
outbound_endpoint = Table(
    "runtime_outbound_endpoint",
    metadata,
    Column("org_id", String(18), primary_key=True),
    Column("name", String(64), primary_key=True),
    Column("url", String(2048), nullable=False),
    Column("secret_ref", String(64), nullable=False),
    Column("active", Boolean, nullable=False),
    Column("updated_at_ms", BigInteger, nullable=False),
)
