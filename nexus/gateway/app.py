"""The gateway role: static route table, streaming proxy, admission, aggregate readiness."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp
from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from nexus.contracts.errors import NexusError, NotFound
from nexus.contracts.ops import CheckResult
from nexus.contracts.roles import Role
from nexus.gateway.proxy import forward, upstream_session, upstream_timeout
from nexus.gateway.route_table import RouteTable, load_route_table
from nexus.gateway.static import StaticBundle, default_static_root
from nexus.platform.http import OpsInfo, ReadinessCheck, create_role_app, error_response
from nexus.platform.settings import Settings

CAPABILITIES = ("ops.v1", "route-table.v1", "proxy.streaming")
PROXY_METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]


def create_app(settings: Settings, *, route_table: RouteTable | None = None) -> FastAPI:
    table = route_table or load_route_table()
    upstream_urls = {name: settings.upstream_url(name) for name in table.upstreams}
    gw = settings.gateway
    static_root = gw.gateway_static_root or default_static_root()
    bundles = {name: StaticBundle(name, static_root) for name in table.static_bundles}
    timeout = upstream_timeout(
        timeout=gw.gateway_upstream_timeout_seconds,
        connect_timeout=gw.gateway_connect_timeout_seconds,
    )
    readiness_timeout = aiohttp.ClientTimeout(total=gw.gateway_readiness_timeout_seconds)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.session = upstream_session()
        try:
            yield
        finally:
            await app.state.session.close()

    def upstream_ready(name: str) -> ReadinessCheck:
        async def check() -> CheckResult:
            result = CheckResult(name=f"upstream:{name}", ok=False, detail="starting")
            session: aiohttp.ClientSession | None = getattr(app.state, "session", None)
            if session is None:
                return result
            try:
                async with session.get(
                    f"{upstream_urls[name]}/readyz", timeout=readiness_timeout
                ) as reply:
                    ok = reply.status == 200
            except TimeoutError:
                return result.model_copy(update={"detail": "timeout"})
            except aiohttp.ClientError as exc:
                return result.model_copy(update={"detail": f"unreachable ({type(exc).__name__})"})
            return result.model_copy(update={"ok": ok, "detail": "ready" if ok else "not ready"})

        return check

    info = OpsInfo(
        role=Role.GATEWAY.value,
        capabilities=CAPABILITIES,
        route_table_version=table.version,
        readiness_checks=[upstream_ready(name) for name in table.upstreams],
    )
    app = create_role_app(info, lifespan=lifespan)

    @app.api_route("/{path:path}", methods=PROXY_METHODS, include_in_schema=False)
    async def proxy(request: Request) -> Response:
        route = table.match(request.url.path)
        allowed = route is not None and (
            (route.methods is None or request.method in route.methods)
            and (route.only is None or route.upstream_path(request.url.path) in route.only)
        )
        if route is None or not allowed:
            raise NotFound(f"no route for {request.method} {request.url.path}")
        if route.static is not None:
            request.scope["nexus.route_label"] = f"static:{route.static}"
            return bundles[route.static].serve(request.url.path, route.prefix)
        upstream = str(route.upstream)  # a route has exactly one of upstream and static
        request.scope["nexus.route_label"] = f"proxy:{upstream}"
        return await forward(
            request,
            session=app.state.session,
            upstream_limits=timeout,
            route=route,
            base_url=upstream_urls[upstream],
            body_limit=gw.gateway_body_limit_bytes,
            request_id=request.state.request_id,
        )

    async def unrouted(request: Request, exc: Exception) -> Response:
        """A path the catch-all pattern cannot take (one with a line break in it) is still
        the route table's to decide: proxied when a route matches, else the 404 envelope."""
        if not isinstance(exc, StarletteHTTPException):  # pragma: no cover - registered so
            raise exc
        if exc.status_code != 404:
            return JSONResponse(
                {"code": "METHOD_NOT_ALLOWED", "message": "method not allowed"}, 405
            )
        try:
            return await proxy(request)
        except NexusError as error:
            return error_response(error, getattr(request.state, "request_id", None))

    app.add_exception_handler(StarletteHTTPException, unrouted)
    return app
