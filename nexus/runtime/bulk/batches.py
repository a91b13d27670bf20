"""Bulk API 1.0 jobs and batches (ADR 0077, "Bulk API 1.0"): use cases and the worker's part.

A 1.0 job (`kind` `v1ingest` or `v1query`) takes batches while Open; each batch is a unit of
chunks of the job (numbered from `number * BATCH_STRIDE`) that is queued to run at once, as
work items of its own lane (`<job_id>/<batch_id>`), so batches run in parallel and a job's
close only stops it taking batches. An ingest batch's rows are saved as the 2.0 jobs' are
(`chunks.save_rows`); a query batch writes its result pages as chunks (the records, so a
result can be answered as JSON, CSV or XML).

Who sees a job is decided as for 2.0 jobs (`service`): its creator, or a System
Administrator of the org; anyone else, and any other org, is told there is no such job.
Only the creator adds batches.
"""

from __future__ import annotations

from typing import Any

import orjson
from sqlalchemy import case, func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from nexus.contracts.errors import BadRequest, NotFound
from nexus.contracts.identity import TrustedCall
from nexus.platform.db.clock import db_now_ms, read_now_ms
from nexus.platform.ids import new_id
from nexus.runtime.access.service import AccessCache, CallerAccess
from nexus.runtime.bulk import chunks
from nexus.runtime.bulk import models as m
from nexus.runtime.bulk.queue import BULK
from nexus.runtime.bulk.repository import BulkRepository
from nexus.runtime.bulk.service import (
    CHUNK,
    INGEST_OPERATIONS,
    JOB_PREFIX,
    QUERY_OPERATIONS,
    InvalidJob,
    InvalidJobState,
    check_query,
    is_admin,
    object_rights,
)
from nexus.runtime.metadata.view import MetadataCache, MetadataView
from nexus.runtime.query.engine import run_query
from nexus.runtime.query.parser import SoqlError, parse_soql

BATCH_PREFIX = "751"
KINDS = ("v1ingest", "v1query")
CONTENT_TYPES = ("JSON", "CSV", "XML")
#: Batches a job (Salesforce: 10,000), and the chunk numbers each batch owns.
MAX_BATCHES = 10_000
BATCH_STRIDE = 100_000
#: Records a batch (Salesforce: 10,000).
MAX_BATCH_RECORDS = 10_000
BATCH_ENDED = ("Completed", "Failed", "NotProcessed")


class InvalidBatch(BadRequest):
    default_code = "INVALIDBATCH"


def _kind(operation: str) -> str:
    return "v1query" if operation in QUERY_OPERATIONS else "v1ingest"


async def create_job(
    session: AsyncSession,
    *,
    view: MetadataView,
    access: CallerAccess,
    caller: TrustedCall,
    operation: str,
    object_name: str,
    external_id_field: str | None,
    content_type: str,
    api_version: str,
) -> dict[str, Any]:
    if operation not in (*INGEST_OPERATIONS, *QUERY_OPERATIONS):
        raise InvalidJob(f"Invalid operation: {operation}")
    if content_type not in CONTENT_TYPES:
        raise InvalidJob(f"Invalid content type: {content_type}")
    external = None
    if operation in QUERY_OPERATIONS:
        obj = view.object(object_name)
        if obj is None or not access.object(view, obj).read:
            raise InvalidJob(f"Unable to find object: {object_name}")
    else:
        obj = object_rights(view, access, object_name, operation)
        if operation == "hardDelete" and not await is_admin(session, caller):
            raise InvalidJob(
                "hardDelete needs the Bulk API Hard Delete permission",
                code="INSUFFICIENT_ACCESS",
            )
        if operation == "upsert":
            f = view.field(obj, external_id_field) if external_id_field else None
            if f is None or not (f.external_id or f.api_name == "Id"):
                raise InvalidJob(
                    f"Field name provided, {external_id_field}, is not an "
                    f"External ID or indexed field for {obj.api_name}"
                )
            external = f.api_name
    job_id = new_id(JOB_PREFIX)
    now = await read_now_ms(session)
    await BulkRepository(session).insert_job(
        org_id=caller.org_id,
        job_id=job_id,
        kind=_kind(operation),
        user_id=caller.user_id,
        object_name=obj.api_name,
        operation=operation,
        external_id_field=external,
        column_delimiter="COMMA",
        line_ending="LF",
        api_version=api_version,
        soql=None,
        columns=None,
        state="Open",
        error_message=None,
        uploaded_bytes=0,
        chunks=0,  # a v1 job's batches
        next_chunk=0,
        records_processed=0,
        records_failed=0,
        started_at_ms=None,
        processing_ms=0,
        created_at_ms=now,
        updated_at_ms=now,
        content_type=content_type,
    )
    return await info(session, caller, job_id)


async def _job(session: AsyncSession, caller: TrustedCall, job_id: str) -> Any:
    job = await BulkRepository(session).job(caller.org_id, job_id)
    if job is None or job.kind not in KINDS:
        raise NotFound(f"Unable to find object: {job_id}", code="INVALIDJOB")
    if job.user_id != caller.user_id and not await is_admin(session, caller):
        # another user's job: not yours to see
        raise NotFound(f"Unable to find object: {job_id}", code="INVALIDJOB")
    return job


async def _counts(session: AsyncSession, org_id: str, job_id: str) -> dict[str, int]:
    b = m.bulk_batch

    def n(state: str) -> Any:
        return func.coalesce(func.sum(case((b.c.state == state, 1), else_=0)), 0)

    row = (
        await session.execute(
            select(
                n("Queued"),
                n("InProgress"),
                n("Completed"),
                n("Failed"),
                func.count(),
                func.coalesce(func.sum(b.c.records_processed), 0),
                func.coalesce(func.sum(b.c.records_failed), 0),
                func.coalesce(func.sum(b.c.processing_ms), 0),
            ).where(b.c.org_id == org_id, b.c.job_id == job_id)
        )
    ).one()
    keys = ("queued", "in_progress", "completed", "failed", "total", "processed", "rfailed", "ms")
    return {k: int(v) for k, v in zip(keys, row, strict=True)}


def _job_info(job: Any, counts: dict[str, int]) -> dict[str, Any]:
    return {
        "id": job.job_id,
        "operation": job.operation,
        "object": job.object_name,
        "created_by_id": job.user_id,
        "created_at_ms": int(job.created_at_ms),
        "updated_at_ms": int(job.updated_at_ms),
        "state": job.state,
        "external_id_field": job.external_id_field,
        "content_type": job.content_type or "CSV",
        "api_version": job.api_version,
        "batches_queued": counts["queued"],
        "batches_in_progress": counts["in_progress"],
        "batches_completed": counts["completed"],
        "batches_failed": counts["failed"],
        "batches_total": counts["total"],
        "records_processed": counts["processed"],
        "records_failed": counts["rfailed"],
        "processing_ms": counts["ms"],
    }


async def info(session: AsyncSession, caller: TrustedCall, job_id: str) -> dict[str, Any]:
    job = await _job(session, caller, job_id)
    return _job_info(job, await _counts(session, caller.org_id, job_id))


async def set_state(
    session: AsyncSession, *, caller: TrustedCall, job_id: str, state: str
) -> dict[str, Any]:
    """Close a job (it takes no more batches; those queued still run) or abort it (the
    batches not started are NotProcessed)."""
    job = await _job(session, caller, job_id)
    repo = BulkRepository(session)
    if state == "Closed":
        if job.state != "Open":
            raise InvalidJobState(f"Job {job_id} is not open")
        await repo.update_job(caller.org_id, job_id, states=("Open",), state="Closed")
    elif state == "Aborted":
        if job.state not in ("Open", "Closed"):
            raise InvalidJobState(f"Job {job_id} is {job.state}")
        await repo.update_job(caller.org_id, job_id, states=("Open", "Closed"), state="Aborted")
        b = m.bulk_batch
        await session.execute(
            update(b)
            .where(b.c.org_id == caller.org_id, b.c.job_id == job_id, b.c.state == "Queued")
            .values(state="NotProcessed", updated_at_ms=db_now_ms())
        )
    else:
        raise InvalidJobState(f"Invalid state: {state}")
    return await info(session, caller, job_id)


def _batch_info(batch: Any) -> dict[str, Any]:
    return {
        "id": batch.batch_id,
        "job_id": batch.job_id,
        "state": batch.state,
        "state_message": batch.state_message,
        "created_at_ms": int(batch.created_at_ms),
        "updated_at_ms": int(batch.updated_at_ms),
        "records_processed": int(batch.records_processed),
        "records_failed": int(batch.records_failed),
        "processing_ms": int(batch.processing_ms),
    }


async def add_batch(
    session: AsyncSession,
    *,
    view: MetadataView,
    access: CallerAccess,
    caller: TrustedCall,
    job_id: str,
    content_type: str,
    columns: list[str] | None,
    rows: list[list[str]] | None,
    soql: str | None,
) -> dict[str, Any]:
    """Queue a batch (only the creator's, only while the job is Open); it runs at once
    (the caller rings the worker after the commit)."""
    job = await _job(session, caller, job_id)
    if job.user_id != caller.user_id:
        raise InvalidJob("only the job's creator adds batches", code="INVALIDUSER")
    if job.state != "Open":
        raise InvalidJobState(f"Job {job_id} is not open")
    if content_type != (job.content_type or "CSV"):
        raise InvalidBatch(
            f"the batch's content type {content_type} is not the job's ({job.content_type})"
        )
    state, message, stored_columns, chunk_rows = "Queued", None, None, []
    if job.kind == "v1query":
        if not soql or not soql.strip():
            raise InvalidBatch("the batch holds no query")
        try:
            obj, _ = check_query(
                view, access, soql, job.operation, dialect=session.get_bind().dialect.name
            )
            if obj.api_name != job.object_name:
                raise SoqlError(f"the query is not on {job.object_name}", code="INVALIDBATCH")
        except SoqlError as exc:  # Salesforce queues the batch, which fails
            state, message = "Failed", f"InvalidBatch : Failed to process query: {exc.message}"
    else:
        if not columns or rows is None:
            raise InvalidBatch("the batch holds no records")
        if len(rows) > MAX_BATCH_RECORDS:
            raise InvalidBatch(f"a batch holds at most {MAX_BATCH_RECORDS} records")
        stored_columns = orjson.dumps(columns).decode()
        chunk_rows = [rows[i : i + CHUNK] for i in range(0, len(rows), CHUNK)]
    j = m.bulk_job
    # the batch's number: the job's row is locked until the commit, so numbers never clash
    taken = await session.execute(
        update(j)
        .where(
            j.c.org_id == caller.org_id,
            j.c.job_id == job_id,
            j.c.state == "Open",
            j.c.chunks < MAX_BATCHES,
        )
        .values(chunks=j.c.chunks + 1, updated_at_ms=db_now_ms())
    )
    if not getattr(taken, "rowcount", 0):
        raise InvalidJobState(f"Job {job_id} is not open or has {MAX_BATCHES} batches")
    refreshed = await BulkRepository(session).job(caller.org_id, job_id)
    number = int(refreshed.chunks) - 1 if refreshed is not None else 0
    batch_id = new_id(BATCH_PREFIX)
    now = await read_now_ms(session)
    await session.execute(
        insert(m.bulk_batch).values(
            org_id=caller.org_id,
            job_id=job_id,
            batch_id=batch_id,
            number=number,
            state=state,
            state_message=message,
            columns=stored_columns,
            soql=soql if job.kind == "v1query" else None,
            chunks=len(chunk_rows),
            next_chunk=0,
            records_processed=0,
            records_failed=0,
            started_at_ms=None,
            processing_ms=0,
            created_at_ms=now,
            updated_at_ms=now,
        )
    )
    await BulkRepository(session).insert_chunks(
        [
            {
                "org_id": caller.org_id,
                "job_id": job_id,
                "seq": number * BATCH_STRIDE + n,
                "records": len(part),
                "data": orjson.dumps(part).decode(),
                "outcomes": None,
                "failed": 0,
                "done": False,
            }
            for n, part in enumerate(chunk_rows)
        ]
    )
    if state == "Queued":
        await BULK.enqueue(session, caller.org_id, f"{job_id}/{batch_id}")
    return await batch_info(session, caller, job_id, batch_id)


async def _batch(session: AsyncSession, caller: TrustedCall, job_id: str, batch_id: str) -> Any:
    await _job(session, caller, job_id)
    b = m.bulk_batch
    row = (
        await session.execute(
            select(b).where(
                b.c.org_id == caller.org_id, b.c.job_id == job_id, b.c.batch_id == batch_id
            )
        )
    ).first()
    if row is None:
        raise NotFound(f"Unable to find batch: {batch_id}", code="INVALIDBATCH")
    return row


async def batch_info(
    session: AsyncSession, caller: TrustedCall, job_id: str, batch_id: str
) -> dict[str, Any]:
    return _batch_info(await _batch(session, caller, job_id, batch_id))


async def list_batches(
    session: AsyncSession, caller: TrustedCall, job_id: str
) -> list[dict[str, Any]]:
    await _job(session, caller, job_id)
    b = m.bulk_batch
    rows = await session.execute(
        select(b).where(b.c.org_id == caller.org_id, b.c.job_id == job_id).order_by(b.c.number)
    )
    return [_batch_info(r) for r in rows]


async def _chunks(session: AsyncSession, org_id: str, job_id: str, batch: Any) -> list[Any]:
    c = m.bulk_chunk
    base = int(batch.number) * BATCH_STRIDE
    rows = await session.execute(
        select(c)
        .where(
            c.c.org_id == org_id,
            c.c.job_id == job_id,
            c.c.seq >= base,
            c.c.seq < base + BATCH_STRIDE,
        )
        .order_by(c.c.seq)
    )
    return list(rows)


async def batch_results(
    session: AsyncSession, caller: TrustedCall, job_id: str, batch_id: str
) -> dict[str, Any]:
    """An ingest batch's outcome per row, in the batch's order; a query batch's result ids."""
    job = await _job(session, caller, job_id)
    batch = await _batch(session, caller, job_id, batch_id)
    if batch.state not in ("Completed", "Failed"):
        raise InvalidBatch(f"Batch not completed: {batch.state}")
    stored = await _chunks(session, caller.org_id, job_id, batch)
    if job.kind == "v1query":
        if batch.state != "Completed":
            raise InvalidBatch(f"Batch failed: {batch.state_message}")
        count = max(1, len(stored))
        results = [result_id(batch_id, n) for n in range(count)]
        return {"results": results, "outcomes": None, "content_type": job.content_type}
    outcomes: list[list[Any]] = []
    for chunk in stored:
        if chunk.outcomes is None:
            break  # the rows after a failed batch's last saved chunk were not processed
        outcomes.extend(orjson.loads(chunk.outcomes))
    return {"results": None, "outcomes": outcomes, "content_type": job.content_type}


def result_id(batch_id: str, n: int) -> str:
    """A query batch's `n`th result page (Salesforce's result ids have the prefix 752)."""
    return f"752{batch_id[3:12]}{n:06d}"


async def query_result(
    session: AsyncSession, caller: TrustedCall, job_id: str, batch_id: str, result: str
) -> dict[str, Any]:
    """One result page of a query batch: its records and the query's columns."""
    job = await _job(session, caller, job_id)
    batch = await _batch(session, caller, job_id, batch_id)
    if job.kind != "v1query" or batch.state != "Completed":
        raise InvalidBatch(f"Batch not completed: {batch.state}")
    n = int(result[-6:]) if result[-6:].isdigit() else -1
    if len(result) != 18 or result != result_id(batch_id, max(n, 0)) or n < 0:
        raise NotFound(f"Unable to find result: {result}", code="INVALIDBATCH")
    c = m.bulk_chunk
    row = (
        await session.execute(
            select(c.c.data).where(
                c.c.org_id == caller.org_id,
                c.c.job_id == job_id,
                c.c.seq == int(batch.number) * BATCH_STRIDE + n,
            )
        )
    ).first()
    if row is None and n > 0:
        raise NotFound(f"Unable to find result: {result}", code="INVALIDBATCH")
    records = orjson.loads(row.data) if row is not None else []
    return {
        "records": records,
        "columns": _query_columns(batch.soql or ""),
        "content_type": job.content_type,
        "object": job.object_name,
    }


def _query_columns(soql: str) -> list[str]:
    return [path.text for path in parse_soql(soql).fields]


async def batch_request(
    session: AsyncSession, caller: TrustedCall, job_id: str, batch_id: str
) -> dict[str, Any]:
    """What the batch was asked: its header and rows, or its query."""
    job = await _job(session, caller, job_id)
    batch = await _batch(session, caller, job_id, batch_id)
    answer: dict[str, Any] = {"content_type": job.content_type, "soql": batch.soql}
    if batch.soql is not None:
        return {**answer, "columns": None, "rows": None}
    rows: list[list[str]] = []
    for chunk in await _chunks(session, caller.org_id, job_id, batch):
        rows.extend(orjson.loads(chunk.data))
    return {**answer, "columns": orjson.loads(batch.columns or "[]"), "rows": rows}


# ---------------------------------------------------------------------------- worker


def _split(item: str) -> tuple[str, str]:
    job_id, _, batch_id = item.partition("/")
    return job_id, batch_id


async def _update_batch(
    session: AsyncSession, org_id: str, job_id: str, batch_id: str, **values: Any
) -> None:
    b = m.bulk_batch
    await session.execute(
        update(b)
        .where(b.c.org_id == org_id, b.c.job_id == job_id, b.c.batch_id == batch_id)
        .values(updated_at_ms=db_now_ms(), **values)
    )


async def _end(
    session: AsyncSession, org_id: str, job_id: str, batch_id: str, state: str, *, msg: str | None
) -> None:
    b = m.bulk_batch
    now = db_now_ms()
    await session.execute(
        update(b)
        .where(
            b.c.org_id == org_id,
            b.c.job_id == job_id,
            b.c.batch_id == batch_id,
            b.c.state.in_(("Queued", "InProgress")),
        )
        .values(
            state=state,
            state_message=msg,
            processing_ms=func.coalesce(now - b.c.started_at_ms, 0),
            updated_at_ms=now,
        )
    )


async def start(session: AsyncSession, org_id: str, item: str) -> None:
    job_id, batch_id = _split(item)
    b = m.bulk_batch
    await session.execute(
        update(b)
        .where(
            b.c.org_id == org_id,
            b.c.job_id == job_id,
            b.c.batch_id == batch_id,
            b.c.state == "Queued",
        )
        .values(state="InProgress", started_at_ms=db_now_ms(), updated_at_ms=db_now_ms())
    )


async def fail(session: AsyncSession, org_id: str, item: str, error: str) -> None:
    job_id, batch_id = _split(item)
    await _end(session, org_id, job_id, batch_id, "Failed", msg=error)


async def run_chunk(
    session: AsyncSession,
    *,
    metadata: MetadataCache,
    access_cache: AccessCache,
    org_id: str,
    item: str,
) -> bool:
    """Run the batch's next chunk; True when work remains after it."""
    job_id, batch_id = _split(item)
    repo = BulkRepository(session)
    job = await repo.job(org_id, job_id)
    b = m.bulk_batch
    batch = (
        await session.execute(
            select(b).where(b.c.org_id == org_id, b.c.job_id == job_id, b.c.batch_id == batch_id)
        )
    ).first()
    if job is None or batch is None or batch.state != "InProgress":
        return False  # aborted, or already ended
    caller = await chunks.run_as(session, job)
    if caller is None:
        await _end(session, org_id, job_id, batch_id, "Failed", msg="InvalidUser : inactive user")
        return False
    view = await metadata.view(session, org_id)
    access = await access_cache.for_caller(session, caller)
    obj = view.object(job.object_name)
    if obj is None or not access.object(view, obj).read:
        msg = f"InvalidBatch : no object {job.object_name}"
        await _end(session, org_id, job_id, batch_id, "Failed", msg=msg)
        return False
    if job.kind == "v1query":
        return await _query_page(session, job, batch, view=view, access=access)
    return await _ingest_chunk(session, job, batch, obj, view=view, access=access, caller=caller)


async def _ingest_chunk(
    session: AsyncSession,
    job: Any,
    batch: Any,
    obj: Any,
    *,
    view: MetadataView,
    access: Any,
    caller: TrustedCall,
) -> bool:
    org_id, job_id, batch_id = job.org_id, job.job_id, batch.batch_id
    repo = BulkRepository(session)
    b = m.bulk_batch
    columns = [str(c) for c in orjson.loads(batch.columns or "[]")]
    problem = chunks.problem_columns(job, view, obj, columns)
    if problem:
        await _end(session, org_id, job_id, batch_id, "Failed", msg=problem[:1000])
        return False
    if job.operation == "hardDelete" and not await is_admin(session, caller):
        msg = "InvalidUser : hardDelete needs a System Administrator"
        await _end(session, org_id, job_id, batch_id, "Failed", msg=msg)
        return False
    n = int(batch.next_chunk)
    chunk = await repo.chunk(org_id, job_id, int(batch.number) * BATCH_STRIDE + n)
    if chunk is None:
        await _end(session, org_id, job_id, batch_id, "Completed", msg=None)
        return False
    rows: list[list[str]] = orjson.loads(chunk.data)
    outcomes = await chunks.save_rows(
        session, job, obj, columns, rows, view=view, access=access, caller=caller
    )
    failed = sum(1 for o in outcomes if o[2] is not None)
    await repo.save_outcomes(
        org_id, job_id, int(chunk.seq), outcomes=orjson.dumps(outcomes).decode(), failed=failed
    )
    await _update_batch(
        session,
        org_id,
        job_id,
        batch_id,
        next_chunk=n + 1,
        records_processed=b.c.records_processed + len(rows),
        records_failed=b.c.records_failed + failed,
    )
    if n + 1 >= int(batch.chunks):
        await _end(session, org_id, job_id, batch_id, "Completed", msg=None)
        return False
    return True


async def _query_page(
    session: AsyncSession, job: Any, batch: Any, *, view: MetadataView, access: Any
) -> bool:
    org_id, job_id, batch_id = job.org_id, job.job_id, batch.batch_id
    page = await run_query(
        session,
        view=view,
        access=access,
        soql=batch.soql or "",
        include_deleted=job.operation == "queryAll",
        page_size=chunks.PAGE,
        start=int(batch.records_processed),
    )
    n = int(batch.chunks)
    if page.records:
        await BulkRepository(session).insert_chunks(
            [
                {
                    "org_id": org_id,
                    "job_id": job_id,
                    "seq": int(batch.number) * BATCH_STRIDE + n,
                    "records": len(page.records),
                    "data": orjson.dumps(page.records, default=str).decode(),
                    "outcomes": None,
                    "failed": 0,
                    "done": True,
                }
            ]
        )
        await _update_batch(
            session,
            org_id,
            job_id,
            batch_id,
            chunks=n + 1,
            records_processed=int(batch.records_processed) + len(page.records),
        )
    if page.done or not page.records or n + 1 >= BATCH_STRIDE:
        await _end(session, org_id, job_id, batch_id, "Completed", msg=None)
        return False
    return True
