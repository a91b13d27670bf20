"""Every SQL statement of CSV import jobs and their rows. Who may run a job's chunk is the
work engine's to say (its item's lease, ADR 0062): these statements carry no lease."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Row, delete, insert, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from nexus.platform.db.clock import db_now_ms
from nexus.runtime.imports import models as m

#: Rows per INSERT statement when a job is accepted.
INSERT_BATCH = 1000
#: States of a job that has not ended.
UNFINISHED = ("queued", "running")


class ImportRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    # ------------------------------------------------------------------ accepting, status
    async def insert_job(self, **values: Any) -> None:
        await self.session.execute(insert(m.import_job).values(**values))

    async def insert_rows(self, rows: Sequence[dict[str, Any]]) -> None:
        for start in range(0, len(rows), INSERT_BATCH):
            await self.session.execute(insert(m.import_row), rows[start : start + INSERT_BATCH])

    async def job(self, org_id: str, job_id: str) -> Row[Any] | None:
        j = m.import_job
        result = await self.session.execute(
            select(j).where(j.c.org_id == org_id, j.c.job_id == job_id)
        )
        return result.first()

    async def error_rows(self, org_id: str, job_id: str) -> list[tuple[int, str]]:
        r = m.import_row
        rows = await self.session.execute(
            select(r.c.row_no, r.c.error)
            .where(r.c.org_id == org_id, r.c.job_id == job_id, r.c.error.is_not(None))
            .order_by(r.c.row_no)
        )
        return [(int(row.row_no), str(row.error)) for row in rows]

    # ------------------------------------------------------------------ the job's state
    async def start(self, org_id: str, job_id: str) -> None:
        """A queued job is running from its first chunk's claim on."""
        j = m.import_job
        await self.session.execute(
            update(j)
            .where(j.c.org_id == org_id, j.c.job_id == job_id, j.c.state == "queued")
            .values(state="running", updated_at_ms=db_now_ms())
        )

    async def finish(self, org_id: str, job_id: str, *, state: str, error: str | None) -> None:
        """Done or failed; a job that already ended keeps its end."""
        j = m.import_job
        await self.session.execute(
            update(j)
            .where(j.c.org_id == org_id, j.c.job_id == job_id, j.c.state.in_(UNFINISHED))
            .values(state=state, error=error, updated_at_ms=db_now_ms())
        )

    # ------------------------------------------------------------------ chunks
    async def rows_after(self, org_id: str, job_id: str, after: int, limit: int) -> list[Any]:
        r = m.import_row
        result = await self.session.execute(
            select(r.c.row_no, r.c.fields)
            .where(r.c.org_id == org_id, r.c.job_id == job_id, r.c.row_no > after)
            .order_by(r.c.row_no)
            .limit(limit)
        )
        return list(result.all())

    async def delete_rows(self, org_id: str, job_id: str, numbers: Sequence[int]) -> None:
        r = m.import_row
        await self.session.execute(
            delete(r).where(r.c.org_id == org_id, r.c.job_id == job_id, r.c.row_no.in_(numbers))
        )

    async def keep_row_errors(self, org_id: str, job_id: str, errors: dict[int, str]) -> None:
        """A failed row keeps its error only (its values are dropped)."""
        r = m.import_row
        for number, message in errors.items():
            await self.session.execute(
                update(r)
                .where(r.c.org_id == org_id, r.c.job_id == job_id, r.c.row_no == number)
                .values(fields=None, error=message)
            )

    async def advance(
        self, org_id: str, job_id: str, *, processed: int, succeeded: int, failed: int
    ) -> None:
        """Count a chunk (in the transaction the chunk's item completes in: its fence)."""
        j = m.import_job
        await self.session.execute(
            update(j)
            .where(j.c.org_id == org_id, j.c.job_id == job_id)
            .values(
                processed=processed,
                succeeded=j.c.succeeded + succeeded,
                failed=j.c.failed + failed,
                updated_at_ms=db_now_ms(),
            )
        )
