"""Every SQL statement of bulk jobs and their chunks. Who may run a job's chunk is the work
engine's to say (its item's lease, ADR 0062/0077): these statements carry no lease."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Row, delete, func, insert, select, tuple_, update
from sqlalchemy.ext.asyncio import AsyncSession

from nexus.platform.db.clock import db_now_ms
from nexus.runtime.bulk import models as m

#: States of a job whose work has not ended.
UNFINISHED = ("Open", "UploadComplete", "InProgress")
ENDED = ("JobComplete", "Failed", "Aborted")


class BulkRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    # ------------------------------------------------------------------ jobs
    async def insert_job(self, **values: Any) -> None:
        await self.session.execute(insert(m.bulk_job).values(**values))

    async def job(self, org_id: str, job_id: str) -> Row[Any] | None:
        j = m.bulk_job
        result = await self.session.execute(
            select(j).where(j.c.org_id == org_id, j.c.job_id == job_id)
        )
        return result.first()

    async def jobs_page(
        self,
        org_id: str,
        kind: str,
        *,
        user_id: str | None,
        after: tuple[int, str] | None,
        limit: int,
    ) -> list[Row[Any]]:
        """Jobs oldest first; `user_id` None: every user's (an administrator's list)."""
        j = m.bulk_job
        stmt = select(j).where(j.c.org_id == org_id, j.c.kind == kind)
        if user_id is not None:
            stmt = stmt.where(j.c.user_id == user_id)
        if after is not None:
            stmt = stmt.where(tuple_(j.c.created_at_ms, j.c.job_id) > tuple_(*after))
        stmt = stmt.order_by(j.c.created_at_ms, j.c.job_id).limit(limit)
        return list((await self.session.execute(stmt)).all())

    async def console_jobs(
        self,
        org_id: str,
        *,
        kinds: Sequence[str],
        job_id: str | None = None,
        state: str | None = None,
        object_name: str | None = None,
        operation: str | None = None,
        user_id: str | None = None,
        before: tuple[int, str] | None = None,
        limit: int = 1,
    ) -> list[Row[Any]]:
        """The admin console's jobs of `kinds`, newest first (strictly before `before`,
        a `(created_at_ms, job_id)` cursor), each with `records_total`: the rows uploaded
        (ingest; 0 before any upload) summed from the chunks' counts, never their data."""
        j, c = m.bulk_job, m.bulk_chunk
        uploaded = (
            select(func.coalesce(func.sum(c.c.records), 0))
            .where(c.c.org_id == j.c.org_id, c.c.job_id == j.c.job_id)
            .scalar_subquery()
        )
        stmt = select(j, uploaded.label("records_total")).where(
            j.c.org_id == org_id, j.c.kind.in_(kinds)
        )
        for column, wanted in (
            (j.c.job_id, job_id),
            (j.c.state, state),
            (j.c.operation, operation),
            (j.c.user_id, user_id),
        ):
            if wanted is not None:
                stmt = stmt.where(column == wanted)
        if object_name is not None:
            stmt = stmt.where(func.lower(j.c.object_name) == object_name.lower())
        if before is not None:
            stmt = stmt.where(tuple_(j.c.created_at_ms, j.c.job_id) < tuple_(*before))
        stmt = stmt.order_by(j.c.created_at_ms.desc(), j.c.job_id.desc()).limit(limit)
        return list((await self.session.execute(stmt)).all())

    async def update_job(
        self, org_id: str, job_id: str, *, states: Sequence[str] | None = None, **values: Any
    ) -> bool:
        """Change a job (only while in one of `states`, when given); whether it changed."""
        j = m.bulk_job
        stmt = update(j).where(j.c.org_id == org_id, j.c.job_id == job_id)
        if states is not None:
            stmt = stmt.where(j.c.state.in_(states))
        result = await self.session.execute(stmt.values(updated_at_ms=db_now_ms(), **values))
        return bool(getattr(result, "rowcount", 0))

    async def add_upload(
        self, org_id: str, job_id: str, *, chunks: int, size: int, columns: str
    ) -> bool:
        """Count an upload's chunks and bytes, while the job is still Open."""
        j = m.bulk_job
        result = await self.session.execute(
            update(j)
            .where(j.c.org_id == org_id, j.c.job_id == job_id, j.c.state == "Open")
            .values(
                chunks=j.c.chunks + chunks,
                uploaded_bytes=j.c.uploaded_bytes + size,
                columns=columns,
                updated_at_ms=db_now_ms(),
            )
        )
        return bool(getattr(result, "rowcount", 0))

    async def advance(
        self, org_id: str, job_id: str, *, next_chunk: int, processed: int, failed: int
    ) -> None:
        """Count a chunk (in the transaction the chunk's item completes in: its fence)."""
        j = m.bulk_job
        await self.session.execute(
            update(j)
            .where(j.c.org_id == org_id, j.c.job_id == job_id)
            .values(
                next_chunk=next_chunk,
                records_processed=j.c.records_processed + processed,
                records_failed=j.c.records_failed + failed,
                updated_at_ms=db_now_ms(),
            )
        )

    async def finish(self, org_id: str, job_id: str, *, state: str, error: str | None) -> None:
        """JobComplete, Failed or Aborted; a job that already ended keeps its end. The
        processing time runs from the first chunk's claim."""
        j = m.bulk_job
        now = db_now_ms()
        await self.session.execute(
            update(j)
            .where(j.c.org_id == org_id, j.c.job_id == job_id, j.c.state.in_(UNFINISHED))
            .values(
                state=state,
                error_message=error,
                processing_ms=func.coalesce(now - j.c.started_at_ms, 0),
                updated_at_ms=now,
            )
        )

    async def delete_job(self, org_id: str, job_id: str) -> None:
        c, j = m.bulk_chunk, m.bulk_job
        await self.session.execute(delete(c).where(c.c.org_id == org_id, c.c.job_id == job_id))
        await self.session.execute(delete(j).where(j.c.org_id == org_id, j.c.job_id == job_id))

    # ------------------------------------------------------------------ chunks
    async def insert_chunks(self, rows: Sequence[dict[str, Any]]) -> None:
        if rows:
            await self.session.execute(insert(m.bulk_chunk), list(rows))

    async def chunk(self, org_id: str, job_id: str, seq: int) -> Row[Any] | None:
        c = m.bulk_chunk
        result = await self.session.execute(
            select(c).where(c.c.org_id == org_id, c.c.job_id == job_id, c.c.seq == seq)
        )
        return result.first()

    async def save_outcomes(
        self, org_id: str, job_id: str, seq: int, *, outcomes: str, failed: int
    ) -> None:
        c = m.bulk_chunk
        await self.session.execute(
            update(c)
            .where(c.c.org_id == org_id, c.c.job_id == job_id, c.c.seq == seq)
            .values(outcomes=outcomes, failed=failed, done=True)
        )

    async def chunk_sizes(self, org_id: str, job_id: str) -> list[tuple[int, int]]:
        """(seq, records) of every chunk: a query job's page index (one small row each)."""
        c = m.bulk_chunk
        rows = await self.session.execute(
            select(c.c.seq, c.c.records)
            .where(c.c.org_id == org_id, c.c.job_id == job_id)
            .order_by(c.c.seq)
        )
        return [(int(seq), int(n)) for seq, n in rows]
