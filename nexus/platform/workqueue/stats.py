"""Queue statistics from indexed counts: depth per (family, queue class, state), in flight,
and the age of the oldest pending item.

One grouped statement per queue (the queues table is small) over the claim index `(family,
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

from nexus.platform.db.clock import read_now_ms
from nexus.platform.workqueue.keys import SEPARATOR
from nexus.platform.workqueue.store import (
    CANCELLED,
    DEAD,
    OUTCOME_UNKNOWN,
    PENDING,
    PROCESSING,
    SUCCEEDED,
    TARGET_WAIT,
    WAITING,
)
from nexus.platform.workqueue.tables import WorkTables

ALL_STATES = (
    PENDING,
    WAITING,
    TARGET_WAIT,
    PROCESSING,
    SUCCEEDED,
    DEAD,
    OUTCOME_UNKNOWN,
    CANCELLED,
)
# runnable, blocked behind a lane, running, or parked
OPEN_STATES = (PENDING, WAITING, TARGET_WAIT, PROCESSING, DEAD, OUTCOME_UNKNOWN)


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
    conn: AsyncConnection,
    t: WorkTables,
    *,
    states: Collection[str] = OPEN_STATES,
    org_id: str | None = None,
) -> QueueStats:
    """Every queue's counts, or only org `org_id`'s queues (an operator sees their org's)."""
    items, queues, families = t.items, t.queues, t.families
    now = await read_now_ms(conn)
    found: dict[tuple[str, str, str], QueueCount] = {}
    # an org's queues (an installation's policy row, `store.apply_policy`, holds no items)
    keys = select(queues.c.family, queues.c.queue_class).where(
        queues.c.family.contains(SEPARATOR, autoescape=True)
    )
    if org_id is not None:
        keys = keys.join(families, families.c.family == queues.c.family).where(
            families.c.org_id == org_id
        )
    for family, queue_class in list(await conn.execute(keys)):
        rows = await conn.execute(
            select(
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
            .where(
                items.c.family == family,
                items.c.queue_class == queue_class,
                items.c.state.in_(sorted(states)),
            )
            .group_by(items.c.state)
        )
        for r in rows:
            state, oldest = str(r[0]), r[3]
            found[(family, queue_class, state)] = QueueCount(
                family=family,
                queue_class=queue_class,
                state=state,
                count=int(r[1]),
                in_flight=int(r[2] or 0),
                oldest_age_ms=max(0, now - int(oldest))
                if state == PENDING and oldest is not None
                else None,
            )
        for state in states:  # every known queue reports every state asked for (0 if empty)
            found.setdefault(
                (family, queue_class, state), QueueCount(family, queue_class, state, 0, 0, None)
            )
    counts = list(found.values())
    counts.sort(key=lambda c: (c.family, c.queue_class, ALL_STATES.index(c.state)))
    return QueueStats(at_ms=now, counts=counts)
