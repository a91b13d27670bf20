"""Every SQL statement of Runtime's retention, each on the caller's connection (one short
transaction per batch)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Column, Table, and_, delete, or_, select
from sqlalchemy.ext.asyncio import AsyncConnection

from nexus.runtime.imports import models as imports_tables
from nexus.runtime.inbox import models as inbox_tables
from nexus.runtime.records import models as records_tables
from nexus.runtime.releases import models as releases_tables

#: A position in the inbox dedupe rows' keyset order: (accepted_at_ms, org, message key).
MessageKeyPosition = tuple[int, str, str]


class RetentionRepository:
    def __init__(self, conn: AsyncConnection) -> None:
        self.conn = conn

    async def old_idempotency_keys(self, cutoff: int, limit: int) -> list[tuple[Any, Any]]:
        idem = records_tables.idempotency
        result = await self.conn.execute(
            select(idem.c.org_id, idem.c.idem_key)
            .where(idem.c.created_at_ms < cutoff)
            .order_by(idem.c.created_at_ms)
            .limit(limit)
        )
        return [tuple(r) for r in result]

    async def delete_idempotency_keys(self, keys: Sequence[tuple[Any, Any]]) -> None:
        idem = records_tables.idempotency
        await self._delete_keys(idem, idem.c.idem_key, keys)

    async def old_finished_import_jobs(self, cutoff: int, limit: int) -> list[tuple[Any, Any]]:
        jobs = imports_tables.import_job
        result = await self.conn.execute(
            select(jobs.c.org_id, jobs.c.job_id)
            .where(jobs.c.state.in_(("done", "failed")), jobs.c.updated_at_ms < cutoff)
            .limit(limit)
        )
        return [tuple(r) for r in result]

    async def delete_import_jobs(self, jobs: Sequence[tuple[Any, Any]]) -> None:
        """The jobs and their rows (a job's rows in one statement)."""
        rows = imports_tables.import_row
        for org_id, job_id in jobs:
            await self.conn.execute(
                delete(rows).where(rows.c.org_id == org_id, rows.c.job_id == job_id)
            )
        table = imports_tables.import_job
        await self._delete_keys(table, table.c.job_id, jobs)

    async def message_keys_page(
        self, cutoff: int, after: MessageKeyPosition | None, limit: int
    ) -> list[tuple[Any, ...]]:
        """Dedupe rows accepted before `cutoff`, after `after` in keyset order over
        `(accepted_at_ms, org, key)` (its index leads): (at, org, key, work_id)."""
        msg = inbox_tables.inbox_message
        order = (msg.c.accepted_at_ms, msg.c.org_id, msg.c.message_key)
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
        return [tuple(r) for r in await self.conn.execute(query.order_by(*order).limit(limit))]

    async def live_inbox_items(self, ids: Sequence[str]) -> set[str]:
        items = inbox_tables.inbox.items
        result = await self.conn.execute(select(items.c.id).where(items.c.id.in_(ids)))
        return {str(r[0]) for r in result}

    async def delete_message_keys(self, keys: Sequence[tuple[Any, Any]]) -> None:
        msg = inbox_tables.inbox_message
        await self._delete_keys(msg, msg.c.message_key, keys)

    async def delete_replicas_not_seen_since(self, cutoff: int) -> int:
        replica = releases_tables.replica
        gone = await self.conn.execute(delete(replica).where(replica.c.seen_at_ms < cutoff))
        return int(gone.rowcount or 0)

    async def _delete_keys(
        self, table: Table, key: Column[Any], keys: Sequence[tuple[Any, Any]]
    ) -> None:
        """Delete rows by (org_id, key): one statement per org, not one per row."""
        by_org: dict[str, list[str]] = {}
        for org_id, value in keys:
            by_org.setdefault(str(org_id), []).append(str(value))
        for org_id, values in by_org.items():
            await self.conn.execute(delete(table).where(table.c.org_id == org_id, key.in_(values)))
