"""Bulk API 1.0 (`/services/async/{version}/job...`): jobs and batches (ADR 0077).

The dialect parses and bounds the requests (jobInfo as JSON or XML, batches as JSON, CSV
or XML records or a query's SOQL) and projects Runtime's answers into Bulk API 1.0's own
shapes; every request is one Runtime use case under `bulk/v1/...` (the job and its batches,
who may see them and the saves are Runtime's). The session comes in `X-SFDC-Session` (or
an `Authorization: Bearer` header).

Errors are Bulk API 1.0's, not the REST envelope: `{"exceptionCode", "exceptionMessage"}`
in JSON when the request speaks JSON, else `<error xmlns=...dataload>`; HTTP 400 as
Salesforce answers them (an unknown, another user's or another org's job alike:
`InvalidJob`), 404 `InvalidUrl` for a path no route takes.

XML is read with expat refusing DTDs and entity declarations, with bounded size, depth and
element count (as `nexus.identity.soap`).
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from typing import Any
from xml.sax.saxutils import escape

import orjson
from fastapi import APIRouter, Request
from fastapi.responses import Response
from fastapi.routing import APIRoute

from nexus.apps.sfcrm.bulk2 import error_text
from nexus.apps.sfcrm.context import check_version, dialect
from nexus.apps.sfcrm.errors import CATEGORY_CODES, SfError
from nexus.apps.sfcrm.runtime_client import Caller
from nexus.contracts.records import ErrorCategory
from nexus.platform.bounded_xml import UnsafeXml, XmlElement, parse_bounded

NS = "http://www.force.com/2009/06/asyncapi/dataload"
XSI = "http://www.w3.org/2001/XMLSchema-instance"
#: A jobInfo body; a batch (Salesforce: 10 MB, 10,000 records).
MAX_JOB_BODY = 64 * 1024
MAX_BATCH_BYTES = 10 * 1024 * 1024
MAX_BATCH_RECORDS = 10_000
MAX_XML_DEPTH = 8
MAX_XML_ELEMENTS = 1_000_000
NULL = "#N/A"
OPERATIONS = ("insert", "update", "upsert", "delete", "hardDelete", "query", "queryAll")
VERSION = re.compile(r"^[1-9]\d{1,2}\.0$")
#: Runtime's error codes as Bulk API 1.0's exception codes.
EXCEPTION_CODES = {
    "INVALIDJOB": "InvalidJob",
    "INVALIDJOBSTATE": "InvalidJobState",
    "INVALIDBATCH": "InvalidBatch",
    "INVALIDUSER": "InvalidUser",
    "INSUFFICIENT_ACCESS_OR_READONLY": "InvalidUser",
    "INSUFFICIENT_ACCESS": "InvalidUser",
    "INVALID_SESSION_ID": "InvalidSessionId",
    "REQUEST_LIMIT_EXCEEDED": "ExceededQuota",
    "REQUEST_ENTITY_TOO_LARGE": "InvalidBatch",
    "API_DISABLED_FOR_ORG": "FeatureNotEnabled",
}


class BulkError(Exception):
    """One Bulk API 1.0 error answer."""

    def __init__(self, code: str, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.code, self.message, self.status = code, message, status


def wants_json(request: Request) -> bool:
    accept = request.headers.get("accept", "")
    content_type = request.headers.get("content-type", "")
    return "json" in accept.lower() or "json" in content_type.lower()


def _xml(root: str, body: str) -> str:
    return f'<?xml version="1.0" encoding="UTF-8"?><{root} xmlns="{NS}">{body}</{root}>'


def error_response(request: Request, exc: BulkError) -> Response:
    if wants_json(request):
        body = orjson.dumps({"exceptionCode": exc.code, "exceptionMessage": exc.message})
        return Response(body, status_code=exc.status, media_type="application/json")
    text = _xml(
        "error",
        f"<exceptionCode>{escape(exc.code)}</exceptionCode>"
        f"<exceptionMessage>{escape(exc.message)}</exceptionMessage>",
    )
    return Response(text, status_code=exc.status, media_type="application/xml")


def _from_sf(exc: SfError) -> BulkError:
    if exc.code == "INVALID_SESSION_ID":
        return BulkError("InvalidSessionId", "Invalid session id")
    if exc.status == 404:
        lowered = exc.message.lower()
        code = "InvalidBatch" if "batch" in lowered or "result" in lowered else "InvalidJob"
        return BulkError(code, exc.message or "Unable to find object")
    if exc.status >= 500:
        return BulkError("Unknown", "an unexpected error occurred", exc.status)
    return BulkError(EXCEPTION_CODES.get(exc.code, "ClientInputError"), exc.message)


class BulkRoute(APIRoute):
    """Every error of a Bulk API 1.0 route in 1.0's shape (the App's handlers answer the
    REST envelope)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def answer(request: Request) -> Response:
            try:
                return await handler(request)
            except BulkError as exc:
                return error_response(request, exc)
            except SfError as exc:
                return error_response(request, _from_sf(exc))

        return answer


router = APIRouter(prefix="/services/async/{version}", route_class=BulkRoute)


# ---------------------------------------------------------------------------- shared


async def _enter(request: Request, version: str) -> Caller:
    if not VERSION.fullmatch(version):
        raise BulkError("InvalidVersion", f"Invalid api version: {version}", 404)
    try:
        check_version(f"v{version}")
    except SfError:
        raise BulkError("InvalidVersion", f"Invalid api version: {version}", 404) from None
    session = request.headers.get("x-sfdc-session", "").strip()
    authorization = f"Bearer {session}" if session else request.headers.get("authorization")
    if not authorization:
        raise BulkError("InvalidSessionId", "Unable to find session id")
    d = dialect(request)
    caller = await d.runtime.caller(authorization)
    request.state.api_usage = d.usage.count(caller)
    return caller


async def _body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise BulkError("InvalidBatch", f"Exceeded max size limit of {limit} bytes")
    raw = bytearray()
    async for part in request.stream():
        raw += part
        if len(raw) > limit:
            raise BulkError("InvalidBatch", f"Exceeded max size limit of {limit} bytes")
    return bytes(raw)


def _reply(request: Request, body: bytes | str, media_type: str, status: int = 200) -> Response:
    return Response(
        body,
        status_code=status,
        media_type=media_type,
        headers=dialect(request).limit_info(request),
    )


def _iso(ms: int, *, as_json: bool) -> str:
    moment = datetime.fromtimestamp(ms / 1000, tz=UTC)
    text = moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}"
    return text + ("+0000" if as_json else "Z")


def _elements(fields: list[tuple[str, Any]]) -> str:
    out = []
    for name, value in fields:
        if value is None:
            continue
        text = ("true" if value else "false") if isinstance(value, bool) else str(value)
        out.append(f"<{name}>{escape(text)}</{name}>")
    return "".join(out)


# ---------------------------------------------------------------------------- XML reading


XmlNode = XmlElement


def is_nil(node: XmlNode) -> bool:
    return node.attrs.get(f"{XSI} nil", "").lower() == "true"


def parse_xml(body: bytes) -> XmlNode:
    """The document's root element (names without their namespace, attributes with it);
    InvalidXML when it is not well-formed, holds a DTD or an entity, or passes the bounds."""
    try:
        return parse_bounded(body, max_elements=MAX_XML_ELEMENTS, max_depth=MAX_XML_DEPTH)
    except UnsafeXml as exc:
        raise BulkError("InvalidXML", str(exc)) from None


# ---------------------------------------------------------------------------- jobs


def _concurrency(value: Any) -> str:
    # simple-salesforce sends 0 (Parallel) or 1 (Serial)
    if value in (None, "", 0, "Parallel"):
        return "Parallel"
    if value in (1, "Serial"):
        return "Serial"
    raise BulkError("InvalidJob", f"Invalid concurrency mode: {value}")


async def _job_info_body(request: Request) -> dict[str, Any]:
    raw = await _body(request, MAX_JOB_BODY)
    content_type = request.headers.get("content-type", "").lower()
    if "json" in content_type:
        try:
            body = orjson.loads(raw) if raw.strip() else None
        except orjson.JSONDecodeError:
            raise BulkError("InvalidJob", "the jobInfo is not valid JSON") from None
        if not isinstance(body, dict):
            raise BulkError("InvalidJob", "the jobInfo must be a JSON object")
        return body
    if "xml" in content_type:
        root = parse_xml(raw)
        if root.name != "jobInfo":
            raise BulkError("InvalidXML", "the root element must be jobInfo")
        return {child.name: child.text.strip() for child in root.children}
    raise BulkError("InvalidJob", "Unsupported content type: the jobInfo is JSON or XML")


def _text(body: dict[str, Any], key: str) -> str | None:
    value = body.get(key)
    if value is not None and not isinstance(value, str):
        raise BulkError("InvalidJob", f"{key} must be a string")
    return value or None


def job_fields(job: dict[str, Any], *, as_json: bool) -> list[tuple[str, Any]]:
    """A job's JobInfo fields in the guide's order."""
    return [
        ("id", job["id"]),
        ("operation", job["operation"]),
        ("object", job["object"]),
        ("createdById", job["created_by_id"]),
        ("createdDate", _iso(job["created_at_ms"], as_json=as_json)),
        ("systemModstamp", _iso(job["updated_at_ms"], as_json=as_json)),
        ("state", job["state"]),
        ("externalIdFieldName", job.get("external_id_field")),
        ("concurrencyMode", "Parallel"),
        ("contentType", job["content_type"]),
        ("numberBatchesQueued", job["batches_queued"]),
        ("numberBatchesInProgress", job["batches_in_progress"]),
        ("numberBatchesCompleted", job["batches_completed"]),
        ("numberBatchesFailed", job["batches_failed"]),
        ("numberBatchesTotal", job["batches_total"]),
        ("numberRecordsProcessed", job["records_processed"]),
        ("numberRetries", 0),
        ("apiVersion", float(job["api_version"])),
        ("numberRecordsFailed", job["records_failed"]),
        ("totalProcessingTime", job["processing_ms"]),
        ("apiActiveProcessingTime", job["processing_ms"]),
        ("apexProcessingTime", 0),
    ]


def _job_reply(request: Request, job: dict[str, Any], status: int = 200) -> Response:
    as_json = wants_json(request)
    fields = job_fields(job, as_json=as_json)
    if as_json:
        return _reply(request, orjson.dumps(dict(fields)), "application/json", status)
    return _reply(request, _xml("jobInfo", _elements(fields)), "application/xml", status)


@router.post("/job")
async def create_job(request: Request, version: str) -> Response:
    caller = await _enter(request, version)
    body = await _job_info_body(request)
    operation = _text(body, "operation")
    obj = _text(body, "object")
    if operation not in OPERATIONS:
        raise BulkError("InvalidJob", f"Invalid operation: {operation}")
    if not obj:
        raise BulkError("InvalidJob", "object is required")
    content_type = _text(body, "contentType") or "CSV"
    if content_type not in ("JSON", "CSV", "XML"):
        raise BulkError("InvalidJob", f"Unsupported content type: {content_type}")
    _concurrency(body.get("concurrencyMode"))
    if body.get("state") not in (None, "", "Open"):
        raise BulkError("InvalidJob", "a new job's state is Open")
    job = await dialect(request).runtime.call(
        caller,
        "bulk/v1/jobs/create",
        {
            "operation": operation,
            "object": obj,
            "external_id_field": _text(body, "externalIdFieldName"),
            "content_type": content_type,
            "api_version": version,
        },
    )
    return _job_reply(request, job, status=201)


@router.get("/job/{job_id}")
async def job_info(request: Request, version: str, job_id: str) -> Response:
    caller = await _enter(request, version)
    job = await dialect(request).runtime.call(caller, "bulk/v1/jobs/info", {"id": job_id[:18]})
    return _job_reply(request, job)


@router.post("/job/{job_id}")
async def job_state(request: Request, version: str, job_id: str) -> Response:
    caller = await _enter(request, version)
    state = _text(await _job_info_body(request), "state")
    if state not in ("Closed", "Aborted"):
        raise BulkError("InvalidJobState", f"Invalid state: {state} (Closed or Aborted)")
    job = await dialect(request).runtime.call(
        caller, "bulk/v1/jobs/state", {"id": job_id[:18], "state": state}
    )
    return _job_reply(request, job)


# ---------------------------------------------------------------------------- batches


def _batch_fields(batch: dict[str, Any], *, as_json: bool) -> list[tuple[str, Any]]:
    return [
        ("id", batch["id"]),
        ("jobId", batch["job_id"]),
        ("state", batch["state"]),
        ("stateMessage", batch.get("state_message")),
        ("createdDate", _iso(batch["created_at_ms"], as_json=as_json)),
        ("systemModstamp", _iso(batch["updated_at_ms"], as_json=as_json)),
        ("numberRecordsProcessed", batch["records_processed"]),
        ("numberRecordsFailed", batch["records_failed"]),
        ("totalProcessingTime", batch["processing_ms"]),
        ("apiActiveProcessingTime", batch["processing_ms"]),
        ("apexProcessingTime", 0),
    ]


def _batch_reply(request: Request, batch: dict[str, Any], status: int = 200) -> Response:
    as_json = wants_json(request)
    fields = _batch_fields(batch, as_json=as_json)
    if as_json:
        shown = {k: v for k, v in fields if v is not None}
        return _reply(request, orjson.dumps(shown), "application/json", status)
    return _reply(request, _xml("batchInfo", _elements(fields)), "application/xml", status)


def _cell(value: Any) -> str:
    """A JSON record's value as the batch's text (`#N/A`: null)."""
    if value is None:
        return NULL
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float | str):
        return str(value)
    raise BulkError("InvalidBatch", "a record's value must be a string, number or boolean")


def _flat(record: dict[str, Any], prefix: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in record.items():
        if key == "attributes" or not isinstance(key, str):
            continue
        if isinstance(value, dict):  # a parent by its external id: `Account.Ext__c`
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[prefix + key] = _cell(value)
    return out


def _table(records: list[dict[str, str]]) -> tuple[list[str], list[list[str]]]:
    """Records (field -> text) as one header and rows; a field a record lacks is not set."""
    columns: dict[str, None] = {}
    for record in records:
        columns.update(dict.fromkeys(record))
    names = list(columns)
    return names, [[record.get(name, "") for name in names] for record in records]


def _json_records(raw: bytes) -> tuple[list[str], list[list[str]]]:
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise BulkError("InvalidBatch", "the batch is not valid JSON") from None
    if not isinstance(body, list) or not all(isinstance(r, dict) for r in body):
        raise BulkError("InvalidBatch", "a JSON batch is a list of records")
    return _table([_flat(r) for r in body])


def _xml_records(raw: bytes) -> tuple[list[str], list[list[str]]]:
    root = parse_xml(raw)
    if root.name != "sObjects":
        raise BulkError("InvalidBatch", "an XML batch's root element is sObjects")
    records = []
    for node in root.children:
        if node.name != "sObject":
            raise BulkError("InvalidBatch", "an sObjects element holds sObject elements")
        record: dict[str, str] = {}
        for f in node.children:
            if f.children:  # a parent by its external id
                for g in f.children:
                    record[f"{f.name}.{g.name}"] = NULL if is_nil(g) else g.text
            else:
                record[f.name] = NULL if is_nil(f) else f.text
        records.append(record)
    return _table(records)


def _csv_records(raw: bytes) -> tuple[list[str], list[list[str]]]:
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise BulkError("InvalidBatch", "the batch is not UTF-8") from None
    try:
        rows = [r for r in csv.reader(io.StringIO(text), strict=True) if any(r)]
    except csv.Error:
        raise BulkError("InvalidBatch", "the CSV data cannot be read") from None
    if not rows:
        raise BulkError("InvalidBatch", "the batch has no header row")
    header = [c.strip() for c in rows[0]]
    return header, rows[1:]


BATCH_TYPES = {"json": "JSON", "csv": "CSV", "xml": "XML"}


def _batch_type(request: Request) -> str:
    content_type = request.headers.get("content-type", "").lower()
    for marker, name in BATCH_TYPES.items():
        if marker in content_type:
            return name
    raise BulkError("InvalidBatch", "Unsupported content type: a batch is JSON, CSV or XML")


@router.post("/job/{job_id}/batch")
async def add_batch(request: Request, version: str, job_id: str) -> Response:
    caller = await _enter(request, version)
    content_type = _batch_type(request)
    raw = await _body(request, MAX_BATCH_BYTES)
    body: dict[str, Any] = {"id": job_id[:18], "content_type": content_type}
    stripped = raw.strip()
    if re.match(rb"(?is)^select\s", stripped):  # a query job's batch: the SOQL itself
        try:
            body["query"] = stripped.decode("utf-8")
        except UnicodeDecodeError:
            raise BulkError("InvalidBatch", "the query is not UTF-8") from None
    else:
        read = {"JSON": _json_records, "XML": _xml_records, "CSV": _csv_records}[content_type]
        columns, rows = read(raw)
        if not columns or not rows:
            raise BulkError("InvalidBatch", "Records not processed: the batch has no records")
        if len(rows) > MAX_BATCH_RECORDS:
            raise BulkError("InvalidBatch", f"a batch holds at most {MAX_BATCH_RECORDS} records")
        body.update(columns=columns, rows=rows)
    batch = await dialect(request).runtime.call(caller, "bulk/v1/batches/add", body)
    return _batch_reply(request, batch, status=201)


@router.get("/job/{job_id}/batch")
async def list_batches(request: Request, version: str, job_id: str) -> Response:
    caller = await _enter(request, version)
    answer = await dialect(request).runtime.call(
        caller, "bulk/v1/batches/list", {"id": job_id[:18]}
    )
    as_json = wants_json(request)
    if as_json:
        shown = [
            {k: v for k, v in _batch_fields(b, as_json=True) if v is not None}
            for b in answer["batches"]
        ]
        return _reply(request, orjson.dumps({"batchInfo": shown}), "application/json")
    body = "".join(
        f"<batchInfo>{_elements(_batch_fields(b, as_json=False))}</batchInfo>"
        for b in answer["batches"]
    )
    return _reply(request, _xml("batchInfoList", body), "application/xml")


def _ids(job_id: str, batch_id: str) -> dict[str, str]:
    return {"id": job_id[:18], "batch": batch_id[:18]}


@router.get("/job/{job_id}/batch/{batch_id}")
async def batch_info(request: Request, version: str, job_id: str, batch_id: str) -> Response:
    caller = await _enter(request, version)
    batch = await dialect(request).runtime.call(
        caller, "bulk/v1/batches/info", _ids(job_id, batch_id)
    )
    return _batch_reply(request, batch)


def _status_code(error: list[Any]) -> str:
    try:
        return CATEGORY_CODES.get(ErrorCategory(error[0]), str(error[0]))
    except ValueError:
        return str(error[0])


def _csv_text(rows: list[list[Any]]) -> bytes:
    out = io.StringIO()
    csv.writer(out, lineterminator="\n", quoting=csv.QUOTE_ALL).writerows(rows)
    return out.getvalue().encode()


def _outcomes_reply(request: Request, content_type: str, outcomes: list[list[Any]]) -> Response:
    if content_type == "JSON":
        results = [
            {
                "success": error is None,
                "created": bool(created) and error is None,
                "id": record_id,
                "errors": []
                if error is None
                else [{"fields": error[2], "message": error[1], "statusCode": _status_code(error)}],
            }
            for record_id, created, error in outcomes
        ]
        return _reply(request, orjson.dumps(results), "application/json")
    if content_type == "CSV":
        rows: list[list[Any]] = [["Id", "Success", "Created", "Error"]]
        rows += [
            [
                record_id or "",
                "true" if error is None else "false",
                "true" if created and error is None else "false",
                "" if error is None else error_text(error),
            ]
            for record_id, created, error in outcomes
        ]
        return _reply(request, _csv_text(rows), "text/csv")
    parts = []
    for record_id, created, error in outcomes:
        errors = ""
        if error is not None:
            fields = "".join(f"<fields>{escape(f)}</fields>" for f in error[2])
            errors = (
                f"<errors>{fields}<message>{escape(error[1])}</message>"
                f"<statusCode>{escape(_status_code(error))}</statusCode></errors>"
            )
        parts.append(
            f"<result>{errors}<id>{escape(record_id or '')}</id>"
            f"<success>{'true' if error is None else 'false'}</success>"
            f"<created>{'true' if created and error is None else 'false'}</created></result>"
        )
    return _reply(request, _xml("results", "".join(parts)), "application/xml")


@router.get("/job/{job_id}/batch/{batch_id}/result")
async def batch_results(request: Request, version: str, job_id: str, batch_id: str) -> Response:
    caller = await _enter(request, version)
    answer = await dialect(request).runtime.call(
        caller, "bulk/v1/batches/results", _ids(job_id, batch_id)
    )
    content_type = answer["content_type"] or "CSV"
    if answer["results"] is None:
        return _outcomes_reply(request, content_type, answer["outcomes"])
    if content_type == "JSON":
        return _reply(request, orjson.dumps(answer["results"]), "application/json")
    body = "".join(f"<result>{escape(r)}</result>" for r in answer["results"])
    return _reply(request, _xml("result-list", body), "application/xml")


def _value_at(record: Any, path: list[str]) -> Any:
    value = record
    for part in path:
        if not isinstance(value, dict):
            return None
        lowered = part.lower()
        value = next((v for k, v in value.items() if k.lower() == lowered), None)
    return value


def _json_record(record: dict[str, Any], version: str) -> dict[str, Any]:
    attributes = dict(record.get("attributes") or {})
    if record.get("Id"):
        attributes["url"] = (
            f"/services/data/v{version}/sobjects/{attributes.get('type')}/{record['Id']}"
        )
    return {"attributes": attributes, **{k: v for k, v in record.items() if k != "attributes"}}


def _xml_value(name: str, value: Any) -> str:
    if value is None:
        return f'<{name} xsi:nil="true"/>'
    if isinstance(value, dict):
        inner = "".join(_xml_value(k, v) for k, v in value.items() if k != "attributes")
        kind = escape(str((value.get("attributes") or {}).get("type", "")))
        return f'<{name} xsi:type="sObject"><type>{kind}</type>{inner}</{name}>'
    if isinstance(value, bool):
        value = "true" if value else "false"
    return f"<{name}>{escape(str(value))}</{name}>"


@router.get("/job/{job_id}/batch/{batch_id}/result/{result_id}")
async def query_result(
    request: Request, version: str, job_id: str, batch_id: str, result_id: str
) -> Response:
    caller = await _enter(request, version)
    answer = await dialect(request).runtime.call(
        caller, "bulk/v1/batches/result", {**_ids(job_id, batch_id), "result": result_id[:18]}
    )
    records: list[dict[str, Any]] = answer["records"]
    content_type = answer["content_type"] or "CSV"
    if content_type == "JSON":
        shaped = [_json_record(r, version) for r in records]
        return _reply(request, orjson.dumps(shaped), "application/json")
    if content_type == "CSV":
        if not records:
            return _reply(request, b"Records not found for this query", "text/csv")
        columns: list[str] = answer["columns"]
        paths = [c.split(".") for c in columns]
        rows: list[list[Any]] = [columns]
        for record in records:
            row = []
            for path in paths:
                value = _value_at(record, path)
                if isinstance(value, bool):
                    value = "true" if value else "false"
                row.append("" if value is None or isinstance(value, dict) else value)
            rows.append(row)
        return _reply(request, _csv_text(rows), "text/csv")
    parts = []
    for record in records:
        kind = escape(str((record.get("attributes") or {}).get("type", answer["object"])))
        inner = "".join(_xml_value(k, v) for k, v in record.items() if k != "attributes")
        parts.append(f'<records xsi:type="sObject"><type>{kind}</type>{inner}</records>')
    body = (
        f'<?xml version="1.0" encoding="UTF-8"?><queryResult xmlns="{NS}" '
        f'xmlns:xsi="{XSI}">{"".join(parts)}</queryResult>'
    )
    return _reply(request, body, "application/xml")


@router.get("/job/{job_id}/batch/{batch_id}/request")
async def batch_request(request: Request, version: str, job_id: str, batch_id: str) -> Response:
    caller = await _enter(request, version)
    answer = await dialect(request).runtime.call(
        caller, "bulk/v1/batches/request", _ids(job_id, batch_id)
    )
    content_type = answer["content_type"] or "CSV"
    if answer["soql"] is not None:
        return _reply(request, answer["soql"], "text/plain")
    columns: list[str] = answer["columns"]
    rows: list[list[str]] = answer["rows"]
    if content_type == "CSV":
        return _reply(request, _csv_text([columns, *rows]), "text/csv")
    records = [
        {c: (None if v == NULL else v) for c, v in zip(columns, row, strict=True) if v != ""}
        for row in rows
    ]
    if content_type == "JSON":
        return _reply(request, orjson.dumps(records), "application/json")
    body = "".join(
        "<sObject>" + "".join(_xml_value(k, v) for k, v in r.items()) + "</sObject>"
        for r in records
    )
    text = (
        f'<?xml version="1.0" encoding="UTF-8"?><sObjects xmlns="{NS}" '
        f'xmlns:xsi="{XSI}">{body}</sObjects>'
    )
    return _reply(request, text, "application/xml")


@router.api_route(
    "/{rest:path}",
    methods=["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"],
    include_in_schema=False,
)
async def unknown(request: Request, version: str, rest: str) -> Response:
    del version, rest
    raise BulkError("InvalidUrl", f"unknown url: {request.url.path}", 404)
