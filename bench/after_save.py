#!/usr/bin/env python
"""After-save flows: what a flow costs the saving request, and how fast runtime-worker's
outbox drains.

    .venv/bin/python bench/after_save.py [--url DATABASE_URL] [--records 2000]

1. Mutation latency (one record per request, sequential): an object without after-save
   flows vs one with a flow of two actions (create_record + webhook): p50/p99 ms.
2. Drain: `--records` accounts saved in batches of 200 (2 items each), then an in-process
   `OutboxRunner` (the runtime-worker loop) executes them: record actions through `mutate`,
   webhooks signed and POSTed to the stdlib receiver process (tests/support). Items/s.
Prints JSON. Default database: a fresh SQLite file.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sqlalchemy import func, select

from nexus.contracts.identity import TrustedCall
from nexus.contracts.records import MutateItem, MutateRequest
from nexus.contracts.roles import LogicalService
from nexus.identity.repository import IdentityRepository
from nexus.identity.setup import bootstrap_first_admin
from nexus.platform.db.engine import create_engine, reading, session_factory, unit_of_work
from nexus.platform.migrations import upgrade_to_head
from nexus.platform.observability import configure_logging
from nexus.platform.secrets import write_webhook_secret
from nexus.platform.service_app import ServiceState
from nexus.platform.settings import load_settings
from nexus.runtime.access.service import AccessCache
from nexus.runtime.metadata.service import apply_metadata
from nexus.runtime.metadata.view import MetadataCache
from nexus.runtime.outbox import models as outbox_tables
from nexus.runtime.outbox.bindings import set_endpoint
from nexus.runtime.outbox.worker import OutboxRunner
from nexus.runtime.records.mutate import mutate

SECRET = "whsec_YmVuY2gtYmVuY2gtYmVuY2gtYmVuY2gtYmVuY2gtMzI="
TEXT = {"api_name": "Name", "label": "Name", "type": "text", "length": 80}


def obj(name: str, prefix: str) -> dict[str, Any]:
    return {
        "api_name": name,
        "label": name,
        "plural_label": name + "s",
        "key_prefix": prefix,
        "name_field": TEXT,
        "fields": [{"api_name": "Score__c", "label": "Score", "type": "number"}],
    }


METADATA = {
    "objects": [
        obj("Account", "001"),
        obj("Lead", "00Q"),
        {
            **obj("Task", "00T"),
            "fields": [
                {
                    "api_name": "WhatId",
                    "label": "What",
                    "type": "lookup",
                    "reference_to": "Account",
                    "relationship_name": "What",
                }
            ],
        },
    ],
    "flows": [
        {
            "api_name": "Bench",
            "object": "Account",
            "when": "after_save",
            "trigger": "create",
            "after_save": [
                {
                    "kind": "create_record",
                    "object": "Task",
                    "fields": {"Name": "Name", "WhatId": "Id"},
                },
                {
                    "kind": "webhook",
                    "endpoint": "bench",
                    "event": "account.created",
                    "payload": {"id": "Id", "name": "Name", "score": "Score__c"},
                },
            ],
        }
    ],
}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2)


def start_receiver() -> tuple[subprocess.Popen[str], str]:
    receiver = subprocess.Popen(
        [sys.executable, "-m", "tests.support.webhook_receiver", SECRET],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert receiver.stdout is not None
    return receiver, receiver.stdout.readline().split()[1]


async def main(url: str | None, records: int) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="nexus-after-save-"))
    url = url or f"sqlite+aiosqlite:///{tmp / 'runtime.sqlite3'}"
    settings = load_settings(
        var_dir=tmp, runtime_database_url=url, outbox_backoff_base_ms=100, outbox_concurrency=32
    )
    engine = create_engine(url, application_name="bench-after-save", pool_size=20)
    await upgrade_to_head(engine, LogicalService.RUNTIME)
    sessions = session_factory(engine)
    await bootstrap_first_admin(sessions, password="bench-password-1")
    async with unit_of_work(sessions, readonly=True) as session:
        repo = IdentityRepository(session)
        org = await repo.first_org()
        user = await repo.user_by_username("admin")
    org_id, user_id = str(org["org_id"]), str(user["user_id"])
    await apply_metadata(engine, org_id=org_id, raw=METADATA)
    caller = TrustedCall(
        org_id=org_id,
        user_id=user_id,
        session_id="bench",
        client_id=None,
        scopes=frozenset({"api"}),
        security_epoch=0,
        via="delegation",
    )
    cache, access_cache = MetadataCache(), AccessCache()

    async def save(items: list[MutateItem]) -> None:
        async with unit_of_work(sessions) as session:
            view = await cache.view(session, org_id)
            access = await access_cache.for_caller(session, caller)
            result = await mutate(
                session, view=view, access=access, caller=caller, request=MutateRequest(items=items)
            )
        assert all(r.success for r in result.results), result.results[0].errors

    latency: dict[str, Any] = {}
    for name in ("Lead", "Account", "Lead", "Account"):  # second round counts (warm)
        times = []
        for i in range(300):
            started = time.perf_counter()
            await save([MutateItem(op="create", object=name, fields={"Name": f"l{i}"})])
            times.append((time.perf_counter() - started) * 1000)
        latency[name] = {"p50_ms": percentile(times, 0.5), "p99_ms": percentile(times, 0.99)}
    latency = {
        "no_after_save_flow": latency["Lead"],
        "flow_with_2_actions": latency["Account"],
    }

    receiver, port = start_receiver()
    write_webhook_secret(tmp, "bench", SECRET)
    async with engine.begin() as conn:
        await set_endpoint(
            conn,
            org_id=org_id,
            name="bench",
            url=f"http://127.0.0.1:{port}/ok",
            secret_ref="bench",
            actor="bench",
        )
    items = outbox_tables.outbox.items
    async with engine.begin() as conn:  # only the drain's items count
        await conn.execute(items.delete())
    for start in range(0, records, 200):
        await save(
            [
                MutateItem(op="create", object="Account", fields={"Name": f"a{i}", "Score__c": i})
                for i in range(start, min(records, start + 200))
            ]
        )
    runner = OutboxRunner(ServiceState(engine), settings)
    started = time.perf_counter()
    task = asyncio.create_task(runner.run())
    by_class: dict[str, float] = {}
    while True:
        async with reading(engine) as conn:
            rows = dict(
                (
                    await conn.execute(
                        select(items.c.queue_class, func.count())
                        .where(items.c.state.in_(("pending", "target_wait", "processing")))
                        .group_by(items.c.queue_class)
                    )
                ).all()
            )
        for queue_class in ("record", "webhook"):
            if queue_class not in rows and queue_class not in by_class:
                by_class[queue_class] = time.perf_counter() - started
        if not rows:
            break
        await asyncio.sleep(0.05)
    elapsed = time.perf_counter() - started
    runner.stop()
    await task
    await runner.close()
    receiver.kill()
    receiver.wait()
    async with reading(engine) as conn:
        states = dict(
            (await conn.execute(select(items.c.state, func.count()).group_by(items.c.state))).all()
        )
    await engine.dispose()
    return {
        "backend": engine.dialect.name,
        "mutation_latency": latency,
        "drain": {
            "items": 2 * records,
            "states": states,
            "seconds": round(elapsed, 2),
            "items_per_s": round(2 * records / elapsed),
            "record_actions_done_after_s": round(by_class["record"], 2),
            "webhooks_done_after_s": round(by_class["webhook"], 2),
        },
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--url")
    parser.add_argument("--records", type=int, default=2000)
    args = parser.parse_args()
    configure_logging(role="bench", level="warning", fmt="json")
    print(json.dumps(asyncio.run(main(args.url, args.records)), indent=2))
