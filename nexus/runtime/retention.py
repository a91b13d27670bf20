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

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Column, Table, and_, delete, or_, select
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from nexus.platform import fast_sql
from nexus.platform.db import reading
from nexus.platform.observability import get_logger
from nexus.platform.periodic import every
from nexus.platform.workqueue import retention as work_retention
from nexus.runtime.imports import models as imports_tables
from nexus.runtime.inbox import models as inbox_tables
from nexus.runtime.outbox import models as outbox_tables
from nexus.runtime.records import models as records_tables
from nexus.runtime.releases import models as releases_tables

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
        cutoff = await fast_sql.read_now_ms(conn) - retention_ms
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
    idem = records_tables.idempotency
    while True:
        async with engine.begin() as conn:
            keys = [
                tuple(r)
                for r in await conn.execute(
                    select(idem.c.org_id, idem.c.idem_key)
                    .where(idem.c.created_at_ms < cutoff)
                    .order_by(idem.c.created_at_ms)
                    .limit(batch)
                )
            ]
            await _delete_keys(conn, idem, idem.c.idem_key, keys)
        pruned.idempotency_keys += len(keys)
        if len(keys) < batch:
            break
    pruned.import_jobs = await _prune_import_jobs(engine, cutoff, batch)
    async with engine.begin() as conn:
        gone = await conn.execute(
            delete(releases_tables.replica).where(releases_tables.replica.c.seen_at_ms < cutoff)
        )
    pruned.replicas = int(gone.rowcount or 0)
    return pruned


async def _prune_import_jobs(engine: AsyncEngine, cutoff: int, batch: int) -> int:
    """Finished imports last updated before `cutoff`, with their rows: one transaction per
    batch of jobs (a job's rows go in one statement)."""
    jobs, rows = imports_tables.import_job, imports_tables.import_row
    removed = 0
    while True:
        async with engine.begin() as conn:
            finished = list(
                await conn.execute(
                    select(jobs.c.org_id, jobs.c.job_id)
                    .where(jobs.c.state.in_(("done", "failed")), jobs.c.updated_at_ms < cutoff)
                    .limit(batch)
                )
            )
            for org_id, job_id in finished:
                await conn.execute(
                    delete(rows).where(rows.c.org_id == org_id, rows.c.job_id == job_id)
                )
            await _delete_keys(conn, jobs, jobs.c.job_id, [tuple(r) for r in finished])
        removed += len(finished)
        if len(finished) < batch:
            return removed


async def _prune_message_keys(engine: AsyncEngine, cutoff: int, batch: int) -> int:
    """Dedupe rows accepted before `cutoff` whose inbox item is gone, in keyset order over
    `(accepted_at_ms, org, key)` (its index leads); a row whose item is still there (dead,
    waiting) is kept and passed over."""
    msg, items = inbox_tables.inbox_message, inbox_tables.inbox.items
    order = (msg.c.accepted_at_ms, msg.c.org_id, msg.c.message_key)
    removed = 0
    after: tuple[int, str, str] | None = None
    while True:
        query = select(*order, msg.c.work_id).where(msg.c.accepted_at_ms < cutoff)
        if after is not None:
            at, org_id, key = after
            query = query.where(
                or_(
                    msg.c.accepted_at_ms > at,
                    and_(
                        msg.c.accepted_at_ms == at,
                        or_(
                            msg.c.org_id > org_id,
                            and_(msg.c.org_id == org_id, msg.c.message_key > key),
                        ),
                    ),
                )
            )
        async with engine.begin() as conn:
            rows = list(await conn.execute(query.order_by(*order).limit(batch)))
            live = {
                r[0]
                for r in await conn.execute(
                    select(items.c.id).where(items.c.id.in_([r[3] for r in rows]))
                )
            }
            gone = [(r[1], r[2]) for r in rows if r[3] not in live]
            await _delete_keys(conn, msg, msg.c.message_key, gone)
            removed += len(gone)
        if len(rows) < batch:
            return removed
        after = (int(rows[-1][0]), str(rows[-1][1]), str(rows[-1][2]))


async def _delete_keys(
    conn: AsyncConnection, table: Table, key: Column[Any], keys: Sequence[tuple[Any, Any]]
) -> None:
    """Delete rows by (org_id, key): one statement per org, not one per row."""
    by_org: dict[str, list[str]] = {}
    for org_id, value in keys:
        by_org.setdefault(str(org_id), []).append(str(value))
    for org_id, values in by_org.items():
        await conn.execute(delete(table).where(table.c.org_id == org_id, key.in_(values)))


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
