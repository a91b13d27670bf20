"""`/sobjects/{T}/describe/layouts`: an object's page layout as Salesforce's DescribeLayoutResult.

One Runtime call (`ui/object`, the browser's record-page use case): Runtime answers the
describe and the layout with only the fields and related lists the caller may read; this
module lays them out in Salesforce's shape (sections of rows of items, one Master record
type). Nexus has one layout per object, so every record type id but Master's is unknown.
"""

from __future__ import annotations

import hashlib
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from nexus.apps.sfcrm import wire
from nexus.apps.sfcrm.context import dialect
from nexus.apps.sfcrm.errors import bad_request, not_found
from nexus.apps.sfcrm.params import object_in_path
from nexus.contracts.describe import FieldDescribe
from nexus.contracts.ui import ObjectInfo
from nexus.platform.ids import to_18

router = APIRouter(prefix="/services/data/{version}/sobjects/{name}/describe/layouts")

MASTER_RECORD_TYPE = "012000000000000AAA"
RELATED_LIST_ROWS = 5
BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def synthetic_id(prefix: str, *parts: str) -> str:
    """A stable 18-character id for a Nexus definition that has no record id (a layout, a
    list view): the key prefix and 12 base62 characters of a digest of its names."""
    number = int.from_bytes(hashlib.sha256("/".join(parts).lower().encode()).digest()[:9])
    digits = ""
    for _ in range(12):
        number, rest = divmod(number, 62)
        digits += BASE62[rest]
    return to_18(prefix + digits)


def _item(f: FieldDescribe | None, name: str, editable: bool, tab: int) -> dict[str, Any]:
    details = wire.field(f) if f is not None else None
    return {
        "editableForNew": bool(f and f.createable),
        "editableForUpdate": bool(editable and f and f.updateable),
        "label": f.label if f is not None else name,
        "layoutComponents": [
            {
                "details": details,
                "displayLines": 1,
                "tabOrder": tab,
                "type": "Field",
                "value": name,
            }
        ],
        "placeholder": False,
        "required": bool(f and not f.nillable and f.createable and not f.calculated),
    }


def _sections(info: ObjectInfo, layout_id: str, *, edit: bool) -> list[dict[str, Any]]:
    fields = {f.name.lower(): f for f in info.describe.fields}
    editable = edit and info.describe.summary.updateable
    out = []
    tab = 0
    for number, section in enumerate(info.layout.sections):
        columns = max(1, int(section.get("columns", 2)))
        names = [str(n) for n in section.get("fields", [])]
        items = []
        for name in names:
            tab += 1
            items.append(_item(fields.get(name.lower()), name, editable, tab))
        rows = [
            {"layoutItems": items[i : i + columns], "numItems": len(items[i : i + columns])}
            for i in range(0, len(items), columns)
        ]
        out.append(
            {
                "collapsed": False,
                "columns": columns,
                "heading": str(section.get("label", "")),
                "layoutRows": rows,
                "layoutSectionId": synthetic_id("01B", layout_id, str(number)),
                "parentLayoutId": layout_id,
                "rows": len(rows),
                "tabOrder": "LeftToRight",
                "useCollapsibleSection": False,
                "useHeading": True,
            }
        )
    return out


def _related_lists(info: ObjectInfo) -> list[dict[str, Any]]:
    children = {c.child_object.lower(): c for c in info.describe.child_relationships}
    out = []
    for name in info.layout.related_lists:
        child = children.get(name.lower())
        if child is None:
            continue
        out.append(
            {
                "accessLevelRequiredForCreate": None,
                "buttons": [],
                "columns": [
                    {
                        "field": f"{child.child_object}.Name",
                        "fieldApiName": "Name",
                        "format": None,
                        "label": "Name",
                        "lookupId": "Id",
                        "name": "Name",
                        "sortable": True,
                    }
                ],
                "custom": child.child_object.endswith("__c"),
                "field": child.field,
                "label": child.relationship_name or child.child_object,
                "limitRows": RELATED_LIST_ROWS,
                "name": child.relationship_name or child.child_object,
                "sobject": child.child_object,
                "sort": [],
            }
        )
    return out


def describe_layout(version: str, info: ObjectInfo) -> dict[str, Any]:
    """One DescribeLayout: the detail sections (what the caller may read) and the edit
    sections (the same fields, editable where the caller may edit)."""
    name = info.describe.summary.name
    layout_id = synthetic_id("00h", name, "layout")
    return {
        "buttonLayoutSection": {"detailButtons": []},
        "detailLayoutSections": _sections(info, layout_id, edit=False),
        "editLayoutSections": _sections(info, layout_id, edit=True),
        "feedView": None,
        "highlightsPanelLayoutSection": None,
        "id": layout_id,
        "multirowEditLayoutSections": [],
        "offlineLinks": [],
        "quickActionList": {"quickActionListItems": []},
        "relatedContent": None,
        "relatedLists": _related_lists(info),
        "saveOptions": [],
    }


def describe_layouts(version: str, info: ObjectInfo) -> dict[str, Any]:
    name = info.describe.summary.name
    layout = describe_layout(version, info)
    root = f"{wire.object_urls(version, name)['describe']}/layouts"
    return {
        "layouts": [layout],
        "recordTypeMappings": [
            {
                "active": True,
                "available": True,
                "defaultRecordTypeMapping": True,
                "developerName": "Master",
                "layoutId": layout["id"],
                "master": True,
                "name": "Master",
                "picklistsForRecordType": [
                    {
                        "picklistName": f.name,
                        "picklistValues": wire.field(f)["picklistValues"],
                    }
                    for f in info.describe.fields
                    if f.type in ("picklist", "multi_picklist")
                ],
                "recordTypeId": MASTER_RECORD_TYPE,
                "urls": {"layout": f"{root}/{MASTER_RECORD_TYPE}"},
            }
        ],
        "recordTypeSelectorRequired": [False],
    }


async def _object_info(request: Request, version: str, name: str) -> ObjectInfo:
    d = dialect(request)
    caller = await d.enter(request, version)
    asked = {"object": object_in_path(name)}
    return ObjectInfo.model_validate(await d.runtime.call(caller, "ui/object", asked))


@router.get("")
async def layouts(request: Request, version: str, name: str) -> Response:
    info = await _object_info(request, version, name)
    return dialect(request).reply(request, describe_layouts(version, info))


@router.get("/{record_type_id}")
async def layout_for_record_type(
    request: Request, version: str, name: str, record_type_id: str
) -> Response:
    """The layout of one record type (simple-salesforce's `describe_layout`); Nexus objects
    have only the Master record type."""
    info = await _object_info(request, version, name)
    if not (len(record_type_id) in (15, 18) and record_type_id.isalnum()):
        raise bad_request(
            "MALFORMED_ID", f"Record Type ID: id value of incorrect type: {record_type_id[:20]}"
        )
    if record_type_id[:15] != MASTER_RECORD_TYPE[:15]:
        raise not_found()
    return dialect(request).reply(request, describe_layout(version, info))
