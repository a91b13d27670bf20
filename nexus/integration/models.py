"""Integration tables: connector routes and ingress receipts. Every key starts with `org_id`."""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    TypeDecorator,
    UniqueConstraint,
    func,
)
from sqlalchemy.dialects import mysql

from nexus.platform.db import exact_key
from nexus.platform.workqueue.tables import work_tables

metadata = MetaData()


class _HexMediumBlob(TypeDecorator[bytes]):
    """MEDIUMBLOB bound as hex text through `UNHEX()`.

    aiomysql 0.3 escapes `bytes` parameters with a PyMySQL helper that PyMySQL 1.1+ replaced
    by a string ("DO NOT IMPORT THIS!!!"), so a bytes parameter raises TypeError; a str
    parameter takes the path that works.
    """

    impl = mysql.MEDIUMBLOB
    cache_ok = True

    def bind_processor(self, dialect: Any) -> Any:
        def to_hex(value: bytes | None) -> str | None:
            return None if value is None else value.hex()

        return to_hex  # instead of the BLOB's own processor, which wants bytes

    def bind_expression(self, bindvalue: Any) -> Any:
        return func.unhex(bindvalue, type_=self)


#: Bodies up to 16 MiB fit a MEDIUMBLOB (a MySQL BLOB stops at 64 KiB).
BodyBytes = LargeBinary().with_variant(_HexMediumBlob(), "mysql")

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

#: IngressReceipt: a verified provider delivery, durably accepted, and the receipt router's
#: state until it is materialized into events (seed: connector-root-architecture).
ingress_receipt = Table(
    "integration_ingress_receipt",
    metadata,
    Column("org_id", String(18), primary_key=True),
    Column("receipt_id", String(32), primary_key=True),
    Column("connector", String(64), nullable=False),
    Column("route_key", String(64), nullable=False),
    Column("route_version", Integer, nullable=False),
    Column("provider_delivery_id", exact_key(191), nullable=False),
    # where the delivery id came from: header | pointer | scheme | derived | generated
    Column("delivery_id_source", String(16), nullable=False),
    Column("method", String(10), nullable=False),
    Column("content_type", String(255), nullable=True),
    Column("event_kind", String(128), nullable=True),
    Column("received_at_ms", BigInteger, nullable=False),
    Column("last_delivery_at_ms", BigInteger, nullable=False),
    Column("deliveries", Integer, nullable=False),
    Column("correlation", Text, nullable=False),  # JSON: safe ids only (request, delivery)
    Column("body_bytes", Integer, nullable=False),
    Column("body_snapshot", BodyBytes, nullable=True),  # the payload when within the bound
    Column("body_ref", String(255), nullable=True),  # else where it is kept
    Column("payload_sha256", String(64), nullable=False),
    Column("signature_scheme", String(32), nullable=False),
    Column("signature_verdict", String(32), nullable=False),
    Column("signature_key_index", Integer, nullable=True),
    Column("router_status", String(16), nullable=False),  # received | materialized | failed
    Column("router_attempts", Integer, nullable=False),
    Column("next_attempt_at_ms", BigInteger, nullable=False),
    Column("lease_token", String(36), nullable=True),
    Column("lease_owner", String(128), nullable=True),
    Column("lease_until_ms", BigInteger, nullable=True),
    Column("materialized_event_ids", Text, nullable=True),  # JSON list
    Column("error", Text, nullable=True),  # sanitized: never payloads or secrets
    UniqueConstraint(
        "org_id", "connector", "provider_delivery_id", name="uq_ingress_receipt_delivery"
    ),
    Index(
        "ix_ingress_receipt_router", "org_id", "router_status", "next_attempt_at_ms", "receipt_id"
    ),
    Index("ix_ingress_receipt_body_ref", "body_ref"),  # is a kept body file still referenced
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
