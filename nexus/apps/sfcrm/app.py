"""The sfcrm AppService (`nexus serve --role=app --app=sfcrm`): the Salesforce REST dialect.

It parses and bounds requests, makes one coarse Runtime call per use case with the caller's
delegation, and projects the neutral result into the dialect. It owns no database, keeps no
permissions and decides no authorization (DESIGN §2, §7; ADR 0030).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Receive, Scope, Send

from nexus.apps.sfcrm import (
    batch,
    bulk1,
    bulk2,
    changes,
    composite,
    layouts,
    list_views,
    query,
    relationships,
    resources,
    sobjects,
    suggestions,
    tooling,
    tree,
    ui_api,
    undelete,
)
from nexus.apps.sfcrm.context import ApiUsage, Dialect
from nexus.apps.sfcrm.errors import SfError, not_found
from nexus.apps.sfcrm.openapi import openapi_document
from nexus.apps.sfcrm.runtime_client import RuntimeClient, runtime_session
from nexus.contracts.catalog import Snapshot
from nexus.contracts.errors import NexusError
from nexus.contracts.roles import Role
from nexus.platform.catalog_follower import following
from nexus.platform.http import OpsInfo, create_role_app, error_response, framework_error
from nexus.platform.settings import Settings
from nexus.platform.workload import WorkloadSigner, ensure_workload_keys, workload_key_dir

APP_NAME = "sfcrm"
WORKLOAD = "app-sfcrm"
CAPABILITIES = ("ops.v1", "sfdc-rest.v1")
PREFIX = "/services/data"
#: Every path under it is the dialect's (`/services/data`, `/services/async`, `/services/apexrest`
#: ...): what no route takes is Salesforce's NOT_FOUND, never the role's own envelope.
DIALECT_ROOT = "/services"
RUNTIME_CONNECTIONS = 256
USAGE_REPORT_SECONDS = 1.0
ALL_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]


class TrailingSlash:
    """`/services/data/v59.0/sobjects/` is `/services/data/v59.0/sobjects`: no redirects."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            path: str = scope["path"]
            if path.startswith(PREFIX) and path.endswith("/") and len(path) > 1:
                scope = dict(scope, path=path.rstrip("/") or "/")
        await self.app(scope, receive, send)


def in_dialect(path: str) -> bool:
    return path == DIALECT_ROOT or path.startswith(DIALECT_ROOT + "/")


def install_dialect_errors(app: FastAPI) -> None:
    """Dialect errors, request validation and Starlette's own 404/405 under `/services` (a
    path no route takes, such as `/services/apexrest/x`, is NOT_FOUND) in the dialect's
    envelope; the role's own paths keep the Nexus envelope."""

    async def dialect_error(request: Request, exc: Exception) -> Response:
        if not isinstance(exc, SfError):  # pragma: no cover - registered for SfError
            raise exc
        headers = request.app.state.dialect.limit_info(request) if exc.status != 401 else {}
        if exc.status == 401:
            headers["WWW-Authenticate"] = 'Bearer realm="nexus"'
        return JSONResponse(exc.body(), status_code=exc.status, headers=headers)

    async def invalid_request(request: Request, exc: Exception) -> Response:
        if in_dialect(request.url.path) and isinstance(exc, RequestValidationError):
            return await dialect_error(request, SfError(400, "INVALID_FIELD", "invalid request"))
        if isinstance(exc, NexusError):
            error = SfError(exc.status, exc.code, exc.message)
            return await dialect_error(request, error)
        raise exc  # pragma: no cover

    async def http_error(request: Request, exc: Exception) -> Response:
        """Starlette's own 404/405 (a path no route pattern takes, such as one with a line
        break in it) in the dialect's envelope."""
        if not isinstance(exc, StarletteHTTPException):  # pragma: no cover - registered so
            raise exc
        if not in_dialect(request.url.path):  # the role's own paths: Nexus envelope
            plain = framework_error(request, exc)
            return error_response(plain, getattr(request.state, "request_id", None))
        if exc.status_code == 405:
            error = SfError(405, "METHOD_NOT_ALLOWED", "HTTP method not allowed")
        elif exc.status_code == 400:  # a body FastAPI could not parse (JSON nested too deep)
            error = SfError(400, "JSON_PARSER_ERROR", "The request body could not be parsed")
        else:
            error = SfError(exc.status_code, "NOT_FOUND", "The requested resource does not exist")
        return await dialect_error(request, error)

    app.add_exception_handler(SfError, dialect_error)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(RequestValidationError, invalid_request)


async def report_usage(dialect: Dialect) -> None:
    """Report API usage to Runtime about every `USAGE_REPORT_SECONDS`, until cancelled."""
    while True:
        await asyncio.sleep(USAGE_REPORT_SECONDS)
        await dialect.usage.report(dialect.runtime)


#: The dialect's routers, in matching order: the ones before `sobjects` (and its neighbours)
#: hold paths its `{name}/{id}` and `{name}/{field}/{value}` patterns would otherwise take
#: (`{name}/updated` is no record id).
ROUTERS = (
    resources.router,
    layouts.router,
    list_views.router,
    changes.router,
    relationships.router,
    sobjects.router,
    query.router,
    bulk2.router,
    bulk1.router,  # `/services/async/...`: Bulk API 1.0's own errors
    composite.router,
    ui_api.router,
    undelete.router,
    suggestions.router,
    tooling.router,
    tree.router,
    batch.router,
)


def create_app(settings: Settings) -> FastAPI:
    keys = workload_key_dir(settings.var_dir / "secrets")
    if settings.core.env == "development":  # as `nexus serve` does; production provisions it
        ensure_workload_keys(keys, [WORKLOAD])
    signer = WorkloadSigner.load(keys, WORKLOAD)
    runtime_url = settings.upstream_url(Role.RUNTIME_API.value)
    release: dict[str, Snapshot] = {}  # the last verified `app` snapshot (docs/adr/0033)

    async def adopt(snapshot: Snapshot) -> None:
        release["active"] = snapshot

    def active_release() -> dict[str, object] | None:
        held = release.get("active")
        if held is None:
            return None
        return {"catalog_revision": held.catalog_revision, "apps": held.content.get("apps", [])}

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with (
            following(
                "app",
                catalog_url=settings.upstream_url(Role.CATALOG.value),
                signer=signer,
                apply=adopt,
                interval_s=settings.api.app_catalog_poll_seconds,
            ),
            serving_dialect(app),
        ):
            yield

    @asynccontextmanager
    async def serving_dialect(app: FastAPI) -> AsyncIterator[None]:
        client = runtime_session(connections=RUNTIME_CONNECTIONS)
        runtime = RuntimeClient(
            signer=signer,
            session=client,
            base_url=runtime_url,
            timeout_s=settings.gateway.gateway_upstream_timeout_seconds,
        )
        dialect = Dialect(
            runtime=runtime,
            usage=ApiUsage(settings.api.api_daily_request_limit),
        )
        app.state.dialect = dialect
        reporter = asyncio.create_task(report_usage(dialect))
        try:
            yield
        finally:
            reporter.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reporter
            await dialect.usage.report(dialect.runtime)  # what this process counted last
            await client.close()

    app = create_role_app(
        OpsInfo(
            role=Role.APP.value,
            app=APP_NAME,
            capabilities=CAPABILITIES,
            release=active_release,
        ),
        lifespan=lifespan,
    )

    install_dialect_errors(app)

    @app.get(f"{PREFIX}/openapi.json", include_in_schema=False)
    async def openapi() -> JSONResponse:
        return JSONResponse(openapi_document())

    for router in ROUTERS:
        app.include_router(router)

    @app.api_route(f"{PREFIX}/{{rest:path}}", methods=ALL_METHODS, include_in_schema=False)
    async def unknown(rest: str) -> Response:
        del rest
        raise not_found()

    app.add_middleware(TrailingSlash)
    return app
