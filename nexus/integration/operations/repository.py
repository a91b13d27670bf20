"""The SQL of operating the integration: dead letters joined to their events and receipts,
routes and their history, operator audits, purge and retention deletes.

Every read is keyed: parked items through the claim index (one range per queue, see
`workqueue.operate.page`), then `event_work` by its unique `work_id`, events and receipts by
primary key; receipts by `(org, connector, delivery id)`; audits by `(org, at_ms)`. Never a
payload column: no body snapshot, no mapped command.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, delete, select, tuple_
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql import Select

from nexus.integration.delivery import models as delivery_tables
from nexus.integration.ingress import models as ingress_tables
from nexus.integration.operations import models as operations_tables
from nexus.integration.routing import models as routing_tables
from nexus.integration.routing.router_repository import after_in_router_order
from nexus.platform.db.clock import db_now_ms
from nexus.platform.workqueue import operate

work = delivery_tables.work
ev, ew, rc = (
    routing_tables.connector_event,
    delivery_tables.event_work,
    ingress_tables.ingress_receipt,
)

#: The event and receipt context of a parked item (ids, kinds, versions, times: no payload).
CONTEXT = (
    ev.c.event_id,
    ev.c.receipt_id,
    ev.c.event_kind,
    ev.c.connector,
    ev.c.route_key,
    ev.c.route_version,
    ev.c.installed_pack_id,
    ev.c.pack_generation,
    ev.c.source_object_kind,
    ev.c.source_object_id,
    ev.c.parse_outcome,
    ev.c.created_at_ms.label("event_created_at_ms"),
    rc.c.provider_delivery_id,
    rc.c.received_at_ms,
    rc.c.deliveries,
    rc.c.digest_mismatches,
    rc.c.router_status,
)


@dataclass(frozen=True)
class RouteState:
    """A route as it is now, and the bodies of the versions a decision needs."""

    connector: str
    route_key: str
    version: int
    active: bool
    bodies: dict[int, str]  # version -> canonical declaration JSON


class OperationsRepository:
    def __init__(self, conn: AsyncConnection) -> None:
        self.conn = conn

    # ------------------------------------------------------------------ dead letters
    async def parked(
        self,
        *,
        org_id: str,
        filters: operate.Filters,
        connector: str | None = None,
        route_key: str | None = None,
        halting_only: bool = False,
        cursor: tuple[int, str] | None = None,
        limit: int = 100,
    ) -> list[Any]:
        """A page of parked items of `org_id` with their context (rows: item + CONTEXT)."""

        def build(family: str, queue_class: str) -> Select[Any]:
            query = (
                operate.parked_select(work, filters, family, queue_class, *CONTEXT)
                .join(ew, and_(ew.c.work_id == work.items.c.id, ew.c.org_id == org_id))
                .join(ev, and_(ev.c.org_id == ew.c.org_id, ev.c.event_id == ew.c.event_id))
                .outerjoin(rc, and_(rc.c.org_id == ev.c.org_id, rc.c.receipt_id == ev.c.receipt_id))
            )
            if connector is not None:
                query = query.where(ev.c.connector == connector)
            if route_key is not None:
                query = query.where(ev.c.route_key == route_key)
            if halting_only:
                query = query.where(work.source_lanes.c.halted_by == work.items.c.id)
            return query

        return await operate.page(
            self.conn, work, filters, build, org_id=org_id, cursor=cursor, limit=limit
        )

    async def items_with_context(self, *, org_id: str, work_ids: Sequence[str]) -> dict[str, Any]:
        """The named items of `org_id` (any state) with their context; other orgs' items and
        unknown ids are simply absent."""
        items = work.items
        if not work_ids:
            return {}
        rows = await self.conn.execute(
            select(items.c.id, items.c.state, items.c.family, items.c.failure_class, *CONTEXT)
            .select_from(
                items.join(ew, and_(ew.c.work_id == items.c.id, ew.c.org_id == org_id))
                .join(ev, and_(ev.c.org_id == ew.c.org_id, ev.c.event_id == ew.c.event_id))
                .outerjoin(rc, and_(rc.c.org_id == ev.c.org_id, rc.c.receipt_id == ev.c.receipt_id))
            )
            .where(items.c.id.in_(list(work_ids)))
        )
        return {r.id: r for r in rows}

    # ------------------------------------------------------------------ routes
    async def routes(
        self, *, org_id: str, wanted: dict[tuple[str, str], set[int]]
    ) -> dict[tuple[str, str], RouteState]:
        """Current state of each (connector, route key) and the bodies of the current version
        and of the `wanted` older versions, from the route history."""
        if not wanted:
            return {}
        r, h = routing_tables.route, routing_tables.route_version
        current = {
            (row.connector, row.route_key): row
            for row in await self.conn.execute(
                select(r.c.connector, r.c.route_key, r.c.version, r.c.active).where(
                    r.c.org_id == org_id,
                    tuple_(r.c.connector, r.c.route_key).in_(sorted(wanted)),
                )
            )
        }
        keys = [
            (connector, route_key, version)
            for (connector, route_key), versions in sorted(wanted.items())
            if (connector, route_key) in current
            for version in {*versions, int(current[(connector, route_key)].version)}
        ]
        bodies: dict[tuple[str, str], dict[int, str]] = {}
        if keys:
            for row in await self.conn.execute(
                select(h.c.connector, h.c.route_key, h.c.version, h.c.body).where(
                    h.c.org_id == org_id,
                    tuple_(h.c.connector, h.c.route_key, h.c.version).in_(keys),
                )
            ):
                bodies.setdefault((row.connector, row.route_key), {})[int(row.version)] = row.body
        return {
            key: RouteState(
                connector=key[0],
                route_key=key[1],
                version=int(row.version),
                active=bool(row.active),
                bodies=bodies.get(key, {}),
            )
            for key, row in current.items()
        }

    # ------------------------------------------------------------------ audit
    async def audit(
        self,
        *,
        org_id: str,
        actor: str,
        entries: Sequence[tuple[str, str, str, str | None]],
    ) -> None:
        """Operator audit rows: (action, target, outcome, reason) each; never payloads."""
        if not entries:
            return
        now = db_now_ms()
        await self.conn.execute(
            operations_tables.operator_audit.insert().values(at_ms=now),
            [
                {
                    "org_id": org_id,
                    "audit_id": uuid.uuid4().hex,
                    "actor": actor[:64],
                    "action": action[:32],
                    "target": target[:191],
                    "outcome": outcome[:16],
                    "reason": reason,
                }
                for action, target, outcome, reason in entries
            ],
        )

    async def audit_log(
        self, *, org_id: str, before_ms: int | None, limit: int
    ) -> list[dict[str, Any]]:
        a = operations_tables.operator_audit
        query = select(a).where(a.c.org_id == org_id)
        if before_ms is not None:
            query = query.where(a.c.at_ms < before_ms)
        rows = await self.conn.execute(
            query.order_by(a.c.at_ms.desc(), a.c.audit_id.desc()).limit(limit)
        )
        return [dict(r) for r in rows.mappings()]

    # ------------------------------------------------------------------ receipts
    async def receipts_by_delivery(
        self, *, org_id: str, delivery_id: str, connector: str | None
    ) -> list[dict[str, Any]]:
        """Receipts of a provider delivery id, each with its events and their work items.
        Without a connector, one unique-key lookup per connector the org has routes for."""
        if connector is None:
            connectors = sorted(
                {
                    row[0]
                    for row in await self.conn.execute(
                        select(routing_tables.route.c.connector).where(
                            routing_tables.route.c.org_id == org_id
                        )
                    )
                }
            )
        else:
            connectors = [connector]
        if not connectors:
            return []
        receipts = [
            dict(row)
            for row in (
                await self.conn.execute(
                    select(
                        rc.c.receipt_id,
                        rc.c.connector,
                        rc.c.route_key,
                        rc.c.route_version,
                        rc.c.provider_delivery_id,
                        rc.c.delivery_id_source,
                        rc.c.event_kind,
                        rc.c.content_type,
                        rc.c.received_at_ms,
                        rc.c.last_delivery_at_ms,
                        rc.c.deliveries,
                        rc.c.digest_mismatches,
                        rc.c.body_bytes,
                        rc.c.payload_sha256,
                        rc.c.signature_scheme,
                        rc.c.signature_verdict,
                        rc.c.router_status,
                        rc.c.router_attempts,
                        rc.c.error,
                    ).where(
                        rc.c.org_id == org_id,
                        rc.c.connector.in_(connectors),  # the unique key, one range each
                        rc.c.provider_delivery_id == delivery_id,
                    )
                )
            ).mappings()
        ]
        if not receipts:
            return []
        items = work.items
        events = await self.conn.execute(
            select(
                ev.c.receipt_id,
                ev.c.event_id,
                ev.c.ordinal,
                ev.c.event_kind,
                ev.c.route_version,
                ev.c.installed_pack_id,
                ev.c.pack_generation,
                ev.c.parse_outcome,
                ew.c.work_type,
                items.c.id.label("work_id"),
                items.c.state,
                items.c.attempt,
                items.c.failure_class,
                items.c.last_error,
            )
            .select_from(
                ev.outerjoin(
                    ew, and_(ew.c.org_id == ev.c.org_id, ew.c.event_id == ev.c.event_id)
                ).outerjoin(items, items.c.id == ew.c.work_id)
            )
            .where(ev.c.org_id == org_id, ev.c.receipt_id.in_([r["receipt_id"] for r in receipts]))
            .order_by(ev.c.receipt_id, ev.c.ordinal)
        )
        by_receipt: dict[str, list[dict[str, Any]]] = {}
        for row in events.mappings():
            by_receipt.setdefault(row["receipt_id"], []).append(dict(row))
        for receipt in receipts:
            receipt["events"] = by_receipt.get(receipt["receipt_id"], [])
        return receipts

    # ------------------------------------------------------------------ deletes
    async def forget_work(self, *, work_ids: Sequence[str]) -> list[tuple[str, str]]:
        """Delete the event links of deleted work items; returns their (org, event id)."""
        if not work_ids:
            return []
        links = [
            (row.org_id, row.event_id)
            for row in await self.conn.execute(
                select(ew.c.org_id, ew.c.event_id).where(ew.c.work_id.in_(list(work_ids)))
            )
        ]
        await self.conn.execute(delete(ew).where(ew.c.work_id.in_(list(work_ids))))
        return links

    async def receipts_of(self, *, org_id: str, event_ids: Sequence[str]) -> list[str]:
        if not event_ids:
            return []
        rows = await self.conn.execute(
            select(ev.c.receipt_id)
            .where(ev.c.org_id == org_id, ev.c.event_id.in_(list(event_ids)))
            .distinct()
        )
        return sorted(str(r[0]) for r in rows)

    async def old_receipts(
        self,
        *,
        org_id: str,
        before_ms: int,
        cursor: tuple[int, str] | None,
        limit: int,
    ) -> list[tuple[int, str]]:
        """(next_attempt_at_ms, receipt id) of materialized receipts received before
        `before_ms`, through the router index `(org, router_status, next_attempt_at_ms,
        receipt_id)` — a materialized receipt's next attempt time is when it was last routed,
        never before it was received."""
        query = select(rc.c.next_attempt_at_ms, rc.c.receipt_id).where(
            rc.c.org_id == org_id,
            rc.c.router_status == "materialized",
            rc.c.next_attempt_at_ms < before_ms,
            rc.c.received_at_ms < before_ms,
        )
        if cursor is not None:
            query = query.where(after_in_router_order(cursor))
        rows = await self.conn.execute(
            query.order_by(rc.c.next_attempt_at_ms, rc.c.receipt_id).limit(limit)
        )
        return [(int(r[0]), str(r[1])) for r in rows]

    async def prune_receipts(self, *, org_id: str, receipt_ids: Sequence[str]) -> tuple[int, int]:
        """Delete the receipts whose events carry no work item any more, with those events;
        a receipt with an event still linked to work (dead, waiting, or not yet pruned) stays.
        Returns (events, receipts) deleted."""
        if not receipt_ids:
            return 0, 0
        events = list(
            await self.conn.execute(
                select(ev.c.receipt_id, ev.c.event_id).where(
                    ev.c.org_id == org_id, ev.c.receipt_id.in_(list(receipt_ids))
                )
            )
        )
        linked = {
            row[0]
            for row in await self.conn.execute(
                select(ew.c.event_id).where(
                    ew.c.org_id == org_id, ew.c.event_id.in_([e.event_id for e in events])
                )
            )
        }
        keep = {e.receipt_id for e in events if e.event_id in linked}
        prunable = [r for r in receipt_ids if r not in keep]
        if not prunable:
            return 0, 0
        dropped = await self.conn.execute(
            delete(ev).where(ev.c.org_id == org_id, ev.c.receipt_id.in_(prunable))
        )
        receipts = await self.conn.execute(
            delete(rc).where(
                rc.c.org_id == org_id,
                rc.c.receipt_id.in_(prunable),
                rc.c.router_status == "materialized",
            )
        )
        return int(dropped.rowcount), int(receipts.rowcount)

    async def orgs(self) -> list[str]:
        """The orgs with connector routes (the route table is small)."""
        rows = await self.conn.execute(select(routing_tables.route.c.org_id).distinct())
        return sorted(str(r[0]) for r in rows)
