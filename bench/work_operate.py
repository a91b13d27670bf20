"""Operating the work engine at size: queue statistics, a dead-letter page, a replay batch and
retention pruning over a table of mostly finished items.

    python bench/work_operate.py --items 200000 --backend sqlite|mariadb

Items: 95% succeeded (half of them older than the retention cutoff), 2.5% dead, 2.5% pending,
over 8 families. Prints the median latency of `queue_stats` (open states) and of one page of
`list_parked`, the time of one 100-item replay, and retention's rows/s in batches of 500.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

from sqlalchemy import MetaData, insert, select

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nexus.platform.db.clock import db_now_ms
from nexus.platform.db.engine import create_engine, reading
from nexus.platform.workqueue import operate
from nexus.platform.workqueue import retention as work_retention
from nexus.platform.workqueue.stats import queue_stats
from nexus.platform.workqueue.tables import work_tables

FAMILIES = 8
DAY_MS = 86_400_000


async def seed(engine, t, items: int) -> int:
    async with engine.begin() as conn:
        for table in t.all:
            await conn.run_sync(table.create)
        now = int((await conn.execute(db_now_ms().select())).scalar_one())
        await conn.execute(
            insert(t.families),
            [
                {
                    "family": f"org1/routes:f{f}",
                    "org_id": "org1",
                    "owner": "bench",
                    "ownership_epoch": 1,
                    "admitting": True,
                    "updated_at": now,
                }
                for f in range(FAMILIES)
            ],
        )
        await conn.execute(
            insert(t.queues),
            [
                {
                    "family": f"org1/routes:f{f}",
                    "queue_class": "default",
                    "weight": 1,
                    "max_attempts": 8,
                    "lane_policy": "halt",
                    "last_enqueued_at": now,
                }
                for f in range(FAMILIES)
            ],
        )
    rows = []
    for i in range(items):
        kind = i % 40
        state = "dead" if kind == 0 else "pending" if kind == 1 else "succeeded"
        old = i % 2 == 0 and state == "succeeded"
        at = now - (10 * DAY_MS if old else 1000) + i
        rows.append(
            {
                "id": f"{i:020d}",
                "family": f"org1/routes:f{i % FAMILIES}",
                "queue_class": "default",
                "state": state,
                "run_after": at,
                "attempt": 1,
                "max_attempts": 8,
                "reclaims": 0,
                "payload": '{"event_id": "e"}',
                "failure_class": "terminal" if state == "dead" else None,
                "last_error": "Runtime refused the command" if state == "dead" else None,
                "created_at": at,
                "finished_at": None if state == "pending" else at,
            }
        )
        if len(rows) == 5000:
            async with engine.begin() as conn:
                await conn.execute(insert(t.items), rows)
            rows = []
    if rows:
        async with engine.begin() as conn:
            await conn.execute(insert(t.items), rows)
    return now


async def timed(step, repeat: int = 15) -> float:
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        await step()
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples)


async def run(url: str) -> None:
    engine = create_engine(url, application_name="bench-operate")
    t = work_tables(MetaData(), "bench_work")
    try:
        started = time.perf_counter()
        now = await seed(engine, t, ITEMS)
        print(f"seeded {ITEMS} items in {time.perf_counter() - started:.1f}s")

        async def stats() -> None:
            async with reading(engine) as conn:
                await queue_stats(conn, t)

        async def page() -> None:
            async with reading(engine) as conn:
                await operate.list_parked(conn, t, org_id="org1", limit=100)

        print(f"queue_stats (open states): {await timed(stats):.1f} ms median")
        print(f"list_parked page of 100:   {await timed(page):.1f} ms median")
        async with reading(engine) as conn:
            ids = [p.id for p in await operate.list_parked(conn, t, org_id="org1", limit=100)]
        started = time.perf_counter()
        async with engine.begin() as conn:
            done = await operate.replay(conn, t, ids, org_id="org1")
        print(f"replay of {len(done.done)} items: {(time.perf_counter() - started) * 1000:.1f} ms")
        pruned, started = 0, time.perf_counter()
        while True:
            async with engine.begin() as conn:
                batch = await work_retention.prune_finished(conn, t, before_ms=now - 7 * DAY_MS)
            pruned += len(batch)
            if len(batch) < operate.MAX_BATCH:
                break
        elapsed = time.perf_counter() - started
        print(f"retention: {pruned} items in {elapsed:.1f}s = {pruned / elapsed:,.0f} rows/s")
        async with reading(engine) as conn:
            left = len(list(await conn.execute(select(t.items.c.id))))
        print(f"left: {left} items")
    finally:
        await engine.dispose()


ITEMS = 200_000

if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--items", type=int, default=ITEMS)
    parser.add_argument("--backend", choices=["sqlite", "mariadb"], default="sqlite")
    args = parser.parse_args()
    ITEMS = args.items
    if args.backend == "mariadb":
        from tests.support.mariadb import find_server_binary, start_mariadb

        server = start_mariadb(find_server_binary())
        try:
            asyncio.run(run(server.create_database("bench_operate")))
        finally:
            server.stop()
    else:
        with tempfile.TemporaryDirectory() as folder:
            asyncio.run(run(f"sqlite+aiosqlite:///{folder}/bench_operate.sqlite3"))
