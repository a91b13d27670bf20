"""`/ui-api`: the browser CRM's reads, shaped like Salesforce's UI API (docs/ui-api.md).

Each request is one coarse Runtime call (`ui/nav`, `ui/object`, `ui/records`, `ui/list`,
`search`) with the caller's delegation; Runtime decides every access question and this module
only projects the neutral answer (ADR 0039).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from nexus.apps.sfcrm.context import dialect, json_object
from nexus.apps.sfcrm.csv_export import csv_text
from nexus.apps.sfcrm.errors import bad_request, not_found
from nexus.apps.sfcrm.params import whole_number
from nexus.contracts.describe import FieldDescribe, ObjectDescribe
from nexus.contracts.ui import ListResult, NavItem, ObjectInfo

router = APIRouter(prefix="/services/data/{version}/ui-api")

MAX_IDS = 10
DEFAULT_LIST_PAGE = 50
MIN_LIST_PAGE, MAX_LIST_PAGE = 10, 200
MIN_TERM = 2
MAX_FILTERS = 10
MAX_FILTER_VALUES, MAX_FILTER_VALUE = 20, 255  # as Runtime's user filters

#: Runtime field type -> the UI API's dataType.
DATA_TYPES = {
    "text": "String",
    "textarea": "TextArea",
    "long_text": "TextArea",
    "email": "Email",
    "phone": "Phone",
    "url": "Url",
    "number": "Double",
    "currency": "Currency",
    "percent": "Percent",
    "checkbox": "Boolean",
    "date": "Date",
    "datetime": "DateTime",
    "picklist": "Picklist",
    "multi_picklist": "MultiPicklist",
    "lookup": "Reference",
    "master_detail": "Reference",
    "auto_number": "String",
    "formula": "String",
}
#: The fields every record has, read-only (label, dataType, reference target).
SYSTEM_FIELDS = (
    ("Id", "Record ID", "String", None),
    ("OwnerId", "Owner ID", "Reference", "User"),
    ("CreatedDate", "Created Date", "DateTime", None),
    ("CreatedById", "Created By ID", "Reference", "User"),
    ("LastModifiedDate", "Last Modified Date", "DateTime", None),
    ("LastModifiedById", "Last Modified By ID", "Reference", "User"),
)


def data_type(f: FieldDescribe) -> str:
    if f.type == "number" and f.scale == 0:
        return "Int"
    return DATA_TYPES.get(f.type, "String")


def field_info(f: FieldDescribe) -> dict[str, Any]:
    return {
        "apiName": f.name,
        "label": f.label,
        "dataType": data_type(f),
        "nexusType": f.type,
        "length": f.length,
        "precision": f.precision,
        "scale": f.scale,
        "required": not f.nillable and not f.calculated and f.type != "auto_number",
        "createable": f.createable,
        "updateable": f.updateable,
        "nameField": f.name_field,
        "unique": f.unique,
        "externalId": f.external_id,
        "custom": f.custom,
        "calculated": f.calculated,
        "defaultValue": f.default_value,
        "inlineHelpText": None,
        "historyTracked": f.track_history,
        "picklistValues": (
            [
                {"value": v.value, "label": v.label, "defaultValue": v.default_value}
                for v in f.picklist_values
                if v.active
            ]
            if f.type in ("picklist", "multi_picklist")
            else None
        ),
        "restrictedPicklist": f.restricted_picklist,
        "reference": bool(f.reference_to),
        "referenceToInfos": [{"apiName": r, "nameFields": ["Name"]} for r in f.reference_to],
        "relationshipName": f.relationship_name,
    }


def _system_field(name: str, label: str, kind: str, target: str | None) -> dict[str, Any]:
    return {
        "apiName": name,
        "label": label,
        "dataType": kind,
        "nexusType": "system",
        "length": None,
        "precision": None,
        "scale": None,
        "required": False,
        "createable": False,
        "updateable": False,
        "nameField": False,
        "unique": name == "Id",
        "externalId": False,
        "custom": False,
        "calculated": False,
        "defaultValue": None,
        "inlineHelpText": None,
        "historyTracked": False,
        "picklistValues": None,
        "restrictedPicklist": False,
        "reference": target is not None,
        "referenceToInfos": [{"apiName": target, "nameFields": ["Name"]}] if target else [],
        "relationshipName": None,
    }


def object_info_body(d: ObjectDescribe) -> dict[str, Any]:
    s = d.summary
    fields = {f.name: field_info(f) for f in d.fields}
    for name, label, kind, target in SYSTEM_FIELDS:
        fields.setdefault(name, _system_field(name, label, kind, target))
    return {
        "apiName": s.name,
        "label": s.label,
        "labelPlural": s.label_plural,
        "keyPrefix": s.key_prefix,
        "custom": s.custom,
        "createable": s.createable,
        "updateable": s.updateable,
        "deletable": s.deletable,
        "queryable": s.queryable,
        "nameFields": ["Name"],
        "sharingModel": d.sharing_model,
        "fields": fields,
        "childRelationships": [
            {
                "childObjectApiName": c.child_object,
                "fieldName": c.field,
                "relationshipName": c.relationship_name,
                "cascadeDelete": c.cascade_delete,
            }
            for c in d.child_relationships
        ],
    }


def full_object_info(info: ObjectInfo) -> dict[str, Any]:
    body = object_info_body(info.describe)
    body["listViews"] = [{"apiName": v.api_name, "label": v.label} for v in info.list_views]
    body["layout"] = {
        "sections": [
            {"heading": s["label"], "columns": s["columns"], "fields": s["fields"]}
            for s in info.layout.sections
        ],
        "relatedLists": info.layout.related_lists,
    }
    return body


@router.get("/nav-items")
async def nav_items(request: Request, version: str) -> Response:
    d = dialect(request)
    caller = await d.enter(request, version)
    items = [NavItem.model_validate(i) for i in await d.runtime.call(caller, "ui/nav", {})]
    body = {
        "navItems": [
            {
                "objectApiName": i.summary.name,
                "label": i.summary.label,
                "labelPlural": i.summary.label_plural,
                "keyPrefix": i.summary.key_prefix,
                "createable": i.summary.createable,
                "defaultListViewApiName": i.list_views[0].api_name if i.list_views else None,
                "listViews": [{"apiName": v.api_name, "label": v.label} for v in i.list_views],
            }
            for i in items
        ]
    }
    return d.reply(request, body)


@router.get("/object-info/{object_name}")
async def object_info(request: Request, version: str, object_name: str) -> Response:
    d = dialect(request)
    caller = await d.enter(request, version)
    answer = await d.runtime.call(caller, "ui/object", {"object": object_name})
    return d.reply(request, full_object_info(ObjectInfo.model_validate(answer)))


def _changed_date(ms: int) -> str:
    moment = datetime.fromtimestamp(ms / 1000, tz=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}+0000"


def _layout(info: dict[str, Any], sections: list[dict[str, Any]], editable: bool) -> list[Any]:
    out = []
    for section in sections:
        items = []
        for name in section["fields"]:
            f = info["fields"].get(name, {})
            items.append(
                {
                    "field": name,
                    "label": f.get("label", name),
                    "editableForNew": bool(f.get("createable")),
                    "editableForUpdate": editable and bool(f.get("updateable")),
                    "required": bool(f.get("required")),
                }
            )
        columns = max(1, int(section["columns"]))
        rows = [{"layoutItems": items[i : i + columns]} for i in range(0, len(items), columns)]
        out.append({"heading": section["label"], "columns": columns, "layoutRows": rows})
    return out


def record_page(graph: dict[str, Any], info: dict[str, Any]) -> dict[str, Any]:
    """One ReadGraph as the record, its layout, access, related lists and history."""
    record = graph["record"]
    parents: dict[str, Any] = graph.get("parent_names", {})
    fields = {
        name: {"value": value, "displayValue": parents.get(name)}
        for name, value in record["fields"].items()
    }
    access = graph["access"]
    return {
        "record": {
            "apiName": record["object"],
            "id": record["id"],
            "fields": fields,
            "lastModifiedDate": record["fields"].get("LastModifiedDate"),
            "systemModstamp": record["fields"].get("SystemModstamp"),
        },
        "access": {
            "readable": bool(access.get("read")),
            "editable": bool(access.get("edit")),
            "deletable": bool(access.get("delete")),
        },
        "layout": {
            "objectApiName": record["object"],
            "sections": _layout(info, graph["sections"], bool(access.get("edit"))),
        },
        "relatedLists": [
            {
                "childObjectApiName": r["object"],
                "fieldApiName": r["field"],
                "relationshipName": r["relationship_name"],
                "label": r["relationship_name"] or r["object"],
                "records": r["records"],
                "hasMore": r["has_more"],
            }
            for r in graph["related"]
        ],
        "history": [
            {
                "field": h["field"],
                "oldValue": h["old_value"],
                "newValue": h["new_value"],
                "changedById": h["changed_by_id"],
                "changedDate": _changed_date(int(h["changed_at_ms"])),
            }
            for h in graph["history"]
        ],
    }


@router.get("/record-ui/{record_ids}")
async def record_ui(request: Request, version: str, record_ids: str) -> Response:
    d = dialect(request)
    caller = await d.enter(request, version)
    ids = list(dict.fromkeys(i.strip() for i in record_ids.split(",") if i.strip()))
    if not ids or len(ids) > MAX_IDS:
        raise bad_request("INVALID_ID_FIELD", f"give 1 to {MAX_IDS} record ids")
    if not all(len(i) in (15, 18) and i.isalnum() and i.isascii() for i in ids):
        raise not_found()
    answer = await d.runtime.call(caller, "ui/records", {"ids": ids})
    infos = {
        name: object_info_body(ObjectInfo.model_validate(o).describe)
        for name, o in answer["objects"].items()
    }
    body: dict[str, Any] = {
        "records": {},
        "access": {},
        "layouts": {},
        "relatedLists": {},
        "history": {},
        "objectInfos": infos,
    }
    for asked, graph in zip(ids, answer["graphs"], strict=True):
        page = record_page(graph, infos[graph["record"]["object"]])
        body["records"][asked] = page["record"]
        body["access"][asked] = page["access"]
        body["layouts"][asked] = page["layout"]
        body["relatedLists"][asked] = page["relatedLists"]
        body["history"][asked] = page["history"]
    return d.reply(request, body)


def _int_param(request: Request, name: str, default: int, low: int, high: int) -> int:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    value = whole_number(raw)
    if value is None or not low <= value <= high:
        raise bad_request("INVALID_INPUT", f"{name} is a number from {low} to {high}")
    return value


def _split_values(text: str) -> list[str]:
    """`a,b\\,c` -> ["a", "b,c"]: commas separate the values of `in`; `\\,` is a comma."""
    return [v.replace("\\,", ",") for v in re.split(r"(?<!\\),", text)]


def _list_query(request: Request, asked: dict[str, Any]) -> dict[str, Any]:
    """`sortBy`, `q` and every `filter=Field:operator:value` (docs/ui-api.md) into a
    Runtime list request; Runtime checks each filter against the metadata and FLS."""
    for param, key in (("sortBy", "sort_by"), ("q", "q")):
        if request.query_params.get(param):
            asked[key] = request.query_params[param]
    raw = request.query_params.getlist("filter")
    if len(raw) > MAX_FILTERS:
        raise bad_request("INVALID_FILTER", f"at most {MAX_FILTERS} filters")
    filters = []
    for item in raw:
        field, _, rest = item.partition(":")
        operator, colon, value = rest.partition(":")
        if not 0 < len(field) <= 80 or not operator or not colon:  # 80: an api name
            raise bad_request("INVALID_FILTER", "a filter is Field:operator:value")
        values = _split_values(value) if operator == "in" else [value]
        if len(values) > MAX_FILTER_VALUES:
            raise bad_request(
                "INVALID_FILTER", f"filter on {field!r}: at most {MAX_FILTER_VALUES} values"
            )
        if any(len(v) > MAX_FILTER_VALUE for v in values):
            raise bad_request(
                "INVALID_FILTER",
                f"filter on {field!r}: a value is at most {MAX_FILTER_VALUE} characters",
            )
        filters.append({"field": field, "operator": operator, "values": values})
    if filters:
        asked["filters"] = filters
    return asked


@router.get("/list-ui/{object_name}/{list_view}")
async def list_ui(request: Request, version: str, object_name: str, list_view: str) -> Response:
    d = dialect(request)
    caller = await d.enter(request, version)
    page_size = _int_param(request, "pageSize", DEFAULT_LIST_PAGE, MIN_LIST_PAGE, MAX_LIST_PAGE)
    start = _int_param(request, "pageToken", 0, 0, 100_000)
    asked = _list_query(
        request,
        {"object": object_name, "list_view": list_view, "page_size": page_size, "start": start},
    )
    result = ListResult.model_validate(await d.runtime.call(caller, "ui/list", asked))
    labels = {c.path: c.label for c in result.columns}
    following = start + page_size
    body = {
        "info": {
            "listReference": {
                "objectApiName": result.object,
                "listViewApiName": result.list_view,
            },
            "label": result.label,
            "displayColumns": [
                {
                    "fieldApiName": c.path,
                    "label": c.label,
                    "dataType": DATA_TYPES.get(c.type, "String"),
                    "sortable": c.sortable,
                }
                for c in result.columns
            ],
            "filteredByInfo": [
                {"fieldApiName": f.field, "operator": f.operator, "operandLabels": f.values}
                for f in result.filters
            ],
            "orderedByInfo": [
                {
                    "fieldApiName": s.field,
                    "isAscending": not s.descending,
                    "label": labels.get(s.field, s.field),
                }
                for s in result.sort
            ],
            "createable": result.createable,
        },
        "records": {
            "count": result.total_size,
            "pageSize": page_size,
            "currentPageToken": str(start),
            "nextPageToken": str(following) if following < result.total_size else None,
            "previousPageToken": str(max(0, start - page_size)) if start > 0 else None,
            "records": [
                {
                    "apiName": result.object,
                    "id": row.id,
                    "fields": {
                        k: {"value": v, "displayValue": None} for k, v in row.values.items()
                    },
                    "access": {"editable": row.editable, "deletable": row.deletable},
                }
                for row in result.rows
            ],
        },
    }
    return d.reply(request, body)


@router.get("/list-ui/{object_name}/{list_view}/export")
async def list_export(request: Request, version: str, object_name: str, list_view: str) -> Response:
    """The list view (with `sortBy`, `q` and `filter` as in list-ui) as a CSV download: a header of
    column labels, then every record the caller may see (at most 10,000; the header
    `X-Nexus-Truncated: true` says there were more)."""
    d = dialect(request)
    caller = await d.enter(request, version)
    asked = _list_query(request, {"object": object_name, "list_view": list_view})
    answer = await d.runtime.call(caller, "ui/export", asked)
    text = csv_text([c["label"] for c in answer["columns"]], answer["rows"])
    name = "".join(ch for ch in str(answer["label"]) if ch.isalnum() or ch in " -_").strip()
    headers = {
        **d.limit_info(request),
        "Content-Disposition": f'attachment; filename="{name or "export"}.csv"',
        "X-Nexus-Truncated": "true" if answer["truncated"] else "false",
    }
    return Response(text, media_type="text/csv; charset=utf-8", headers=headers)


@router.get("/search")
async def search(request: Request, version: str) -> Response:
    d = dialect(request)
    caller = await d.enter(request, version)
    term = (request.query_params.get("q") or "").strip()
    if len(term) < MIN_TERM:
        raise bad_request("INVALID_SEARCH", f"q needs at least {MIN_TERM} characters")
    page_size = _int_param(request, "pageSize", 10, 1, 50)
    asked: dict[str, Any] = {"term": term, "limit": page_size}
    only = request.query_params.get("objectApiName")
    if only:
        asked["objects"] = [only]
    answer = await d.runtime.call(caller, "search", asked)
    groups: dict[str, list[dict[str, Any]]] = {}
    for hit in answer["searchRecords"]:
        kind = str(hit.get("attributes", {}).get("type", ""))
        groups.setdefault(kind, []).append(
            {"id": hit.get("Id"), "apiName": kind, "name": hit.get("Name")}
        )
    body = {
        "query": term,
        "results": [
            {"objectApiName": kind, "records": records[:page_size]}
            for kind, records in groups.items()
        ],
    }
    return d.reply(request, body)


# ---------------------------------------------------------------------------- CSV import


def _import_status(job: dict[str, Any]) -> dict[str, Any]:
    body = {
        "id": job["id"],
        "objectApiName": job["object"],
        "operation": job["mode"],
        "state": job["state"],
        "total": job["total"],
        "processed": job["processed"],
        "succeeded": job["succeeded"],
        "failed": job["failed"],
        "error": job["error"],
    }
    if "mapping" in job:
        body["mapping"] = job["mapping"]
    return body


@router.post("/imports")
async def create_import(request: Request, version: str) -> Response:
    """Upload a CSV (`csv` text) for `objectApiName`: insert, or upsert by
    `externalIdFieldName`; `mapping` (CSV column -> field) or columns matched by name/label."""
    d = dialect(request)
    caller = await d.enter(request, version)
    body = await json_object(request)
    asked: dict[str, Any] = {
        "object": body.get("objectApiName"),
        "mode": body.get("operation", "insert"),
        "csv": body.get("csv"),
    }
    if body.get("externalIdFieldName"):
        asked["external_id_field"] = body["externalIdFieldName"]
    if body.get("mapping") is not None:
        asked["mapping"] = body["mapping"]
    if not isinstance(asked["object"], str) or not isinstance(asked["csv"], str):
        raise bad_request("INVALID_INPUT", "give objectApiName and csv")
    job = await d.runtime.call(caller, "imports/create", asked)
    return d.reply(request, _import_status(job), 201)


@router.get("/imports/{job_id}")
async def import_status(request: Request, version: str, job_id: str) -> Response:
    d = dialect(request)
    caller = await d.enter(request, version)
    job = await d.runtime.call(caller, "imports/status", {"id": job_id})
    return d.reply(request, _import_status(job))


@router.get("/imports/{job_id}/errors")
async def import_errors(request: Request, version: str, job_id: str) -> Response:
    """The rows that were not saved, as CSV (`Row` is the data row's number, 1 = the first
    row under the header)."""
    d = dialect(request)
    caller = await d.enter(request, version)
    answer = await d.runtime.call(caller, "imports/errors", {"id": job_id})
    text = csv_text(["Row", "Error"], ([row["row"], row["error"]] for row in answer["errors"]))
    headers = {
        **d.limit_info(request),
        "Content-Disposition": f'attachment; filename="import-{job_id[:32]}-errors.csv"',
    }
    return Response(text, media_type="text/csv; charset=utf-8", headers=headers)
