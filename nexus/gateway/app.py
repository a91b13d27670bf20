"""The gateway role: static route table, streaming proxy, admission, aggregate readiness."""

from __future__ import annotations

import asyncio
import functools
import hmac
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from fastapi import FastAPI
from pydantic import SecretStr
from starlette.types import Receive, Scope, Send

from nexus.contracts.errors import MethodNotAllowed, NexusError, NotFound, Unauthorized
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
from nexus.platform.operator_gate import bearer
from nexus.platform.settings import Settings

CAPABILITIES = ("ops.v1", "route-table.v1", "proxy.streaming")
PROXY_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
#: Runs of slashes in a request path, collapsed to one before routing.
DOUBLE_SLASHES = re.compile(r"/{2,}")
DOUBLE_SLASHES_RAW = re.compile(rb"/{2,}")
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


def ops_token_guard(token: SecretStr | None) -> Callable[[str | None], None]:
    """What the gateway's public port asks before its /metrics and /version (and a route's
    `ops_token_only` sub-paths) answer: `Authorization: Bearer <NEXUS_GATEWAY_OPS_TOKEN>`,
    compared in constant time. Unset, nobody gets them (401); each role's own port still
    serves its /metrics and /version to the internal network."""
    expected = token.get_secret_value().encode() if token is not None else None

    def guard(authorization: str | None) -> None:
        given = bearer(authorization)
        if expected is None or given is None or not hmac.compare_digest(given.encode(), expected):
            raise Unauthorized(
                "this endpoint needs the gateway's ops token (NEXUS_GATEWAY_OPS_TOKEN) "
                "as a bearer token",
                code="INVALID_OPS_TOKEN",
            )

    return guard


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
            (
                name,
                Upstream(
                    pools[url], gw.gateway_body_limit_bytes, gw.gateway_large_body_limit_bytes
                ),
            )
            for name, url in upstream_urls.items()
        )
        try:
            with tuned_for_serving():
                yield
        finally:
            upstreams.clear()
            for pool in pools.values():
                await pool.close()

    ops_guard = ops_token_guard(gw.gateway_ops_token)
    info = OpsInfo(
        role=Role.GATEWAY.value,
        capabilities=CAPABILITIES,
        route_table_version=table.version,
        readiness_checks=[
            upstream_ready(upstreams, name, gw.gateway_readiness_timeout_seconds)
            for name in table.upstreams
        ],
        ops_guard=ops_guard,
    )
    app = create_role_app(info, lifespan=lifespan)
    match_route = cached_matcher(table)

    async def proxy(scope: Scope, receive: Receive, send: Send) -> None:
        """Every path but the gateway's own ops endpoints: the route table decides."""
        request_id = scope["state"]["request_id"]
        if "//" in scope["path"]:
            scope = collapse_slashes(scope)
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
            # logs and metrics name the route-table entry, never the rest of the path
            if route.static is not None:
                scope["nexus.route_label"] = f"static:{route.static}:{route.prefix}"
                response = bundles[route.static].serve(path, route.prefix)
                await response(scope, receive, send)
                return
            upstream = str(route.upstream)  # a route has exactly one of upstream and static
            scope["nexus.route_label"] = f"proxy:{upstream}:{route.prefix}"
            if route.ops_token_only and route.upstream_path(path) in route.ops_token_only:
                ops_guard(_authorization(scope))
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


def collapse_slashes(scope: Scope) -> Scope:
    """`//services/data` is `/services/data`: clients that join an instance URL ending in `/`
    with a path starting with one (the `sf` CLI stores `https://host/`) reach the same route,
    and the upstream sees the path once, as a route-table match does."""
    raw = scope.get("raw_path") or scope["path"].encode()
    return dict(
        scope,
        path=DOUBLE_SLASHES.sub("/", scope["path"]),
        raw_path=DOUBLE_SLASHES_RAW.sub(b"/", raw),
    )


def _authorization(scope: Scope) -> str | None:
    for name, value in scope["headers"]:
        if name == b"authorization":
            return bytes(value).decode("latin-1")
    return None
