"""Queue statistics from indexed counts: depth per (family, queue class, state), in flight,
and the age of the oldest pending item.

One grouped statement, driven from the small queues table into the claim index `(family,
queue_class, state, run_after, id)`: each (queue, state) is one index range, counted without
touching the rows; `MIN(run_after)` of a pending range is its first entry; a `processing` row's
`run_after` is its lease expiry, so "in flight" (a live lease) is the part of the processing
range at or after now. The cost grows with the rows in the states asked for, which is why
`/metrics` asks only for the live and parked states (finished rows are history, counted by
the worker counters) and reads this at most every few seconds, never per scrape.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from sqlalchemy import and_, case, func, select
from sqlalchemy.ext.asyncio import AsyncConnection

from nexus.platform.db import db_now_ms
from nexus.platform.workqueue.store import (
    CANCELLED,
    DEAD,
    OUTCOME_UNKNOWN,
    PENDING,
    PROCESSING,
    SUCCEEDED,
)
from nexus.platform.workqueue.tables import WorkTables

ALL_STATES = (PENDING, PROCESSING, SUCCEEDED, DEAD, OUTCOME_UNKNOWN, CANCELLED)
OPEN_STATES = (PENDING, PROCESSING, DEAD, OUTCOME_UNKNOWN)  # waiting, running, or parked


@dataclass(frozen=True)
class QueueCount:
    family: str
    queue_class: str
    state: str
    count: int
    in_flight: int  # processing with a live lease (0 for other states)
    oldest_age_ms: int | None  # pending only: how long the oldest runnable item has waited


@dataclass(frozen=True)
class QueueStats:
    at_ms: int  # the database clock when counted
    counts: list[QueueCount]  # every queue, every state asked for (0 when empty)

    def total(self, state: str) -> int:
        return sum(c.count for c in self.counts if c.state == state)


async def queue_stats(
    conn: AsyncConnection, t: WorkTables, *, states: Collection[str] = OPEN_STATES
) -> QueueStats:
    items, queues = t.items, t.queues
    now = int((await conn.execute(db_now_ms().select())).scalar_one())
    rows = await conn.execute(
        select(
            queues.c.family,
            queues.c.queue_class,
            items.c.state,
            func.count(),
            func.sum(
                case(
                    (and_(items.c.state == PROCESSING, items.c.run_after >= now), 1),
                    else_=0,
                )
            ),
            func.min(items.c.run_after),
        )
        .select_from(
            queues.join(
                items,
                and_(
                    items.c.family == queues.c.family,
                    items.c.queue_class == queues.c.queue_class,
                    items.c.state.in_(sorted(states)),
                ),
            )
        )
        .group_by(queues.c.family, queues.c.queue_class, items.c.state)
    )
    found = {
        (str(r[0]), str(r[1]), str(r[2])): QueueCount(
            family=str(r[0]),
            queue_class=str(r[1]),
            state=str(r[2]),
            count=int(r[3]),
            in_flight=int(r[4] or 0),
            oldest_age_ms=max(0, now - int(r[5])) if r[2] == PENDING and r[5] is not None else None,
        )
        for r in rows
    }
    # Every known queue reports every state asked for: a queue that drained shows 0.
    for family, queue_class in await conn.execute(select(queues.c.family, queues.c.queue_class)):
        for state in states:
            found.setdefault(
                (family, queue_class, state), QueueCount(family, queue_class, state, 0, 0, None)
            )
    counts = list(found.values())
    counts.sort(key=lambda c: (c.family, c.queue_class, ALL_STATES.index(c.state)))
    return QueueStats(at_ms=now, counts=counts)
