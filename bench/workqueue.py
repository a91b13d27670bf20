#!/usr/bin/env python
"""Work engine burn-down: N pre-inserted no-op items claimed and completed by 1, 2 and 4
worker processes (real `Worker`s: batch CAS claims, micro-batched fenced completions).

    .venv/bin/python bench/workqueue.py [--items 100000] [--procs 1 2 4]
        [--backend sqlite|mariadb|galera]
        [--lanes]   # 20% of items on 1,000 source lanes, half of those also on 10 target lanes
        [--blocked 1000 100000]  # lane-heavy: every item on a lane, 10% of the lanes blocked

`--backend galera` (issue 24): a throwaway 3-node MariaDB Galera cluster on loopback ports
(tests/support/galera.py, as `make test-galera`), worker process n on node n % 3, so
`--procs 1 3` compares one node's writer with a writer on every node (certification
conflicts at COMMIT are the engine's lost CAS, claimed again).

Each run seeds a fresh queue, starts the processes, and times from the moment every process
is ready until the database says no item is pending or processing. Checks afterwards that
every item succeeded exactly once (attempt = 1, none dead, no reclaims). Prints JSON.

`--blocked N...` (issue 24, ADR 0064) runs a lane-free burn-down of `--items` first, then for
each N the lane-heavy one: the same `--items`, every one on a source lane (9,000 lanes), plus
1,000 more lanes (10% of all) whose head is slow (its handler sleeps until the run ends) with
N items blocked behind them. The clock stops when every item of the free lanes succeeded (no
item pending, only the slow heads processing); the blocked ones stay `waiting`. Each run
reports its rate as a share of the lane-free one.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import uvloop
from sqlalchemy import MetaData, func, select

from nexus.platform.db.engine import create_engine, reading
from nexus.platform.observability import configure_logging
from nexus.platform.workqueue.store import NewItem, QueuePolicy, WorkStore
from nexus.platform.workqueue.tables import work_tables
from nexus.platform.workqueue.worker import Worker, WorkerSettings

FAMILY = "org1/bench"
PREFIX = "bench_work"


FREE_LANES = 9_000
SLOW_LANES = 1_000


def lane(kind: str, i: int, lanes: int) -> str:
    return f"{kind}-{i % lanes}"


def blocked_layout(items: int, blocked: int) -> list[NewItem]:
    """Slow heads first (each is its lane's head), then the free lanes' items and the blocked
    items interleaved, as a connector's traffic would arrive."""
    layout = [NewItem(FAMILY, "default", "slow", lane_key=f"slow-{n}") for n in range(SLOW_LANES)]
    free = [
        NewItem(FAMILY, "default", "{}", lane_key=f"free-{i % FREE_LANES}") for i in range(items)
    ]
    stuck = [
        NewItem(FAMILY, "default", "stuck", lane_key=f"slow-{i % SLOW_LANES}")
        for i in range(blocked)
    ]
    step = max(1, len(free) // max(1, len(stuck)))
    mixed: list[NewItem] = []
    while free or stuck:
        mixed += free[:step]
        del free[:step]
        if stuck:
            mixed.append(stuck.pop())
    return layout + mixed


async def seed(url: str, items: int, lanes: bool, blocked: int | None = None) -> None:
    engine = create_engine(url, application_name="bench-seed")
    tables = work_tables(MetaData(), PREFIX)
    async with engine.begin() as conn:
        for table in tables.all:
            await conn.run_sync(table.drop, checkfirst=True)
        for table in tables.all:
            await conn.run_sync(table.create)
    store = WorkStore(tables, owner="bench")
    async with engine.begin() as conn:
        await store.ensure_queue(conn, FAMILY, "default", policy=QueuePolicy(max_attempts=5))
    if blocked is not None:
        layout = blocked_layout(items, blocked)
        for start in range(0, len(layout), 5000):
            async with engine.begin() as conn:
                await store.enqueue(conn, layout[start : start + 5000])
        await settle(engine)
        return
    for start in range(0, items, 5000):
        batch = []
        for i in range(start, min(items, start + 5000)):
            laned = lanes and i % 5 == 0
            batch.append(
                NewItem(
                    FAMILY,
                    "default",
                    "{}",
                    # (i // 5) and (i // 10): `i % 1000` and `i % 10` of these i put every
                    # target item on one key and the laned items on 200 lanes
                    lane_key=f"source-{(i // 5) % 1000}" if laned else None,
                    target_key=f"target-{(i // 10) % 10}" if laned and i % 10 == 0 else None,
                )
            )
        async with engine.begin() as conn:
            await store.enqueue(conn, batch)
    await settle(engine)


async def settle(engine: Any) -> None:
    """Every run starts from a quiet database: the seed's writes checkpointed out of the WAL
    (SQLite: else the run's checkpoints copy them, inside the timed window), InnoDB's purge of
    the last run's history done (MariaDB: `innodb_max_purge_lag_wait=0` waits for it)."""
    if engine.dialect.name == "sqlite":  # outside any transaction: the driver's own connection
        await engine.dispose()
        with contextlib.closing(sqlite3.connect(str(engine.url.database))) as db:
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        return
    async with engine.connect() as conn:
        await conn.exec_driver_sql("SET GLOBAL innodb_max_purge_lag_wait=0")
    await engine.dispose()


def synchronous() -> str:
    """SQLite's `PRAGMA synchronous` for this run (`--durable`: FULL; the product ships NORMAL)."""
    return os.environ.get("BENCH_SQLITE_SYNCHRONOUS", "NORMAL")


async def work(url: str, ready: Path, go: Path) -> None:
    engine = create_engine(  # on SQLite on the loop's thread, as the roles' work engines run
        url,
        application_name="bench-worker",
        pool_size=4,
        sqlite_synchronous=synchronous(),
        sqlite_on_loop=True,
    )
    store = WorkStore(work_tables(MetaData(), PREFIX), owner="bench")

    async def handler(item: Any) -> None:
        if item.payload == "slow":  # a lane head that blocks its lane until the run ends
            await asyncio.sleep(3600)

    worker = Worker(
        engine,
        store,
        handler,
        WorkerSettings(
            # the slow heads of a blocked run hold executors of their own: the free work
            # has 2,048 in every run
            concurrency=2048 + SLOW_LANES,
            batch=1024,
            idle_poll_ms=20,
            flush_max=2048,
            drain_timeout_s=0.2,
        ),
    )
    gc.collect()
    gc.freeze()
    ready.touch()  # noqa: ASYNC240 - start-up handshake with the parent, before the clock
    while not go.exists():  # noqa: ASYNC110, ASYNC240 - a file from another process
        await asyncio.sleep(0.005)
    cpu_at_go = time.process_time()
    task = asyncio.create_task(worker.run())
    while not (go.parent / "stop").exists():  # noqa: ASYNC110
        await asyncio.sleep(0.05)
    worker.stop()
    await task
    stats = {
        "pid": os.getpid(),
        "succeeded": worker.stats.succeeded,
        "lost": worker.stats.lost,
        "claims": worker.stats.claims,
        "cpu_s": time.process_time() - cpu_at_go,
    }
    print(json.dumps(stats))
    await engine.dispose()


async def remaining(url: str) -> dict[str, int]:
    engine = create_engine(url, application_name="bench-watch")
    items = work_tables(MetaData(), PREFIX).items
    async with reading(engine) as conn:
        rows = await conn.execute(select(items.c.state, func.count()).group_by(items.c.state))
        counts = {str(r[0]): int(r[1]) for r in rows}
        attempts = (
            await conn.execute(select(func.max(items.c.attempt), func.sum(items.c.reclaims)))
        ).one()
    await engine.dispose()
    counts["max_attempt"] = int(attempts[0] or 0)
    counts["reclaims"] = int(attempts[1] or 0)
    return counts


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (Linux /proc), e.g. the database server."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def busy_cores() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine so far (/proc/stat), to tell how much of
    a window went to other programs."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = values[3] + values[4]
    tick = os.sysconf("SC_CLK_TCK")
    return (sum(values) - idle) / tick, sum(values) / tick


def run(
    urls: list[str],
    items: int,
    procs: int,
    lanes: bool,
    server_pids: list[int],
    *,
    blocked: int | None = None,
) -> dict[str, Any]:
    """One burn-down; worker process n works through `urls[n % len(urls)]` (a cluster's
    nodes), the seed and the watch through the first."""
    url = urls[0]
    asyncio.run(seed(url, items, lanes, blocked))
    folder = Path(tempfile.mkdtemp(prefix="nexus-bench-wq-"))
    go = folder / "go"
    workers = []
    for n in range(procs):
        ready = folder / f"ready{n}"
        workers.append(
            (
                ready,
                subprocess.Popen(
                    [
                        sys.executable,
                        __file__,
                        "--worker",
                        urls[n % len(urls)],
                        str(ready),
                        str(go),
                    ],
                    stdout=subprocess.PIPE,
                    text=True,
                ),
            )
        )
    while not all(r.exists() for r, _ in workers):
        time.sleep(0.01)
    load_before = os.getloadavg()[0]
    db_cpu = sum(cpu_seconds(pid) for pid in server_pids)
    machine = busy_cores()
    started = time.perf_counter()
    go.touch()

    async def watch() -> float:
        engine = create_engine(url, application_name="bench-watch")
        table = work_tables(MetaData(), PREFIX).items
        open_states = ["pending", "waiting", "target_wait", "processing"]
        unfinished = (  # one index probe: counting 100,000 rows every 20 ms cost a core
            select(table.c.id)
            .where(
                table.c.family == FAMILY,
                table.c.queue_class == "default",
                table.c.state.in_(["pending"] if blocked is not None else open_states),
            )
            .limit(1)
        )
        running = select(func.count()).where(  # the processing range: at most the executors
            table.c.family == FAMILY,
            table.c.queue_class == "default",
            table.c.state == "processing",
        )
        while True:
            async with reading(engine) as conn:
                left = (await conn.execute(unfinished)).first()
                # blocked runs: a free lane's next item is promoted with its head's
                # completion, so no pending item and only the slow heads running = done
                if left is None and blocked is not None:
                    left = (await conn.execute(running)).scalar_one() > SLOW_LANES or None
            if left is None:
                await engine.dispose()
                return time.perf_counter() - started
            await asyncio.sleep(0.02)

    elapsed = asyncio.run(watch())
    busy, total = (a - b for a, b in zip(busy_cores(), machine, strict=True))
    db_cpu = sum(cpu_seconds(pid) for pid in server_pids) - db_cpu
    (folder / "stop").touch()
    reports = [
        json.loads(p.communicate(timeout=60)[0].strip().splitlines()[-1]) for _, p in workers
    ]
    counts = asyncio.run(remaining(url))
    assert counts.get("succeeded") == items, counts
    assert counts["max_attempt"] == 1, counts
    assert counts["reclaims"] == 0, counts
    assert sum(r["succeeded"] for r in reports) == items, reports
    if blocked is not None:  # the slow heads were released at the end; nothing ran past them
        assert counts.get("waiting", 0) == blocked, counts
        assert counts.get("pending", 0) == SLOW_LANES, counts
    return {
        "procs": procs,
        "items": items,
        "lanes": lanes,
        "blocked": blocked,
        "seconds": round(elapsed, 2),
        "items_per_s": round(items / elapsed),
        "per_process": [r["succeeded"] for r in reports],
        "lost": sum(r["lost"] for r in reports),
        "items_per_claim": round(items / max(1, sum(r["claims"] for r in reports))),
        # CPU per 1,000 items: the workers' own, the database server's (MariaDB; SQLite runs
        # inside the workers), and the machine's busy cores during the window (2.0 = full;
        # what the workers and the server did not use went to other programs)
        "worker_cpu_ms_per_1k": round(sum(r["cpu_s"] for r in reports) * 1e6 / items, 1),
        "db_cpu_ms_per_1k": round(db_cpu * 1e6 / items, 1),
        "machine_busy_cores": round(busy / total * (os.cpu_count() or 1), 2),
        "load_1min_before": round(load_before, 2),
    }


def databases(backend: str, *, durable: bool) -> tuple[list[Any], list[str]]:
    """The servers started for `backend` (none for SQLite) and the bench database's URLs
    (one per Galera node)."""
    if backend == "sqlite":
        folder = tempfile.mkdtemp(prefix="nexus-bench-wq-db-")
        return [], [f"sqlite+aiosqlite:///{folder}/work.sqlite3"]
    from tests.support.mariadb import find_server_binary, start_mariadb

    binary = find_server_binary()
    if binary is None:
        raise SystemExit("mariadbd not found")
    if backend == "galera":
        from tests.support.galera import start_galera

        cluster = start_galera(binary)
        return list(cluster.nodes), cluster.create_database("bench_work")
    server = start_mariadb(binary, durable=durable)
    return [server], [server.create_database("bench_work")]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--procs", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--backend", choices=["sqlite", "mariadb", "galera"], default="sqlite")
    parser.add_argument("--lanes", action="store_true")
    parser.add_argument("--blocked", type=int, nargs="+", help="lane-heavy runs, N blocked each")
    parser.add_argument(
        "--durable",
        action="store_true",
        help="commit-durable: SQLite synchronous=FULL, MariaDB innodb_flush_log_at_trx_commit=1",
    )
    parser.add_argument(
        "--peers",
        action="store_true",
        help="then run huey (SqliteHuey) and procrastinate (PostgreSQL) from ../shared/peerbench",
    )
    parser.add_argument("--worker", nargs=3, metavar=("URL", "READY", "GO"))
    args = parser.parse_args()
    configure_logging(role="bench", level="warning", fmt="json")
    if args.worker:
        url, ready, go = args.worker
        # uvloop, as the roles that run workers have it (`nexus serve`: uvicorn, loop="auto")
        uvloop.run(work(url, Path(ready), Path(go)))
        return
    if args.durable:
        os.environ["BENCH_SQLITE_SYNCHRONOUS"] = "FULL"  # the worker processes inherit it
    if args.durable and args.backend == "galera":
        raise SystemExit("--durable: sqlite or mariadb")
    out: dict[str, Any] = {
        "machine": f"{os.uname().nodename} {os.cpu_count()} cpu, {sys.version.split()[0]}",
        "backend": args.backend,
        "durability": (
            ("synchronous=FULL" if args.backend == "sqlite" else "flush_log_at_trx_commit=1")
            if args.durable
            else ("synchronous=NORMAL" if args.backend == "sqlite" else "flush_log_at_trx_commit=2")
        ),
        "runs": [],
    }
    servers, urls = databases(args.backend, durable=args.durable)
    pids = [server.process.pid for server in servers]
    try:
        if args.blocked:
            procs = args.procs[0]
            free = run(urls, args.items, procs, False, pids)
            out["runs"].append(free)
            print(json.dumps(free), file=sys.stderr)
            for blocked in args.blocked:
                heavy = run(urls, args.items, procs, False, pids, blocked=blocked)
                heavy["share_of_lane_free"] = round(heavy["items_per_s"] / free["items_per_s"], 2)
                out["runs"].append(heavy)
                print(json.dumps(heavy), file=sys.stderr)
        for procs in [] if args.blocked else args.procs:
            out["runs"].append(run(urls, args.items, procs, args.lanes, pids))
            print(json.dumps(out["runs"][-1]), file=sys.stderr)
    finally:
        for server in reversed(servers):
            server.stop()
    if args.peers:
        out["peers"] = peers()
    print(json.dumps(out, indent=2))


PEERBENCH = Path(__file__).resolve().parents[2] / "shared" / "peerbench"
PEER_PYTHON = Path(os.environ.get("PB_ROOT", "/tmp/peerbench")) / "venv/bin/python"  # noqa: S108


def peers() -> list[dict[str, Any]]:
    """The peer queues measured right after ours, same machine, same run (their own scripts,
    set up by `../shared/peerbench/setup.sh`)."""
    if not PEER_PYTHON.exists():
        return [{"skipped": "run ../shared/peerbench/setup.sh first"}]
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    rows: list[dict[str, Any]] = []

    def peer(*command: str) -> None:
        done = subprocess.run(
            [str(PEER_PYTHON), *command],
            cwd=PEERBENCH,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
        rows.extend(json.loads(line) for line in lines)
        if done.returncode:
            rows.append({"failed": " ".join(command), "stderr": done.stderr[-500:]})

    for sync in ("default", "normal"):
        peer("peer_huey.py", "--tasks", "20000", "--workers", "4", "--sync", sync)
    subprocess.run(["./servers.sh", "start", "pg"], cwd=PEERBENCH, env=env, check=True)
    try:
        for procs in ("1", "2"):
            peer("peer_procrastinate.py", "--jobs", "20000", "--procs", procs)
    finally:
        subprocess.run(["./servers.sh", "stop", "pg"], cwd=PEERBENCH, env=env, check=False)
    return rows


if __name__ == "__main__":
    main()
