"""The dialect's directory: versions, the resource map of a version, and limits."""

from __future__ import annotations

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import Response
from starlette.routing import BaseRoute

from nexus.apps.sfcrm import wire
from nexus.apps.sfcrm.context import LATEST_VERSION, MIN_VERSION, check_version, dialect

router = APIRouter()

VERSION_ROOT = "/services/data/{version}/"
#: Salesforce's names in a version's resource map (`GET /services/data/vXX.X`). The map lists
#: those this App serves: a resource is listed once some route below its name exists, so a
#: resource added (or removed) by another module is listed (or not) without editing this.
RESOURCES = (
    "sobjects",
    "query",
    "queryAll",
    "search",
    "parameterizedSearch",
    "composite",
    "limits",
    "tooling",
    "jobs",
    "recent",
    "ui-api",
)


def served_resources(app: FastAPI) -> list[str]:
    """The names of `RESOURCES` some route of the App serves, in the order of `RESOURCES`."""
    cached: list[str] | None = getattr(app.state, "sfcrm_resources", None)
    if cached is None:
        served = {_resource(path) for path in _paths(app.router.routes)}
        cached = [name for name in RESOURCES if name in served]
        app.state.sfcrm_resources = cached
    return cached


def _paths(routes: list[BaseRoute]) -> list[str]:
    """Every route path, into included routers (an included APIRouter's routes carry their
    router's prefix; the App includes them without another)."""
    paths = []
    for route in routes:
        included = getattr(route, "original_router", None)
        if included is not None:
            paths += _paths(list(included.routes))
        else:
            path = getattr(route, "path", None)
            if isinstance(path, str):
                paths.append(path)
    return paths


def _resource(path: str) -> str | None:
    if not path.startswith(VERSION_ROOT):
        return None
    return path.removeprefix(VERSION_ROOT).split("/", 1)[0]


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
    body = {name: f"{root}/{name}" for name in served_resources(request.app)}
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
