"""`/search/suggestions` (typeahead on record names) and `/search/scopeOrder` (the objects
global search covers, in order).

Suggestions are one Runtime `search` call with the plain term (Runtime matches names on the
objects asked, with object, field and row access); the scope order is `ui/nav`, the objects
the caller may read in the order the org defined them, as the browser's navigation has them.
"""

from __future__ import annotations

import re
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from nexus.apps.sfcrm import wire
from nexus.apps.sfcrm.context import dialect
from nexus.apps.sfcrm.errors import bad_request
from nexus.apps.sfcrm.params import count_param
from nexus.contracts.ui import NavItem

router = APIRouter(prefix="/services/data/{version}/search")

MIN_TERM = 3  # Salesforce suggests nothing for a shorter string (outside CJK)
MAX_TERM = 255
DEFAULT_LIMIT, MAX_LIMIT = 5, 50
MAX_OBJECTS = 10
WILDCARDS = re.compile(r"[*?\"]")
OBJECT_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,79}$")


def _limit(request: Request) -> int:
    raw = request.query_params.get("limit")
    return count_param(raw, "limit", default=DEFAULT_LIMIT, low=1, high=MAX_LIMIT)


def _objects(request: Request) -> list[str]:
    raw = request.query_params.get("sobject") or ""
    names = list(dict.fromkeys(n.strip() for n in raw.split(",") if n.strip()))
    if not names:
        raise bad_request("MISSING_ARGUMENT", "sobject is required", ["sobject"])
    if len(names) > MAX_OBJECTS or not all(OBJECT_NAME.fullmatch(n) for n in names):
        raise bad_request("INVALID_TYPE", f"sobject names at most {MAX_OBJECTS} object types")
    return names


def suggestion(version: str, hit: dict[str, Any]) -> dict[str, Any]:
    kind = str(hit.get("attributes", {}).get("type", ""))
    record_id = hit.get("Id")
    return {
        "attributes": {"type": kind, "url": f"{wire.base(version)}/sobjects/{kind}/{record_id}"},
        "Id": record_id,
        "Name": hit.get("Name"),
    }


@router.get("/suggestions")
async def suggestions(request: Request, version: str) -> Response:
    d = dialect(request)
    caller = await d.enter(request, version)
    term = WILDCARDS.sub("", request.query_params.get("q") or "").strip()
    if len(term) > MAX_TERM:
        raise bad_request("INVALID_SEARCH", f"q is at most {MAX_TERM} characters", ["q"])
    objects = _objects(request)
    limit = _limit(request)
    if len(term) < MIN_TERM:
        return d.reply(request, {"autoSuggestResults": [], "hasMoreResults": False})
    asked = {"term": term, "objects": objects, "limit": limit + 1}
    hits = (await d.runtime.call(caller, "search", asked))["searchRecords"]
    body = {
        "autoSuggestResults": [suggestion(version, h) for h in hits[:limit]],
        "hasMoreResults": len(hits) > limit,
    }
    return d.reply(request, body)


@router.get("/scopeOrder")
async def scope_order(request: Request, version: str) -> Response:
    d = dialect(request)
    caller = await d.enter(request, version)
    items = [NavItem.model_validate(i) for i in await d.runtime.call(caller, "ui/nav", {})]
    body = [
        {
            "type": i.summary.name,
            "url": f"{wire.object_urls(version, i.summary.name)['describe']}",
        }
        for i in items
        if i.summary.queryable
    ]
    return d.reply(request, body)
