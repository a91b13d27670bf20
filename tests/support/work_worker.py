"""A real worker process for the work engine's crash tests.

    python -m tests.support.work_worker URL PREFIX OWNER LEASE_MS SLEEP_MS

Runs a `Worker` whose handler sleeps SLEEP_MS then records its effect idempotently (one row
per item id in `<prefix>_effect`, and one row per execution in `<prefix>_execution`). Stops on
SIGTERM (drain) and prints its stats as JSON.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys

from sqlalchemy import Column, Integer, MetaData, String, Table, insert

from nexus.platform.db import create_engine, insert_ignore
from nexus.platform.observability import configure_logging
from nexus.platform.workqueue.store import Claimed, WorkStore
from nexus.platform.workqueue.tables import work_tables
from nexus.platform.workqueue.worker import Worker, WorkerSettings


def effect_tables(metadata: MetaData, prefix: str) -> tuple[Table, Table]:
    effect = Table(f"{prefix}_effect", metadata, Column("item_id", String(36), primary_key=True))
    execution = Table(
        f"{prefix}_execution",
        metadata,
        Column("n", Integer, primary_key=True, autoincrement=True),
        Column("item_id", String(36), nullable=False),
        Column("token", String(32), nullable=False),
        Column("pid", Integer, nullable=False),
    )
    return effect, execution


async def main(url: str, prefix: str, owner: str, lease_ms: int, sleep_ms: int) -> None:
    engine = create_engine(url, application_name="crash-worker")
    metadata = MetaData()
    store = WorkStore(work_tables(metadata, prefix), owner=owner, lease_ms=lease_ms)
    effect, execution = effect_tables(metadata, prefix)

    async def handler(item: Claimed) -> None:
        async with engine.begin() as conn:
            await conn.execute(
                insert(execution).values(item_id=item.id, token=item.token, pid=os.getpid())
            )
        await asyncio.sleep(sleep_ms / 1000)
        async with engine.begin() as conn:  # an idempotent effect, keyed by the work id
            await conn.execute(insert_ignore(effect, conn.dialect.name).values(item_id=item.id))

    worker = Worker(
        engine,
        store,
        handler,
        WorkerSettings(concurrency=8, batch=8, idle_poll_ms=50, queue_refresh_ms=200),
    )
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, worker.stop)
    print("ready", flush=True)
    await worker.run()
    print(json.dumps({"succeeded": worker.stats.succeeded, "lost": worker.stats.lost}), flush=True)
    await engine.dispose()


if __name__ == "__main__":
    configure_logging(role="crash-worker", level="warning", fmt="json")
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])))
