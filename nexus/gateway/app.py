"""The gateway role: static route table, streaming proxy, admission, aggregate readiness."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp
from fastapi import FastAPI
from starlette.types import Receive, Scope, Send

from nexus.contracts.errors import MethodNotAllowed, NexusError, NotFound
from nexus.contracts.ops import CheckResult
from nexus.contracts.roles import Role
from nexus.gateway.proxy import Upstream, forward, upstream_session, upstream_timeout
from nexus.gateway.route_table import RouteTable, load_route_table
from nexus.gateway.static import StaticBundle, default_static_root
from nexus.platform.http import (
    OPS_PATHS,
    OpsInfo,
    ReadinessCheck,
    RequestContextMiddleware,
    create_role_app,
    error_response,
)
from nexus.platform.interpreter import tuned_for_serving
from nexus.platform.settings import Settings

CAPABILITIES = ("ops.v1", "route-table.v1", "proxy.streaming")
PROXY_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


def upstream_ready(
    upstreams: dict[str, Upstream], name: str, url: str, timeout: aiohttp.ClientTimeout
) -> ReadinessCheck:
    """Ready when the upstream's own /readyz answers 200 (not before the pool exists)."""

    async def check() -> CheckResult:
        result = CheckResult(name=f"upstream:{name}", ok=False, detail="starting")
        upstream = upstreams.get(name)
        if upstream is None:
            return result
        try:
            async with upstream.session.get(f"{url}/readyz", timeout=timeout) as reply:
                ok = reply.status == 200
        except TimeoutError:
            return result.model_copy(update={"detail": "timeout"})
        except aiohttp.ClientError as exc:
            return result.model_copy(update={"detail": f"unreachable ({type(exc).__name__})"})
        return result.model_copy(update={"ok": ok, "detail": "ready" if ok else "not ready"})

    return check


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
    upstreams: dict[str, Upstream] = {}  # filled once the pool exists (lifespan)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        session = upstream_session()
        upstreams.update(
            (name, Upstream(session, timeout, url, gw.gateway_body_limit_bytes))
            for name, url in upstream_urls.items()
        )
        try:
            with tuned_for_serving():
                yield
        finally:
            upstreams.clear()
            await session.close()

    info = OpsInfo(
        role=Role.GATEWAY.value,
        capabilities=CAPABILITIES,
        route_table_version=table.version,
        readiness_checks=[
            upstream_ready(upstreams, name, upstream_urls[name], readiness_timeout)
            for name in table.upstreams
        ],
    )
    app = create_role_app(info, lifespan=lifespan)

    async def proxy(scope: Scope, receive: Receive, send: Send) -> None:
        """Every path but the gateway's own ops endpoints: the route table decides."""
        request_id = scope["state"]["request_id"]
        path, method = scope["path"], scope["method"]
        route = table.match(path)
        allowed = route is not None and (
            (route.methods is None or method in route.methods)
            and (route.only is None or route.upstream_path(path) in route.only)
        )
        try:
            if method not in PROXY_METHODS:
                raise MethodNotAllowed(f"method {method} is not supported")
            if route is None or not allowed:
                raise NotFound(f"no route for {method} {path}")
            if route.static is not None:
                scope["nexus.route_label"] = f"static:{route.static}"
                response = bundles[route.static].serve(path, route.prefix)
                await response(scope, receive, send)
                return
            upstream = str(route.upstream)  # a route has exactly one of upstream and static
            scope["nexus.route_label"] = f"proxy:{upstream}"
            await forward(
                scope,
                receive,
                send,
                route=route,
                upstream=upstreams[upstream],
                request_id=request_id,
            )
        except NexusError as error:
            await error_response(error, request_id)(scope, receive, send)

    app.serve_ahead("/", RequestContextMiddleware(proxy, role=Role.GATEWAY.value), unless=OPS_PATHS)
    return app
