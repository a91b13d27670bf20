#!/usr/bin/env python
"""Integration loops: stored receipts -> events + WorkItems (router), WorkItems -> AcceptCommand
calls (executor).

    .venv/bin/python bench/pipeline.py [--backend sqlite|mariadb] [--receipts 5000]
                                       [--batch 64] [--lanes per-object|source|none]
                                       [--sqlite-driver on-loop|aiosqlite]

Receipts are stored as ingress stores them (group-committed rows with body snapshots), then
one `ReceiptRouter` drains them (receipts/s), then one `Worker` with the `CommandExecutor`
(64 calls in flight) delivers every command to a Runtime stand-in served by uvicorn in
another process (`tests/support/runtime_stand_in.py`, 202 for everything), commands/s.
`--lanes per-object` gives each receipt its own source lane and 50 target lanes (a route
with `source` and `target_lane`); `source` gives each its own source lane only (as
bench/end_to_end.py's route does); `none` maps commands without lanes. SQLite runs on the
loop as integration's loops engine does (ADR 0049; `--sqlite-driver aiosqlite` for the old
driver). Besides the rates, each phase's CPU of this process (`process_time`: router, then
executor; the stand-in's is not counted) per item, in microseconds: on this 2-core box
shared with others, CPU per item is the steadier measure. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from joserfc.jwk import ECKey

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from nexus.contracts.roles import LogicalService
from nexus.integration.delivery.executor import CommandExecutor
from nexus.integration.delivery.models import work
from nexus.integration.ingress.repository import ReceiptRow, store_receipts
from nexus.integration.routing.router import EXECUTOR_OWNER, ReceiptRouter, RouterSettings
from nexus.integration.routing.routes import parse_route_file
from nexus.integration.routing.service import apply_routes
from nexus.platform.db.engine import create_engine
from nexus.platform.http_client import internal_client
from nexus.platform.migrations import upgrade_to_head
from nexus.platform.observability import configure_logging
from nexus.platform.workload import WorkloadSigner
from nexus.platform.workqueue.store import WorkStore
from nexus.platform.workqueue.worker import Worker, WorkerSettings
from tests.support.receipts import receipt_row

ORG = "00D000000000001AAA"
COMMAND = {
    "op": "upsert",
    "object": "Contact",
    "external_id_field": "External_Id__c",
    "fields": {"External_Id__c": "/data/id", "LastName": "/data/name"},
}


def routes() -> dict[str, Any]:
    base = {"signature": {"scheme": "hmac", "header": "x-sig"}, "secrets": ["bench"]}
    return {
        "org_id": ORG,
        "routes": [
            base | {"connector": "bench", "route": "plain", "command": COMMAND},
            base
            | {
                "connector": "bench",
                "route": "sourced",
                "command": COMMAND,
                "source": {
                    "object_kind": {"pointer": "/object"},
                    "object_id": {"pointer": "/data/id"},
                },
            },
            base
            | {
                "connector": "bench",
                "route": "laned",
                "command": COMMAND,
                "source": {
                    "object_kind": {"pointer": "/object"},
                    "object_id": {"pointer": "/data/id"},
                },
                "target_lane": "account:{/data/account}",
            },
        ],
    }


def receipt(n: int, route: str) -> ReceiptRow:
    body = json.dumps(
        {"object": "contact", "data": {"id": f"c-{n}", "name": f"N{n}", "account": f"a{n % 50}"}}
    ).encode()
    return receipt_row(org_id=ORG, connector="bench", route=route, body=body)


def stand_in() -> tuple[subprocess.Popen[bytes], str]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import uvicorn; from tests.support.runtime_stand_in import StandIn;"
            f" uvicorn.run(StandIn().app(), port={port}, log_level='warning')",
        ],
        cwd=ROOT,
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(200):
        try:
            httpx.get(url, timeout=0.5)
            break
        except httpx.TransportError:
            time.sleep(0.05)
    return proc, url


async def run(url: str, args: argparse.Namespace) -> dict[str, Any]:
    engine = create_engine(
        url, application_name="bench-pipeline", sqlite_on_loop=args.sqlite_driver == "on-loop"
    )
    await upgrade_to_head(engine, LogicalService.INTEGRATION)
    await apply_routes(engine, org_id=ORG, route_file=parse_route_file(routes()))
    route = {"per-object": "laned", "source": "sourced", "none": "plain"}[args.lanes]
    rows = [receipt(n, route) for n in range(args.receipts)]
    for start in range(0, len(rows), 500):
        async with engine.begin() as conn:
            await conn.run_sync(store_receipts, rows[start : start + 500])

    router = ReceiptRouter(
        engine, var_dir=Path(tempfile.mkdtemp()), settings=RouterSettings(batch=args.batch)
    )
    started, cpu_started = time.perf_counter(), time.process_time()
    while await router.step():
        pass
    routed_s = time.perf_counter() - started
    routed_cpu_s = time.process_time() - cpu_started

    proc, runtime_url = stand_in()
    try:
        client = internal_client(base_url=runtime_url, timeout_seconds=10, connections=64)
        signer = WorkloadSigner("integration", ECKey.generate_key("P-256", private=True))
        worker = Worker(
            engine,
            WorkStore(work, owner=EXECUTOR_OWNER),
            CommandExecutor(client, signer, timeout_seconds=10),
            WorkerSettings(concurrency=64, batch=64, idle_poll_ms=10, queue_refresh_ms=100),
        )
        started, cpu_started = time.perf_counter(), time.process_time()
        task = asyncio.create_task(worker.run())
        while worker.stats.succeeded < args.receipts:  # noqa: ASYNC110 - polling a counter
            await asyncio.sleep(0.02)
        executed_s = time.perf_counter() - started
        executed_cpu_s = time.process_time() - cpu_started
        worker.stop()
        await task
        await client.aclose()
    finally:
        proc.terminate()
        proc.wait()
    await engine.dispose()
    return {
        "backend": args.backend,
        "lanes": args.lanes,
        "sqlite_driver": args.sqlite_driver,
        "receipts": args.receipts,
        "router_batch": args.batch,
        "router_receipts_per_s": round(router.stats.materialized / routed_s),
        "executor_commands_per_s": round(worker.stats.succeeded / executed_s),
        "router_cpu_us_per_receipt": round(routed_cpu_s * 1e6 / router.stats.materialized),
        "executor_cpu_us_per_command": round(executed_cpu_s * 1e6 / worker.stats.succeeded),
        "machine": f"{os.cpu_count()} cpu, load {os.getloadavg()[0]:.1f}",
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", choices=["sqlite", "mariadb"], default="sqlite")
    parser.add_argument("--receipts", type=int, default=5000)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--lanes", choices=["per-object", "source", "none"], default="per-object")
    parser.add_argument("--sqlite-driver", choices=["on-loop", "aiosqlite"], default="on-loop")
    args = parser.parse_args()
    configure_logging(role="bench", level="warning", fmt="json")
    server = None
    if args.backend == "sqlite":
        url = f"sqlite+aiosqlite:///{tempfile.mkdtemp(prefix='nexus-bench-pipe-')}/i.sqlite3"
    else:
        from tests.support.mariadb import find_server_binary, start_mariadb

        binary = find_server_binary()
        if binary is None:
            raise SystemExit("mariadbd not found")
        server = start_mariadb(binary)
        url = server.create_database("bench_pipeline")
    try:
        print(json.dumps(asyncio.run(run(url, args))))
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()
