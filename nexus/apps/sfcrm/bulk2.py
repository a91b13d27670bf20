"""Bulk API 2.0 (`/jobs/ingest`, `/jobs/query`): ingest and query jobs (ADR 0077).

The dialect only parses, bounds and projects: every request is one Runtime use case under
`bulk/...` (the job, its state machine, who may see it and the saves are Runtime's), except
an upload larger than one Runtime call takes, which is split into several calls on record
boundaries (CSV-aware: a line break inside a quoted value is not a boundary). Results (the
ingest CSVs, a query's pages) stream through: Runtime sends one stored chunk at a time as an
NDJSON line and each becomes CSV text here, so no process holds more than one chunk.
"""

from __future__ import annotations

import csv
import io
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import aiohttp
import orjson
from fastapi import APIRouter, Request
from fastapi.responses import Response, StreamingResponse

from nexus.apps.sfcrm.context import dialect, json_body
from nexus.apps.sfcrm.errors import CATEGORY_CODES, SfError, bad_request
from nexus.apps.sfcrm.params import whole_number
from nexus.apps.sfcrm.runtime_client import Caller
from nexus.contracts.records import ErrorCategory

router = APIRouter(prefix="/services/data/{version}/jobs")

#: One upload (Salesforce: 150 MB per job; simple-salesforce sends at most 100 MB at once).
MAX_UPLOAD_BYTES = 100 * 1024 * 1024
#: The CSV text of one Runtime upload call (its limit is 8 M characters).
PIECE_BYTES = 4 * 1024 * 1024
DELIMITERS = {
    "COMMA": ",",
    "TAB": "\t",
    "SEMICOLON": ";",
    "PIPE": "|",
    "CARET": "^",
    "BACKQUOTE": "`",
}
LINE_ENDINGS = {"LF": "\n", "CRLF": "\r\n"}
#: Result CSVs by their path segment, lower case: the guide writes `unprocessedrecords`,
#: simple-salesforce asks for `unprocessedRecords`.
RESULTS = {
    "successfulresults": "successful",
    "failedresults": "failed",
    "unprocessedrecords": "unprocessed",
}
JSON_BODY_LIMIT = 1024 * 1024


def _iso(ms: int) -> str:
    moment = datetime.fromtimestamp(ms / 1000, tz=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}+0000"


def job_wire(job: dict[str, Any], *, full: bool) -> dict[str, Any]:
    """Runtime's job as Salesforce's JobInfo (create/close answers: without the counts)."""
    version = job["api_version"]
    out: dict[str, Any] = {
        "id": job["id"],
        "operation": job["operation"],
        "object": job["object"],
        "createdById": job["created_by_id"],
        "createdDate": _iso(job["created_at_ms"]),
        "systemModstamp": _iso(job["updated_at_ms"]),
        "state": job["state"],
    }
    if job.get("external_id_field"):
        out["externalIdFieldName"] = job["external_id_field"]
    out.update(
        concurrencyMode="Parallel",
        contentType="CSV",
        apiVersion=float(version),
    )
    if job["kind"] == "ingest":
        out["contentUrl"] = f"services/data/v{version}/jobs/ingest/{job['id']}/batches"
    out.update(lineEnding=job["line_ending"], columnDelimiter=job["column_delimiter"])
    if full:
        out["jobType"] = "V2Ingest" if job["kind"] == "ingest" else "V2Query"
        out["numberRecordsProcessed"] = job["records_processed"]
        if job["kind"] == "ingest":
            out["numberRecordsFailed"] = job["records_failed"]
        out.update(
            retries=0,
            totalProcessingTime=job["processing_ms"],
            apiActiveProcessingTime=job["processing_ms"],
            apexProcessingTime=0,
        )
        if job["kind"] == "query":
            out["isPkChunkingSupported"] = False
        if job.get("error_message"):
            out["errorMessage"] = job["error_message"]
    return out


async def _json_body(request: Request) -> dict[str, Any]:
    """The request's JSON object (the dialect's bounded reader); an empty body is `{}`, so a
    missing field answers its own error."""
    body = await json_body(request, JSON_BODY_LIMIT)
    if body is None:
        return {}
    if not isinstance(body, dict):
        raise SfError(400, "JSON_PARSER_ERROR", "The request body must be a JSON object")
    return body


def _text(body: dict[str, Any], key: str, default: str | None = None) -> str | None:
    value = body.get(key, default)
    if value is not None and not isinstance(value, str):
        raise bad_request("INVALIDJOB", f"{key} must be a string", [key])
    return value


def _options(body: dict[str, Any]) -> dict[str, Any]:
    content_type = _text(body, "contentType", "CSV")
    if content_type != "CSV":
        raise bad_request("INVALIDJOB", "contentType must be CSV", ["contentType"])
    options: dict[str, Any] = {}
    delimiter = _text(body, "columnDelimiter", "COMMA")
    if delimiter not in DELIMITERS:
        raise bad_request(
            "INVALIDJOB", f"invalid columnDelimiter {delimiter!r}", ["columnDelimiter"]
        )
    options["column_delimiter"] = delimiter
    ending = _text(body, "lineEnding", "LF")
    if ending not in LINE_ENDINGS:
        raise bad_request("INVALIDJOB", f"invalid lineEnding {ending!r}", ["lineEnding"])
    options["line_ending"] = ending
    return options


def _version(version: str) -> str:
    return version.removeprefix("v")


# ---------------------------------------------------------------------------- create, info


@router.post("/ingest")
async def create_ingest(request: Request, version: str) -> Response:
    d = dialect(request)
    caller = await d.enter(request, version)
    body = await _json_body(request)
    operation = _text(body, "operation")
    obj = _text(body, "object")
    if not operation:
        raise bad_request("INVALIDJOB", "operation is required", ["operation"])
    if not obj:
        raise bad_request("INVALIDJOB", "object is required", ["object"])
    job = await d.runtime.call(
        caller,
        "bulk/jobs/create",
        {
            "kind": "ingest",
            "operation": operation,
            "object": obj,
            "external_id_field": _text(body, "externalIdFieldName"),
            "api_version": _version(version),
            **_options(body),
        },
    )
    return d.reply(request, job_wire(job, full=False))


@router.post("/query")
async def create_query(request: Request, version: str) -> Response:
    d = dialect(request)
    caller = await d.enter(request, version)
    body = await _json_body(request)
    operation = _text(body, "operation", "query")
    query = _text(body, "query")
    if not query or not query.strip():
        raise bad_request("INVALIDJOB", "query is required", ["query"])
    job = await d.runtime.call(
        caller,
        "bulk/jobs/create",
        {
            "kind": "query",
            "operation": operation,
            "query": query,
            "api_version": _version(version),
            **_options(body),
        },
    )
    return d.reply(request, job_wire(job, full=False))


async def _list(request: Request, version: str, kind: str) -> Response:
    d = dialect(request)
    caller = await d.enter(request, version)
    locator = request.query_params.get("queryLocator") or None
    answer = await d.runtime.call(caller, "bulk/jobs/list", {"kind": kind, "locator": locator})
    nxt = answer.get("next_locator")
    return d.reply(
        request,
        {
            "done": nxt is None,
            "records": [job_wire(j, full=True) for j in answer["jobs"]],
            "nextRecordsUrl": (
                f"/services/data/{version}/jobs/{kind}?queryLocator={nxt}" if nxt else None
            ),
        },
    )


@router.get("/ingest")
async def list_ingest(request: Request, version: str) -> Response:
    return await _list(request, version, "ingest")


@router.get("/query")
async def list_query(request: Request, version: str) -> Response:
    return await _list(request, version, "query")


async def _info(request: Request, version: str, kind: str, job_id: str) -> Response:
    d = dialect(request)
    caller = await d.enter(request, version)
    job = await d.runtime.call(caller, "bulk/jobs/info", {"id": job_id[:18], "kind": kind})
    return d.reply(request, job_wire(job, full=True))


@router.get("/ingest/{job_id}")
async def ingest_info(request: Request, version: str, job_id: str) -> Response:
    return await _info(request, version, "ingest", job_id)


@router.get("/query/{job_id}")
async def query_info(request: Request, version: str, job_id: str) -> Response:
    return await _info(request, version, "query", job_id)


async def _set_state(request: Request, version: str, kind: str, job_id: str) -> Response:
    d = dialect(request)
    caller = await d.enter(request, version)
    state = _text(await _json_body(request), "state")
    allowed = ("UploadComplete", "Aborted") if kind == "ingest" else ("Aborted",)
    if state not in allowed:
        raise bad_request(
            "INVALIDJOBSTATE", f"state must be one of {', '.join(allowed)}", ["state"]
        )
    body = {"id": job_id[:18], "kind": kind, "state": state}
    job = await d.runtime.call(caller, "bulk/jobs/state", body)
    return d.reply(request, job_wire(job, full=False))


@router.patch("/ingest/{job_id}")
async def ingest_state(request: Request, version: str, job_id: str) -> Response:
    return await _set_state(request, version, "ingest", job_id)


@router.patch("/query/{job_id}")
async def query_state(request: Request, version: str, job_id: str) -> Response:
    return await _set_state(request, version, "query", job_id)


async def _delete(request: Request, version: str, kind: str, job_id: str) -> Response:
    d = dialect(request)
    caller = await d.enter(request, version)
    await d.runtime.call(caller, "bulk/jobs/delete", {"id": job_id[:18], "kind": kind})
    return d.reply(request, None, status=204)


@router.delete("/ingest/{job_id}")
async def ingest_delete(request: Request, version: str, job_id: str) -> Response:
    return await _delete(request, version, "ingest", job_id)


@router.delete("/query/{job_id}")
async def query_delete(request: Request, version: str, job_id: str) -> Response:
    return await _delete(request, version, "query", job_id)


# ---------------------------------------------------------------------------- upload


def record_boundary(data: bytes | bytearray, limit: int) -> int:
    """The end of the last whole CSV record in `data[:limit]` (just after its line break),
    or 0 when there is none. `data` starts at a record boundary, so a line break ends a
    record exactly when the quotes before it are balanced ("" inside a quoted value counts
    twice and keeps the balance)."""
    end = data.rfind(b"\n", 0, limit)
    while end >= 0:
        if data.count(b'"', 0, end) % 2 == 0:
            return end + 1
        end = data.rfind(b"\n", 0, end)
    return 0


def _decoded(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise bad_request("INVALIDBATCH", "InvalidBatch : the data is not UTF-8") from None


async def _send_piece(
    request: Request, caller: Caller, job_id: str, header: bytes, piece: bytes
) -> None:
    body = {"id": job_id, "header": _decoded(header), "csv": _decoded(piece)}
    await dialect(request).runtime.call(caller, "bulk/jobs/upload", body)


@router.put("/ingest/{job_id}/batches")
async def upload(request: Request, version: str, job_id: str) -> Response:
    """Upload job data: the CSV body goes to Runtime in pieces of whole records, each with
    the upload's first record (its header), which Runtime reads with the job's delimiter."""
    d = dialect(request)
    caller = await d.enter(request, version)
    job_id = job_id[:18]
    declared = request.headers.get("content-length", "")
    size = whole_number(declared)
    if size is not None and size > MAX_UPLOAD_BYTES:
        raise SfError(413, "REQUEST_ENTITY_TOO_LARGE", "an upload is at most 100 MB")
    buffer = bytearray()
    header: bytes | None = None
    received = sent = 0
    async for part in request.stream():
        received += len(part)
        if received > MAX_UPLOAD_BYTES:
            raise SfError(413, "REQUEST_ENTITY_TOO_LARGE", "an upload is at most 100 MB")
        buffer += part
        if header is None:
            if buffer.startswith(b"\xef\xbb\xbf"):
                del buffer[:3]
            cut = _first_boundary(buffer)
            if not cut:
                continue
            header = bytes(buffer[:cut])
            del buffer[:cut]
        while len(buffer) >= PIECE_BYTES:
            cut = record_boundary(buffer, PIECE_BYTES) or record_boundary(buffer, len(buffer))
            if not cut:  # one record longer than a piece: wait for its end
                break
            await _send_piece(request, caller, job_id, header, bytes(buffer[:cut]))
            sent += 1
            del buffer[:cut]
    if header is None:
        header, buffer = bytes(buffer), bytearray()
    if not header.strip():
        raise bad_request("INVALIDBATCH", "InvalidBatch : the upload is empty")
    if buffer.strip() or not sent:
        await _send_piece(request, caller, job_id, header, bytes(buffer))
    return Response(status_code=201, headers=d.limit_info(request))


def _first_boundary(data: bytearray) -> int:
    """The end of the first whole record (the header), or 0."""
    start = 0
    while True:
        end = data.find(b"\n", start)
        if end < 0:
            return 0
        if data.count(b'"', 0, end) % 2 == 0:
            return end + 1
        start = end + 1


# ---------------------------------------------------------------------------- results


async def _ndjson(reply: aiohttp.ClientResponse) -> AsyncIterator[Any]:
    """Runtime's NDJSON answer one value at a time (a line may be longer than aiohttp's
    readline takes)."""
    pending = bytearray()
    async for part in reply.content.iter_any():
        pending += part
        while True:
            end = pending.find(b"\n")
            if end < 0:
                break
            line = bytes(pending[:end])
            del pending[: end + 1]
            if line:
                yield orjson.loads(line)
    if pending.strip():
        yield orjson.loads(bytes(pending))


class _Csv:
    """CSV text with the job's delimiter and line ending, every value quoted."""

    def __init__(self, delimiter: str, line_ending: str) -> None:
        self.out = io.StringIO()
        self.writer = csv.writer(
            self.out, delimiter=delimiter, lineterminator=line_ending, quoting=csv.QUOTE_ALL
        )

    def rows(self, rows: list[list[Any]]) -> bytes:
        self.writer.writerows(rows)
        text = self.out.getvalue()
        self.out.seek(0)
        self.out.truncate()
        return text.encode()


def error_text(error: list[Any]) -> str:
    """A failed row's `sf__Error`: `CODE:message:fields --`, as Salesforce writes it."""
    category, message, fields = error
    try:
        code = CATEGORY_CODES.get(ErrorCategory(category), category)
    except ValueError:
        code = category
    return f"{code}:{message}:{','.join(fields)} --"


def _job_csv(job: dict[str, Any]) -> _Csv:
    return _Csv(
        DELIMITERS.get(job["column_delimiter"], ","), LINE_ENDINGS.get(job["line_ending"], "\n")
    )


async def _open(
    request: Request, caller: Caller, use_case: str, body: dict[str, Any]
) -> tuple[aiohttp.ClientResponse, AsyncIterator[Any], Any]:
    reply = await dialect(request).runtime.open_stream(caller, use_case, body)
    values = _ndjson(reply)
    try:
        meta = await anext(values)
    except Exception:
        reply.release()
        raise
    return reply, values, meta


def _streamed(
    reply: aiohttp.ClientResponse, first: bytes, rest: AsyncIterator[bytes]
) -> AsyncIterator[bytes]:
    async def body() -> AsyncIterator[bytes]:
        try:
            yield first
            async for part in rest:
                yield part
        finally:
            reply.release()

    return body()


@router.get("/ingest/{job_id}/{which}")
async def ingest_results(request: Request, version: str, job_id: str, which: str) -> Response:
    kind = RESULTS.get(which.lower())
    if kind is None:
        raise SfError(404, "NOT_FOUND", "The requested resource does not exist")
    d = dialect(request)
    caller = await d.enter(request, version)
    reply, values, meta = await _open(
        request, caller, "bulk/ingest/results", {"id": job_id[:18], "which": kind}
    )
    out = _job_csv(meta["job"])
    columns = list(meta["columns"])
    head = {"successful": ["sf__Id", "sf__Created"], "failed": ["sf__Id", "sf__Error"]}
    first = out.rows([head.get(kind, []) + columns])

    async def rows() -> AsyncIterator[bytes]:
        async for batch in values:
            if kind == "successful":
                shaped = [[r[0], "true" if r[1] else "false", *r[2:]] for r in batch]
            elif kind == "failed":
                shaped = [[r[0] or "", error_text(r[1]), *r[2:]] for r in batch]
            else:
                shaped = batch
            yield out.rows(shaped)

    return StreamingResponse(
        _streamed(reply, first, rows()),
        media_type="text/csv",
        headers=d.limit_info(request),
    )


@router.get("/query/{job_id}/results")
async def query_results(request: Request, version: str, job_id: str) -> Response:
    d = dialect(request)
    caller = await d.enter(request, version)
    params = request.query_params
    body: dict[str, Any] = {"id": job_id[:18], "locator": params.get("locator") or None}
    max_records = params.get("maxRecords")
    if max_records:
        count = whole_number(max_records)
        if count is None or count < 1:
            raise bad_request("INVALID_FIELD", "maxRecords must be a positive integer")
        body["max_records"] = min(count, 10_000_000)
    reply, values, meta = await _open(request, caller, "bulk/query/results", body)
    out = _job_csv(meta["job"])
    first = out.rows([list(meta["columns"])])

    async def rows() -> AsyncIterator[bytes]:
        async for batch in values:
            yield out.rows(batch)

    headers = {
        **d.limit_info(request),
        "Sforce-Locator": meta["next"] or "null",
        "Sforce-NumberOfRecords": str(meta["count"]),
    }
    return StreamingResponse(
        _streamed(reply, first, rows()), media_type="text/csv", headers=headers
    )
