"""Ingress tables: the durable receipt of every verified delivery."""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    BigInteger,
    Column,
    Index,
    Integer,
    LargeBinary,
    String,
    Table,
    Text,
    TypeDecorator,
    UniqueConstraint,
    func,
)
from sqlalchemy.dialects import mysql

from nexus.integration.tables import metadata
from nexus.platform.db.backend import exact_key


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
    # redeliveries whose body digest differed from `payload_sha256` (the first body is kept)
    Column("digest_mismatches", Integer, nullable=False, server_default="0"),
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
    # one delivery = one provider delivery id on one route (integration_0009); the id
    # before the route, so the console finds a delivery id on every route with one range
    UniqueConstraint(
        "org_id",
        "connector",
        "provider_delivery_id",
        "route_key",
        name="uq_ingress_receipt_route_delivery",
    ),
    Index(
        "ix_ingress_receipt_router", "org_id", "router_status", "next_attempt_at_ms", "receipt_id"
    ),
    Index("ix_ingress_receipt_body_ref", "body_ref"),  # is a kept body file still referenced
)
