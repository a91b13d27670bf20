"""Composite resources: sObject Collections (one Runtime call for up to 200 records; the
retrieve by ids as GET or POST) and `/composite` with `compositeRequest` (up to 25
subrequests, `@{ref.field}` references). `send_subrequest` is the one way a subrequest runs
through this AppService (`/composite` here, `composite/batch` in batch.py)."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
from fastapi import APIRouter, Request
from fastapi.responses import Response

from nexus.apps.sfcrm import composite_runtime, wire
from nexus.apps.sfcrm.context import SUBREQUEST_HEADER, dialect, json_object
from nexus.apps.sfcrm.errors import SfError, bad_request
from nexus.apps.sfcrm.runtime_client import Caller
from nexus.apps.sfcrm.sobjects import record_fields
from nexus.contracts.composite import CompositeResponse, UnresolvedReference, resolve_references
from nexus.contracts.records import MutateResponse

router = APIRouter(prefix="/services/data/{version}/composite")

MAX_RECORDS = 200
MAX_SUBREQUESTS = 25
ID = re.compile(r"^[A-Za-z0-9]{15}(?:[A-Za-z0-9]{3})?$")
FIELD = re.compile(r"^[A-Za-z][A-Za-z0-9_]*(?:\.[A-Za-z][A-Za-z0-9_]*)*$")
Headers = dict[str, str]


def _records(body: dict[str, Any]) -> list[dict[str, Any]]:
    records = body.get("records")
    if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
        raise bad_request("JSON_PARSER_ERROR", "records must be a list of objects")
    if not records or len(records) > MAX_RECORDS:
        raise bad_request("EXCEEDED_ID_LIMIT", f"between 1 and {MAX_RECORDS} records per request")
    return records


def truthy(raw: Any) -> bool:
    if isinstance(raw, str):
        return raw.lower() == "true"
    return bool(raw)


async def _mutate(
    request: Request, items: list[dict[str, Any]], all_or_none: bool
) -> MutateResponse:
    d = dialect(request)
    answer = await d.runtime.call(
        request.state.caller, "records/mutate", {"items": items, "all_or_none": all_or_none}
    )
    return MutateResponse.model_validate(answer)


def _type_of(record: dict[str, Any]) -> str | None:
    attributes = record.get("attributes")
    kind = attributes.get("type") if isinstance(attributes, dict) else None
    return kind if isinstance(kind, str) and kind else None


@router.post("/sobjects")
async def create_many(request: Request, version: str) -> Response:
    d = dialect(request)
    request.state.caller = await d.enter(request, version)
    body = await json_object(request)
    records = _records(body)
    items = []
    for record in records:
        kind = _type_of(record)
        if kind is None:
            raise bad_request("INVALID_TYPE", "each record needs attributes.type")
        fields = {k: v for k, v in record_fields(record).items() if k.lower() != "id"}
        items.append({"op": "create", "object": kind, "fields": fields})
    result = await _mutate(request, items, truthy(body.get("allOrNone")))
    return d.reply(request, [wire.save_result(r) for r in result.results])


@router.patch("/sobjects")
async def update_many(request: Request, version: str) -> Response:
    d = dialect(request)
    request.state.caller = await d.enter(request, version)
    body = await json_object(request)
    items = []
    for record in _records(body):
        fields = record_fields(record)
        record_id = fields.pop("id", None) or fields.pop("Id", None)
        if not isinstance(record_id, str):
            raise bad_request("MISSING_ARGUMENT", "each record needs an id", ["id"])
        items.append(
            {"op": "update", "object": _type_of(record), "id": record_id, "fields": fields}
        )
    result = await _mutate(request, items, truthy(body.get("allOrNone")))
    return d.reply(request, [wire.save_result(r) for r in result.results])


@router.delete("/sobjects")
async def delete_many(request: Request, version: str) -> Response:
    d = dialect(request)
    request.state.caller = await d.enter(request, version)
    ids = [i.strip() for i in request.query_params.get("ids", "").split(",") if i.strip()]
    if not ids or len(ids) > MAX_RECORDS:
        raise bad_request("EXCEEDED_ID_LIMIT", f"between 1 and {MAX_RECORDS} ids per request")
    items = [{"op": "delete", "id": i} for i in ids]
    result = await _mutate(request, items, truthy(request.query_params.get("allOrNone")))
    return d.reply(request, [wire.save_result(r) for r in result.results])


@router.get("/sobjects/{name}")
async def retrieve_many_by_query(request: Request, version: str, name: str) -> Response:
    """`?ids=a,b&fields=F1,F2`: as the POST form below."""
    d = dialect(request)
    caller = await d.enter(request, version)
    params = request.query_params
    ids = [i.strip() for i in params.get("ids", "").split(",") if i.strip()]
    fields = [f.strip() for f in params.get("fields", "").split(",") if f.strip()]
    return await _retrieve(request, version, caller, name, ids=ids, fields=fields)


@router.post("/sobjects/{name}")
async def retrieve_many(request: Request, version: str, name: str) -> Response:
    """Records by id with the named fields, in the order asked (null where none is visible):
    one Runtime query."""
    d = dialect(request)
    caller = await d.enter(request, version)
    body = await json_object(request)
    return await _retrieve(
        request, version, caller, name, ids=body.get("ids"), fields=body.get("fields")
    )


async def _retrieve(
    request: Request, version: str, caller: Caller, name: str, *, ids: Any, fields: Any
) -> Response:
    d = dialect(request)
    if not isinstance(ids, list) or not ids or len(ids) > MAX_RECORDS:
        raise bad_request("EXCEEDED_ID_LIMIT", f"between 1 and {MAX_RECORDS} ids per request")
    if not isinstance(fields, list) or not fields:
        raise bad_request("MISSING_ARGUMENT", "fields must be a non-empty list", ["fields"])
    if not all(isinstance(i, str) and ID.match(i) for i in ids):
        raise bad_request("MALFORMED_ID", "ids must be record ids")
    if not all(isinstance(f, str) and FIELD.match(f) for f in fields) or not FIELD.match(name):
        raise bad_request("INVALID_FIELD", "fields must be field names")
    selected = list(dict.fromkeys(["Id", *fields]))
    quoted = ", ".join(f"'{i}'" for i in dict.fromkeys(ids))
    # SOQL for Runtime's parser (never SQL); ids, fields and name matched the patterns above
    soql = f"SELECT {', '.join(selected)} FROM {name} WHERE Id IN ({quoted})"  # noqa: S608
    answer = await d.runtime.call(caller, "query", {"soql": soql, "page_size": 2000})
    found = {r["Id"][:15]: r for r in answer["records"]}
    wanted = {f.split(".")[0].lower() for f in fields}
    out: list[dict[str, Any] | None] = []
    for i in ids:
        row = found.get(i[:15])
        if row is None:
            out.append(None)
            continue
        values = {"Id": row["Id"]} | {k: v for k, v in row.items() if k.lower() in wanted}
        shaped = wire.record(version, name, values)
        if "id" not in wanted:
            shaped.pop("Id", None)
        out.append(shaped)
    return d.reply(request, out)


@router.patch("/sobjects/{name}/{field}")
async def upsert_many(request: Request, version: str, name: str, field: str) -> Response:
    d = dialect(request)
    request.state.caller = await d.enter(request, version)
    body = await json_object(request)
    items = []
    for record in _records(body):
        fields = record_fields(record)
        value = next((v for k, v in fields.items() if k.lower() == field.lower()), None)
        if value is None:
            raise bad_request("MISSING_ARGUMENT", f"each record needs {field}", [field])
        rest = {k: v for k, v in fields.items() if k.lower() != field.lower()}
        items.append(
            {
                "op": "upsert",
                "object": _type_of(record) or name,
                "external_id_field": field,
                "external_id": value,
                "fields": rest,
            }
        )
    result = await _mutate(request, items, truthy(body.get("allOrNone")))
    return d.reply(request, [wire.save_result(r, upsert=True) for r in result.results])


# ------------------------------------------------------------------ compositeRequest


@router.post("")
async def composite(request: Request, version: str) -> Response:
    """Record subrequests run as ONE Runtime `records/composite` call in one transaction: with
    `allOrNone` the first failure halts the rest and undoes what earlier ones did (ADR 0036).
    A request with any other kind of subrequest (a query, a describe, ...) runs subrequest by
    subrequest through this AppService (each one Runtime call); there, with `allOrNone`,
    records created by earlier subrequests are deleted again, but updates and deletes stay.
    The whole request counts as one API request."""
    d = dialect(request)
    caller = request.state.caller = await d.enter(request, version)
    body = await json_object(request)
    subrequests = body.get("compositeRequest")
    if not isinstance(subrequests, list) or not subrequests:
        raise bad_request("JSON_PARSER_ERROR", "compositeRequest must be a non-empty list")
    if len(subrequests) > MAX_SUBREQUESTS:
        raise bad_request("LIMIT_EXCEEDED", f"at most {MAX_SUBREQUESTS} subrequests")
    for sub in subrequests:
        if not isinstance(sub, dict) or not isinstance(sub.get("url"), str):
            raise bad_request("JSON_PARSER_ERROR", "each subrequest needs method and url")
    all_or_none = truthy(body.get("allOrNone"))
    translated = composite_runtime.translate(subrequests)
    if translated is not None:
        call = {"items": [t.item for t in translated], "all_or_none": all_or_none}
        answer = CompositeResponse.model_validate(
            await d.runtime.call(caller, "records/composite", call)
        )
        replies = composite_runtime.responses(translated, subrequests, answer)
        return d.reply(request, {"compositeResponse": replies})
    responses = await _one_by_one(request, subrequests, all_or_none)
    return d.reply(request, {"compositeResponse": responses})


@asynccontextmanager
async def subrequests_client(request: Request) -> AsyncIterator[tuple[httpx.AsyncClient, Headers]]:
    """A client for subrequests to this AppService (in process, no socket), and the headers
    they carry: the caller's authorization and the secret that says "already counted"."""
    d = dialect(request)
    headers = {
        "authorization": request.headers.get("authorization", ""),
        SUBREQUEST_HEADER: d.subrequest_secret,
        "content-type": "application/json",
    }
    transport = httpx.ASGITransport(app=request.app)
    async with httpx.AsyncClient(transport=transport, base_url="http://sfcrm") as client:
        yield client, headers


async def _one_by_one(
    request: Request, subrequests: list[dict[str, Any]], all_or_none: bool
) -> list[dict[str, Any]]:
    d = dialect(request)
    results: dict[str, Any] = {}
    responses: list[dict[str, Any]] = []
    created: list[str] = []
    halted = False
    async with subrequests_client(request) as (client, headers):
        for sub in subrequests:
            ref = str(sub.get("referenceId") or "")
            if halted:
                responses.append(composite_runtime.halted(ref))
                continue
            response = await _subrequest(client, headers, sub, ref, results)
            responses.append(response)
            status = response["httpStatusCode"]
            if status < 300:
                if ref:
                    results[ref] = response["body"]
                if status == 201 and str(sub.get("method", "")).upper() == "POST":
                    created.append(str(response["body"].get("id")))
            elif all_or_none:
                halted = True
    if halted and all_or_none:
        responses = [
            composite_runtime.halted(r["referenceId"]) if r["httpStatusCode"] < 300 else r
            for r in responses
        ]
        if created:
            items = [{"op": "delete", "id": i} for i in created]
            call = {"items": items, "all_or_none": False}
            await d.runtime.call(request.state.caller, "records/mutate", call)
    return responses


async def _subrequest(
    client: httpx.AsyncClient,
    headers: Headers,
    sub: dict[str, Any],
    ref: str,
    results: dict[str, Any],
) -> dict[str, Any]:
    """One subrequest through this AppService, its references resolved first."""
    method = str(sub.get("method", "GET")).upper()
    try:
        url = resolve_references(sub["url"], results)
        body = resolve_references(sub.get("body"), results)
    except UnresolvedReference as missing:
        return composite_runtime.invalid_reference(ref, str(missing))
    if not isinstance(url, str):
        return composite_runtime.invalid_reference(ref, "url")
    try:
        status, answer = await send_subrequest(client, headers, method, url, body)
    except SfError as refused:
        return composite_runtime.error_entry(ref, refused)
    location = {}
    if status == 201 and isinstance(answer, dict) and "id" in answer:
        location = {"Location": f"{url}/{answer['id']}"}
    return composite_runtime.entry(ref, status, answer, location)


async def send_subrequest(
    client: httpx.AsyncClient, headers: Headers, method: str, url: str, body: Any
) -> tuple[int, Any]:
    """One subrequest through this AppService: its status and JSON answer. A url that cannot
    be run (see `composite_runtime.url_error`) raises its SfError."""
    refused = composite_runtime.url_error(url)  # checked once resolved: a value may hold `../`
    if refused is not None:
        raise refused
    content = None if body is None else json.dumps(body)
    try:
        outgoing = client.build_request(method, url, headers=headers, content=content)
    except httpx.InvalidURL as invalid:  # percent-encoding took it past httpx's 64 KB
        raise bad_request("INVALID_INPUT", f"a subrequest url is invalid: {invalid}") from None
    reply = await client.send(outgoing)
    if not reply.content:
        return reply.status_code, None
    try:
        return reply.status_code, reply.json()
    except ValueError:  # a resource that answers text (a CSV export): as it is
        return reply.status_code, reply.text
