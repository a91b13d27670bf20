"""Data replication and recent items: `sobjects/{T}/updated`, `sobjects/{T}/deleted` (the
SObject Get Updated / Get Deleted resources) and `/recent`, one Runtime call each.

Runtime decides which records the caller sees and checks the window against the database
clock (at most 30 days back, start before end); here the dates are parsed and the answers
shaped. Nexus records no "last viewed": `/recent` is the caller's most recently modified
records that it may still read (ADR 0076).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from nexus.apps.sfcrm import wire
from nexus.apps.sfcrm.context import dialect
from nexus.apps.sfcrm.errors import bad_request
from nexus.apps.sfcrm.params import object_in_path, whole_number
from nexus.apps.sfcrm.runtime_client import Caller
from nexus.contracts.changes import (
    MAX_RECENT,
    DeletedResponse,
    RecentRecord,
    RecentResponse,
    UpdatedResponse,
)

router = APIRouter(prefix="/services/data/{version}")
INVALID_DATE = "INVALID_REPLICATION_DATE"


def parse_moment(raw: str | None, name: str) -> int:
    """An ISO 8601 date/time parameter as epoch milliseconds (UTC when it names no zone).
    A `+` sent unencoded arrives as a space; it is read as the `+` it was."""
    if raw is None or not raw.strip():
        raise bad_request("MISSING_ARGUMENT", f"the {name} parameter is required", [name])
    text = raw.strip().replace(" ", "+")
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise bad_request(
            INVALID_DATE, f"{name} is not a date/time such as 2026-05-06T00:00:00+00:00", [name]
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def wire_moment(ms: int) -> str:
    moment = datetime.fromtimestamp(ms / 1000, tz=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}+0000"


def _window(request: Request, name: str) -> dict[str, Any]:
    params = request.query_params
    return {
        "object": object_in_path(name),
        "start_ms": parse_moment(params.get("start"), "start"),
        "end_ms": parse_moment(params.get("end"), "end"),
    }


@router.get("/sobjects/{name}/updated")
async def updated(request: Request, version: str, name: str) -> Response:
    d = dialect(request)
    caller = await d.enter(request, version)
    answer = await d.runtime.call(caller, "records/updated", _window(request, name))
    result = UpdatedResponse.model_validate(answer)
    body = {"ids": result.ids, "latestDateCovered": wire_moment(result.latest_covered_ms)}
    return d.reply(request, body)


@router.get("/sobjects/{name}/deleted")
async def deleted(request: Request, version: str, name: str) -> Response:
    d = dialect(request)
    caller = await d.enter(request, version)
    answer = await d.runtime.call(caller, "records/deleted", _window(request, name))
    result = DeletedResponse.model_validate(answer)
    body = {
        "deletedRecords": [
            {"id": r.id, "deletedDate": wire_moment(r.deleted_ms)} for r in result.deleted
        ],
        "earliestDateAvailable": wire_moment(result.earliest_available_ms),
        "latestDateCovered": wire_moment(result.latest_covered_ms),
    }
    return d.reply(request, body)


def recent_item(version: str, record: RecentRecord) -> dict[str, Any]:
    """A recent item as Salesforce lists it: attributes, Id and Name."""
    return wire.record(version, record.object, {"Id": record.id, "Name": record.name})


async def recent_records(
    request: Request, caller: Caller, *, object_name: str | None, limit: int
) -> RecentResponse:
    body: dict[str, Any] = {"limit": limit}
    if object_name is not None:
        body["object"] = object_in_path(object_name)
    answer = await dialect(request).runtime.call(caller, "records/recent", body)
    return RecentResponse.model_validate(answer)


@router.get("/recent")
async def recent(request: Request, version: str) -> Response:
    d = dialect(request)
    caller = await d.enter(request, version)
    raw = request.query_params.get("limit")
    limit = MAX_RECENT
    if raw is not None:
        asked = whole_number(raw)
        if asked is None or asked < 1:
            raise bad_request(
                "INVALID_QUERY_PARAMETER_VALUE", "limit is a positive number", ["limit"]
            )
        limit = min(MAX_RECENT, asked)
    result = await recent_records(request, caller, object_name=None, limit=limit)
    return d.reply(request, [recent_item(version, r) for r in result.records])
