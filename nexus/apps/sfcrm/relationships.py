"""`GET sobjects/{T}/{id}/{relationshipName}`: a record's parent (a parent relationship such
as Contact's `Account`) or a page of its children (a child relationship such as Account's
`Contacts`, shaped as a query page), `?fields=` choosing the fields. One Runtime
`records/related` call: Runtime resolves the name as the caller may see it.

The path has the shape of `sobjects/{T}/{field}/{value}` (a read by external id): a second
segment that is a record id (15 or 18 letters and digits, a digit among them; no field name
has that shape in practice) is a relationship read, anything else an external id read.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from nexus.apps.sfcrm import query, sobjects, wire
from nexus.apps.sfcrm.context import dialect
from nexus.apps.sfcrm.errors import bad_request, not_found
from nexus.apps.sfcrm.params import MAX_OBJECT_NAME, object_in_path
from nexus.apps.sfcrm.sobjects import looks_like_id, split_fields
from nexus.contracts.trees import RelatedResponse

#: Runtime's bounds: the most fields one read selects, and a field path's length.
MAX_FIELDS = 500
MAX_FIELD_PATH = 255

router = APIRouter(prefix="/services/data/{version}/sobjects")


def is_record_id(value: str) -> bool:
    return looks_like_id(value) and any(c.isdigit() for c in value)


@router.get("/{name}/{record_id}/{relationship}")
async def related(
    request: Request, version: str, name: str, record_id: str, relationship: str
) -> Response:
    if not is_record_id(record_id):
        return await sobjects.read_by_external_id(request, version, name, record_id, relationship)
    d = dialect(request)
    caller = await d.enter(request, version)
    if len(relationship) > MAX_OBJECT_NAME:  # no relationship name is that long
        raise not_found()
    body: dict[str, Any] = {
        "object": object_in_path(name),
        "id": record_id,
        "relationship": relationship,
    }
    fields = split_fields(request.query_params.get("fields"))
    if fields is not None:
        if len(fields) > MAX_FIELDS:
            raise bad_request("LIMIT_EXCEEDED", f"at most {MAX_FIELDS} fields", ["fields"])
        if not all(query_field(f) for f in fields):
            raise bad_request("INVALID_FIELD", "fields must be field names", ["fields"])
        body["fields"] = fields
    answer = RelatedResponse.model_validate(await d.runtime.call(caller, "records/related", body))
    if answer.record is not None:
        return d.reply(request, wire.record(version, answer.record.object, answer.record.fields))
    if answer.page is None:  # pragma: no cover - Runtime answers one or the other
        raise not_found()
    return d.reply(request, query.page(version, "query", answer.page.model_dump()))


def query_field(name: str) -> bool:
    if len(name) > MAX_FIELD_PATH:
        return False
    parts = name.split(".")
    return all(p and p[0].isalpha() and p.replace("_", "").isalnum() and p.isascii() for p in parts)
