"""Routing tables: connector routes, their versions, and the immutable events routed
receipts became."""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Integer,
    String,
    Table,
    Text,
    UniqueConstraint,
)

from nexus.integration.tables import metadata

#: The active declaration of each connector route; `version` grows with every change.
route = Table(
    "integration_route",
    metadata,
    Column("org_id", String(18), primary_key=True),
    Column("connector", String(64), primary_key=True),
    Column("route_key", String(64), primary_key=True),
    Column("version", Integer, nullable=False),
    Column("body", Text, nullable=False),  # the declaration as canonical JSON (no secrets)
    Column("digest", String(64), nullable=False),
    Column("active", Boolean, nullable=False),
    Column("updated_at_ms", BigInteger, nullable=False),
    #: the App whose Catalog snapshot declared it (docs/adr/0033); NULL: applied by hand
    Column("owner", String(64), nullable=True),
)

#: Every version a route has had (immutable, written by `apply`): a replay proves that an
#: older event's command mapping still holds by comparing its version's `command` with the
#: current one's (docs/adr/0020).
route_version = Table(
    "integration_route_version",
    metadata,
    Column("org_id", String(18), primary_key=True),
    Column("connector", String(64), primary_key=True),
    Column("route_key", String(64), primary_key=True),
    Column("version", Integer, primary_key=True),
    Column("body", Text, nullable=False),  # the declaration as canonical JSON (no secrets)
    Column("digest", String(64), nullable=False),
    Column("applied_at_ms", BigInteger, nullable=False),
)

#: ConnectorOutboxEvent: immutable, one per routed receipt (or several when a route fans out).
#: `event_id` is derived from (receipt, ordinal), so a re-run of the router cannot duplicate.
connector_event = Table(
    "integration_connector_event",
    metadata,
    Column("org_id", String(18), primary_key=True),
    Column("event_id", String(40), primary_key=True),
    Column("receipt_id", String(32), nullable=False),
    Column("ordinal", Integer, nullable=False),
    Column("installed_pack_id", String(64), nullable=False),
    Column("pack_generation", Integer, nullable=False),
    Column("connector", String(64), nullable=False),
    Column("route_key", String(64), nullable=False),
    Column("route_version", Integer, nullable=False),
    Column("event_kind", String(128), nullable=True),
    Column("source_object_kind", String(128), nullable=True),
    Column("source_object_id", String(191), nullable=True),
    Column("idempotency_key", String(191), nullable=False),
    Column("delivery_seq", BigInteger, nullable=False),
    Column("payload_sha256", String(64), nullable=False),
    Column("parse_outcome", String(16), nullable=False),  # parsed | no_command (ADR 0018)
    Column("command", Text, nullable=True),  # the mapped Runtime command (JSON)
    Column("correlation", Text, nullable=False),  # JSON: safe ids only
    Column("created_at_ms", BigInteger, nullable=False),
    UniqueConstraint("org_id", "receipt_id", "ordinal", name="uq_connector_event_receipt"),
)
