"""Runtime's retention (run by runtime-worker): what is older than
`NEXUS_RUNTIME_RETENTION_DAYS` by the database clock is deleted in bounded batches, each its
own short transaction:

    inbox, outbox    succeeded and cancelled items (`workqueue.retention.prune_finished`);
                     dead and outcome-unknown ones stay until an operator replays or purges
    message keys     the inbox's dedupe rows whose command is no longer in the inbox (pruned
                     above, or purged): a message redelivered after the period is no longer
                     recognised as a duplicate — the period must outlast every sender's
                     retries (Integration's are minutes to hours)
    idempotency      records' idempotency keys (a client retrying a mutation days later gets
                     a new write, as with Salesforce's own idempotency window)
    import jobs      finished CSV imports (done or failed) with their rows: the rows hold
                     customer values and per-row errors, kept for the error report only
    replicas         runtime-api replicas not seen for the period (a live replica writes
                     its heartbeat every few seconds; release acks ignore stale rows anyway)
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncEngine

from nexus.platform.db.clock import read_now_ms
from nexus.platform.db.engine import reading
from nexus.platform.observability import get_logger
from nexus.platform.periodic import every
from nexus.platform.workqueue import retention as work_retention
from nexus.runtime.inbox import models as inbox_tables
from nexus.runtime.outbox import models as outbox_tables
from nexus.runtime.retention.repository import MessageKeyPosition, RetentionRepository

log = get_logger(__name__)

DAY_MS = 86_400_000
BATCH = 500


@dataclass
class Pruned:
    inbox: int = 0
    outbox: int = 0
    message_keys: int = 0
    idempotency_keys: int = 0
    import_jobs: int = 0
    replicas: int = 0

    def anything(self) -> bool:
        return any(vars(self).values())


async def prune_once(engine: AsyncEngine, *, retention_ms: int, batch: int = BATCH) -> Pruned:
    """One retention pass (see the module docstring)."""
    async with reading(engine) as conn:
        cutoff = await read_now_ms(conn) - retention_ms
    pruned = Pruned()
    for tables, field in ((inbox_tables.inbox, "inbox"), (outbox_tables.outbox, "outbox")):
        while True:
            async with engine.begin() as conn:
                ids = await work_retention.prune_finished(
                    conn, tables, before_ms=cutoff, limit=batch
                )
            setattr(pruned, field, getattr(pruned, field) + len(ids))
            if len(ids) < batch:
                break
    pruned.message_keys = await _prune_message_keys(engine, cutoff, batch)
    while True:
        async with engine.begin() as conn:
            repo = RetentionRepository(conn)
            keys = await repo.old_idempotency_keys(cutoff, batch)
            await repo.delete_idempotency_keys(keys)
        pruned.idempotency_keys += len(keys)
        if len(keys) < batch:
            break
    pruned.import_jobs = await _prune_import_jobs(engine, cutoff, batch)
    async with engine.begin() as conn:
        pruned.replicas = await RetentionRepository(conn).delete_replicas_not_seen_since(cutoff)
    return pruned


async def _prune_import_jobs(engine: AsyncEngine, cutoff: int, batch: int) -> int:
    """Finished imports last updated before `cutoff`, with their rows: one transaction per
    batch of jobs."""
    removed = 0
    while True:
        async with engine.begin() as conn:
            repo = RetentionRepository(conn)
            finished = await repo.old_finished_import_jobs(cutoff, batch)
            await repo.delete_import_jobs(finished)
        removed += len(finished)
        if len(finished) < batch:
            return removed


async def _prune_message_keys(engine: AsyncEngine, cutoff: int, batch: int) -> int:
    """Dedupe rows accepted before `cutoff` whose inbox item is gone; a row whose item is
    still there (dead, waiting) is kept and passed over."""
    removed = 0
    after: MessageKeyPosition | None = None
    while True:
        async with engine.begin() as conn:
            repo = RetentionRepository(conn)
            rows = await repo.message_keys_page(cutoff, after, batch)
            live = await repo.live_inbox_items([r[3] for r in rows])
            gone = [(r[1], r[2]) for r in rows if r[3] not in live]
            await repo.delete_message_keys(gone)
            removed += len(gone)
        if len(rows) < batch:
            return removed
        after = (int(rows[-1][0]), str(rows[-1][1]), str(rows[-1][2]))


@asynccontextmanager
async def retention_loop(
    engine: AsyncEngine, *, retention_days: float, interval_s: float
) -> AsyncIterator[None]:
    """Run `prune_once` every `interval_s` seconds while the block runs."""

    async def step() -> None:
        pruned = await prune_once(engine, retention_ms=int(retention_days * DAY_MS))
        if pruned.anything():
            log.info("runtime.retention_pruned", **vars(pruned))

    async with every(interval_s, step, name="runtime-retention"):
        yield
