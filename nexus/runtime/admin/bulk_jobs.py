"""The admin console's Bulk jobs (`/admin/v1/runtime/bulk-jobs`, issue 26, ADR 0077): every
Bulk API 2.0 job of the org newest first, with cursor paging and filters, one job's detail, and the
abort a System Administrator may ask for (the bulk service's own `Aborted` state change,
which lets an administrator control any job of the org).

Runtime decides: `Admin` passes only a System Administrator of the caller's org, and every
statement is bounded by that org, so another org's job is a 404 like one that does not
exist. What is shown is a job's shape and counts, never its data: no uploaded value, no
query text (a SOQL filter can quote values), no result.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import orjson
from fastapi import APIRouter, Query, Request
from sqlalchemy.ext.asyncio import AsyncSession

from nexus.contracts.errors import BadRequest, NotFound
from nexus.contracts.identity import TrustedCall
from nexus.identity.api import Directory
from nexus.platform.db.engine import unit_of_work
from nexus.platform.service_app import ServiceState
from nexus.runtime.admin.endpoints import Admin, audit
from nexus.runtime.bulk import service as bulk
from nexus.runtime.bulk.repository import ENDED, UNFINISHED, BulkRepository

router = APIRouter(prefix="/admin/v1/runtime/bulk-jobs")

State = Literal["Open", "UploadComplete", "InProgress", "JobComplete", "Failed", "Aborted"]
Operation = Literal["insert", "update", "upsert", "delete", "hardDelete", "query", "queryAll"]
#: Bulk API 2.0's jobs. A 1.0 job's progress is its batches' (`bulk/batches.py`), which this
#: console does not read yet: 1.0 jobs are not listed, and are a 404 here.
KINDS = ("ingest", "query")
PAGE = 50
MAX_PAGE = 200


def _cursor(text: str | None) -> tuple[int, str] | None:
    """`<created_at_ms>.<job id>` of the last job of the previous page."""
    if not text:
        return None
    created, _, job_id = text.partition(".")
    if not created.isdigit() or len(created) > 15 or not _is_id(job_id):
        raise BadRequest("the cursor is not one this list gave", code="INVALID_CURSOR")
    return int(created), job_id


def _counts(job: Any) -> dict[str, int | None]:
    """Records and chunks done of all there are; a query job's totals are known once it
    has written its last page."""
    processed = int(job.records_processed)
    if job.kind == "query":
        done = job.state == "JobComplete"
        return {
            "recordsTotal": processed if done else None,
            "chunksDone": int(job.chunks),
            "chunksTotal": int(job.chunks) if done else None,
        }
    return {
        "recordsTotal": int(job.records_total),
        "chunksDone": int(job.next_chunk),
        "chunksTotal": int(job.chunks),
    }


def _job(job: Any, usernames: dict[str, str | None]) -> dict[str, Any]:
    ended = job.state in ENDED
    return {
        "id": job.job_id,
        "kind": job.kind,
        "object": job.object_name,
        "operation": job.operation,
        "state": job.state,
        "createdById": job.user_id,
        "createdBy": usernames.get(job.user_id),
        "createdAtMs": int(job.created_at_ms),
        "startedAtMs": None if job.started_at_ms is None else int(job.started_at_ms),
        # a job's last change is its end: nothing changes a job once it ended
        "finishedAtMs": int(job.updated_at_ms) if ended else None,
        "recordsProcessed": int(job.records_processed),
        "recordsFailed": int(job.records_failed),
        **_counts(job),
        "errorMessage": job.error_message,
        "abortable": job.state in UNFINISHED,
    }


def _detail(job: Any, usernames: dict[str, str | None]) -> dict[str, Any]:
    return {
        **_job(job, usernames),
        "apiVersion": job.api_version,
        "externalIdField": job.external_id_field,
        "columnDelimiter": job.column_delimiter,
        "lineEnding": job.line_ending,
        "columns": orjson.loads(job.columns) if job.kind == "ingest" and job.columns else [],
        "uploadedBytes": int(job.uploaded_bytes),
        "processingMs": int(job.processing_ms),
    }


async def _usernames(
    session: AsyncSession, org_id: str, user_ids: set[str]
) -> dict[str, str | None]:
    directory = Directory(session)
    found = {}
    for user_id in sorted(user_ids):  # a page's creators: a few users
        user = await directory.user(org_id, user_id)
        found[user_id] = None if user is None else str(user["username"])
    return found


async def list_jobs(
    session: AsyncSession,
    caller: TrustedCall,
    *,
    state: str | None,
    object_name: str | None,
    operation: str | None,
    created_by: str | None,
    cursor: str | None,
    limit: int,
) -> dict[str, Any]:
    before = _cursor(cursor)
    user_id = None
    if created_by:
        user = await Directory(session).user_by_username(created_by)
        if user is None or user["org_id"] != caller.org_id:
            return {"jobs": [], "nextCursor": None}  # nobody of this org: no job of theirs
        user_id = str(user["user_id"])
    rows = await BulkRepository(session).console_jobs(
        caller.org_id,
        kinds=KINDS,
        state=state,
        object_name=object_name or None,
        operation=operation,
        user_id=user_id,
        before=before,
        limit=limit + 1,
    )
    more, rows = len(rows) > limit, rows[:limit]
    names = await _usernames(session, caller.org_id, {r.user_id for r in rows})
    last = rows[-1] if more else None
    return {
        "jobs": [_job(r, names) for r in rows],
        "nextCursor": f"{last.created_at_ms}.{last.job_id}" if last is not None else None,
    }


async def job_detail(session: AsyncSession, caller: TrustedCall, job_id: str) -> dict[str, Any]:
    rows = await BulkRepository(session).console_jobs(caller.org_id, kinds=KINDS, job_id=job_id)
    if not rows:
        raise NotFound("no such bulk job")
    return _detail(rows[0], await _usernames(session, caller.org_id, {rows[0].user_id}))


async def abort_job(session: AsyncSession, caller: TrustedCall, job_id: str) -> dict[str, Any]:
    """The bulk service's abort, as this administrator (409 INVALIDJOBSTATE once ended)."""
    job = await BulkRepository(session).job(caller.org_id, job_id)
    if job is None or job.kind not in KINDS:
        raise NotFound("no such bulk job")
    await bulk.set_state(session, caller=caller, job_id=job_id, kind=job.kind, state="Aborted")
    await audit(session, caller, "bulk_job.abort", f"bulk_job:{job_id}")
    return await job_detail(session, caller, job_id)


def _service(request: Request) -> ServiceState:
    service: ServiceState = request.app.state.service
    return service


@router.get("")
async def list_bulk_jobs(
    request: Request,
    caller: Admin,
    *,
    state: State | None = None,
    object: Annotated[str | None, Query(max_length=80)] = None,
    operation: Operation | None = None,
    createdBy: Annotated[str | None, Query(max_length=255)] = None,
    cursor: Annotated[str | None, Query(max_length=40)] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = PAGE,
) -> dict[str, Any]:
    """The org's bulk jobs, newest first; `nextCursor` asks for the page after."""
    async with unit_of_work(_service(request).sessions, readonly=True) as session:
        return await list_jobs(
            session,
            caller,
            state=state,
            object_name=object,
            operation=operation,
            created_by=createdBy,
            cursor=cursor,
            limit=limit,
        )


@router.get("/{job_id}")
async def get_bulk_job(request: Request, job_id: str, caller: Admin) -> dict[str, Any]:
    _check(job_id)
    async with unit_of_work(_service(request).sessions, readonly=True) as session:
        return await job_detail(session, caller, job_id)


@router.post("/{job_id}/abort")
async def abort_bulk_job(request: Request, job_id: str, caller: Admin) -> dict[str, Any]:
    _check(job_id)
    async with unit_of_work(_service(request).sessions) as session:
        return await abort_job(session, caller, job_id)


def _is_id(text: str) -> bool:
    return 0 < len(text) <= 18 and text.isascii() and text.isalnum()


def _check(job_id: str) -> None:
    if not _is_id(job_id):
        raise NotFound("no such bulk job")
