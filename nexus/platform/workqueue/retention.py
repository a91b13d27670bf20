"""Deleting work for good: purge parked items (an operator's choice) and prune finished ones
(retention). Both delete only rows in the states they name, so no lease holder is touched;
both read through the primary key or the claim index, bounded per call (`MAX_BATCH`).
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import delete, select
from sqlalchemy.ext.asyncio import AsyncConnection

from nexus.platform.workqueue.operate import (
    HALTS_LANE,
    MAX_BATCH,
    NOT_FOUND,
    NOT_PARKED,
    Done,
    Refused,
    with_lane,
)
from nexus.platform.workqueue.store import CANCELLED, PARKED, SUCCEEDED
from nexus.platform.workqueue.tables import WorkTables

PRUNABLE = (SUCCEEDED, CANCELLED)


async def purge(conn: AsyncConnection, t: WorkTables, ids: Sequence[str]) -> Done:
    """Delete parked items for good. A head that halts its lane is refused (`HALTS_ITS_LANE`):
    skip or replay it first, so no lane is left halted by an item that no longer exists."""
    ids = list(dict.fromkeys(ids))[:MAX_BATCH]
    if not ids:
        return Done([], [])
    items, lanes = t.items, t.source_lanes
    rows = {
        r.id: r
        for r in await conn.execute(
            select(items.c.id, items.c.state, lanes.c.halted_by)
            .select_from(with_lane(t))
            .where(items.c.id.in_(ids))
        )
    }
    refused = [Refused(i, NOT_FOUND) for i in ids if i not in rows]
    refused += [Refused(i, NOT_PARKED) for i, r in rows.items() if r.state not in PARKED]
    refused += [
        Refused(i, HALTS_LANE) for i, r in rows.items() if r.state in PARKED and r.halted_by == i
    ]
    wanted = [i for i, r in rows.items() if r.state in PARKED and r.halted_by != i]
    if not wanted:
        return Done([], refused)
    await conn.execute(
        delete(items).where(items.c.id.in_(wanted), items.c.state.in_(sorted(PARKED)))
    )
    left = {r[0] for r in await conn.execute(select(items.c.id).where(items.c.id.in_(wanted)))}
    refused += [Refused(i, NOT_PARKED) for i in wanted if i in left]
    return Done([i for i in wanted if i not in left], refused)


async def prune_finished(
    conn: AsyncConnection,
    t: WorkTables,
    *,
    before_ms: int,
    limit: int = MAX_BATCH,
    states: Sequence[str] = PRUNABLE,
) -> list[str]:
    """Delete up to `limit` items in `states` (succeeded and cancelled) that finished before
    `before_ms` (database epoch ms); returns their ids. Reads one claim-index range per
    (queue, state) — a finished row's `run_after` is its last lease expiry, so `run_after <
    before_ms` bounds the range and `finished_at` confirms. Call again until it returns fewer
    than `limit` (each call in its own short transaction)."""
    items, queues = t.items, t.queues
    limit = min(limit, MAX_BATCH)
    found: list[str] = []
    for family, queue_class in await conn.execute(select(queues.c.family, queues.c.queue_class)):
        for state in states:
            if len(found) >= limit:
                break
            rows = await conn.execute(
                select(items.c.id)
                .where(
                    items.c.family == family,
                    items.c.queue_class == queue_class,
                    items.c.state == state,
                    items.c.run_after < before_ms,
                    items.c.finished_at < before_ms,
                )
                .order_by(items.c.run_after, items.c.id)
                .limit(limit - len(found))
            )
            found += [r[0] for r in rows]
    if found:
        await conn.execute(delete(items).where(items.c.id.in_(found), items.c.state.in_(states)))
    return found
