"""`/internal/v1/runtime/bulk/...`: bulk jobs' use cases, one call per dialect request.

Results are streamed as NDJSON: a first line with what the dialect needs before the body
(columns, the page's record count and the next locator), then one line per stored chunk,
each read in its own short read transaction, so neither this process nor the caller holds
more than one chunk of a result of any size.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Literal

import orjson
from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from nexus.contracts.identity import TrustedCall
from nexus.platform.db.engine import unit_of_work
from nexus.platform.doorbell import ring_here
from nexus.runtime.bulk import batches, service
from nexus.runtime.bulk.queue import BELL
from nexus.runtime.dependencies import RecordsCaller, runtime_state, use_case

router = APIRouter(prefix="/internal/v1/runtime/bulk")
#: One upload call's CSV text; the dialect splits a larger upload on record boundaries.
MAX_PART_CHARS = 8 * 1024 * 1024
NDJSON = "application/x-ndjson"
Kind = Literal["ingest", "query"]


class CreateRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Kind
    operation: str = Field(min_length=1, max_length=16)
    object: str | None = Field(default=None, max_length=80)
    external_id_field: str | None = Field(default=None, max_length=80)
    column_delimiter: str = Field(default="COMMA", max_length=10)
    line_ending: str = Field(default="LF", max_length=4)
    api_version: str = Field(default="59.0", max_length=8)
    query: str | None = Field(default=None, max_length=100_000)


class JobRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1, max_length=18)
    kind: Kind = "ingest"


class UploadRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1, max_length=18)
    header: str = Field(min_length=1, max_length=100_000)  # the upload's first record
    csv: str = Field(max_length=MAX_PART_CHARS)


class StateRequest(JobRequest):
    state: str = Field(min_length=1, max_length=16)


class ListRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Kind
    locator: str | None = Field(default=None, max_length=64)


class IngestResultsRequest(JobRequest):
    which: Literal["successful", "failed", "unprocessed"]


class QueryResultsRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1, max_length=18)
    locator: str | None = Field(default=None, max_length=32)
    max_records: int | None = Field(default=None, ge=1, le=10_000_000)


@router.post("/jobs/create")
async def create(request: Request, body: CreateRequest, caller: RecordsCaller) -> dict[str, Any]:
    spec = service.JobSpec(
        kind=body.kind,
        operation=body.operation,
        object=body.object,
        external_id_field=body.external_id_field,
        column_delimiter=body.column_delimiter,
        line_ending=body.line_ending,
        api_version=body.api_version,
        soql=body.query,
    )
    async with use_case(request, caller, readonly=False) as (session, view, access):
        job = await service.create_job(session, view=view, access=access, caller=caller, spec=spec)
    if body.kind == "query":
        ring_here(BELL)  # a query job runs at once
    return job


@router.post("/jobs/upload")
async def upload(request: Request, body: UploadRequest, caller: RecordsCaller) -> dict[str, Any]:
    async with use_case(request, caller, readonly=False) as (session, _view, _access):
        return await service.upload(
            session, caller=caller, job_id=body.id, header=body.header, text=body.csv
        )


@router.post("/jobs/state")
async def set_state(request: Request, body: StateRequest, caller: RecordsCaller) -> dict[str, Any]:
    async with use_case(request, caller, readonly=False) as (session, _view, _access):
        job, enqueued = await service.set_state(
            session, caller=caller, job_id=body.id, kind=body.kind, state=body.state
        )
    if enqueued:
        ring_here(BELL)
    return job


@router.post("/jobs/info")
async def info(request: Request, body: JobRequest, caller: RecordsCaller) -> dict[str, Any]:
    async with use_case(request, caller, readonly=True) as (session, _view, _access):
        return await service.info(session, caller, body.id, kind=body.kind)


@router.post("/jobs/list")
async def list_jobs(request: Request, body: ListRequest, caller: RecordsCaller) -> dict[str, Any]:
    async with use_case(request, caller, readonly=True) as (session, _view, _access):
        return await service.list_jobs(session, caller, kind=body.kind, locator=body.locator)


@router.post("/jobs/delete")
async def delete(request: Request, body: JobRequest, caller: RecordsCaller) -> dict[str, Any]:
    async with use_case(request, caller, readonly=False) as (session, _view, _access):
        await service.delete_job(session, caller=caller, job_id=body.id, kind=body.kind)
    return {"deleted": True}


def _line(value: Any) -> bytes:
    return orjson.dumps(value) + b"\n"


async def _chunks(
    request: Request, caller: TrustedCall, job_id: str, seqs: list[int]
) -> AsyncIterator[tuple[list[list[Any]], list[list[Any]] | None]]:
    """Each chunk's rows and outcomes, one short read transaction per chunk."""
    sessions = runtime_state(request)[0].sessions
    for seq in seqs:
        async with unit_of_work(sessions, readonly=True) as session:
            found = await service.chunk(session, caller, job_id, seq)
        if found is None:  # the job was deleted meanwhile
            return
        yield found


@router.post("/ingest/results")
async def ingest_results(
    request: Request, body: IngestResultsRequest, caller: RecordsCaller
) -> StreamingResponse:
    async with use_case(request, caller, readonly=True) as (session, _view, _access):
        job = await service.readable_job(session, caller, body.id, kind="ingest")
        sizes = await service.chunk_sizes(session, caller, body.id)
    done = int(job.next_chunk)
    if body.which == "unprocessed":
        seqs = [seq for seq, _ in sizes if seq >= done]
    else:
        seqs = [seq for seq, _ in sizes if seq < done]
    meta = {"columns": orjson.loads(job.columns or "[]"), "job": service.job_info(job)}

    async def lines() -> AsyncIterator[bytes]:
        yield _line(meta)
        async for rows, outcomes in _chunks(request, caller, body.id, seqs):
            if body.which == "unprocessed" or outcomes is None:
                if body.which == "unprocessed":
                    yield _line(rows)
                continue
            if body.which == "successful":
                picked = [[o[0], o[1], *r] for r, o in zip(rows, outcomes, strict=True) if not o[2]]
            else:
                picked = [[o[0], o[2], *r] for r, o in zip(rows, outcomes, strict=True) if o[2]]
            if picked:
                yield _line(picked)

    return StreamingResponse(lines(), media_type=NDJSON)


def _offset(locator: str | None) -> int:
    if not locator:
        return 0
    try:
        offset = int(locator, 36)
    except ValueError:
        offset = -1
    if offset < 0:
        raise service.InvalidJob("invalid locator", code="INVALID_LOCATOR")
    return offset


@router.post("/query/results")
async def query_results(
    request: Request, body: QueryResultsRequest, caller: RecordsCaller
) -> StreamingResponse:
    """One page of a finished query job's result, from `locator` (a record offset),
    at most `max_records` records; `next` is the following page's locator (None: last)."""
    async with use_case(request, caller, readonly=True) as (session, _view, _access):
        job = await service.readable_job(session, caller, body.id, kind="query")
        if job.state != "JobComplete":
            raise service.InvalidJobState(f"the job is {job.state}: its results are not ready")
        sizes = await service.chunk_sizes(session, caller, body.id)
    total = sum(n for _, n in sizes)
    start = _offset(body.locator)
    end = total if body.max_records is None else min(total, start + body.max_records)
    start = min(start, total)
    spans: list[tuple[int, int, int]] = []  # (seq, first row in it, rows after that)
    first_row = 0
    for seq, n in sizes:
        lo, hi = max(start, first_row), min(end, first_row + n)
        if lo < hi:
            spans.append((seq, lo - first_row, hi - lo))
        first_row += n
    meta = {
        "columns": orjson.loads(job.columns or "[]"),
        "job": service.job_info(job),
        "count": end - start,
        "next": None if end >= total else _base36(end),
    }

    async def lines() -> AsyncIterator[bytes]:
        yield _line(meta)
        seqs = [seq for seq, _, _ in spans]
        windows = [(skip, take) for _, skip, take in spans]
        n = 0
        async for rows, _ in _chunks(request, caller, body.id, seqs):
            skip, take = windows[n]
            n += 1
            yield _line(rows[skip : skip + take])

    return StreamingResponse(lines(), media_type=NDJSON)


def _base36(n: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        n, r = divmod(n, 36)
        out = digits[r] + out
        if n == 0:
            return out


# ---------------------------------------------------------------------------- Bulk API 1.0


class V1CreateRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    operation: str = Field(min_length=1, max_length=16)
    object: str = Field(min_length=1, max_length=80)
    external_id_field: str | None = Field(default=None, max_length=80)
    content_type: str = Field(default="CSV", max_length=8)
    api_version: str = Field(default="59.0", max_length=8)


class V1JobRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1, max_length=18)


class V1StateRequest(V1JobRequest):
    state: str = Field(min_length=1, max_length=16)


class V1BatchRequest(V1JobRequest):
    batch: str = Field(min_length=1, max_length=18)


class V1ResultRequest(V1BatchRequest):
    result: str = Field(min_length=1, max_length=18)


class V1AddBatchRequest(V1JobRequest):
    """A batch's records as text values (`#N/A`: null, empty: not set), or its query."""

    content_type: str = Field(default="CSV", max_length=8)
    columns: list[str] | None = Field(default=None, max_length=5_000)
    rows: list[list[str]] | None = Field(default=None, max_length=batches.MAX_BATCH_RECORDS)
    query: str | None = Field(default=None, max_length=100_000)


@router.post("/v1/jobs/create")
async def v1_create(
    request: Request, body: V1CreateRequest, caller: RecordsCaller
) -> dict[str, Any]:
    async with use_case(request, caller, readonly=False) as (session, view, access):
        return await batches.create_job(
            session,
            view=view,
            access=access,
            caller=caller,
            operation=body.operation,
            object_name=body.object,
            external_id_field=body.external_id_field,
            content_type=body.content_type,
            api_version=body.api_version,
        )


@router.post("/v1/jobs/info")
async def v1_info(request: Request, body: V1JobRequest, caller: RecordsCaller) -> dict[str, Any]:
    async with use_case(request, caller, readonly=True) as (session, _view, _access):
        return await batches.info(session, caller, body.id)


@router.post("/v1/jobs/state")
async def v1_state(request: Request, body: V1StateRequest, caller: RecordsCaller) -> dict[str, Any]:
    async with use_case(request, caller, readonly=False) as (session, _view, _access):
        return await batches.set_state(session, caller=caller, job_id=body.id, state=body.state)


@router.post("/v1/batches/add")
async def v1_add_batch(
    request: Request, body: V1AddBatchRequest, caller: RecordsCaller
) -> dict[str, Any]:
    async with use_case(request, caller, readonly=False) as (session, view, access):
        batch = await batches.add_batch(
            session,
            view=view,
            access=access,
            caller=caller,
            job_id=body.id,
            content_type=body.content_type,
            columns=body.columns,
            rows=body.rows,
            soql=body.query,
        )
    if batch["state"] == "Queued":
        ring_here(BELL)  # a batch runs as soon as it is queued
    return batch


@router.post("/v1/batches/list")
async def v1_list_batches(
    request: Request, body: V1JobRequest, caller: RecordsCaller
) -> dict[str, Any]:
    async with use_case(request, caller, readonly=True) as (session, _view, _access):
        return {"batches": await batches.list_batches(session, caller, body.id)}


@router.post("/v1/batches/info")
async def v1_batch_info(
    request: Request, body: V1BatchRequest, caller: RecordsCaller
) -> dict[str, Any]:
    async with use_case(request, caller, readonly=True) as (session, _view, _access):
        return await batches.batch_info(session, caller, body.id, body.batch)


@router.post("/v1/batches/results")
async def v1_batch_results(
    request: Request, body: V1BatchRequest, caller: RecordsCaller
) -> dict[str, Any]:
    async with use_case(request, caller, readonly=True) as (session, _view, _access):
        return await batches.batch_results(session, caller, body.id, body.batch)


@router.post("/v1/batches/request")
async def v1_batch_request(
    request: Request, body: V1BatchRequest, caller: RecordsCaller
) -> dict[str, Any]:
    async with use_case(request, caller, readonly=True) as (session, _view, _access):
        return await batches.batch_request(session, caller, body.id, body.batch)


@router.post("/v1/batches/result")
async def v1_query_result(
    request: Request, body: V1ResultRequest, caller: RecordsCaller
) -> dict[str, Any]:
    async with use_case(request, caller, readonly=True) as (session, _view, _access):
        return await batches.query_result(session, caller, body.id, body.batch, body.result)
