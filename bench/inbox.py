#!/usr/bin/env python
"""The command inbox: AcceptCommand over HTTP to a real runtime-api process, then a real
runtime-worker applying the commands (upserts of Contacts through the record use case).

    .venv/bin/python bench/inbox.py [--backend sqlite|mariadb] [--commands 2000]
        [--records 500] [--clients 16] [--rate 100] [--concurrency 8] [--mode single|batch]

1. accept: `--commands` upserts sent by `--clients` concurrent senders, no worker running:
   accepted/s, p50/p99 latency. `--mode single`: each sender one HTTP request per command
   (each a fresh workload token); `--mode batch` (default): the senders hand their commands
   to one Integration `CommandExecutor`, as the executor's Worker does with `--clients`
   commands in flight, which coalesces them into batch requests.
2. burn-down: a runtime-worker started on that backlog, timed until nothing is pending:
   commands applied/s.
3. steady: `--rate` commands/s for 20 s with the worker running: time from the accept
   commit to the record change committed (both database clock: the item's created_at and
   finished_at), p50/p99, and runtime-worker's CPU per command at that rate.
Checks afterwards that every command succeeded and each Contact has one version per command.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx
from sqlalchemy import func, select

from nexus.contracts.commands import COMMANDS_PATH, AcceptCommandRequest
from nexus.contracts.roles import LogicalService
from nexus.integration.delivery.executor import CommandExecutor
from nexus.platform.db.engine import reading, session_factory, unit_of_work
from nexus.platform.http_client import internal_client
from nexus.platform.observability import configure_logging
from nexus.platform.secrets import workload_signer
from nexus.platform.workqueue.store import Claimed
from nexus.runtime.inbox import models as inbox_tables
from nexus.runtime.metadata.view import MetadataCache
from tests.conftest import Backend
from tests.support.commands import RuntimeDb, free_port, prepare_runtime, start_worker
from tests.support.mariadb import find_server_binary, start_mariadb

ROOT = Path(__file__).resolve().parents[1]


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (Linux /proc), to report cost per command even
    on a machine shared with other load."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p))] if ordered else 0.0


def start_api(db: RuntimeDb, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEXUS_")}
    env.update(
        NEXUS_VAR_DIR=str(db.var_dir),
        NEXUS_RUNTIME_DATABASE_URL=db.url,
        NEXUS_LOG_LEVEL="warning",
        NEXUS_LOG_FORMAT="json",
    )
    with log.open("a") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "nexus", "serve", "--role=runtime-api", f"--port={port}"],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise SystemExit("runtime-api did not become ready")


class Sender:
    def __init__(self, db: RuntimeDb, url: str, records: int, mode: str) -> None:
        self.signer = workload_signer(db.settings, "integration")
        self.org_id = db.org_id
        self.mode = mode
        self.client = httpx.AsyncClient(
            base_url=url, timeout=30, limits=httpx.Limits(max_connections=64)
        )
        self.pool = internal_client(base_url=url, timeout_seconds=30, connections=8)
        self.executor = CommandExecutor(self.pool, self.signer, timeout_seconds=30)
        self.records = records
        self.sent: dict[str, int] = {}

    async def send(self) -> float:
        record = f"bench-{random.randrange(self.records)}"  # noqa: S311 - load shape
        self.sent[record] = self.sent.get(record, 0) + 1
        request = AcceptCommandRequest.model_validate(
            {
                "org_id": self.org_id,
                "message_id": uuid.uuid4().hex,
                "command": {
                    "op": "upsert",
                    "object": "Contact",
                    "external_id_field": "External_Id__c",
                    "external_id": record,
                    "fields": {"LastName": f"v{self.sent[record]}"},
                },
            }
        )
        started = time.perf_counter()
        if self.mode == "batch":
            await self.executor(claimed(request))
            return (time.perf_counter() - started) * 1000
        reply = await self.client.post(
            COMMANDS_PATH,
            content=request.model_dump_json(),
            headers={
                **self.signer.headers(
                    "runtime-api",
                    deadline_ms=int((time.time() + 30) * 1000),
                    org=request.org_id,
                ),
                "content-type": "application/json",
            },
        )
        if reply.status_code != 202:
            raise RuntimeError(f"accept failed: {reply.status_code} {reply.text}")
        return (time.perf_counter() - started) * 1000

    async def aclose(self) -> None:
        await self.executor.aclose()
        await self.pool.aclose()
        await self.client.aclose()


def claimed(request: AcceptCommandRequest) -> Claimed:
    """The work item the executor's Worker would hand it (message id = work id)."""
    return Claimed(
        id=request.message_id,
        family="bench",
        queue_class="bench",
        token="t",
        epoch=1,
        attempt=1,
        max_attempts=1,
        payload=request.model_dump_json(),
        lane_key=None,
        lane_seq=None,
        target_key=None,
    )


async def count(db: RuntimeDb, *states: str) -> int:
    items = inbox_tables.inbox.items
    async with reading(db.engine) as conn:
        return int(
            (await conn.execute(select(func.count()).where(items.c.state.in_(states)))).scalar_one()
        )


async def run(db: RuntimeDb, args: argparse.Namespace, logs: Path) -> dict[str, Any]:
    api, url = start_api(db, logs / "api.log")
    sender = Sender(db, url, args.records, args.mode)
    result: dict[str, Any] = {}
    try:
        latencies: list[float] = []
        queue: asyncio.Queue[int] = asyncio.Queue()
        for n in range(args.commands):
            queue.put_nowait(n)

        async def client() -> None:
            while not queue.empty():
                queue.get_nowait()
                latencies.append(await sender.send())

        started, cpu = time.perf_counter(), cpu_seconds(api.pid)
        await asyncio.gather(*(client() for _ in range(args.clients)))
        elapsed = time.perf_counter() - started
        result["accept"] = phase = {
            "mode": args.mode,
            "commands": args.commands,
            "clients": args.clients,
            "requests": sender.executor.stats.requests if args.mode == "batch" else args.commands,
            "per_second": round(args.commands / elapsed, 1),
            "api_cpu_ms_per_command": round((cpu_seconds(api.pid) - cpu) * 1000 / args.commands, 2),
            "p50_ms": round(percentile(latencies, 0.5), 2),
            "p99_ms": round(percentile(latencies, 0.99), 2),
        }
        print("accept", json.dumps(phase), file=sys.stderr, flush=True)
        if args.accept_only:
            return result

        env = {"NEXUS_INBOX_CONCURRENCY": str(args.concurrency), "NEXUS_LOG_LEVEL": "warning"}
        worker = start_worker(db, logs / "worker.log", **env)
        try:
            started, cpu = time.perf_counter(), cpu_seconds(worker.process.pid)
            while await count(db, "pending", "waiting", "processing"):  # noqa: ASYNC110 - the database decides
                await asyncio.sleep(0.05)
            elapsed = time.perf_counter() - started
            result["burn_down"] = phase = {
                "concurrency": args.concurrency,
                "per_second": round(args.commands / elapsed, 1),
                "worker_cpu_ms_per_command": round(
                    (cpu_seconds(worker.process.pid) - cpu) * 1000 / args.commands, 2
                ),
            }
            print("burn_down", json.dumps(phase), file=sys.stderr, flush=True)

            items = inbox_tables.inbox.items
            async with reading(db.engine) as conn:
                mark = int((await conn.execute(select(func.max(items.c.created_at)))).scalar_one())
            steady = int(args.rate * 20)
            started, cpu = time.perf_counter(), cpu_seconds(worker.process.pid)
            tasks = []
            for n in range(steady):
                delay = started + n / args.rate - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                tasks.append(asyncio.create_task(sender.send()))
            await asyncio.gather(*tasks)
            while await count(db, "pending", "waiting", "processing"):  # noqa: ASYNC110 - the database decides
                await asyncio.sleep(0.05)
            steady_cpu = cpu_seconds(worker.process.pid) - cpu
            async with reading(db.engine) as conn:
                waits = [
                    float(r[0])
                    for r in await conn.execute(
                        select(items.c.finished_at - items.c.created_at).where(
                            items.c.created_at > mark
                        )
                    )
                ]
            result["steady"] = {
                "rate": args.rate,
                "commands": len(waits),
                "accept_to_applied_p50_ms": round(percentile(waits, 0.5), 1),
                "accept_to_applied_p99_ms": round(percentile(waits, 0.99), 1),
                # small groups at a steady rate, idle polls included (not a burn-down's 64)
                "worker_cpu_ms_per_command": round(steady_cpu * 1000 / max(1, len(waits)), 2),
            }
            print("steady", json.dumps(result["steady"]), file=sys.stderr, flush=True)
        finally:
            worker.process.send_signal(signal.SIGTERM)
            worker.process.wait(timeout=30)
    finally:
        api.send_signal(signal.SIGTERM)
        api.wait(timeout=30)
        await sender.aclose()
    total = args.commands + steady
    result["check"] = await check(db, sender.sent, total)
    return result


async def check(db: RuntimeDb, sent: dict[str, int], total: int) -> str:
    succeeded = await count(db, "succeeded")
    if succeeded != total:
        raise SystemExit(f"only {succeeded} of {total} commands succeeded")
    async with unit_of_work(session_factory(db.engine), readonly=True) as session:
        view = await MetadataCache().view(session, db.org_id)
        obj = view.object("Contact")
        assert obj is not None
        table = view.table(obj)
        versions = {
            r[0]: int(r[1])
            for r in await session.execute(select(table.c.external_id__c, table.c.row_version))
        }
    wrong = {k: (versions.get(k), n) for k, n in sent.items() if versions.get(k) != n}
    if wrong:
        raise SystemExit(f"row versions differ from the commands sent: {list(wrong.items())[:5]}")
    return f"{total} commands succeeded; every record has one version per command"


async def main_async(args: argparse.Namespace) -> None:
    server = None
    folder = Path(tempfile.mkdtemp(prefix="nexus-inbox-bench-"))
    if args.backend == "mariadb":
        binary = find_server_binary()
        if binary is None:
            raise SystemExit("mariadbd not found")
        server = start_mariadb(binary)
        backend = Backend("mariadb", {LogicalService.RUNTIME: server.create_database("bench")})
    else:
        backend = Backend(
            "sqlite", {LogicalService.RUNTIME: f"sqlite+aiosqlite:///{folder}/runtime.sqlite3"}
        )
    try:
        db = await prepare_runtime(backend, folder / "var")
        try:
            result = await run(db, args, folder)
        finally:
            await db.engine.dispose()
    finally:
        if server is not None:
            server.stop()
    print(json.dumps({"backend": args.backend, **result}, indent=2))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", choices=["sqlite", "mariadb"], default="sqlite")
    parser.add_argument("--commands", type=int, default=2000)
    parser.add_argument("--records", type=int, default=500)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--rate", type=float, default=100)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--mode", choices=["single", "batch"], default="batch")
    parser.add_argument("--accept-only", action="store_true", help="skip burn-down and steady")
    configure_logging(role="bench", level="warning", fmt="json")
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
