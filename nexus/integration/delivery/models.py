"""Delivery tables: the work engine's tables (ConnectorWorkItems) and which WorkItem
carries which event."""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Column,
    String,
    Table,
    UniqueConstraint,
)

from nexus.integration.tables import metadata
from nexus.platform.workqueue.tables import work_tables

#: ConnectorWorkItem: the work engine's tables (family = installed pack id).
work = work_tables(metadata, "integration_work")

#: Which WorkItem carries which event: unique (event_id, work_type); the DLQ joins through it.
event_work = Table(
    "integration_event_work",
    metadata,
    Column("org_id", String(18), primary_key=True),
    Column("event_id", String(40), primary_key=True),
    Column("work_type", String(32), primary_key=True),
    Column("work_id", String(36), nullable=False),
    Column("created_at_ms", BigInteger, nullable=False),
    UniqueConstraint("work_id", name="uq_event_work_item"),
)
