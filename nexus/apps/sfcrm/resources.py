"""The dialect's directory: versions, the resource map of a version, and limits."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from nexus.apps.sfcrm import wire
from nexus.apps.sfcrm.context import LATEST_VERSION, MIN_VERSION, check_version, dialect

router = APIRouter()

RESOURCES = (
    "sobjects",
    "query",
    "queryAll",
    "search",
    "parameterizedSearch",
    "composite",
    "limits",
)


@router.get("/services/data")
async def versions(request: Request) -> Response:
    """Every version this dialect answers to (no authentication, as Salesforce)."""
    body = [
        {"label": f"v{n}.0", "url": f"/services/data/v{n}.0", "version": f"{n}.0"}
        for n in range(MIN_VERSION, LATEST_VERSION + 1)
    ]
    return dialect(request).reply(request, body)


@router.get("/services/data/{version}")
async def resource_map(request: Request, version: str) -> Response:
    d = dialect(request)
    caller = await d.enter(request, version)
    root = wire.base(version)
    body = {name: f"{root}/{name}" for name in RESOURCES}
    body["identity"] = f"/id/{caller.org_id}/{caller.user_id}"
    return d.reply(request, body)


@router.get("/services/data/{version}/limits")
async def limits(request: Request, version: str) -> Response:
    """Real counters where Nexus keeps them (daily API requests of this user)."""
    d = dialect(request)
    caller = await d.enter(request, version)
    check_version(version)
    limit = d.usage.limit
    used = d.usage.used(caller)
    body = {"DailyApiRequests": {"Max": limit, "Remaining": max(0, limit - used)}}
    return d.reply(request, body)
