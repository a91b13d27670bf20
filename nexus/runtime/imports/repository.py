"""Every SQL statement of CSV import jobs and their rows. The job's lease is on the database
clock (`db_now_ms()` in the statement)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Row, and_, delete, insert, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from nexus.platform.db.clock import db_now_ms
from nexus.runtime.imports import models as m

#: Rows per INSERT statement when a job is accepted.
INSERT_BATCH = 1000


def _claimable() -> Any:
    j = m.import_job
    return and_(
        j.c.state.in_(("queued", "running")),
        or_(j.c.lease_until.is_(None), j.c.lease_until < db_now_ms()),
    )


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

    # ------------------------------------------------------------------ the runner's lease
    async def waiting(self) -> tuple[str, str] | None:
        """A job a runner could take (a read: idle runners do not take SQLite's write lock)."""
        j = m.import_job
        found = (
            await self.session.execute(select(j.c.org_id, j.c.job_id).where(_claimable()).limit(1))
        ).first()
        return None if found is None else (str(found.org_id), str(found.job_id))

    async def claim(self, owner: str, job: tuple[str, str], lease_ms: int) -> bool:
        """Take the lease of a waiting job, or of one whose runner's lease ran out (CAS)."""
        j = m.import_job
        taken = await self.session.execute(
            update(j)
            .where(j.c.org_id == job[0], j.c.job_id == job[1], _claimable())
            .values(state="running", lease_owner=owner, lease_until=db_now_ms() + lease_ms)
        )
        return bool(taken.rowcount == 1)  # type: ignore[attr-defined]

    async def leased_job(self, org_id: str, job_id: str, owner: str) -> Row[Any] | None:
        j = m.import_job
        result = await self.session.execute(
            select(j).where(j.c.org_id == org_id, j.c.job_id == job_id, j.c.lease_owner == owner)
        )
        return result.first()

    async def finish(
        self, org_id: str, job_id: str, owner: str, *, state: str, error: str | None
    ) -> None:
        j = m.import_job
        await self.session.execute(
            update(j)
            .where(j.c.org_id == org_id, j.c.job_id == job_id, j.c.lease_owner == owner)
            .values(
                state=state,
                error=error,
                lease_owner=None,
                lease_until=None,
                updated_at_ms=db_now_ms(),
            )
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
        self,
        org_id: str,
        job_id: str,
        owner: str,
        *,
        processed: int,
        succeeded: int,
        failed: int,
        lease_ms: int,
    ) -> bool:
        """Count a chunk and extend the lease; False when another runner holds the job."""
        j = m.import_job
        moved = await self.session.execute(
            update(j)
            .where(j.c.org_id == org_id, j.c.job_id == job_id, j.c.lease_owner == owner)
            .values(
                processed=processed,
                succeeded=j.c.succeeded + succeeded,
                failed=j.c.failed + failed,
                lease_until=db_now_ms() + lease_ms,
                updated_at_ms=db_now_ms(),
            )
        )
        return bool(moved.rowcount == 1)  # type: ignore[attr-defined]
