"""Streaming reverse proxy: one upstream request per client request, bodies never buffered.

Admission happens before a byte goes upstream: a declared Content-Length above the limit is a
413 at once; an undeclared (chunked) body is counted as it streams and the upstream request
is aborted as soon as it passes the limit. Connection failures are 502, timeouts 504, each
with the JSON error body every Nexus role uses.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import aiohttp
import yarl
from prometheus_client import Counter
from starlette.types import Receive, Scope, Send

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
_RESPONSE_SKIPPED_RAW = frozenset(name.encode() for name in RESPONSE_SKIPPED)
#: Client headers never relayed as they are (the gateway writes its own x-forwarded-*).
_NOT_RELAYED = HOP_BY_HOP | {
    REQUEST_ID_HEADER,
    "x-forwarded-for",
    "x-forwarded-proto",
    "x-forwarded-host",
}
#: Headers that only Nexus roles set for one another; a client can never supply them.
INTERNAL_HEADER_PREFIX = "x-nexus-"

UPSTREAM_POOL_LIMIT = 512
#: Upstream answers up to this size (declared by Content-Length) are relayed in one piece.
BUFFERED_RESPONSE_LIMIT = 256 * 1024
#: Request bodies up to this size (declared by Content-Length) are read, then sent in one piece.
BUFFERED_REQUEST_LIMIT = 256 * 1024

UPSTREAM_REQUESTS = Counter(
    "nexus_gateway_upstream_requests_total",
    "Requests proxied to an upstream, by upstream and status (or error kind)",
    ["upstream", "outcome"],
)

log = get_logger(__name__)


class _BodyTooLarge(Exception):
    pass


class _ClientGone(Exception):
    pass


class _LimitedBody:
    """The client's body, counted as it streams; remembers when it passed the limit (the
    HTTP client may wrap the exception raised from inside the stream)."""

    def __init__(self, receive: Receive, limit: int) -> None:
        self.receive = receive
        self.limit = limit
        self.exceeded = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        seen = 0
        while True:
            message = await self.receive()
            if message["type"] == "http.disconnect":
                raise _ClientGone
            chunk = message.get("body", b"")
            seen += len(chunk)
            if seen > self.limit:
                self.exceeded = True
                raise _BodyTooLarge
            if chunk:
                yield chunk
            if not message.get("more_body", False):
                return


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


@dataclass(frozen=True)
class Upstream:
    """Where a matched route goes and how: the pool, its limits, the body limit."""

    session: aiohttp.ClientSession
    limits: aiohttp.ClientTimeout
    base_url: str
    body_limit: int


def _request_headers(
    scope: Scope, request_id: str
) -> tuple[list[tuple[str, str]], int | None, bool]:
    """The headers sent upstream, the declared body length, and whether a body follows."""
    headers: list[tuple[str, str]] = []
    declared: int | None = None
    chunked = False
    prior = host = ""
    for raw_name, raw_value in scope["headers"]:
        name = raw_name.decode("latin-1").lower()
        value = raw_value.decode("latin-1")
        if name == "content-length":
            declared = int(value) if value.isdigit() else None
        elif name == "transfer-encoding":
            chunked = True
        elif name == "x-forwarded-for":
            prior = value
        elif name == "host":
            host = value
        if name in _NOT_RELAYED or name.startswith(INTERNAL_HEADER_PREFIX):
            continue
        headers.append((name, value))
    client = scope.get("client")
    address = client[0] if client else ""
    headers += [
        (REQUEST_ID_HEADER, request_id),
        ("x-forwarded-for", f"{prior}, {address}" if prior else address),
        ("x-forwarded-proto", scope.get("scheme", "http")),
        ("x-forwarded-host", host),
    ]
    return headers, declared, chunked or bool(declared)


async def _read_declared(receive: Receive, declared: int) -> bytes:
    """A body of declared length, read whole (at most the body limit): sent upstream in one
    piece instead of streamed through a payload wrapper."""
    parts: list[bytes] = []
    seen = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _ClientGone
        chunk = message.get("body", b"")
        seen += len(chunk)
        if seen > declared:
            raise _BodyTooLarge
        parts.append(chunk)
        if not message.get("more_body", False):
            return b"".join(parts)


async def forward(
    scope: Scope,
    receive: Receive,
    send: Send,
    *,
    route: Route,
    upstream: Upstream,
    request_id: str,
) -> None:
    """Relay one request to `upstream` and its answer back; failures raise `NexusError`s
    (answered by the caller) as long as nothing of the answer has been sent."""
    name = str(route.upstream)
    headers, declared, has_body = _request_headers(scope, request_id)
    limit = upstream.body_limit
    if declared is not None and declared > limit:
        UPSTREAM_REQUESTS.labels(name, "rejected_413").inc()
        raise PayloadTooLarge(f"request body exceeds the limit of {limit} bytes")
    raw_path = scope.get("raw_path") or scope["path"].encode()
    path = route.upstream_path(raw_path.decode("latin-1"))
    query = scope.get("query_string", b"").decode("latin-1")
    target = yarl.URL(upstream.base_url + path + ("?" + query if query else ""))
    streamed: _LimitedBody | None = None
    body: bytes | _LimitedBody | None = None
    try:
        if declared is not None and declared <= BUFFERED_REQUEST_LIMIT:
            body = await _read_declared(receive, declared)
        elif has_body:
            body = streamed = _LimitedBody(receive, limit)
        answer = await upstream.session.request(
            scope["method"],
            target,
            headers=headers,
            data=body,
            allow_redirects=False,
            compress=None,
            timeout=upstream.limits,
        )
    except _ClientGone:
        UPSTREAM_REQUESTS.labels(name, "client_gone").inc()
        return
    except (aiohttp.ClientError, _BodyTooLarge, TimeoutError) as exc:
        if isinstance(exc, _BodyTooLarge) or (streamed is not None and streamed.exceeded):
            UPSTREAM_REQUESTS.labels(name, "rejected_413").inc()
            raise PayloadTooLarge(f"request body exceeds the limit of {limit} bytes") from None
        kind = _failure_kind(exc)
        UPSTREAM_REQUESTS.labels(name, kind).inc()
        log.warning("gateway.upstream_failed", upstream=name, kind=kind)
        if kind == "timeout":
            raise UpstreamTimeout(f"upstream {name} did not answer in time") from None
        raise UpstreamError(f"upstream {name} is not reachable") from None
    try:
        await _relay_answer(send, answer, name, head_only=scope["method"] == "HEAD")
    finally:
        answer.release()


async def _relay_answer(
    send: Send, answer: aiohttp.ClientResponse, name: str, *, head_only: bool
) -> None:
    UPSTREAM_REQUESTS.labels(name, str(answer.status)).inc()
    headers = [
        (k.lower(), v) for k, v in answer.raw_headers if k.lower() not in _RESPONSE_SKIPPED_RAW
    ]
    sized = answer.content_length is not None and answer.content_length <= BUFFERED_RESPONSE_LIMIT
    if sized or head_only:
        # Small, sized answers are read whole: one body message, no streaming.
        try:
            content = b"" if head_only else await answer.read()
        except (aiohttp.ClientError, TimeoutError):
            UPSTREAM_REQUESTS.labels(name, "broken_response").inc()
            raise UpstreamError(f"upstream {name} broke off its answer") from None
        await send({"type": "http.response.start", "status": answer.status, "headers": headers})
        await send({"type": "http.response.body", "body": content})
        return
    await send({"type": "http.response.start", "status": answer.status, "headers": headers})
    try:
        async for chunk in answer.content.iter_any():
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
    except (aiohttp.ClientError, TimeoutError):
        # the answer has started: all that can be done is to end it short (the client sees
        # a body shorter than declared, or an unterminated chunked body)
        UPSTREAM_REQUESTS.labels(name, "broken_response").inc()
        log.warning("gateway.upstream_broke_off", upstream=name)
        raise
    await send({"type": "http.response.body", "body": b""})
