"""Operating the work: the dead-letter read path, replay and skip (purge and retention:
`retention.py`).

Operator actions, not the hot path; still every call is bounded (`limit`, at most
`MAX_BATCH` ids) and reads items through the claim index `(family, queue_class, state,
run_after, id)`, driven from the small queues table, so no statement scans the items table.

Fencing: an operator never writes a row an executor may hold. Replay and skip move only
parked rows (`dead`, `outcome_unknown`: no lease holds them) and carry `state IN (parked)` in
their `WHERE`, so two operators racing on one item cannot both win; purge and retention delete
only rows in the states they name. Lanes move by compare-and-set on `head_seq`.

Replay makes a new attempt of the same item (ENGINE.md invariant 2): `pending`, runnable now,
`attempt` kept (it keeps growing), `max_attempts = attempt + the queue's max_attempts` so the
replay gets the queue's full retry budget. A halted lane resumes at its head (the replayed
item); an item whose lane moved past it (a `skip`-policy lane) rejoins its lane at the tail,
`waiting` behind the items there. Skipping a halted head moves its lane on and promotes the
next item.

Every action is for one org (`org_id`, the operator's, as Runtime vouched for it): it lists,
replays and skips only items of that org's families (`keys.family_key`); another org's item
is refused as `NOT_FOUND`, the same as an unknown id, so its existence is not revealed.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, bindparam, or_, select, true, tuple_, update
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql import Select

from nexus.platform.db.clock import db_now_ms
from nexus.platform.workqueue.keys import org_of
from nexus.platform.workqueue.store import (
    CANCELLED,
    PARKED,
    PENDING,
    WAITING,
    NewItem,
    WorkStore,
    new_token,
)
from nexus.platform.workqueue.tables import WorkTables

MAX_BATCH = 500

# Why an operator action was not done to an item (machine-readable; the console words them).
NOT_FOUND = "NOT_FOUND"
NOT_PARKED = "NOT_PARKED"
NOT_HALTING = "NOT_A_HALTED_LANE_HEAD"
HALTS_LANE = "HALTS_ITS_LANE"


@dataclass(frozen=True)
class Parked:
    """A parked item as the dead-letter list shows it (no payload)."""

    id: str
    family: str
    queue_class: str
    state: str
    attempt: int
    max_attempts: int
    failure_class: str | None
    error: str | None  # sanitized when it was recorded
    created_at: int
    finished_at: int | None
    lane_key: str | None
    halting: bool  # its source lane is halted by it ("halted by <id>")


@dataclass(frozen=True)
class Filters:
    """Which parked items an operator means; `since_ms`/`until_ms` bound when they parked."""

    family: str | None = None
    queue_class: str | None = None
    failure_class: str | None = None
    since_ms: int | None = None
    until_ms: int | None = None  # exclusive
    states: Collection[str] = PARKED


@dataclass(frozen=True)
class Refused:
    id: str
    reason: str  # one of the codes above


@dataclass(frozen=True)
class Done:
    """What an operator action did: the ids it changed and the ones it left alone, why."""

    done: list[str]
    refused: list[Refused]


def _lane_of_item(t: WorkTables) -> Any:
    lanes, items = t.source_lanes, t.items
    return and_(lanes.c.family == items.c.family, lanes.c.lane_key == items.c.lane_key)


def with_lane(t: WorkTables) -> Any:
    """Items with their source lane row (none for items without a lane)."""
    return t.items.outerjoin(t.source_lanes, _lane_of_item(t))


def _is_parked(t: WorkTables) -> Any:
    """`state IN (parked)` without an expanding parameter (usable with executemany)."""
    return or_(*(t.items.c.state == state for state in sorted(PARKED)))


def parked_select(
    t: WorkTables, filters: Filters, family: str, queue_class: str, *columns: Any
) -> Select[Any]:
    """Parked items of one queue (plus `columns` of tables a caller joins on), one range of
    the claim index per parked state, ordered by when they parked (`finished_at`, then id).
    Callers add joins; `page` adds the cursor and the limit."""
    items, lanes = t.items, t.source_lanes
    query = (
        select(
            items.c.id,
            items.c.family,
            items.c.queue_class,
            items.c.state,
            items.c.attempt,
            items.c.max_attempts,
            items.c.failure_class,
            items.c.last_error,
            items.c.created_at,
            items.c.finished_at,
            items.c.lane_key,
            lanes.c.halted_by,
            *columns,
        )
        .select_from(with_lane(t))
        .where(
            items.c.family == family,
            items.c.queue_class == queue_class,
            items.c.state.in_(sorted(filters.states)),
        )
        .order_by(items.c.finished_at, items.c.id)
    )
    if filters.failure_class is not None:
        query = query.where(items.c.failure_class == filters.failure_class)
    if filters.since_ms is not None:
        query = query.where(items.c.finished_at >= filters.since_ms)
    if filters.until_ms is not None:
        query = query.where(items.c.finished_at < filters.until_ms)
    return query


async def page(
    conn: AsyncConnection,
    t: WorkTables,
    filters: Filters,
    build: Callable[[str, str], Select[Any]],
    *,
    org_id: str,
    cursor: tuple[int, str] | None,
    limit: int,
) -> list[Any]:
    """One page of rows across queues: `build(family, queue_class)` gives each queue's query
    (`parked_select`, perhaps joined further); every queue is read through its own index
    range (the queues table is small) and the pages are merged by (finished_at, id). Only
    org `org_id`'s queues; rows after `cursor` only; at most `limit`."""
    queues, families = t.queues, t.families
    keys = (
        select(queues.c.family, queues.c.queue_class)
        .join(families, families.c.family == queues.c.family)
        .where(families.c.org_id == org_id)
        .order_by(queues.c.family, queues.c.queue_class)
    )
    if filters.family is not None:
        keys = keys.where(queues.c.family == filters.family)
    if filters.queue_class is not None:
        keys = keys.where(queues.c.queue_class == filters.queue_class)
    limit = min(limit, MAX_BATCH)
    rows: list[Any] = []
    for family, queue_class in list(await conn.execute(keys)):
        query = build(family, queue_class).where(after(t, cursor)).limit(limit)
        rows += list(await conn.execute(query))
    rows.sort(key=lambda r: (r.finished_at or 0, r.id))
    return rows[:limit]


def after(t: WorkTables, cursor: tuple[int, str] | None) -> Any:
    """Keyset condition: items that parked after `cursor` = (finished_at, id)."""
    if cursor is None:
        return true()
    items = t.items
    finished_at, item_id = cursor
    return or_(
        items.c.finished_at > finished_at,
        and_(items.c.finished_at == finished_at, items.c.id > item_id),
    )


def to_parked(row: Any) -> Parked:
    return Parked(
        id=row.id,
        family=row.family,
        queue_class=row.queue_class,
        state=row.state,
        attempt=int(row.attempt),
        max_attempts=int(row.max_attempts),
        failure_class=row.failure_class,
        error=row.last_error,
        created_at=int(row.created_at),
        finished_at=None if row.finished_at is None else int(row.finished_at),
        lane_key=row.lane_key,
        halting=row.halted_by is not None and row.halted_by == row.id,
    )


async def list_parked(
    conn: AsyncConnection,
    t: WorkTables,
    filters: Filters | None = None,
    *,
    org_id: str,
    cursor: tuple[int, str] | None = None,
    limit: int = 100,
    halting_only: bool = False,
) -> list[Parked]:
    """One page of parked items in parking order; the next page starts after the last one's
    `(finished_at, id)`. A bulk action ("everything parked since T") pages this way with
    `until_ms` = its own start, so an item that parks again meanwhile is not taken twice.
    `halting_only`: the heads of halted source lanes ("halted by <id>")."""
    filters = filters or Filters()

    def build(family: str, queue_class: str) -> Select[Any]:
        query = parked_select(t, filters, family, queue_class)
        return query.where(t.source_lanes.c.halted_by == t.items.c.id) if halting_only else query

    rows = await page(conn, t, filters, build, org_id=org_id, cursor=cursor, limit=limit)
    return [to_parked(r) for r in rows]


# ---------------------------------------------------------------------- replay / skip


async def replay(conn: AsyncConnection, t: WorkTables, ids: Sequence[str], *, org_id: str) -> Done:
    """Make each parked item of org `org_id` in `ids` run again as a new attempt (see the
    module docstring). Items not parked (any more) are refused, never touched."""
    ids = list(dict.fromkeys(ids))[:MAX_BATCH]
    if not ids:
        return Done([], [])
    items, queues, lanes = t.items, t.queues, t.source_lanes
    rows = {
        r.id: r
        for r in await conn.execute(
            select(
                items.c.id,
                items.c.family,
                items.c.queue_class,
                items.c.state,
                items.c.lane_key,
                items.c.lane_seq,
                lanes.c.head_seq,
                lanes.c.halted_by,
            )
            .select_from(with_lane(t))
            .where(items.c.id.in_(ids))
        )
        if org_of(r.family) == org_id
    }
    # each queue's retry budget (read apart: joined, MariaDB drove the read from the queue)
    budget = {
        (r.family, r.queue_class): int(r.max_attempts)
        for r in await conn.execute(
            select(queues.c.family, queues.c.queue_class, queues.c.max_attempts).where(
                tuple_(queues.c.family, queues.c.queue_class).in_(
                    sorted({(r.family, r.queue_class) for r in rows.values()})
                )
            )
        )
    }
    refused = [Refused(i, NOT_FOUND) for i in ids if i not in rows]
    refused += [Refused(i, NOT_PARKED) for i, r in rows.items() if r.state not in PARKED]
    parked = [r for r in rows.values() if r.state in PARKED]
    if not parked:
        return Done([], refused)
    # A lane that moved past its dead item (a `skip` lane) takes it back at its tail.
    behind = [
        r for r in parked if r.lane_key and r.head_seq is not None and r.head_seq > r.lane_seq
    ]
    store = WorkStore(t, owner="operator")
    tails = await store._allocate_lane_seqs(  # the engine's one lane allocator (CAS)
        conn, [NewItem(r.family, r.queue_class, "", lane_key=r.lane_key) for r in behind]
    )
    new_seat = {r.id: tails[index] for index, r in enumerate(behind)}
    token = new_token()  # marks the rows this replay moved (the read-back below)
    again = {
        "state": PENDING,
        "run_after": db_now_ms(),
        "lease_token": token,
        "lease_owner": None,
        "lease_until": None,
        "finished_at": None,
    }
    # One statement per queue budget (an executemany UPDATE is one round trip per row on
    # MySQL drivers); the rare items rejoining a lane's tail one by one, with their sequence.
    budgets: dict[int, list[str]] = {}
    for r in parked:
        if r.id not in new_seat:
            budgets.setdefault(budget[(r.family, r.queue_class)], []).append(r.id)
    for retries, group in budgets.items():
        await conn.execute(
            update(items)
            .where(items.c.id.in_(group), _is_parked(t))
            .values(max_attempts=items.c.attempt + retries, **again)
        )
    for r in parked:
        if (seat := new_seat.get(r.id)) is not None:
            await conn.execute(
                update(items)
                .where(items.c.id == r.id, _is_parked(t))
                .values(
                    max_attempts=items.c.attempt + budget[(r.family, r.queue_class)],
                    lane_seq=seat.seq,
                    **(again | {"state": PENDING if seat.head else WAITING}),
                )
            )
    moved = {
        r[0]
        for r in await conn.execute(
            select(items.c.id).where(
                items.c.id.in_([r.id for r in parked]),
                items.c.lease_token == token,
                items.c.state.in_([PENDING, WAITING]),
            )
        )
    }
    resumed = [
        {"b_family": r.family, "b_key": r.lane_key, "b_id": r.id}
        for r in parked
        if r.id in moved and r.halted_by == r.id
    ]
    if resumed:  # the lane's head is runnable again: it no longer halts the lane
        await conn.execute(
            update(lanes)
            .where(
                lanes.c.family == bindparam("b_family"),
                lanes.c.lane_key == bindparam("b_key"),
                lanes.c.halted_by == bindparam("b_id"),
            )
            .values(halted_by=None),
            resumed,
        )
    refused += [Refused(r.id, NOT_PARKED) for r in parked if r.id not in moved]
    return Done([r.id for r in parked if r.id in moved], refused)


async def skip_head(conn: AsyncConnection, t: WorkTables, item_id: str, *, org_id: str) -> Done:
    """Skip the parked head of a halted lane of org `org_id`: it becomes `cancelled` and the
    lane moves on to the next item. Anything else is refused (`NOT_FOUND`, `NOT_PARKED`,
    `NOT_A_HALTED_LANE_HEAD`)."""
    items, lanes = t.items, t.source_lanes
    row = (
        await conn.execute(
            select(
                items.c.id,
                items.c.family,
                items.c.state,
                items.c.lane_key,
                items.c.lane_seq,
                lanes.c.head_seq,
                lanes.c.halted_by,
            )
            .select_from(with_lane(t))
            .where(items.c.id == item_id)
        )
    ).first()
    if row is None or org_of(row.family) != org_id:
        return Done([], [Refused(item_id, NOT_FOUND)])
    if row.state not in PARKED:
        return Done([], [Refused(item_id, NOT_PARKED)])
    if row.halted_by != item_id or row.head_seq != row.lane_seq:
        return Done([], [Refused(item_id, NOT_HALTING)])
    cancelled = await conn.execute(
        update(items)
        .where(items.c.id == item_id, items.c.state.in_(sorted(PARKED)))
        .values(state=CANCELLED, finished_at=db_now_ms())
    )
    if cancelled.rowcount != 1:  # replayed or skipped by someone else meanwhile
        return Done([], [Refused(item_id, NOT_PARKED)])
    store = WorkStore(t, owner="operator")
    await store.advance_lanes(conn, row.family, [(row.lane_key, int(row.lane_seq))])
    return Done([item_id], [])
