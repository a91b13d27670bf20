"""The gateway role: static route table, streaming proxy, admission, aggregate readiness."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from fastapi import FastAPI
from starlette.types import Receive, Scope, Send

from nexus.contracts.errors import MethodNotAllowed, NexusError, NotFound
from nexus.contracts.ops import CheckResult
from nexus.contracts.roles import Role
from nexus.gateway.proxy import UPSTREAM_POOL_LIMIT, Upstream, forward, upstream_pools
from nexus.gateway.route_table import Route, RouteTable, load_route_table
from nexus.gateway.static import StaticBundle, default_static_root
from nexus.gateway.upstream import UpstreamFailure, exchange
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
#: Paths whose route is remembered (most recently used), and the longest path remembered:
#: matching walks every route's prefixes (~20 us for a webhook path), and the hot paths
#: (webhooks, the dialect's endpoints) repeat.
ROUTE_CACHE_PATHS = 4096
ROUTE_CACHE_MAX_PATH = 256


def cached_matcher(table: RouteTable) -> Callable[[str], Route | None]:
    """`table.match` with its answers for short paths remembered (the table never changes
    while the gateway runs, and a route depends on nothing but the path)."""
    remembered = functools.lru_cache(maxsize=ROUTE_CACHE_PATHS)(table.match)

    def match(path: str) -> Route | None:
        return remembered(path) if len(path) <= ROUTE_CACHE_MAX_PATH else table.match(path)

    return match


def upstream_ready(upstreams: dict[str, Upstream], name: str, timeout: float) -> ReadinessCheck:
    """Ready when the upstream's own /readyz answers 200 within `timeout` seconds (not
    before the pool exists); probes go through the relay's own pool."""

    async def check() -> CheckResult:
        result = CheckResult(name=f"upstream:{name}", ok=False, detail="starting")
        upstream = upstreams.get(name)
        if upstream is None:
            return result
        try:
            async with asyncio.timeout(timeout):
                ok = await _answers_200(upstream, "/readyz")
        except TimeoutError:
            return result.model_copy(update={"detail": "timeout"})
        except UpstreamFailure as failure:
            detail = "timeout" if failure.kind == "timeout" else f"unreachable ({failure.kind})"
            return result.model_copy(update={"detail": detail})
        return result.model_copy(update={"ok": ok, "detail": "ready" if ok else "not ready"})

    return check


async def _answers_200(upstream: Upstream, path: str) -> bool:
    pool = upstream.pool
    request = b"GET %b%b HTTP/1.1\r\nhost: %b\r\n\r\n" % (
        pool.path_prefix.encode("latin-1"),
        path.encode(),
        pool.host_header,
    )
    conn = await exchange(pool, "GET", request, head_only=False)
    try:
        await conn.read_body()
        return conn.status == 200
    finally:
        pool.release(conn)


def create_app(settings: Settings, *, route_table: RouteTable | None = None) -> FastAPI:
    table = route_table or load_route_table()
    upstream_urls = {name: settings.upstream_url(name) for name in table.upstreams}
    gw = settings.gateway
    static_root = gw.gateway_static_root or default_static_root()
    bundles = {name: StaticBundle(name, static_root) for name in table.static_bundles}
    upstreams: dict[str, Upstream] = {}  # filled once the pools exist (lifespan)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        pools = upstream_pools(
            upstream_urls,
            connections=UPSTREAM_POOL_LIMIT,
            connect_timeout=gw.gateway_connect_timeout_seconds,
            read_timeout=gw.gateway_upstream_timeout_seconds,
        )
        upstreams.update(
            (name, Upstream(pools[url], gw.gateway_body_limit_bytes))
            for name, url in upstream_urls.items()
        )
        try:
            with tuned_for_serving():
                yield
        finally:
            upstreams.clear()
            for pool in pools.values():
                await pool.close()

    info = OpsInfo(
        role=Role.GATEWAY.value,
        capabilities=CAPABILITIES,
        route_table_version=table.version,
        readiness_checks=[
            upstream_ready(upstreams, name, gw.gateway_readiness_timeout_seconds)
            for name in table.upstreams
        ],
    )
    app = create_role_app(info, lifespan=lifespan)
    match_route = cached_matcher(table)

    async def proxy(scope: Scope, receive: Receive, send: Send) -> None:
        """Every path but the gateway's own ops endpoints: the route table decides."""
        request_id = scope["state"]["request_id"]
        path, method = scope["path"], scope["method"]
        route = match_route(path)
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
