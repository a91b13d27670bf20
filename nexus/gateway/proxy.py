"""Streaming reverse proxy: one upstream request per client request, bodies never buffered
beyond 256 KiB.

Admission happens before a byte goes upstream: a declared Content-Length above the limit is a
413 at once; an undeclared (chunked) body is counted as it streams and the upstream request
is aborted as soon as it passes the limit. Connection failures are 502, timeouts 504, each
with the JSON error body every Nexus role uses. The HTTP/1.1 client underneath is
`nexus.gateway.upstream` (ADR 0051).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Any

from prometheus_client import Counter
from starlette.types import Receive, Scope, Send

from nexus.contracts.errors import (
    PayloadTooLarge,
    ServiceUnavailable,
    UpstreamError,
    UpstreamTimeout,
)
from nexus.gateway.route_table import Route
from nexus.gateway.upstream import (
    UpstreamConnection,
    UpstreamFailure,
    UpstreamPool,
    begin_exchange,
    exchange,
)
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
_INTERNAL_PREFIX_RAW = INTERNAL_HEADER_PREFIX.encode()
#: Client headers the gateway replaces when it writes the request: the body's framing
#: (Content-Length or chunked, as the gateway sends it) and `Expect` (the gateway has read,
#: or is streaming, the body already; the upstream must not answer 100 Continue).
_NOT_RELAYED_RAW = frozenset(name.encode() for name in _NOT_RELAYED | {"content-length", "expect"})
#: Methods whose requests carry a Content-Length even when the body is empty.
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})

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
_counters: dict[tuple[str, str], Any] = {}


def _count(upstream: str, outcome: str) -> None:
    """One more request for (upstream, outcome); the counter's children are looked up once."""
    child = _counters.get((upstream, outcome))
    if child is None:
        child = _counters[upstream, outcome] = UPSTREAM_REQUESTS.labels(upstream, outcome)
    child.inc()


class _BodyTooLarge(Exception):
    pass


class _ClientGone(Exception):
    pass


class UpstreamBrokeOff(Exception):
    """The upstream stopped in the middle of an answer already being relayed: the client's
    connection is closed with the answer cut short (nothing else can be done once it started)."""


def upstream_pools(
    urls: dict[str, str], *, connections: int, connect_timeout: float, read_timeout: float
) -> dict[str, UpstreamPool]:
    """One keep-alive pool per distinct upstream URL, keyed by URL (several route-table
    upstreams may share one). No cookies are kept (cookies pass through as plain headers, so
    one caller's Set-Cookie never rides along on another caller's request), nothing comes
    from the environment, nothing is decompressed: the client has none of those features.
    """
    return {
        url: UpstreamPool(
            url,
            limit=connections,
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
        )
        for url in dict.fromkeys(urls.values())
    }


@dataclass(frozen=True)
class Upstream:
    """Where a matched route goes: the upstream's pool (and its timeouts), the body limits
    (the second for routes marked `large_bodies`)."""

    pool: UpstreamPool
    body_limit: int
    large_body_limit: int


def _request_head(
    scope: Scope, request_id: str, target: bytes, host: bytes
) -> tuple[bytes, int | None, bool]:
    """The request line and headers sent upstream (without the body's framing header and
    the blank line), the declared body length, and whether the client sent a chunked body."""
    lines = [scope["method"].encode(), b" ", target, b" HTTP/1.1\r\nhost: ", host, b"\r\n"]
    declared: int | None = None
    chunked = False
    prior = client_host = b""
    for raw_name, value in scope["headers"]:
        name = raw_name.lower()
        if name == b"content-length":
            declared = int(value) if value.isdigit() else None
        elif name == b"transfer-encoding":
            chunked = True
        elif name == b"x-forwarded-for":
            prior = value
        elif name == b"host":
            client_host = value
        if name in _NOT_RELAYED_RAW or name.startswith(_INTERNAL_PREFIX_RAW):
            continue
        lines += (name, b": ", value, b"\r\n")
    client = scope.get("client")
    address = client[0].encode() if client else b""
    forwarded_for = prior + b", " + address if prior else address
    proto = scope.get("scheme", "http").encode()
    lines += (
        b"x-request-id: ",
        request_id.encode(),
        b"\r\nx-forwarded-for: ",
        forwarded_for,
        b"\r\nx-forwarded-proto: ",
        proto,
        b"\r\nx-forwarded-host: ",
        client_host,
        b"\r\n",
    )
    return b"".join(lines), declared, chunked


def _target(scope: Scope, route: Route, pool: UpstreamPool) -> bytes:
    """The upstream request target: the client's path as it sent it (no normalisation), with
    the route's rewrite and the upstream URL's own path in front, and the query string."""
    raw_path = scope.get("raw_path") or scope["path"].encode()
    path = pool.path_prefix + route.upstream_path(raw_path.decode("latin-1"))
    query = scope.get("query_string", b"")
    target = path.encode("latin-1")
    return target + b"?" + query if query else target


async def _client_body(receive: Receive, limit: int) -> AsyncGenerator[bytes, None]:
    """The client's body as it arrives, counted against `limit` (`_BodyTooLarge` past it;
    `_ClientGone` when the client disconnects first)."""
    seen = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _ClientGone
        chunk = message.get("body", b"")
        seen += len(chunk)
        if seen > limit:
            raise _BodyTooLarge
        yield chunk
        if not message.get("more_body", False):
            return


async def _read_declared(receive: Receive, declared: int) -> bytes:
    """A body of declared length, read whole (at most the body limit): sent upstream in the
    same write as the request head."""
    parts = [chunk async for chunk in _client_body(receive, declared)]
    return parts[0] if len(parts) == 1 else b"".join(parts)


async def _send_streamed(
    pool: UpstreamPool,
    head: bytes,
    receive: Receive,
    *,
    declared: int | None,
    limit: int,
    head_only: bool,
) -> UpstreamConnection:
    """Stream the client's body upstream as it arrives (sized, or chunked when the client
    declared no length), counted against the limit; wait for the answer's head.

    Past the limit, or when the client goes away, the upstream connection is aborted: the
    upstream sees a cut-off request, never a complete one. Never retried: the body is gone.
    """
    conn = await begin_exchange(pool, head_only=head_only)
    try:
        chunked = declared is None
        if declared is None:
            framing = b"transfer-encoding: chunked\r\n\r\n"
        else:
            framing = b"content-length: %d\r\n\r\n" % declared
        conn.write(head + framing)
        async with contextlib.aclosing(_client_body(receive, limit)) as body:
            async for chunk in body:
                if conn.closed:  # an upstream that answered early and closed takes no more
                    break
                if chunk:
                    conn.write(b"%x\r\n%b\r\n" % (len(chunk), chunk) if chunked else chunk)
                    await conn.drain()
            else:
                if chunked:
                    conn.write(b"0\r\n\r\n")
        await conn.read_head()
    except BaseException:
        conn.abort()
        pool.release(conn)
        raise
    return conn


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
    pool = upstream.pool
    method = scope["method"]
    head_only = method == "HEAD"
    head, declared, chunked = _request_head(
        scope, request_id, _target(scope, route, pool), pool.host_header
    )
    limit = upstream.large_body_limit if route.large_bodies else upstream.body_limit
    if declared is not None and declared > limit:
        _count(name, "rejected_413")
        raise PayloadTooLarge(f"request body exceeds the limit of {limit} bytes")
    try:
        if chunked or (declared is not None and declared > BUFFERED_REQUEST_LIMIT):
            conn = await _send_streamed(
                pool, head, receive, declared=declared, limit=limit, head_only=head_only
            )
        else:
            body = await _read_declared(receive, declared) if declared else b""
            if body or method in _BODY_METHODS:
                head += b"content-length: %d\r\n" % len(body)
            conn = await exchange(pool, method, head + b"\r\n" + body, head_only=head_only)
    except _ClientGone:
        _count(name, "client_gone")
        return
    except _BodyTooLarge:
        _count(name, "rejected_413")
        raise PayloadTooLarge(f"request body exceeds the limit of {limit} bytes") from None
    except UpstreamFailure as failure:
        _count(name, failure.kind)
        log.warning("gateway.upstream_failed", upstream=name, kind=failure.kind)
        if failure.kind == "timeout":
            raise UpstreamTimeout(f"upstream {name} did not answer in time") from None
        if failure.kind == "busy":
            raise ServiceUnavailable(f"upstream {name} is busy; retry later") from None
        raise UpstreamError(f"upstream {name} is not reachable") from None
    try:
        await _relay_answer(send, conn, name, head_only=head_only)
    finally:
        pool.release(conn)


async def _relay_answer(
    send: Send, conn: UpstreamConnection, name: str, *, head_only: bool
) -> None:
    _count(name, str(conn.status))
    headers = [(k, v) for k, v in conn.headers if k not in _RESPONSE_SKIPPED_RAW]
    length = conn.content_length
    if head_only or conn.complete or (length is not None and length <= BUFFERED_RESPONSE_LIMIT):
        # Small, sized answers (and any answer already in whole) go out in one body message.
        try:
            content = await conn.read_body()
        except UpstreamFailure:
            _count(name, "broken_response")
            raise UpstreamError(f"upstream {name} broke off its answer") from None
        await send({"type": "http.response.start", "status": conn.status, "headers": headers})
        await send({"type": "http.response.body", "body": content})
        return
    await send({"type": "http.response.start", "status": conn.status, "headers": headers})
    try:
        while chunk := await conn.next_chunk():
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
    except UpstreamFailure:
        # the answer has started: all that can be done is to end it short (the client sees
        # a body shorter than declared, or an unterminated chunked body)
        _count(name, "broken_response")
        log.warning("gateway.upstream_broke_off", upstream=name)
        raise UpstreamBrokeOff(f"upstream {name} broke off its answer") from None
    await send({"type": "http.response.body", "body": b""})
