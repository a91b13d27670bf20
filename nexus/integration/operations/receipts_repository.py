"""The SQL of failed receipts: list them, check them, and put them back to `received`.

A failed receipt is a terminal routing failure (ADR 0018): it materialized nothing. Its
`next_attempt_at_ms` is the failure time (`routing_repository.mark_failed`), so every list is
one range of the router index `(org_id, router_status, next_attempt_at_ms, receipt_id)`,
paged by keyset on `(next_attempt_at_ms, receipt_id)`. Never a body: the snapshot is only
tested for presence.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select, tuple_, update
from sqlalchemy.ext.asyncio import AsyncConnection

from nexus.integration.ingress import models as ingress_tables
from nexus.integration.routing import models as routing_tables
from nexus.integration.routing.router_repository import FAILED, RECEIVED, after_in_router_order
from nexus.platform.db.clock import db_now_ms

rc, ev = ingress_tables.ingress_receipt, routing_tables.connector_event

#: What an operator sees of a failed receipt: ids, route, times, counts, sanitized error.
LISTED = (
    rc.c.receipt_id,
    rc.c.connector,
    rc.c.route_key,
    rc.c.route_version,
    rc.c.provider_delivery_id,
    rc.c.event_kind,
    rc.c.received_at_ms,
    rc.c.next_attempt_at_ms.label("failed_at_ms"),
    rc.c.router_attempts,
    rc.c.deliveries,
    rc.c.body_bytes,
    rc.c.error,
)


@dataclass(frozen=True)
class FailedFilter:
    connector: str | None = None
    route_key: str | None = None
    delivery_id: str | None = None
    since_ms: int | None = None  # failed at or after
    until_ms: int | None = None  # failed before


@dataclass(frozen=True)
class ReplayCandidate:
    """What a replay decision needs of a receipt (no body, only where it is kept)."""

    receipt_id: str
    router_status: str
    connector: str
    route_key: str
    has_snapshot: bool
    body_ref: str | None
    body_bytes: int


class FailedReceiptsRepository:
    def __init__(self, conn: AsyncConnection) -> None:
        self.conn = conn

    async def page(
        self,
        *,
        org_id: str,
        where: FailedFilter,
        cursor: tuple[int, str] | None = None,
        limit: int = 100,
    ) -> list[Any]:
        """Failed receipts of `org_id`, oldest failure first, after `cursor`."""
        query = select(*LISTED).where(rc.c.org_id == org_id, rc.c.router_status == FAILED)
        if where.since_ms is not None:
            query = query.where(rc.c.next_attempt_at_ms >= where.since_ms)
        if where.until_ms is not None:
            query = query.where(rc.c.next_attempt_at_ms < where.until_ms)
        if where.connector is not None:
            query = query.where(rc.c.connector == where.connector)
        if where.route_key is not None:
            query = query.where(rc.c.route_key == where.route_key)
        if where.delivery_id is not None:
            query = query.where(rc.c.provider_delivery_id == where.delivery_id)
        if cursor is not None:
            query = query.where(after_in_router_order(cursor))
        rows = await self.conn.execute(
            query.order_by(rc.c.next_attempt_at_ms, rc.c.receipt_id).limit(limit)
        )
        return list(rows)

    async def candidates(
        self, *, org_id: str, receipt_ids: Sequence[str]
    ) -> dict[str, ReplayCandidate]:
        """The named receipts of `org_id` (any status); other orgs' and unknown ids are
        absent."""
        if not receipt_ids:
            return {}
        rows = await self.conn.execute(
            select(
                rc.c.receipt_id,
                rc.c.router_status,
                rc.c.connector,
                rc.c.route_key,
                rc.c.body_snapshot.is_not(None).label("has_snapshot"),
                rc.c.body_ref,
                rc.c.body_bytes,
            ).where(rc.c.org_id == org_id, rc.c.receipt_id.in_(list(receipt_ids)))
        )
        return {
            r.receipt_id: ReplayCandidate(
                receipt_id=r.receipt_id,
                router_status=r.router_status,
                connector=r.connector,
                route_key=r.route_key,
                has_snapshot=bool(r.has_snapshot),
                body_ref=r.body_ref,
                body_bytes=int(r.body_bytes),
            )
            for r in rows
        }

    async def with_events(self, *, org_id: str, receipt_ids: Sequence[str]) -> set[str]:
        """Those of the receipts that have an event (by the unique (org, receipt, ordinal))."""
        if not receipt_ids:
            return set()
        rows = await self.conn.execute(
            select(ev.c.receipt_id)
            .where(ev.c.org_id == org_id, ev.c.receipt_id.in_(list(receipt_ids)))
            .distinct()
        )
        return {str(r[0]) for r in rows}

    async def active_routes(
        self, *, org_id: str, keys: set[tuple[str, str]]
    ) -> dict[tuple[str, str], bool]:
        """(connector, route key) -> is it active, for the routes that exist."""
        if not keys:
            return {}
        r = routing_tables.route
        rows = await self.conn.execute(
            select(r.c.connector, r.c.route_key, r.c.active).where(
                r.c.org_id == org_id, tuple_(r.c.connector, r.c.route_key).in_(sorted(keys))
            )
        )
        return {(row.connector, row.route_key): bool(row.active) for row in rows}

    async def requeue(self, *, org_id: str, receipt_ids: Sequence[str], marker: str) -> set[str]:
        """Put the receipts that are still `failed` back to `received`, due now, attempts
        reset, error cleared (CAS on the status: a receipt another operator requeued first is
        not taken). The winners carry `marker` as their lease token (the router's next claim
        replaces it) and are read back by it."""
        if not receipt_ids:
            return set()
        ids = list(receipt_ids)
        await self.conn.execute(
            update(rc)
            .where(rc.c.org_id == org_id, rc.c.receipt_id.in_(ids), rc.c.router_status == FAILED)
            .values(
                router_status=RECEIVED,
                router_attempts=0,
                next_attempt_at_ms=db_now_ms(),
                error=None,
                lease_token=marker,
                lease_owner=None,
                lease_until_ms=None,
            )
        )
        rows = await self.conn.execute(
            select(rc.c.receipt_id).where(
                rc.c.org_id == org_id, rc.c.receipt_id.in_(ids), rc.c.lease_token == marker
            )
        )
        return {str(r[0]) for r in rows}
