"""`/sobjects`: describeGlobal, describe, record CRUD and external id get/upsert."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from nexus.apps.sfcrm import wire
from nexus.apps.sfcrm.changes import recent_item, recent_records
from nexus.apps.sfcrm.context import dialect, json_object, version_number
from nexus.apps.sfcrm.errors import (
    SfError,
    bad_request,
    from_record_errors,
    from_runtime,
    not_found,
)
from nexus.apps.sfcrm.runtime_client import Caller
from nexus.contracts.composite import CompositeResponse
from nexus.contracts.describe import ObjectDescribe, ObjectSummary
from nexus.contracts.records import ItemResult, MutateResponse, RecordData

router = APIRouter(prefix="/services/data/{version}/sobjects")
MAX_BATCH_SIZE = 200
#: How many recent items `sobjects/{T}` lists.
RECENT_ITEMS = 25


def record_fields(body: dict[str, Any]) -> dict[str, Any]:
    """A request record's field values (`attributes` is the envelope, not a field)."""
    return {k: v for k, v in body.items() if k != "attributes"}


def split_fields(raw: str | None) -> list[str] | None:
    if raw is None:
        return None
    names = [n.strip() for n in raw.split(",") if n.strip()]
    return names or None


async def saved(request: Request, item: dict[str, Any]) -> ItemResult:
    """One record mutation for the request's caller; its errors as the error response."""
    d = dialect(request)
    answer = await d.runtime.call(request.state.caller, "records/mutate", {"items": [item]})
    result = MutateResponse.model_validate(answer).results[0]
    if not result.success:
        raise from_record_errors(result.errors)
    return result


@router.get("")
async def describe_global(request: Request, version: str) -> Response:
    d = dialect(request)
    caller = await d.enter(request, version)
    answer = await d.runtime.call(caller, "describe/global", {})
    summaries = [ObjectSummary.model_validate(s) for s in answer]
    body = {
        "encoding": "UTF-8",
        "maxBatchSize": MAX_BATCH_SIZE,
        "sobjects": [wire.object_summary(version, s) for s in summaries],
    }
    return d.reply(request, body)


async def _describe(request: Request, version: str, name: str) -> ObjectDescribe:
    d = dialect(request)
    caller = await d.enter(request, version)
    answer = await d.runtime.call(caller, "describe/object", {"object": name})
    return ObjectDescribe.model_validate(answer)


@router.get("/{name}")
async def object_info(request: Request, version: str, name: str) -> Response:
    """The object's summary and the caller's recent items of it (its most recently modified
    records: Nexus records no "last viewed"), in one Runtime call."""
    d = dialect(request)
    caller = await d.enter(request, version)
    answer = await recent_records(request, caller, object_name=name, limit=RECENT_ITEMS)
    if answer.summary is None:  # pragma: no cover - Runtime answers it for a named object
        raise not_found()
    body = {
        "objectDescribe": wire.object_summary(version, answer.summary),
        "recentItems": [recent_item(version, r) for r in answer.records],
    }
    return d.reply(request, body)


@router.get("/{name}/describe")
async def describe(request: Request, version: str, name: str) -> Response:
    described = await _describe(request, version, name)
    return dialect(request).reply(request, wire.describe(version, described))


@router.post("/{name}")
async def create(request: Request, version: str, name: str) -> Response:
    d = dialect(request)
    request.state.caller = await d.enter(request, version)
    body = await json_object(request)
    result = await saved(request, {"op": "create", "object": name, "fields": record_fields(body)})
    return d.reply(request, wire.save_result(result), 201)


@router.get("/{name}/{record_id}")
async def read(request: Request, version: str, name: str, record_id: str) -> Response:
    caller = await dialect(request).enter(request, version)
    return await _read(request, version, caller, name, record_id)


async def _read(
    request: Request, version: str, caller: Caller, name: str, record_id: str
) -> Response:
    d = dialect(request)
    if not looks_like_id(record_id):
        raise not_found(
            f"Provided external ID field does not exist or is not accessible: {record_id}"
        )
    body: dict[str, Any] = {"id": record_id, "object": name}
    fields = split_fields(request.query_params.get("fields"))
    if fields is not None:
        body["fields"] = fields
    data = RecordData.model_validate(await d.runtime.call(caller, "records/read", body))
    return d.reply(request, wire.record(version, data.object, data.fields))


@router.patch("/{name}/{record_id}")
async def update(request: Request, version: str, name: str, record_id: str) -> Response:
    d = dialect(request)
    request.state.caller = await d.enter(request, version)
    if not looks_like_id(record_id):
        raise not_found()
    body = await json_object(request)
    await saved(
        request, {"op": "update", "object": name, "id": record_id, "fields": record_fields(body)}
    )
    return d.reply(request, None, 204)


@router.delete("/{name}/{record_id}")
async def delete(request: Request, version: str, name: str, record_id: str) -> Response:
    d = dialect(request)
    request.state.caller = await d.enter(request, version)
    if not looks_like_id(record_id):
        raise not_found()
    await saved(request, {"op": "delete", "object": name, "id": record_id})
    return d.reply(request, None, 204)


@router.get("/{name}/{field}/{value:path}")
async def read_by_external_id(
    request: Request, version: str, name: str, field: str, value: str
) -> Response:
    d = dialect(request)
    caller = await d.enter(request, version)
    if field.lower() == "id":
        return await _read(request, version, caller, name, value)
    body: dict[str, Any] = {"object": name, "external_id_field": field, "external_id": value}
    fields = split_fields(request.query_params.get("fields"))
    if fields is not None:
        body["fields"] = fields
    try:
        answer = await d.runtime.call(caller, "records/read", body)
    except SfError as exc:
        if exc.status == 409 and exc.code == "MULTIPLE_RECORDS":
            urls = [f"{wire.base(version)}/sobjects/{name}/{i}" for i in exc.fields]
            return d.reply(request, urls, 300)
        raise
    data = RecordData.model_validate(answer)
    return d.reply(request, wire.record(version, data.object, data.fields))


@router.delete("/{name}/{field}/{value:path}")
async def delete_by_external_id(
    request: Request, version: str, name: str, field: str, value: str
) -> Response:
    """Find the one visible record with the value and delete it: one Runtime call (a read and
    a delete in one `records/composite` transaction); several matches are 300."""
    d = dialect(request)
    caller = request.state.caller = await d.enter(request, version)
    if field.lower() == "id":
        if not looks_like_id(value):
            raise not_found()
        await saved(request, {"op": "delete", "object": name, "id": value})
        return d.reply(request, None, 204)
    find = {"ref": "found", "op": "read", "object": name}
    find |= {"external_id_field": field, "external_id": value}
    items = [find, {"op": "delete", "object": name, "id": "@{found.id}"}]
    answer = CompositeResponse.model_validate(
        await d.runtime.call(caller, "records/composite", {"items": items, "all_or_none": True})
    )
    found, deleted = answer.outcomes
    if found.error is not None:
        error = found.error
        if error.status == 409 and error.code == "MULTIPLE_RECORDS":
            urls = [f"{wire.base(version)}/sobjects/{name}/{i}" for i in error.fields or {}]
            return d.reply(request, urls, 300)
        raise from_runtime(error.status, error.model_dump(exclude={"status"}))
    if deleted.error is not None:
        raise from_runtime(deleted.error.status, deleted.error.model_dump(exclude={"status"}))
    if deleted.result is not None and not deleted.result.success:
        raise from_record_errors(deleted.result.errors)
    return d.reply(request, None, 204)


@router.patch("/{name}/{field}/{value:path}")
async def upsert(request: Request, version: str, name: str, field: str, value: str) -> Response:
    d = dialect(request)
    request.state.caller = await d.enter(request, version)
    body = record_fields(await json_object(request))
    if field.lower() == "id":
        raise bad_request("INVALID_FIELD", "upsert by Id is not supported; use PATCH on the record")
    item = {
        "op": "upsert",
        "object": name,
        "external_id_field": field,
        "external_id": value,
        "fields": {k: v for k, v in body.items() if k.lower() != field.lower()},
    }
    result = await saved(request, item)
    if result.created:
        return d.reply(request, wire.save_result(result, upsert=True), 201)
    if version_number(version) < 46.0:
        return d.reply(request, None, 204)
    return d.reply(request, wire.save_result(result, upsert=True), 200)


def looks_like_id(value: str) -> bool:
    return len(value) in (15, 18) and value.isalnum() and value.isascii()
