"""The work engine on a 3-node Galera cluster, a writer on every node: items enqueued through
all three while one Worker per node claims the same queues at once. Row locks are node-local
on Galera, so the claim turn does not serialize the nodes: two nodes' claims of one row both
run, and the second to commit loses certification with a deadlock error (1213). The engine
takes that as the CAS loss it is (`WorkerStats.conflicts`, claim again at once).

Checked: every item ran exactly once and succeeded at its first attempt; every source lane
ran in its order; no two items of a target lane ran at the same time; conflicts happened
(the test would prove nothing if the nodes never collided).
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from sqlalchemy import MetaData, func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from nexus.platform.db.engine import create_engine, reading
from nexus.platform.workqueue.store import Claimed, NewItem, QueuePolicy, WorkStore
from nexus.platform.workqueue.tables import WorkTables, work_tables
from nexus.platform.workqueue.worker import Worker, WorkerSettings

pytestmark = pytest.mark.asyncio(loop_scope="module")

FAMILY = "org1/galera"
ITEMS_PER_NODE = 600
LANES = 60
TARGETS = 12


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def engines(node_urls: list[str]) -> AsyncIterator[list[AsyncEngine]]:
    made = [create_engine(url, application_name=f"galera-{n}") for n, url in enumerate(node_urls)]
    yield made
    for engine in made:
        await engine.dispose()


async def test_writers_on_every_node_run_each_item_once_in_lane_order(
    engines: list[AsyncEngine],
) -> None:
    tables = work_tables(MetaData(), "g_work")
    async with engines[0].begin() as conn:
        for table in tables.all:
            await conn.run_sync(table.create)

    runs: dict[str, int] = defaultdict(int)
    lane_order: dict[str, list[int]] = defaultdict(list)
    in_flight: dict[str, int] = defaultdict(int)
    overlaps: list[str] = []

    async def handler(item: Claimed) -> None:
        runs[item.id] += 1
        if item.lane_key:
            lane_order[item.lane_key].append(item.lane_seq or 0)
        if item.target_key:
            in_flight[item.target_key] += 1
            if in_flight[item.target_key] > 1:
                overlaps.append(item.target_key)
            await asyncio.sleep(0.002)
            in_flight[item.target_key] -= 1

    # small claims and short passes: a node whose claim took a lane's head runs the lane on
    # by itself (ADR 0068), so with whole-queue claims one node could take every lane first
    # and leave another nothing to write
    settings = WorkerSettings(
        concurrency=64, batch=16, idle_poll_ms=20, queue_refresh_ms=200, lane_passes=2
    )
    workers = [
        Worker(engine, WorkStore(tables, owner="galera", lease_ms=30_000), handler, settings)
        for engine in engines
    ]
    tasks = [asyncio.create_task(w.run()) for w in workers]
    started = time.monotonic()
    total = ITEMS_PER_NODE * len(engines)
    try:
        async with asyncio.timeout(180):
            await enqueue_everywhere(engines, tables)  # into the running workers' queue
            while await succeeded(engines[1], tables) < total:  # noqa: ASYNC110 - the database
                await asyncio.sleep(0.2)
    finally:
        for worker in workers:
            worker.stop()
        await asyncio.gather(*tasks)
    elapsed = time.monotonic() - started

    assert len(runs) == total
    assert set(runs.values()) == {1}, "an item ran twice"
    async with reading(engines[2]) as conn:
        attempts = (await conn.execute(select(func.max(tables.items.c.attempt)))).scalar_one()
    assert attempts == 1
    for lane, seqs in lane_order.items():
        assert seqs == sorted(seqs), f"lane {lane} ran out of order"
    assert not overlaps, f"two items of one target lane ran at once: {overlaps[:3]}"
    conflicts = sum(w.stats.conflicts for w in workers)
    claimed = [w.stats.claimed for w in workers]
    assert all(claimed), f"a node claimed nothing: {claimed}"
    print(
        f"galera: {total} items on 3 nodes in {elapsed:.1f} s ({total / elapsed:.0f}/s), "
        f"claimed per node {claimed}, certification/deadlock conflicts {conflicts}"
    )


async def enqueue_everywhere(engines: list[AsyncEngine], tables: WorkTables) -> None:
    """Each node enqueues its share, in rounds, all nodes at once: the lane rows and the
    queue row are written on every node (their own certification conflicts, retried)."""
    store = WorkStore(tables, owner="galera")
    async with engines[0].begin() as conn:
        await store.ensure_queue(conn, FAMILY, "q", policy=QueuePolicy(max_attempts=3))

    async def node(index: int, engine: AsyncEngine) -> None:
        for start in range(0, ITEMS_PER_NODE, 50):
            items = [
                NewItem(
                    FAMILY,
                    "q",
                    "{}",
                    lane_key=f"lane-{(index * ITEMS_PER_NODE + n) % LANES}",
                    target_key=f"target-{n % TARGETS}" if n % 3 == 0 else None,
                )
                for n in range(start, start + 50)
            ]
            for _ in range(20):
                try:
                    async with engine.begin() as conn:
                        await store.enqueue(conn, items)
                    break
                except Exception as exc:
                    if "1213" not in str(getattr(exc, "orig", exc)):
                        raise
                    await asyncio.sleep(0.01)
            else:
                raise AssertionError("an enqueue lost certification 20 times")

    await asyncio.gather(*(node(i, e) for i, e in enumerate(engines)))


async def succeeded(engine: AsyncEngine, tables: WorkTables) -> int:
    items = tables.items
    async with reading(engine) as conn:
        query = select(func.count()).where(
            items.c.family == FAMILY, items.c.queue_class == "q", items.c.state == "succeeded"
        )
        return int((await conn.execute(query)).scalar_one())
