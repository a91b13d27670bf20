"""`/sobjects/{T}/listviews`: an object's list views, one's basic info, describe and results.

Nexus list views are metadata definitions named by api name; the dialect gives each a stable
`00B` id (a digest of object and name, see `layouts.synthetic_id`). Listing is one Runtime
call (`ui/object`: the list views of an object the caller may read); a view addressed by its
id needs that call to find its name, then `ui/list` (the browser's list-view page: Runtime
runs it with the caller's object, field and row access). A view may also be addressed by its
developer name, which is one call.
"""

from __future__ import annotations

import re
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from nexus.apps.sfcrm.context import dialect
from nexus.apps.sfcrm.errors import not_found
from nexus.apps.sfcrm.layouts import synthetic_id
from nexus.apps.sfcrm.params import count_param, object_in_path
from nexus.apps.sfcrm.runtime_client import Caller
from nexus.apps.sfcrm.ui_api import DATA_TYPES
from nexus.contracts.ui import ListColumn, ListResult, ObjectInfo

router = APIRouter(prefix="/services/data/{version}/sobjects/{name}/listviews")

PREFIX = "00B"
DEFAULT_LIMIT, MAX_LIMIT = 25, 2000  # Salesforce's bounds for `limit`
RUNTIME_PAGE = 200  # the most rows one `ui/list` call answers
MAX_OFFSET = 2000  # Salesforce's bound for `offset` (and SOQL's OFFSET)
DEVELOPER_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,79}$")
#: Nexus list-view filter operators -> SOQL (as Runtime's list views run them).
OPERATORS = {
    "equals": "=",
    "not_equals": "!=",
    "less": "<",
    "less_or_equal": "<=",
    "greater": ">",
    "greater_or_equal": ">=",
}
UNQUOTED_TYPES = frozenset({"number", "currency", "percent", "checkbox", "date", "datetime"})


def view_id(object_name: str, api_name: str) -> str:
    return synthetic_id(PREFIX, object_name, api_name)


def _urls(version: str, object_name: str, identifier: str) -> dict[str, str]:
    root = f"/services/data/{version}/sobjects/{object_name}/listviews/{identifier}"
    return {"url": root, "describeUrl": f"{root}/describe", "resultsUrl": f"{root}/results"}


def basic_info(version: str, object_name: str, api_name: str, label: str) -> dict[str, Any]:
    identifier = view_id(object_name, api_name)
    return {
        **_urls(version, object_name, identifier),
        "developerName": api_name,
        "id": identifier,
        "label": label,
        "soqlCompatible": True,
    }


async def _object_info(request: Request, caller: Caller, name: str) -> ObjectInfo:
    asked = {"object": object_in_path(name)}
    return ObjectInfo.model_validate(
        await dialect(request).runtime.call(caller, "ui/object", asked)
    )


async def _api_name(request: Request, caller: Caller, name: str, identifier: str) -> str:
    """The list view's api name: a developer name as given, an id looked up among the
    object's list views (an id of no view the caller may see is NOT_FOUND)."""
    if len(identifier) in (15, 18) and identifier.startswith(PREFIX) and identifier.isalnum():
        info = await _object_info(request, caller, name)
        obj = info.describe.summary.name
        for ref in info.list_views:
            if view_id(obj, ref.api_name)[:15] == identifier[:15]:
                return ref.api_name
        raise not_found()
    if not DEVELOPER_NAME.fullmatch(identifier):
        raise not_found()
    return identifier


async def _run(
    request: Request, caller: Caller, name: str, api_name: str, *, limit: int, offset: int
) -> ListResult:
    asked = {
        "object": object_in_path(name),
        "list_view": api_name,
        "page_size": limit,
        "start": offset,
    }
    answer = await dialect(request).runtime.call(caller, "ui/list", asked)
    return ListResult.model_validate(answer)


def _int_param(request: Request, name: str, default: int, low: int, high: int) -> int:
    raw = request.query_params.get(name)
    return count_param(raw, name, default=default, low=low, high=high)


def _columns(result: ListResult) -> list[dict[str, Any]]:
    sorted_by = {s.field.lower(): (i, s.descending) for i, s in enumerate(result.sort)}
    out = []
    for c in result.columns:
        order = sorted_by.get(c.path.lower())
        out.append(
            {
                "ascendingLabel": "Z-A" if c.type not in UNQUOTED_TYPES else "High to Low",
                "descendingLabel": "A-Z" if c.type not in UNQUOTED_TYPES else "Low to High",
                "fieldNameOrPath": c.path,
                "hidden": False,
                "label": c.label,
                "searchable": c.type not in UNQUOTED_TYPES,
                "selectListItem": c.path,
                "sortDirection": (
                    None if order is None else ("descending" if order[1] else "ascending")
                ),
                "sortIndex": None if order is None else order[0],
                "sortable": c.sortable,
                "type": DATA_TYPES.get(c.type, "String").lower(),
            }
        )
    return out


def _literal(value: str, kind: str | None) -> str:
    if kind in UNQUOTED_TYPES or value in ("true", "false", "null"):
        return value
    escaped = value.replace("\\", "\\\\").replace("'", "\\'")
    return f"'{escaped}'"


def _like(value: str) -> str:
    text = value.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return text.replace("'", "\\'")


def soql(result: ListResult) -> str:
    """The list view as the SOQL a client may run itself (Runtime runs the same columns,
    filters and order, with the caller's access)."""
    kinds = {c.path.lower(): c.type for c in result.columns}
    conditions = []
    for f in result.filters:
        kind = kinds.get(f.field.lower())
        value = f.values[0] if f.values else ""
        if f.operator in OPERATORS:
            conditions.append(f"{f.field} {OPERATORS[f.operator]} {_literal(value, kind)}")
        elif f.operator == "contains":
            conditions.append(f"{f.field} LIKE '%{_like(value)}%'")
        elif f.operator == "starts_with":
            conditions.append(f"{f.field} LIKE '{_like(value)}%'")
        else:
            values = ", ".join(_literal(v, kind) for v in f.values)
            conditions.append(f"{f.field} IN ({values})")
    # SOQL for the client to read, from Runtime's validated list view (names, escaped values)
    text = f"SELECT {', '.join(c.path for c in result.columns)} FROM {result.object}"  # noqa: S608
    if conditions:
        text += " WHERE " + " AND ".join(conditions)
    order = [f"{s.field} {'DESC' if s.descending else 'ASC'}" for s in result.sort]
    return text + " ORDER BY " + ", ".join([*order, "Id ASC"])


def _cell(column: ListColumn, value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        value = "true" if value else "false"
    elif value is not None and not isinstance(value, str):
        value = str(value)
    return {"fieldNameOrPath": column.path, "value": value}


@router.get("")
async def list_views(request: Request, version: str, name: str) -> Response:
    d = dialect(request)
    caller = await d.enter(request, version)
    info = await _object_info(request, caller, name)
    obj = info.describe.summary.name
    views = [basic_info(version, obj, v.api_name, v.label) for v in info.list_views]
    body = {
        "done": True,
        "listviews": views,
        "nextRecordsUrl": None,
        "size": len(views),
        "sobjectType": obj,
    }
    return d.reply(request, body)


@router.get("/{identifier}")
async def list_view(request: Request, version: str, name: str, identifier: str) -> Response:
    d = dialect(request)
    caller = await d.enter(request, version)
    api_name = await _api_name(request, caller, name, identifier)
    result = await _run(request, caller, name, api_name, limit=1, offset=0)
    return d.reply(request, basic_info(version, result.object, result.list_view, result.label))


@router.get("/{identifier}/describe")
async def describe(request: Request, version: str, name: str, identifier: str) -> Response:
    d = dialect(request)
    caller = await d.enter(request, version)
    api_name = await _api_name(request, caller, name, identifier)
    result = await _run(request, caller, name, api_name, limit=1, offset=0)
    body = {
        "columns": _columns(result),
        "id": view_id(result.object, result.list_view),
        "orderBy": [
            {
                "fieldNameOrPath": s.field,
                "nullsPosition": "last" if s.descending else "first",
                "sortDirection": "descending" if s.descending else "ascending",
            }
            for s in result.sort
        ],
        "query": soql(result),
        "relatedEntityId": None,
        "scope": "everything",
        "scopeEntityId": None,
        "sobjectType": result.object,
        "whereCondition": {
            "conditions": [
                {"field": f.field, "operator": f.operator, "values": f.values}
                for f in result.filters
            ],
            "conjunction": "and",
        },
    }
    return d.reply(request, body)


@router.get("/{identifier}/results")
async def results(request: Request, version: str, name: str, identifier: str) -> Response:
    """The view's rows (`limit` 1-2000, default 25; `offset`), each a list of column values
    as Salesforce gives them (strings, null for none)."""
    d = dialect(request)
    caller = await d.enter(request, version)
    limit = _int_param(request, "limit", DEFAULT_LIMIT, 1, MAX_LIMIT)
    offset = _int_param(request, "offset", 0, 0, MAX_OFFSET)
    api_name = await _api_name(request, caller, name, identifier)
    result = await _run(
        request, caller, name, api_name, limit=min(limit, RUNTIME_PAGE), offset=offset
    )
    shown = {c.path.lower() for c in result.columns}
    columns = [*result.columns]
    if "id" not in shown:  # Salesforce's rows always carry the record id
        columns.append(ListColumn(path="Id", label="Record ID", type="id", sortable=False))
    records = [
        {
            "columns": [
                _cell(c, row.id if c.path == "Id" and "id" not in shown else row.values.get(c.path))
                for c in columns
            ]
        }
        for row in result.rows
    ]
    body = {
        "columns": _columns(result),
        "developerName": result.list_view,
        "done": offset + len(records) >= result.total_size,
        "id": view_id(result.object, result.list_view),
        "label": result.label,
        "records": records,
        "size": result.total_size,
    }
    return d.reply(request, body)
