"""`POST composite/tree/{T}` (SObject Tree, also what `sf data import tree` sends): up to 200
records of type T with their child records inline under child relationship names, each
named by `attributes.referenceId`; all are created or none. One Runtime `records/tree` call:
Runtime resolves the relationships, authorizes every record and creates level by level in
one transaction.

    {"records": [{"attributes": {"type": "Account", "referenceId": "acme"}, "Name": "Acme",
                  "Contacts": {"records": [{"attributes": {...}, "LastName": "Ada"}]}}]}
    201 {"hasErrors": false, "results": [{"referenceId": "acme", "id": "001..."}, ...]}
    400 {"hasErrors": true, "results": [{"referenceId": "...", "errors": [{statusCode, ...}]}]}
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from nexus.apps.sfcrm.context import dialect, json_object
from nexus.apps.sfcrm.errors import bad_request, error_item
from nexus.apps.sfcrm.params import MAX_OBJECT_NAME, object_in_path
from nexus.contracts.trees import MAX_TREE_DEPTH, MAX_TREE_RECORDS, TreeResponse

router = APIRouter(prefix="/services/data/{version}/composite/tree")
MAX_REFERENCE = 80


class _Count:
    def __init__(self) -> None:
        self.records = 0


def _node(record: Any, expected: str | None, depth: int, count: _Count) -> dict[str, Any]:
    """A request record as a Runtime tree node (its children converted too)."""
    if not isinstance(record, dict):
        raise bad_request("INVALID_INPUT", "each record is a JSON object")
    count.records += 1
    if count.records > MAX_TREE_RECORDS:
        raise bad_request("LIMIT_EXCEEDED", f"at most {MAX_TREE_RECORDS} records in a tree")
    if depth > MAX_TREE_DEPTH:
        raise bad_request("INVALID_INPUT", f"a tree is at most {MAX_TREE_DEPTH} levels deep")
    attributes = record.get("attributes")
    if not isinstance(attributes, dict):
        raise bad_request("INVALID_INPUT", "each record needs attributes with type and referenceId")
    kind, ref = attributes.get("type"), attributes.get("referenceId")
    if not isinstance(ref, str) or not ref or len(ref) > MAX_REFERENCE:
        raise bad_request("INVALID_INPUT", "each record needs attributes.referenceId")
    if not isinstance(kind, str) or not kind or len(kind) > MAX_OBJECT_NAME:
        raise bad_request("INVALID_INPUT", f"record {ref} needs attributes.type, an object name")
    if expected is not None and kind.lower() != expected.lower():
        raise bad_request("INVALID_INPUT", f"record {ref} is a {kind}, not a {expected}")
    fields: dict[str, Any] = {}
    children: dict[str, list[dict[str, Any]]] = {}
    for key, value in record.items():
        if key == "attributes":
            continue
        if isinstance(value, dict):
            nested = value.get("records")
            if not isinstance(nested, list) or not nested:
                raise bad_request("INVALID_INPUT", f"{key} of {ref} needs a records list")
            children[key] = [_node(c, None, depth + 1, count) for c in nested]
        else:
            fields[key] = value
    return {"ref": ref, "object": kind, "fields": fields, "children": children}


@router.post("/{name}")
async def create_tree(request: Request, version: str, name: str) -> Response:
    d = dialect(request)
    caller = await d.enter(request, version)
    body = await json_object(request)
    records = body.get("records")
    if not isinstance(records, list) or not records:
        raise bad_request("INVALID_INPUT", "records must be a non-empty list")
    count = _Count()
    nodes = [_node(r, object_in_path(name), 1, count) for r in records]
    answer = TreeResponse.model_validate(
        await d.runtime.call(caller, "records/tree", {"records": nodes})
    )
    if answer.failures:
        results = [
            {"referenceId": f.ref, "errors": [error_item(e) for e in f.errors]}
            for f in answer.failures
        ]
        return d.reply(request, {"hasErrors": True, "results": results}, 400)
    results = [{"referenceId": c.ref, "id": c.id} for c in answer.created]
    return d.reply(request, {"hasErrors": False, "results": results}, 201)
