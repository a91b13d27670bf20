"""`/query`, `/queryAll` (with locators and batchSize), `/search`, `/parameterizedSearch`."""

from __future__ import annotations

import re
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from nexus.apps.sfcrm import wire
from nexus.apps.sfcrm.context import dialect
from nexus.apps.sfcrm.errors import bad_request

router = APIRouter(prefix="/services/data/{version}")

MIN_BATCH = 200
MAX_BATCH = 2000
BATCH_SIZE = re.compile(r"(?:^|[;,\s])batchSize\s*=\s*(\d+)", re.IGNORECASE)
QUERY_OPTIONS_HEADER = "sforce-query-options"


def batch_size(request: Request) -> int | None:
    """`Sforce-Query-Options: batchSize=N`, bounded to 200..2000 as Salesforce does."""
    match = BATCH_SIZE.search(request.headers.get(QUERY_OPTIONS_HEADER, ""))
    if match is None:
        return None
    return max(MIN_BATCH, min(MAX_BATCH, int(match.group(1))))


def page(version: str, endpoint: str, answer: dict[str, Any]) -> dict[str, Any]:
    body: dict[str, Any] = {
        "totalSize": answer["total_size"],
        "done": answer["done"],
        "records": [wire.nested(version, r) for r in answer["records"]],
    }
    if answer.get("next_locator"):
        body["nextRecordsUrl"] = f"{wire.base(version)}/{endpoint}/{answer['next_locator']}"
    return body


async def _query(request: Request, version: str, endpoint: str, locator: str | None) -> Response:
    d = dialect(request)
    caller = await d.enter(request, version)
    body: dict[str, Any]
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
    limit = params.get("overallLimit", "")
    if limit.isdigit():
        body["limit"] = max(1, min(200, int(limit)))
    answer = await d.runtime.call(caller, "search", body)
    records = [wire.nested(version, r) for r in answer["searchRecords"]]
    return d.reply(request, {"searchRecords": records})
