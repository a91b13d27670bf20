"""Streaming reverse proxy: one upstream request per client request, bodies never buffered.

Admission happens before a byte goes upstream: a declared Content-Length above the limit is a
413 at once; an undeclared (chunked) body is counted as it streams and the upstream request
is aborted as soon as it passes the limit. Connection failures are 502, timeouts 504, each
with the JSON error body every Nexus role uses.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import yarl
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
#: Upstream answer headers the gateway does not relay (it sets its own request id).
RESPONSE_SKIPPED = HOP_BY_HOP | {REQUEST_ID_HEADER}
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
    """Classify a failed upstream exchange: `connect` (502), `timeout` (504), `broken` (502)."""
    if isinstance(exc, aiohttp.ConnectionTimeoutError | aiohttp.ClientConnectorError):
        return "connect"
    if isinstance(exc, TimeoutError):  # aiohttp's read timeouts are TimeoutErrors too
        return "timeout"
    return "broken"


def upstream_session(*, connections: int = UPSTREAM_POOL_LIMIT) -> aiohttp.ClientSession:
    """The gateway's one upstream pool: aiohttp, no cookie jar (cookies pass through as plain
    headers, so one caller's Set-Cookie never rides along on another caller's request), no
    proxies or settings from the environment, no decompression.

    httpcore's pool costs grow with the number of pooled connections (ADR 0007); httpx's API
    on top of aiohttp cost about a third of the gateway's CPU per proxied request (ADR 0035).
    """
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=connections, keepalive_timeout=30),
        auto_decompress=False,
        trust_env=False,
        cookie_jar=aiohttp.DummyCookieJar(),
    )


def upstream_timeout(*, timeout: float, connect_timeout: float) -> aiohttp.ClientTimeout:
    """`timeout` between reads of the upstream's answer, `connect_timeout` to connect."""
    return aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout, sock_read=timeout)


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
    session: aiohttp.ClientSession,
    upstream_limits: aiohttp.ClientTimeout,
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
    query = request.scope.get("query_string", b"").decode("latin-1")
    target = yarl.URL(base_url + path + ("?" + query if query else ""))
    body = _LimitedBody(request, body_limit) if _has_body(request) else None
    try:
        upstream = await session.request(
            request.method,
            target,
            headers=_request_headers(request, request_id),
            data=body,
            allow_redirects=False,
            compress=None,
            timeout=upstream_limits,
        )
    except (aiohttp.ClientError, _BodyTooLarge, TimeoutError) as exc:
        if body is not None and body.exceeded:
            UPSTREAM_REQUESTS.labels(route.upstream, "rejected_413").inc()
            raise PayloadTooLarge(f"request body exceeds the limit of {body_limit} bytes") from None
        kind = _failure_kind(exc)
        UPSTREAM_REQUESTS.labels(route.upstream, kind).inc()
        log.warning("gateway.upstream_failed", upstream=route.upstream, kind=kind)
        if kind == "timeout":
            raise UpstreamTimeout(f"upstream {route.upstream} did not answer in time") from None
        raise UpstreamError(f"upstream {route.upstream} is not reachable") from None

    UPSTREAM_REQUESTS.labels(route.upstream, str(upstream.status)).inc()
    raw_headers = [
        (k.lower(), v)
        for k, v in upstream.raw_headers
        if k.lower().decode("latin-1") not in RESPONSE_SKIPPED
    ]
    if upstream.content_length is not None and upstream.content_length <= BUFFERED_RESPONSE_LIMIT:
        # Small, sized answers are read whole: no streaming task per response.
        try:
            content = await upstream.read()
        except (aiohttp.ClientError, TimeoutError):
            UPSTREAM_REQUESTS.labels(route.upstream, "broken_response").inc()
            raise UpstreamError(f"upstream {route.upstream} broke off its answer") from None
        finally:
            upstream.release()
        response: Response = Response(content, status_code=upstream.status)
    else:
        response = StreamingResponse(
            _relay(upstream),
            status_code=upstream.status,
            background=BackgroundTask(upstream.release),
        )
    response.raw_headers = raw_headers
    return response


async def _relay(upstream: aiohttp.ClientResponse) -> AsyncIterator[bytes]:
    async for chunk in upstream.content.iter_any():
        yield chunk
