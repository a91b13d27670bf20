"""Integration rows as the receipt router writes them (receipt -> event -> work item), for
tests of what happens after routing (dead letters, replay, retention) — and how to park an
item through the work engine's own claim and finish, as the executor would."""

from __future__ import annotations

import hashlib
import json
import secrets
from dataclasses import dataclass

from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncEngine

from nexus.integration.delivery import models as delivery_tables
from nexus.integration.ingress import models as ingress_tables
from nexus.integration.ingress.repository import ReceiptRow, store_receipts
from nexus.integration.routing import models as routing_tables
from nexus.integration.routing.router import work_family
from nexus.platform.db.clock import db_now_ms
from nexus.platform.workqueue.store import (
    DEAD,
    TERMINAL,
    NewItem,
    Outcome,
    QueuePolicy,
    WorkStore,
)

EXECUTOR = "test-executor"  # the owner the test families are created for
DIE = Outcome(DEAD, TERMINAL, "Runtime refused the command: INVALID_FIELD (LastName)")


@dataclass(frozen=True)
class Routed:
    receipt_id: str
    event_id: str
    work_id: str
    delivery_id: str


async def route_delivery(
    engine: AsyncEngine,
    *,
    org_id: str,
    connector: str,
    route: str,
    route_version: int,
    pack: str | None = None,
    lane_key: str | None = None,
    payload: dict[str, object] | None = None,
    queue_class: str = "default",
    policy: QueuePolicy | None = None,
) -> Routed:
    """One verified delivery, materialized into one event and one work item."""
    body = json.dumps(payload or {"data": {"id": secrets.token_hex(4)}}).encode()
    delivery_id = f"dlv-{secrets.token_hex(6)}"
    receipt_id = secrets.token_hex(16)
    event_id = f"{receipt_id}-0"
    work_id = secrets.token_hex(16)
    pack = pack or f"routes:{connector}"
    digest = hashlib.sha256(body).hexdigest()
    async with engine.begin() as conn:
        await conn.run_sync(
            store_receipts,
            [
                ReceiptRow(
                    org_id=org_id,
                    receipt_id=receipt_id,
                    connector=connector,
                    route_key=route,
                    route_version=route_version,
                    provider_delivery_id=delivery_id,
                    delivery_id_source="header",
                    method="POST",
                    content_type="application/json",
                    event_kind="contact.updated",
                    correlation={"request_id": "r1"},
                    body_bytes=len(body),
                    body_snapshot=body,
                    body_ref=None,
                    payload_sha256=digest,
                    signature_scheme="standard_webhooks",
                    signature_key_index=0,
                )
            ],
        )
        await conn.execute(
            update(ingress_tables.ingress_receipt)
            .where(ingress_tables.ingress_receipt.c.receipt_id == receipt_id)
            .values(router_status="materialized", materialized_event_ids=json.dumps([event_id]))
        )
        await conn.execute(
            routing_tables.connector_event.insert().values(
                org_id=org_id,
                event_id=event_id,
                receipt_id=receipt_id,
                ordinal=0,
                installed_pack_id=pack,
                pack_generation=route_version,
                connector=connector,
                route_key=route,
                route_version=route_version,
                event_kind="contact.updated",
                source_object_kind="contact" if lane_key else None,
                source_object_id=lane_key,
                idempotency_key=delivery_id,
                delivery_seq=1,
                payload_sha256=digest,
                parse_outcome="parsed",
                command=json.dumps({"op": "upsert", "object": "Contact", "fields": payload}),
                correlation="{}",
                created_at_ms=db_now_ms(),
            )
        )
        store = WorkStore(delivery_tables.work, owner=EXECUTOR)
        family = work_family(org_id, pack)
        await store.ensure_queue(conn, family, queue_class, policy=policy)
        body = json.dumps({"org_id": org_id, "event_id": event_id})
        await store.enqueue(conn, [NewItem(family, queue_class, body, work_id, lane_key)])
        await conn.execute(
            delivery_tables.event_work.insert().values(
                org_id=org_id,
                event_id=event_id,
                work_type="command",
                work_id=work_id,
                created_at_ms=db_now_ms(),
            )
        )
    return Routed(receipt_id, event_id, work_id, delivery_id)


async def execute(
    engine: AsyncEngine, pack: str, outcome: Outcome, queue_class: str = "default", *, org_id: str
) -> list[str]:
    """Claim every claimable item of `pack` in org `org_id` now and record `outcome` for each."""
    store = WorkStore(delivery_tables.work, owner=EXECUTOR)
    family = work_family(org_id, pack)
    async with engine.begin() as conn:
        epoch = (await store.admitted_families(conn))[family]
        claimed = await store.claim(conn, family, queue_class, epoch, 500)
        if claimed:
            token = claimed[0].token
            await store.finish(conn, family, epoch, token, [(c, outcome) for c in claimed])
    return [c.id for c in claimed]
