"""Streaming reverse proxy: one upstream request per client request, bodies never buffered.

Admission happens before a byte goes upstream: a declared Content-Length above the limit is a
413 at once; an undeclared (chunked) body is counted as it streams and the upstream request
is aborted as soon as it passes the limit. Connection failures are 502, timeouts 504, each
with the JSON error body every Nexus role uses.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from http.cookiejar import CookieJar, DefaultCookiePolicy

import aiohttp
import httpx
from httpx_aiohttp import AiohttpTransport
from prometheus_client import Counter
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from nexus.contracts.errors import PayloadTooLarge, UpstreamError, UpstreamTimeout
from nexus.gateway.route_table import Route
from nexus.platform.http import REQUEST_ID_HEADER
from nexus.platform.observability import get_logger

HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
        "host",
    }
)
#: Headers that only Nexus roles set for one another; a client can never supply them.
INTERNAL_HEADER_PREFIX = "x-nexus-"

UPSTREAM_POOL_LIMIT = 512
#: Upstream answers up to this size (declared by Content-Length) are relayed in one piece.
BUFFERED_RESPONSE_LIMIT = 256 * 1024

UPSTREAM_REQUESTS = Counter(
    "nexus_gateway_upstream_requests_total",
    "Requests proxied to an upstream, by upstream and status (or error kind)",
    ["upstream", "outcome"],
)

log = get_logger(__name__)


class _BodyTooLarge(Exception):
    pass


class _LimitedBody:
    """The client's body, counted as it streams; remembers when it passed the limit (the
    HTTP client may wrap the exception raised from inside the stream)."""

    def __init__(self, request: Request, limit: int) -> None:
        self.request = request
        self.limit = limit
        self.exceeded = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        seen = 0
        async for chunk in self.request.stream():
            seen += len(chunk)
            if seen > self.limit:
                self.exceeded = True
                raise _BodyTooLarge
            if chunk:
                yield chunk


def _failure_kind(exc: BaseException) -> str:
    """Classify a failed upstream exchange: `connect` (502), `timeout` (504), `broken` (502).

    Looks through the exception chain, since the transport wraps its own exceptions.
    """
    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and len(chain) < 8:
        chain.append(current)
        current = current.__cause__ or current.__context__
    if any(
        isinstance(e, aiohttp.ConnectionTimeoutError | aiohttp.ClientConnectorError) for e in chain
    ):
        return "connect"
    if any(isinstance(e, aiohttp.ServerTimeoutError | TimeoutError) for e in chain):
        return "timeout"
    if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout) and len(chain) == 1:
        return "connect"
    if isinstance(exc, httpx.TimeoutException):
        return "timeout"
    return "broken"


def _never_stored() -> CookieJar:
    """A cookie jar that refuses every cookie: the gateway is shared by all callers, so one
    caller's Set-Cookie must never ride along on another caller's request."""
    return CookieJar(policy=DefaultCookiePolicy(allowed_domains=[]))


def upstream_client(*, timeout: float, connect_timeout: float) -> httpx.AsyncClient:
    """The gateway's one upstream client: httpx's API over an aiohttp connection pool.

    Neither layer keeps cookies; cookies pass through as plain headers.

    httpcore's pool costs grow with the number of pooled connections (measured here: 250
    req/s at 32 concurrent requests against 3,000 with aiohttp's pool); see ADR 0007.
    """
    transport = AiohttpTransport(
        client=lambda: aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=UPSTREAM_POOL_LIMIT, keepalive_timeout=30),
            auto_decompress=False,
            trust_env=False,
            cookie_jar=aiohttp.DummyCookieJar(),
        )
    )
    return httpx.AsyncClient(
        transport=transport,
        cookies=_never_stored(),
        timeout=httpx.Timeout(timeout, connect=connect_timeout),
        follow_redirects=False,
        trust_env=False,
    )


def _request_headers(request: Request, request_id: str) -> list[tuple[str, str]]:
    headers = [
        (k, v)
        for k, v in request.headers.items()
        if k not in HOP_BY_HOP
        and not k.startswith(INTERNAL_HEADER_PREFIX)
        and k not in (REQUEST_ID_HEADER, "x-forwarded-for", "x-forwarded-proto", "x-forwarded-host")
    ]
    client = request.client.host if request.client else ""
    prior = request.headers.get("x-forwarded-for")
    headers += [
        (REQUEST_ID_HEADER, request_id),
        ("x-forwarded-for", f"{prior}, {client}" if prior else client),
        ("x-forwarded-proto", request.url.scheme),
        ("x-forwarded-host", request.headers.get("host", "")),
    ]
    return headers


def _has_body(request: Request) -> bool:
    length = request.headers.get("content-length")
    return bool(length and length != "0") or "transfer-encoding" in request.headers


async def forward(
    request: Request,
    *,
    client: httpx.AsyncClient,
    route: Route,
    base_url: str,
    body_limit: int,
    request_id: str,
) -> Response:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > body_limit:
        UPSTREAM_REQUESTS.labels(route.upstream, "rejected_413").inc()
        raise PayloadTooLarge(f"request body exceeds the limit of {body_limit} bytes")

    raw_path = request.scope.get("raw_path") or request.url.path.encode()
    path = route.upstream_path(raw_path.decode("latin-1"))
    query = request.scope.get("query_string", b"")
    target = httpx.URL(base_url).copy_with(
        raw_path=path.encode("latin-1") + (b"?" + query if query else b"")
    )
    body = _LimitedBody(request, body_limit) if _has_body(request) else None
    upstream_request = client.build_request(
        request.method, target, headers=_request_headers(request, request_id), content=body
    )
    try:
        upstream = await client.send(upstream_request, stream=True)
    except (httpx.HTTPError, aiohttp.ClientError, _BodyTooLarge, TimeoutError) as exc:
        if body is not None and body.exceeded:
            UPSTREAM_REQUESTS.labels(route.upstream, "rejected_413").inc()
            raise PayloadTooLarge(f"request body exceeds the limit of {body_limit} bytes") from None
        kind = _failure_kind(exc)
        UPSTREAM_REQUESTS.labels(route.upstream, kind).inc()
        log.warning("gateway.upstream_failed", upstream=route.upstream, kind=kind)
        if kind == "timeout":
            raise UpstreamTimeout(f"upstream {route.upstream} did not answer in time") from None
        raise UpstreamError(f"upstream {route.upstream} is not reachable") from None

    UPSTREAM_REQUESTS.labels(route.upstream, str(upstream.status_code)).inc()
    response_headers = [
        (k, v)
        for k, v in upstream.headers.multi_items()
        if k.lower() not in HOP_BY_HOP and k.lower() != REQUEST_ID_HEADER
    ]
    declared_length = upstream.headers.get("content-length", "")
    if declared_length.isdigit() and int(declared_length) <= BUFFERED_RESPONSE_LIMIT:
        # Small, sized answers are read whole: no streaming task per response.
        try:
            content = b"".join([chunk async for chunk in upstream.aiter_raw()])
        except (httpx.HTTPError, aiohttp.ClientError, TimeoutError):
            UPSTREAM_REQUESTS.labels(route.upstream, "broken_response").inc()
            raise UpstreamError(f"upstream {route.upstream} broke off its answer") from None
        finally:
            await upstream.aclose()
        response: Response = Response(content, status_code=upstream.status_code)
    else:
        response = StreamingResponse(
            upstream.aiter_raw(),
            status_code=upstream.status_code,
            background=BackgroundTask(upstream.aclose),
        )
    response.raw_headers = [
        (k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in response_headers
    ]
    return response
