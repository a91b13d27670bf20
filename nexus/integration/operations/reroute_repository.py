"""The SQL of re-routing a dead WorkItem from its receipt (docs/adr/0044): the stored receipt
with its body, the receipt's next event ordinal, cancelling the dead item (CAS on `dead`),
and recording the new event on the receipt. Keyed reads only."""

from __future__ import annotations

import json

from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from nexus.integration.delivery import models as delivery_tables
from nexus.integration.ingress import models as ingress_tables
from nexus.integration.routing import models as routing_tables
from nexus.integration.routing.router_repository import RECEIPT_READ, ClaimedReceipt, receipt_of
from nexus.platform.db.clock import db_now_ms
from nexus.platform.workqueue.store import CANCELLED, DEAD

rc, ev = ingress_tables.ingress_receipt, routing_tables.connector_event


async def stored_receipt(
    conn: AsyncConnection, *, org_id: str, receipt_id: str
) -> ClaimedReceipt | None:
    """The receipt as the router reads it (body snapshot or reference included)."""
    found = await conn.execute(
        select(*RECEIPT_READ).where(rc.c.org_id == org_id, rc.c.receipt_id == receipt_id)
    )
    row = found.first()
    return None if row is None else receipt_of(org_id, row)


async def next_ordinal(conn: AsyncConnection, *, org_id: str, receipt_id: str) -> int:
    found = await conn.execute(
        select(func.max(ev.c.ordinal)).where(ev.c.org_id == org_id, ev.c.receipt_id == receipt_id)
    )
    last = found.scalar_one()
    return 0 if last is None else int(last) + 1


async def cancel_dead(conn: AsyncConnection, *, work_id: str) -> bool:
    """The dead item becomes `cancelled` (CAS: False when it is no longer dead)."""
    items = delivery_tables.work.items
    done = await conn.execute(
        update(items)
        .where(items.c.id == work_id, items.c.state == DEAD)
        .values(state=CANCELLED, finished_at=db_now_ms())
    )
    return int(done.rowcount) == 1


async def record_event(
    conn: AsyncConnection, *, org_id: str, receipt_id: str, event_id: str
) -> None:
    """Add the new event to the receipt's materialized event ids."""
    current = (
        await conn.execute(
            select(rc.c.materialized_event_ids).where(
                rc.c.org_id == org_id, rc.c.receipt_id == receipt_id
            )
        )
    ).scalar_one()
    ids = [*json.loads(current or "[]"), event_id]
    await conn.execute(
        update(rc)
        .where(rc.c.org_id == org_id, rc.c.receipt_id == receipt_id)
        .values(materialized_event_ids=json.dumps(ids))
    )
