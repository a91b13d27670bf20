"""Streaming reverse proxy: one upstream request per client request, bodies never buffered.

Admission happens before a byte goes upstream: a declared Content-Length above the limit is a
413 at once; an undeclared (chunked) body is counted as it streams and the upstream request
is aborted as soon as it passes the limit. Connection failures are 502, timeouts 504, each
with the JSON error body every Nexus role uses.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
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

UPSTREAM_REQUESTS = Counter(
    "nexus_gateway_upstream_requests_total",
    "Requests proxied to an upstream, by upstream and status (or error kind)",
    ["upstream", "outcome"],
)

log = get_logger(__name__)


class _BodyTooLarge(Exception):
    pass


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


async def _limited_body(request: Request, limit: int) -> AsyncIterator[bytes]:
    seen = 0
    async for chunk in request.stream():
        seen += len(chunk)
        if seen > limit:
            raise _BodyTooLarge
        if chunk:
            yield chunk


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
    upstream_request = client.build_request(
        request.method,
        target,
        headers=_request_headers(request, request_id),
        content=_limited_body(request, body_limit) if _has_body(request) else None,
    )
    try:
        upstream = await client.send(upstream_request, stream=True)
    except _BodyTooLarge:
        UPSTREAM_REQUESTS.labels(route.upstream, "rejected_413").inc()
        raise PayloadTooLarge(f"request body exceeds the limit of {body_limit} bytes") from None
    except httpx.TimeoutException as exc:
        kind = "connect_timeout" if isinstance(exc, httpx.ConnectTimeout) else "timeout"
        UPSTREAM_REQUESTS.labels(route.upstream, kind).inc()
        log.warning("gateway.upstream_timeout", upstream=route.upstream, kind=kind)
        if isinstance(exc, httpx.ConnectTimeout):
            raise UpstreamError(f"upstream {route.upstream} is not reachable") from None
        raise UpstreamTimeout(f"upstream {route.upstream} did not answer in time") from None
    except httpx.HTTPError as exc:
        UPSTREAM_REQUESTS.labels(route.upstream, "unreachable").inc()
        log.warning("gateway.upstream_error", upstream=route.upstream, error=type(exc).__name__)
        raise UpstreamError(f"upstream {route.upstream} is not reachable") from None

    UPSTREAM_REQUESTS.labels(route.upstream, str(upstream.status_code)).inc()
    response_headers = [
        (k, v)
        for k, v in upstream.headers.multi_items()
        if k.lower() not in HOP_BY_HOP and k.lower() != REQUEST_ID_HEADER
    ]
    response = StreamingResponse(
        upstream.aiter_raw(),
        status_code=upstream.status_code,
        background=BackgroundTask(upstream.aclose),
    )
    response.raw_headers = [
        (k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in response_headers
    ]
    return response
