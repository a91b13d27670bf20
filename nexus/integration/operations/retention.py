"""Retention: succeeded (and operator-cancelled) WorkItems and materialized receipts older
than `NEXUS_INTEGRATION_RETENTION_DAYS` are pruned in batches; dead and outcome-unknown items,
their events and receipts are kept until they are replayed or purged.

One pass, each batch its own short transaction:
1. finished items older than the cutoff, through the claim index
   (`workqueue.operate.prune_finished`), with their `event_work` links;
2. per org, materialized receipts received before the cutoff, through the router index in
   keyset order: a receipt whose events no longer carry any work item is deleted with its
   events; one still linked (a dead item, a waiting one, or a younger success) stays.
The cutoff is the database clock minus the period. Large bodies kept as files under the var
dir (content-addressed, possibly shared by several receipts) are removed by the same loop once
no receipt references them (`bodies.sweep_orphans`): after pruning, after an operator's purge,
or when an ingest crashed between writing the file and committing its receipt.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.ext.asyncio import AsyncEngine

from nexus.integration.delivery import models as delivery_tables
from nexus.integration.ingress.bodies import sweep_orphans
from nexus.integration.operations.repository import OperationsRepository
from nexus.platform.db.clock import read_now_ms
from nexus.platform.db.engine import reading
from nexus.platform.observability import get_logger
from nexus.platform.periodic import every
from nexus.platform.workqueue import retention as work_retention

log = get_logger(__name__)

DAY_MS = 86_400_000


@dataclass
class Pruned:
    work_items: int = 0
    events: int = 0
    receipts: int = 0


async def prune_once(engine: AsyncEngine, *, retention_ms: int, batch: int = 500) -> Pruned:
    """One retention pass (see the module docstring)."""
    pruned = Pruned()
    async with reading(engine) as conn:
        cutoff = await read_now_ms(conn) - retention_ms
        orgs = await OperationsRepository(conn).orgs()
    while True:
        async with engine.begin() as conn:
            ids = await work_retention.prune_finished(
                conn, delivery_tables.work, before_ms=cutoff, limit=batch
            )
            await OperationsRepository(conn).forget_work(work_ids=ids)
        pruned.work_items += len(ids)
        if len(ids) < batch:
            break
    for org_id in orgs:
        cursor: tuple[int, str] | None = None
        while True:
            async with engine.begin() as conn:
                repo = OperationsRepository(conn)
                old = await repo.old_receipts(
                    org_id=org_id, before_ms=cutoff, cursor=cursor, limit=batch
                )
                events, receipts = await repo.prune_receipts(
                    org_id=org_id, receipt_ids=[r for _, r in old]
                )
            pruned.events += events
            pruned.receipts += receipts
            if len(old) < batch:
                break
            cursor = old[-1]
    return pruned


@asynccontextmanager
async def retention_loop(
    engine: AsyncEngine, *, var_dir: Path, retention_days: float, interval_s: float, batch: int
) -> AsyncIterator[None]:
    """Run `prune_once`, then the body-file sweep, every `interval_s` seconds while the
    block runs."""

    async def step() -> None:
        pruned = await prune_once(engine, retention_ms=int(retention_days * DAY_MS), batch=batch)
        bodies = await sweep_orphans(engine, var_dir, batch=batch)
        if pruned.work_items or pruned.receipts or bodies:
            log.info(
                "integration.retention_pruned",
                work_items=pruned.work_items,
                events=pruned.events,
                receipts=pruned.receipts,
                body_files=bodies,
            )

    async with every(interval_s, step, name="integration-retention"):
        yield
