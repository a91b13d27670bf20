"""`POST /ui-api/records/{recordId}/undelete`: restore a deleted record (the browser CRM's
recycle bin). Salesforce's REST API has no undelete; this is the UI API's small addition
(docs/ui-api.md). One Runtime `records/mutate` call with an `undelete` item: Runtime decides
as for a delete (the object's delete permission and the record's sharing) and restores what
the delete cascaded."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from nexus.apps.sfcrm.context import dialect
from nexus.apps.sfcrm.errors import not_found
from nexus.apps.sfcrm.sobjects import looks_like_id, saved

router = APIRouter(prefix="/services/data/{version}/ui-api")


@router.post("/records/{record_id}/undelete")
async def undelete(request: Request, version: str, record_id: str) -> Response:
    d = dialect(request)
    request.state.caller = await d.enter(request, version)
    if not looks_like_id(record_id):
        raise not_found()
    result = await saved(request, {"op": "undelete", "id": record_id})
    return d.reply(request, {"id": result.id or record_id, "success": True, "errors": []})
