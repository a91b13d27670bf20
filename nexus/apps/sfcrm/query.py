"""`/query`, `/queryAll` (with locators and batchSize, and `columns=true` for the columns'
metadata), `/search`, `/parameterizedSearch`."""

from __future__ import annotations

import re
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from nexus.apps.sfcrm import wire
from nexus.apps.sfcrm.context import dialect
from nexus.apps.sfcrm.errors import bad_request
from nexus.apps.sfcrm.params import whole_number

router = APIRouter(prefix="/services/data/{version}")

MIN_BATCH = 200
MAX_BATCH = 2000
BATCH_SIZE = re.compile(r"(?:^|[;,\s])batchSize\s*=\s*([0-9]+)", re.IGNORECASE)
QUERY_OPTIONS_HEADER = "sforce-query-options"
MAX_SEARCH_LIMIT = 200
AGGREGATE_RESULT = "AggregateResult"
#: Nexus field type (or a system kind) -> Salesforce's apexType in column metadata
APEX_TYPES = {
    "number": "Double",
    "percent": "Double",
    "currency": "Decimal",
    "int": "Integer",
    "checkbox": "Boolean",
    "boolean": "Boolean",
    "date": "Date",
    "datetime": "Datetime",
    "id": "Id",
    "reference": "Id",
    "lookup": "Id",
    "master_detail": "Id",
}


def batch_size(request: Request) -> int | None:
    """`Sforce-Query-Options: batchSize=N`, bounded to 200..2000 as Salesforce does."""
    match = BATCH_SIZE.search(request.headers.get(QUERY_OPTIONS_HEADER, ""))
    if match is None:
        return None
    asked = whole_number(match.group(1))  # None: more digits than any size
    return max(MIN_BATCH, min(MAX_BATCH, MAX_BATCH if asked is None else asked))


def page(version: str, endpoint: str, answer: dict[str, Any]) -> dict[str, Any]:
    body: dict[str, Any] = {
        "totalSize": answer["total_size"],
        "done": answer["done"],
        "records": [_record(version, r) for r in answer["records"]],
    }
    if answer.get("next_locator"):
        body["nextRecordsUrl"] = f"{wire.base(version)}/{endpoint}/{answer['next_locator']}"
    return body


def _record(version: str, record: dict[str, Any]) -> dict[str, Any]:
    """A result record with its urls; an `AggregateResult` (a group) has none, as in
    Salesforce, and only flat values."""
    if record.get("attributes", {}).get("type") == AGGREGATE_RESULT:
        return record
    return wire.nested(version, record)  # type: ignore[no-any-return]


def column_metadata(answer: dict[str, Any]) -> dict[str, Any]:
    """Runtime's description of a query's columns as `/query?columns=true` answers it."""
    return {
        "columnMetadata": [_column(c) for c in answer["columns"]],
        "entityName": answer["entity_name"],
        "groupBy": answer["group_by"],
        "idSelected": answer["id_selected"],
        "keyPrefix": answer["key_prefix"],
    }


def _column(column: dict[str, Any]) -> dict[str, Any]:
    kind = column["type"]
    joined = column["join"] is not None
    # relationships, subqueries and aggregates have no apexType in Salesforce's answers
    plain = kind is not None and not joined and not column["aggregate"]
    apex = APEX_TYPES.get(kind, "String") if plain else None
    return {
        "aggregate": column["aggregate"],
        "apexType": apex,
        "booleanType": kind in ("checkbox", "boolean"),
        "columnName": column["name"],
        "custom": column["custom"],
        "displayName": column["display"],
        "foreignKeyName": column["foreign_key"],
        "insertable": column["insertable"],
        "joinColumns": [_column(c) for c in column["join"] or ()],
        "numberType": bool(column["number"]),
        "textType": apex == "String",
        "updatable": column["updatable"],
    }


async def _query(request: Request, version: str, endpoint: str, locator: str | None) -> Response:
    d = dialect(request)
    caller = await d.enter(request, version)
    body: dict[str, Any]
    if locator is None and request.query_params.get("columns", "").lower() == "true":
        soql = request.query_params.get("q")
        if not soql or not soql.strip():
            raise bad_request("MALFORMED_QUERY", "A query string (q) is required")
        answer = await d.runtime.call(caller, "query/columns", {"soql": soql})
        return d.reply(request, column_metadata(answer))
    if locator is not None:
        body = {"locator": locator}
    else:
        soql = request.query_params.get("q")
        if not soql or not soql.strip():
            raise bad_request("MALFORMED_QUERY", "A query string (q) is required")
        body = {"soql": soql, "include_deleted": endpoint == "queryAll"}
        size = batch_size(request)
        if size is not None:
            body["page_size"] = size
    answer = await d.runtime.call(caller, "query", body)
    return d.reply(request, page(version, endpoint, answer))


@router.get("/query")
async def query(request: Request, version: str) -> Response:
    return await _query(request, version, "query", None)


@router.get("/queryAll")
async def query_all(request: Request, version: str) -> Response:
    return await _query(request, version, "queryAll", None)


@router.get("/query/{locator}")
async def query_more(request: Request, version: str, locator: str) -> Response:
    return await _query(request, version, "query", locator)


@router.get("/queryAll/{locator}")
async def query_all_more(request: Request, version: str, locator: str) -> Response:
    return await _query(request, version, "queryAll", locator)


@router.get("/search")
async def search(request: Request, version: str) -> Response:
    d = dialect(request)
    caller = await d.enter(request, version)
    sosl = request.query_params.get("q")
    if not sosl or not sosl.strip():
        raise bad_request("MALFORMED_SEARCH", "A search string (q) is required")
    answer = await d.runtime.call(caller, "search", {"search": sosl})
    records = [wire.nested(version, r) for r in answer["searchRecords"]]
    return d.reply(request, {"searchRecords": records})


@router.get("/parameterizedSearch")
async def parameterized_search(request: Request, version: str) -> Response:
    d = dialect(request)
    caller = await d.enter(request, version)
    params = request.query_params
    term = params.get("q")
    if not term or not term.strip():
        raise bad_request("MALFORMED_SEARCH", "A search term (q) is required")
    body: dict[str, Any] = {"term": term[:1000]}
    objects = [o.strip() for o in params.get("sobject", "").split(",") if o.strip()]
    if objects:
        body["objects"] = objects[:100]
    limit = params.get("overallLimit", "").strip()
    if limit.isascii() and limit.isdigit():  # `²` is a digit to isdigit(), not to int()
        body["limit"] = (
            MAX_SEARCH_LIMIT if len(limit) > 3 else max(1, min(MAX_SEARCH_LIMIT, int(limit)))
        )
    answer = await d.runtime.call(caller, "search", body)
    records = [wire.nested(version, r) for r in answer["searchRecords"]]
    return d.reply(request, {"searchRecords": records})
