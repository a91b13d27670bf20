"""Bulk jobs' use cases (ADR 0077): create a job, upload its rows, close or abort it, read it,
list jobs, delete one; each in the caller's unit of work.

Who sees and controls a job is decided here: its creator, or a System Administrator of the
same org (Salesforce's "Manage Data Integrations"); anyone else, and any other org, gets
404, as for a job that does not exist. Uploads are parsed (CSV with the job's delimiter) and
stored as chunks of `CHUNK` rows, one row per chunk; nothing is saved before UploadComplete,
whose transaction also enqueues the job's first work item (`queue.BULK`). A query job is
checked (parsed and compiled with the caller's access) and enqueued when created.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from typing import Any

import orjson
from sqlalchemy.ext.asyncio import AsyncSession

from nexus.contracts.errors import BadRequest, Conflict, Forbidden, NotFound, PayloadTooLarge
from nexus.contracts.identity import TrustedCall
from nexus.identity.api import Directory
from nexus.platform.db.clock import read_now_ms
from nexus.platform.ids import new_id
from nexus.runtime.access.service import CallerAccess
from nexus.runtime.bulk.queue import BULK
from nexus.runtime.bulk.repository import ENDED, BulkRepository
from nexus.runtime.metadata.view import MetadataView
from nexus.runtime.query.engine import Compiler, compile_select
from nexus.runtime.query.parser import SoqlError, parse_soql

#: Rows per stored chunk, and per work item: one transaction of saves, which on SQLite holds
#: the file's write turn meanwhile (about half a second), so other writers wait no longer.
CHUNK = 1000
#: A job's uploads together (Salesforce: 150 MB per job).
MAX_JOB_BYTES = 150 * 1024 * 1024
#: Jobs per page of a list (Salesforce: up to 1000).
LIST_PAGE = 1000
JOB_PREFIX = "750"
DELIMITERS = {
    "COMMA": ",",
    "TAB": "\t",
    "SEMICOLON": ";",
    "PIPE": "|",
    "CARET": "^",
    "BACKQUOTE": "`",
}
LINE_ENDINGS = {"LF": "\n", "CRLF": "\r\n"}
INGEST_OPERATIONS = ("insert", "update", "upsert", "delete", "hardDelete")
QUERY_OPERATIONS = ("query", "queryAll")


class InvalidJob(BadRequest):
    default_code = "INVALIDJOB"


class InvalidJobState(Conflict):
    default_code = "INVALIDJOBSTATE"


@dataclass(frozen=True)
class JobSpec:
    kind: str  # ingest | query
    operation: str
    object: str | None = None
    external_id_field: str | None = None
    column_delimiter: str = "COMMA"
    line_ending: str = "LF"
    api_version: str = "59.0"
    soql: str | None = None


async def is_admin(session: AsyncSession, caller: TrustedCall) -> bool:
    """A System Administrator: sees and controls every job of the org (Salesforce's
    "Manage Data Integrations"), and may hard delete."""
    user = await Directory(session).user(caller.org_id, caller.user_id)
    return bool(user is not None and user["is_admin"])


def object_rights(
    view: MetadataView, access: CallerAccess, object_name: str, operation: str
) -> Any:
    obj = view.object(object_name)
    if obj is None or not access.object(view, obj).read:
        raise InvalidJob(f"sObject type '{object_name}' is not supported")
    rights = access.object(view, obj)
    allowed = {
        "insert": rights.create,
        "update": rights.edit,
        "upsert": rights.create and rights.edit,
        "delete": rights.delete,
        "hardDelete": rights.delete,
    }[operation]
    if not allowed:
        raise Forbidden(f"you cannot {operation} {obj.plural_label}", code="INSUFFICIENT_ACCESS")
    return obj


def check_query(
    view: MetadataView, access: CallerAccess, soql: str, operation: str, *, dialect: str
) -> Any:
    """Parse and compile the query with the caller's access (nothing runs): its object and
    its columns."""
    query = parse_soql(soql)
    if query.count or query.children:
        raise SoqlError(
            "Bulk queries support neither COUNT() nor relationship subqueries",
            code="INVALIDJOB",
        )
    compiler = Compiler(view, access, include_deleted=operation == "queryAll", dialect=dialect)
    plan, _ = compile_select(compiler, query)
    return plan.obj, [path.text for path in query.fields]


async def create_job(  # noqa: PLR0912 - one check per option of the job, in the guide's order
    session: AsyncSession,
    *,
    view: MetadataView,
    access: CallerAccess,
    caller: TrustedCall,
    spec: JobSpec,
) -> dict[str, Any]:
    if spec.column_delimiter not in DELIMITERS:
        raise InvalidJob(f"columnDelimiter {spec.column_delimiter!r} is not supported")
    if spec.line_ending not in LINE_ENDINGS:
        raise InvalidJob(f"lineEnding {spec.line_ending!r} is not supported")
    columns: list[str] | None = None
    external = None
    if spec.kind == "query":
        if spec.operation not in QUERY_OPERATIONS:
            raise InvalidJob(f"operation {spec.operation!r} is not a query operation")
        if not spec.soql or not spec.soql.strip():
            raise InvalidJob("a query job needs a query")
        dialect = session.get_bind().dialect.name
        obj, columns = check_query(view, access, spec.soql, spec.operation, dialect=dialect)
        state = "UploadComplete"
    else:
        if spec.operation not in INGEST_OPERATIONS:
            raise InvalidJob(f"operation {spec.operation!r} is not an ingest operation")
        if not spec.object:
            raise InvalidJob("an ingest job needs an object")
        obj = object_rights(view, access, spec.object, spec.operation)
        if spec.operation == "hardDelete" and not await is_admin(session, caller):
            raise Forbidden(
                "hardDelete needs the Bulk API Hard Delete permission (a System Administrator)",
                code="INSUFFICIENT_ACCESS",
            )
        if spec.operation == "upsert":
            if not spec.external_id_field:
                raise InvalidJob("an upsert job needs externalIdFieldName")
            f = view.field(obj, spec.external_id_field)
            if f is None or not (f.external_id or f.api_name == "Id"):
                raise InvalidJob(
                    f"the external id field {spec.external_id_field!r} is not an external id "
                    f"field of {obj.api_name}",
                    fields={"externalIdFieldName": "not an external id field"},
                )
            external = f.api_name
        state = "Open"
    job_id = new_id(JOB_PREFIX)
    now = await read_now_ms(session)
    repo = BulkRepository(session)
    await repo.insert_job(
        org_id=caller.org_id,
        job_id=job_id,
        kind=spec.kind,
        user_id=caller.user_id,
        object_name=obj.api_name,
        operation=spec.operation,
        external_id_field=external,
        column_delimiter=spec.column_delimiter,
        line_ending=spec.line_ending,
        api_version=spec.api_version,
        soql=spec.soql if spec.kind == "query" else None,
        columns=None if columns is None else orjson.dumps(columns).decode(),
        state=state,
        error_message=None,
        uploaded_bytes=0,
        chunks=0,
        next_chunk=0,
        records_processed=0,
        records_failed=0,
        started_at_ms=None,
        processing_ms=0,
        created_at_ms=now,
        updated_at_ms=now,
    )
    if spec.kind == "query":
        await BULK.enqueue(session, caller.org_id, job_id)
    return await info(session, caller, job_id, kind=spec.kind)


async def _job(session: AsyncSession, caller: TrustedCall, job_id: str, kind: str) -> Any:
    job = await BulkRepository(session).job(caller.org_id, job_id)
    if job is None or job.kind != kind:
        raise NotFound("no such job")
    if job.user_id != caller.user_id and not await is_admin(session, caller):
        raise NotFound("no such job")  # another user's job: not yours to see
    return job


def job_info(job: Any) -> dict[str, Any]:
    """A job as its use cases answer it (the dialect names the fields)."""
    return {
        "id": job.job_id,
        "kind": job.kind,
        "operation": job.operation,
        "object": job.object_name,
        "created_by_id": job.user_id,
        "created_at_ms": int(job.created_at_ms),
        "updated_at_ms": int(job.updated_at_ms),
        "state": job.state,
        "external_id_field": job.external_id_field,
        "column_delimiter": job.column_delimiter,
        "line_ending": job.line_ending,
        "api_version": job.api_version,
        "query": job.soql,
        "records_processed": int(job.records_processed),
        "records_failed": int(job.records_failed),
        "processing_ms": int(job.processing_ms),
        "error_message": job.error_message,
    }


async def info(
    session: AsyncSession, caller: TrustedCall, job_id: str, *, kind: str
) -> dict[str, Any]:
    return job_info(await _job(session, caller, job_id, kind))


async def list_jobs(
    session: AsyncSession, caller: TrustedCall, *, kind: str, locator: str | None
) -> dict[str, Any]:
    after = None
    if locator:
        created, _, last = locator.partition("-")
        if not created.isdigit() or not last:
            raise BadRequest("invalid queryLocator", code="INVALID_QUERY_LOCATOR")
        after = (int(created), last)
    mine = None if await is_admin(session, caller) else caller.user_id
    rows = await BulkRepository(session).jobs_page(
        caller.org_id, kind, user_id=mine, after=after, limit=LIST_PAGE + 1
    )
    more = len(rows) > LIST_PAGE
    rows = rows[:LIST_PAGE]
    last_row = rows[-1] if rows and more else None
    return {
        "jobs": [job_info(r) for r in rows],
        "next_locator": f"{last_row.created_at_ms}-{last_row.job_id}" if last_row else None,
    }


def parse_rows(text: str, delimiter: str) -> list[list[str]]:
    """The records of an upload (no header), CSV with the job's delimiter; quoted values may
    hold delimiters and line breaks."""
    try:
        rows = list(csv.reader(io.StringIO(text), delimiter=delimiter, strict=True))
    except csv.Error:
        raise BadRequest(
            "InvalidBatch : the CSV data cannot be read", code="INVALIDBATCH"
        ) from None
    return [r for r in rows if r and any(cell for cell in r)]


async def upload(
    session: AsyncSession,
    *,
    caller: TrustedCall,
    job_id: str,
    header: str,
    text: str,
) -> dict[str, Any]:
    """Store one upload (or one part of a large one) as chunks; only while the job is Open,
    and only by its creator."""
    repo = BulkRepository(session)
    job = await repo.job(caller.org_id, job_id)
    if job is None or job.kind != "ingest" or job.user_id != caller.user_id:
        raise NotFound("no such job")
    if job.state != "Open":
        raise InvalidJobState(f"the job is {job.state}: only an Open job takes data")
    delimiter = DELIMITERS[job.column_delimiter]
    first = parse_rows(header, delimiter)
    columns = [c.strip() for c in first[0]] if len(first) == 1 else []
    if not columns or not any(columns):
        raise BadRequest("InvalidBatch : the upload has no header row", code="INVALIDBATCH")
    if job.columns is not None and orjson.loads(job.columns) != columns:
        raise BadRequest(
            "InvalidBatch : every upload of a job must have the same header row",
            code="INVALIDBATCH",
        )
    size = len(text.encode()) + len(header.encode())
    if int(job.uploaded_bytes) + size > MAX_JOB_BYTES:
        raise PayloadTooLarge(
            f"a job takes at most {MAX_JOB_BYTES // (1024 * 1024)} MB of data",
            code="REQUEST_ENTITY_TOO_LARGE",
        )
    rows = parse_rows(text, delimiter)
    base = int(job.chunks)
    chunks = [
        {
            "org_id": caller.org_id,
            "job_id": job_id,
            "seq": base + n,
            "records": len(rows[start : start + CHUNK]),
            "data": orjson.dumps(rows[start : start + CHUNK]).decode(),
            "outcomes": None,
            "failed": 0,
            "done": False,
        }
        for n, start in enumerate(range(0, len(rows), CHUNK))
    ]
    await repo.insert_chunks(chunks)
    header_json = orjson.dumps(columns).decode()
    if not await repo.add_upload(
        caller.org_id, job_id, chunks=len(chunks), size=size, columns=header_json
    ):
        raise InvalidJobState("the job is no longer Open")
    return {"records": len(rows), "chunks": len(chunks)}


async def set_state(
    session: AsyncSession, *, caller: TrustedCall, job_id: str, kind: str, state: str
) -> tuple[dict[str, Any], bool]:
    """Close (UploadComplete, ingest only) or abort a job; with whether work was enqueued
    (the caller rings the worker after the commit)."""
    repo = BulkRepository(session)
    job = await _job(session, caller, job_id, kind)
    if state == "UploadComplete":
        if kind != "ingest" or job.user_id != caller.user_id:
            raise InvalidJobState("only the creator closes an ingest job")
        if job.state != "Open":
            raise InvalidJobState(f"the job is {job.state}, not Open")
        if int(job.chunks) == 0:
            await repo.update_job(
                caller.org_id,
                job_id,
                states=("Open",),
                state="Failed",
                error_message="InvalidBatch : no data was uploaded for the job",
            )
            return await info(session, caller, job_id, kind=kind), False
        await repo.update_job(caller.org_id, job_id, states=("Open",), state="UploadComplete")
        await BULK.enqueue(session, caller.org_id, job_id)
        return await info(session, caller, job_id, kind=kind), True
    if state == "Aborted":
        if job.state in ENDED:
            raise InvalidJobState(f"the job is {job.state}: it cannot be aborted")
        await repo.finish(caller.org_id, job_id, state="Aborted", error=None)
        return await info(session, caller, job_id, kind=kind), False
    raise InvalidJobState(f"a job's state cannot be set to {state!r}")


async def delete_job(session: AsyncSession, *, caller: TrustedCall, job_id: str, kind: str) -> None:
    """A job that is not running (Open jobs are aborted first, as Salesforce asks)."""
    job = await _job(session, caller, job_id, kind)
    if job.state not in (*ENDED, "UploadComplete") or (
        job.state == "UploadComplete" and kind == "query"
    ):
        raise InvalidJobState(f"the job is {job.state}: abort it before deleting it")
    await BulkRepository(session).delete_job(caller.org_id, job_id)


async def readable_job(
    session: AsyncSession, caller: TrustedCall, job_id: str, *, kind: str
) -> Any:
    """The job whose results the caller may read (its creator or an administrator)."""
    return await _job(session, caller, job_id, kind)


async def chunk_sizes(
    session: AsyncSession, caller: TrustedCall, job_id: str
) -> list[tuple[int, int]]:
    """(seq, records) of a job's chunks (after `readable_job` allowed the caller)."""
    return await BulkRepository(session).chunk_sizes(caller.org_id, job_id)


async def chunk(
    session: AsyncSession, caller: TrustedCall, job_id: str, seq: int
) -> tuple[list[list[Any]], list[list[Any]] | None] | None:
    """One chunk's rows and outcomes (None once the job is gone)."""
    row = await BulkRepository(session).chunk(caller.org_id, job_id, seq)
    if row is None:
        return None
    return orjson.loads(row.data), orjson.loads(row.outcomes) if row.outcomes else None
