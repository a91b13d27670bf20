"""The claim path does not read blocked work (ADR 0064): a regression guard.

Two queues, built by the engine itself: one with 1,000 items blocked, one with 100,000 (100
times more), and everything else the same: 10 source lanes whose heads are running with the
rest of each lane `waiting` behind them, 10 target lanes held by running items with items
parked (`target_wait`) on them, and 50 free items. On each, the operations of the claim path
run in a transaction that is rolled back afterwards (so each one sees the same queue):

    peek       `has_claimable` (the idle poller's read)
    claim      `claim` of 20 items (candidates, target CAS, claim CAS)
    reclaim    `reclaim_expired` of 3 running items whose leases ran out
    promotion  `finish` of a lane head and a target holder: the next item of the lane and
               the oldest waiter of the target become `pending`
    pass       `finish_passing_on` of a lane head: its lane's next item is claimed in the
               completion (ADR 0068)

What each read costs is measured by the database: on MariaDB the session's `Handler_read_*`
counters (rows and index entries the storage engine handed over), on SQLite the virtual
machine's steps (a progress handler every 10 instructions). The test fails when an
operation costs more with the big backlog than with the small one (beyond a small margin for
B-tree depth), and checks the plans: every statement of the path uses its index (MariaDB
EXPLAIN names the key; SQLite's plan has no full scan of the items).
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
import pytest_asyncio
from sqlalchemy import MetaData, event, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from nexus.contracts.roles import LogicalService
from nexus.platform.db.engine import create_engine
from nexus.platform.workqueue.store import (
    PENDING,
    SUCCESS,
    TARGET_WAIT,
    WAITING,
    Claimed,
    NewItem,
    PassOn,
    QueuePolicy,
    WorkStore,
)
from nexus.platform.workqueue.tables import WorkTables, work_tables
from tests.conftest import Backend

pytestmark = pytest.mark.asyncio(loop_scope="module")

QUEUE = "q"
LANES = 10
TARGETS = 10
FREE = 50
SMALL, LARGE = 1_000, 100_000
TARGET_SHARE = 10  # 1 in 10 blocked items waits for a target, the rest behind a lane head


@dataclass
class Scenario:
    family: str
    blocked: int
    epoch: int
    heads: list[Claimed]  # the running lane heads
    holders: list[Claimed]  # the running target holders
    costs: dict[str, int] = field(default_factory=dict)


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def engine(backend: Backend) -> AsyncIterator[tuple[AsyncEngine, WorkTables, str]]:
    engine = create_engine(backend.url(LogicalService.INTEGRATION), application_name="wq-path")
    tables = work_tables(MetaData(), "t_path")
    async with engine.begin() as conn:
        for table in tables.all:
            await conn.run_sync(table.create)
    yield engine, tables, backend.name
    await engine.dispose()


async def build(engine: AsyncEngine, tables: WorkTables, family: str, blocked: int) -> Scenario:
    """The queue, made the way workers make it: heads claimed, followers enqueued behind
    them, target items parked by a claim, free items last."""
    store = WorkStore(tables, owner="me", lease_ms=600_000)
    async with engine.begin() as conn:
        await store.ensure_queue(conn, family, QUEUE, policy=QueuePolicy(max_attempts=5))
        await store.enqueue(
            conn,
            [NewItem(family, QUEUE, "head", lane_key=f"lane-{n}") for n in range(LANES)]
            + [NewItem(family, QUEUE, "holder", target_key=f"target-{n}") for n in range(TARGETS)],
        )
    async with engine.begin() as conn:
        epoch = (await store.admitted_families(conn))[family]
        running = await store.claim(conn, family, QUEUE, epoch, LANES + TARGETS)
    assert len(running) == LANES + TARGETS
    waiters = blocked // TARGET_SHARE
    followers = blocked - waiters
    items = [
        NewItem(family, QUEUE, "follower", lane_key=f"lane-{n % LANES}") for n in range(followers)
    ] + [
        NewItem(family, QUEUE, "waiter", target_key=f"target-{n % TARGETS}") for n in range(waiters)
    ]
    for start in range(0, len(items), 5_000):
        async with engine.begin() as conn:
            await store.enqueue(conn, items[start : start + 5_000])
    async with engine.begin() as conn:  # one claim reads the target items once and parks them
        assert await store.claim(conn, family, QUEUE, epoch, waiters + 1) == []
    async with engine.begin() as conn:
        await store.enqueue(conn, [NewItem(family, QUEUE, "free") for _ in range(FREE)])
    counts = await states(engine, tables, family)
    assert counts[WAITING] == followers
    assert counts[TARGET_WAIT] == waiters
    assert counts[PENDING] == FREE
    return Scenario(
        family,
        blocked,
        epoch,
        heads=[c for c in running if c.lane_key],
        holders=[c for c in running if c.target_key],
    )


async def states(engine: AsyncEngine, tables: WorkTables, family: str) -> dict[str, int]:
    store = WorkStore(tables, owner="me")
    async with engine.connect() as conn:
        rows = await store.counts(conn)
    found = {r["state"]: r["count"] for r in rows if r["family"] == family}
    return {s: found.get(s, 0) for s in (PENDING, WAITING, TARGET_WAIT, "processing")}


# ---------------------------------------------------------------------- measuring


async def cost(
    engine: AsyncEngine,
    backend: str,
    operation: Callable[[AsyncConnection], Awaitable[Any]],
    prepare: Callable[[AsyncConnection], Awaitable[None]] | None = None,
) -> int:
    """The database's work for `operation`, in a transaction that is rolled back."""
    async with engine.connect() as conn:
        await conn.begin()
        if prepare is not None:
            await prepare(conn)
        if backend == "sqlite":
            raw = (await conn.get_raw_connection()).driver_connection
            steps = [0]

            def tick() -> int:
                steps[0] += 1
                return 0

            await raw.set_progress_handler(tick, 10)
            try:
                await operation(conn)
            finally:
                await raw.set_progress_handler(None, 100)
            spent = steps[0]
        else:
            before = await handler_reads(conn)
            await operation(conn)
            spent = await handler_reads(conn) - before
        await conn.rollback()
    return spent


async def handler_reads(conn: AsyncConnection) -> int:
    rows = await conn.exec_driver_sql("SHOW SESSION STATUS LIKE 'Handler_read%%'")
    return sum(int(value) for name, value in rows if name != "Handler_read_retry")


async def measure(engine: AsyncEngine, tables: WorkTables, backend: str, s: Scenario) -> None:
    store = WorkStore(tables, owner="me", lease_ms=600_000)
    items = tables.items

    async def peek(conn: AsyncConnection) -> None:
        assert await store.has_claimable(conn, s.family, QUEUE)

    async def claim(conn: AsyncConnection) -> None:
        got = await store.claim(conn, s.family, QUEUE, s.epoch, 20)
        assert len(got) == 20
        assert {c.payload for c in got} == {"free"}

    async def expire(conn: AsyncConnection) -> None:
        ids = [c.id for c in s.heads[:2] + s.holders[:1]]
        await conn.execute(
            update(items).where(items.c.id.in_(ids)).values(lease_until=0, run_after=0)
        )

    async def reclaim(conn: AsyncConnection) -> None:
        assert await store.reclaim_expired(conn, s.family, QUEUE) == 3

    async def promote(conn: AsyncConnection) -> None:
        head, holder = s.heads[0], s.holders[0]
        results = [(head, SUCCESS), (holder, SUCCESS)]
        assert await store.finish(conn, s.family, s.epoch, head.token, results) == set()

    s.costs["peek"] = await cost(engine, backend, peek)
    s.costs["claim"] = await cost(engine, backend, claim)
    s.costs["reclaim"] = await cost(engine, backend, reclaim, prepare=expire)

    async def pass_on(conn: AsyncConnection) -> None:
        head = s.heads[1]
        lost, passed = await store.finish_passing_on(
            conn, s.family, s.epoch, head.token, [(head, SUCCESS)], pass_on=PassOn("next", 16)
        )
        assert lost == set()
        assert [(c.payload, c.lane_key, c.token) for c in passed] == [
            ("follower", head.lane_key, "next")
        ]

    s.costs["promotion"] = await cost(engine, backend, promote)
    s.costs["pass"] = await cost(engine, backend, pass_on)


@dataclass
class Measured:
    backend: str
    small: Scenario
    large: Scenario
    statements: list[tuple[str, Any]]  # what the large queue's operations ran


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def measured(engine: tuple[AsyncEngine, WorkTables, str]) -> Measured:
    db, tables, backend = engine
    small = await build(db, tables, "org1/small", SMALL)
    large = await build(db, tables, "org1/large", LARGE)
    await measure(db, tables, backend, small)
    statements: list[tuple[str, Any]] = []

    def capture(_conn: Any, _cursor: Any, sql: str, params: Any, _context: Any, many: bool) -> None:
        if "t_path_item" in sql:
            statements.append((sql, params[0] if many else params))

    event.listen(db.sync_engine, "before_cursor_execute", capture)
    try:
        await measure(db, tables, backend, large)
    finally:
        event.remove(db.sync_engine, "before_cursor_execute", capture)
    print(f"{backend}: small {small.costs}, large {large.costs}")
    return Measured(backend, small, large, statements)


async def test_claims_reclaims_and_promotions_cost_the_same_behind_100x_the_backlog(
    measured: Measured, engine: tuple[AsyncEngine, WorkTables, str]
) -> None:
    small, large = measured.small, measured.large
    assert set(large.costs) == {"peek", "claim", "reclaim", "promotion", "pass"}
    for name, spent in large.costs.items():
        # B-tree depth may add a level: a few reads, never a share of 99,000 blocked rows
        limit = small.costs[name] * 1.25 + 20
        assert spent <= limit, (
            f"{name} costs {spent} with {LARGE:,} blocked items vs {small.costs[name]} with "
            f"{SMALL:,}: it reads blocked work"
        )
        assert spent < 2_000, f"{name} costs {spent}: more than the rows it needs"
    # and the promotions happened: the next item of the lane and one waiter are pending
    db, tables, _ = engine
    async with db.connect() as conn:
        await conn.begin()
        store = WorkStore(tables, owner="me", lease_ms=600_000)
        head, holder = large.heads[0], large.holders[0]
        await store.finish(conn, large.family, large.epoch, head.token, [(head, SUCCESS)])
        await store.finish(conn, large.family, large.epoch, holder.token, [(holder, SUCCESS)])
        got = await store.claim(conn, large.family, QUEUE, large.epoch, FREE + 2)
        await conn.rollback()
    assert sorted(c.payload for c in got) == sorted(["free"] * FREE + ["follower", "waiter"])


async def test_every_statement_of_the_claim_path_reads_items_through_an_index(
    measured: Measured, engine: tuple[AsyncEngine, WorkTables, str]
) -> None:
    db, _, backend = engine
    used: set[str] = set()
    async with db.connect() as conn:
        for sql, params in measured.statements:
            prefix = "EXPLAIN QUERY PLAN " if backend == "sqlite" else "EXPLAIN "
            rows = [dict(r._mapping) for r in await conn.exec_driver_sql(prefix + sql, params)]
            if backend == "sqlite":
                details = " | ".join(str(r["detail"]) for r in rows)
                assert not re.search(r"\bSCAN t_path_item\b", details), f"{sql}\n{details}"
                used.update(re.findall(r"INDEX (ix_t_path_\w+)", details))
                if "PRIMARY KEY" in details:
                    used.add("PRIMARY")
            else:
                mine = [r for r in rows if r["table"] == "t_path_item"]
                assert all(r["type"] not in ("ALL", "index") for r in mine), f"{sql}\n{mine}"
                used.update(str(r["key"]) for r in mine if r["key"])
    # the claim range, lane promotion, the oldest waiter, and primary-key CAS
    assert {"ix_t_path_claim", "ix_t_path_source", "ix_t_path_target"} <= used, used
