"""The gateway's own HTTP/1.1 upstream client (ADR 0051) against a scripted upstream.

The upstream is a raw asyncio server whose answers are written byte by byte, so the tests can
do what well-behaved frameworks never do: close idle keep-alive connections, answer
`Connection: close` or HTTP/1.0, break off mid-answer, answer without a length, go silent.
Every test goes through the real gateway app over real sockets, except the few that look at
the pool itself.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

import httpx
import pytest
import pytest_asyncio
from fastapi import FastAPI

from nexus.gateway.app import create_app as create_gateway_app
from nexus.gateway.upstream import UpstreamConnection, UpstreamFailure, UpstreamPool, exchange
from nexus.platform.settings import load_settings
from nexus.platform.tls import ensure_local_tls
from tests.support.servers import closed_port_url, serving, serving_client

pytestmark = pytest.mark.asyncio

BODY_LIMIT = 64 * 1024
READ_TIMEOUT = 0.5
UPSTREAM_FIELDS = (
    "runtime_api_url",
    "runtime_worker_url",
    "catalog_url",
    "integration_url",
    "app_sfcrm_url",
)
LARGE = bytes(range(256)) * 4096  # 1 MiB, every byte value, position-dependent


@dataclass
class Seen:
    """One request as the upstream read it."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    connection: int
    complete: bool = True


@dataclass
class ScriptedUpstream:
    """An HTTP/1.1 server whose answer to each path is a small script (see `answer`)."""

    requests: list[Seen] = field(default_factory=list)
    connections: int = 0
    closed_connections: int = 0
    bytes_sent: int = 0
    url: str = ""

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        connection = self.connections
        served = 0
        try:
            while True:
                seen = await self._read_request(reader, connection)
                if seen is None:
                    return
                self.requests.append(seen)
                if not seen.complete:
                    return
                keep = await self.answer(seen, writer, reused=served > 0)
                served += 1
                if not keep:
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            self.closed_connections += 1
            writer.close()

    async def _read_request(self, reader: asyncio.StreamReader, connection: int) -> Seen | None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            return None
        line, *header_lines = head.decode("latin-1").split("\r\n")[:-2]
        method, path, _ = line.split(" ")
        headers = {}
        for header in header_lines:
            name, _, value = header.partition(":")
            headers[name.strip().lower()] = value.strip()
        seen = Seen(method, path, headers, b"", connection)
        try:
            if "content-length" in headers:
                seen.body = await reader.readexactly(int(headers["content-length"]))
            elif headers.get("transfer-encoding") == "chunked":
                seen.body = await _read_chunked(reader)
        except (asyncio.IncompleteReadError, ConnectionError, ValueError):
            seen.complete = False
        return seen

    async def answer(self, seen: Seen, writer: asyncio.StreamWriter, *, reused: bool) -> bool:
        """Write the scripted answer for `seen.path`; whether the connection stays open."""
        name = seen.path.rsplit("/", 1)[-1].partition("?")[0]
        script = SCRIPTS.get(name, _ok)
        return await script(self, seen, writer, reused)

    def write(self, writer: asyncio.StreamWriter, data: bytes) -> None:
        self.bytes_sent += len(data)
        writer.write(data)


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    parts = []
    while True:
        size = int((await reader.readuntil(b"\r\n")).strip(), 16)
        if size == 0:
            await reader.readuntil(b"\r\n")
            return b"".join(parts)
        parts.append(await reader.readexactly(size))
        await reader.readexactly(2)


Script = Callable[[ScriptedUpstream, Seen, asyncio.StreamWriter, bool], Awaitable[bool]]


def _sized(status: str, body: bytes, *extra: str) -> bytes:
    headers = "".join(f"{h}\r\n" for h in extra)
    return f"HTTP/1.1 {status}\r\ncontent-length: {len(body)}\r\n{headers}\r\n".encode() + body


async def _ok(up: ScriptedUpstream, seen: Seen, w: asyncio.StreamWriter, reused: bool) -> bool:
    body = f'{{"path": "{seen.path}", "bytes": {len(seen.body)}, "conn": {seen.connection}}}'
    up.write(w, _sized("202 Accepted", body.encode(), "content-type: application/json"))
    return True


async def _close(up: ScriptedUpstream, seen: Seen, w: asyncio.StreamWriter, reused: bool) -> bool:
    up.write(w, _sized("200 OK", b"bye", "connection: close"))
    return True  # says close, keeps the socket open: only the client's rule stops reuse


async def _http10(up: ScriptedUpstream, seen: Seen, w: asyncio.StreamWriter, reused: bool) -> bool:
    up.write(w, b"HTTP/1.0 200 OK\r\ncontent-length: 4\r\n\r\nold!")
    return True  # keeps the socket open: only the client's rule stops reuse


async def _idle_close(
    up: ScriptedUpstream, seen: Seen, w: asyncio.StreamWriter, reused: bool
) -> bool:
    """Answers with keep-alive, then closes the connection while it is idle in the pool."""
    up.write(w, _sized("200 OK", b"once"))
    await w.drain()
    await asyncio.sleep(0.05)
    return False


async def _drop_reused(
    up: ScriptedUpstream, seen: Seen, w: asyncio.StreamWriter, reused: bool
) -> bool:
    """On a reused connection: reads the request and closes without a byte of answer (an
    upstream closing an idle connection just as a request was written to it)."""
    if reused:
        return False
    up.write(w, _sized("200 OK", b"first"))
    return True


async def _chunked(up: ScriptedUpstream, seen: Seen, w: asyncio.StreamWriter, reused: bool) -> bool:
    up.write(w, b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\nx-kind: chunked\r\n\r\n")
    for piece in (b"alpha,", b"beta,", b"x" * 70_000, b",omega"):
        up.write(w, b"%x\r\n%b\r\n" % (len(piece), piece))
        await w.drain()
        await asyncio.sleep(0.01)
    up.write(w, b"0\r\n\r\n")
    return True


async def _large(up: ScriptedUpstream, seen: Seen, w: asyncio.StreamWriter, reused: bool) -> bool:
    up.write(w, f"HTTP/1.1 200 OK\r\ncontent-length: {len(LARGE)}\r\n\r\n".encode())
    for start in range(0, len(LARGE), 64 * 1024):
        up.write(w, LARGE[start : start + 64 * 1024])
        await w.drain()
    return True


async def _huge(up: ScriptedUpstream, seen: Seen, w: asyncio.StreamWriter, reused: bool) -> bool:
    """64 MiB, written as fast as the client reads it."""
    up.write(w, f"HTTP/1.1 200 OK\r\ncontent-length: {64 * len(LARGE)}\r\n\r\n".encode())
    for _ in range(64):
        up.write(w, LARGE)
        await w.drain()
    return True


async def _until_eof(
    up: ScriptedUpstream, seen: Seen, w: asyncio.StreamWriter, reused: bool
) -> bool:
    up.write(w, b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\npart one,")
    await w.drain()
    await asyncio.sleep(0.02)
    up.write(w, b"part two")
    await w.drain()
    return False


async def _slow(up: ScriptedUpstream, seen: Seen, w: asyncio.StreamWriter, reused: bool) -> bool:
    await asyncio.sleep(READ_TIMEOUT * 3)
    up.write(w, _sized("200 OK", b"late"))
    return True


async def _trickle(up: ScriptedUpstream, seen: Seen, w: asyncio.StreamWriter, reused: bool) -> bool:
    """An answer slower in total than the read timeout, but never silent that long."""
    up.write(w, b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
    for _ in range(6):
        await asyncio.sleep(READ_TIMEOUT / 3)
        up.write(w, b"1\r\n.\r\n")
        await w.drain()
    up.write(w, b"0\r\n\r\n")
    return True


async def _break_small(
    up: ScriptedUpstream, seen: Seen, w: asyncio.StreamWriter, reused: bool
) -> bool:
    up.write(w, b"HTTP/1.1 200 OK\r\ncontent-length: 1000\r\n\r\nonly ten b")
    await w.drain()
    return False


async def _break_large(
    up: ScriptedUpstream, seen: Seen, w: asyncio.StreamWriter, reused: bool
) -> bool:
    up.write(w, f"HTTP/1.1 200 OK\r\ncontent-length: {len(LARGE)}\r\n\r\n".encode())
    up.write(w, LARGE[: len(LARGE) // 2])
    await w.drain()
    return False


async def _interim(up: ScriptedUpstream, seen: Seen, w: asyncio.StreamWriter, reused: bool) -> bool:
    up.write(w, b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nlink: </x>\r\n\r\n")
    await w.drain()
    up.write(w, _sized("201 Created", b"made"))
    return True


async def _garbage(up: ScriptedUpstream, seen: Seen, w: asyncio.StreamWriter, reused: bool) -> bool:
    up.write(w, b"SMTP ready\r\n\r\n")
    return True


async def _head(up: ScriptedUpstream, seen: Seen, w: asyncio.StreamWriter, reused: bool) -> bool:
    up.write(w, b"HTTP/1.1 200 OK\r\ncontent-length: 1234\r\nx-kind: head\r\n\r\n")
    return True


async def _hop_headers(
    up: ScriptedUpstream, seen: Seen, w: asyncio.StreamWriter, reused: bool
) -> bool:
    up.write(
        w,
        _sized(
            "200 OK",
            b"{}",
            "keep-alive: timeout=5",
            "x-request-id: upstream-own-id",
            "set-cookie: a=1",
            "set-cookie: b=2",
            "content-encoding: gzip",
        ),
    )
    return True


async def _ready(up: ScriptedUpstream, seen: Seen, w: asyncio.StreamWriter, reused: bool) -> bool:
    up.write(w, _sized("200 OK", b'{"status": "ready"}'))
    return True


SCRIPTS: dict[str, Script] = {
    "readyz": _ready,
    "close": _close,
    "http10": _http10,
    "idle-close": _idle_close,
    "drop-reused": _drop_reused,
    "chunked": _chunked,
    "large": _large,
    "huge": _huge,
    "until-eof": _until_eof,
    "slow": _slow,
    "trickle": _trickle,
    "break-small": _break_small,
    "break-large": _break_large,
    "interim": _interim,
    "garbage": _garbage,
    "head": _head,
    "hop-headers": _hop_headers,
}


@pytest_asyncio.fixture
async def upstream() -> AsyncIterator[ScriptedUpstream]:
    scripted = ScriptedUpstream()
    server = await asyncio.start_server(scripted.handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    scripted.url = f"http://127.0.0.1:{port}"
    async with server:
        yield scripted
        server.close()


@pytest_asyncio.fixture
async def gateway(upstream: ScriptedUpstream, tmp_path) -> AsyncIterator[httpx.AsyncClient]:
    settings = load_settings(
        var_dir=tmp_path,
        gateway_body_limit_bytes=BODY_LIMIT,
        gateway_upstream_timeout_seconds=READ_TIMEOUT,
        **dict.fromkeys(UPSTREAM_FIELDS, upstream.url),
    )
    async with serving_client(create_gateway_app(settings), timeout=10) as client:
        yield client


def _for(upstream: ScriptedUpstream, name: str) -> list[Seen]:
    return [seen for seen in upstream.requests if seen.path.endswith(name)]


async def test_small_answers_reuse_one_keep_alive_connection(
    gateway: httpx.AsyncClient, upstream: ScriptedUpstream
) -> None:
    for n in range(5):
        reply = await gateway.post("/webhooks/sfcrm/ok", content=b'{"n": %d}' % n)
        assert reply.status_code == 202
        assert reply.json()["bytes"] == len(b'{"n": 0}')
        assert reply.headers["content-type"] == "application/json"
    assert {seen.connection for seen in _for(upstream, "/ok")} == {1}
    first = _for(upstream, "/ok")[0]
    assert first.method == "POST"
    assert first.body == b'{"n": 0}'
    assert first.headers["x-request-id"]
    assert first.headers["x-forwarded-for"] == "127.0.0.1"
    assert first.headers["x-forwarded-proto"] == "http"
    assert first.headers["host"] == upstream.url.removeprefix("http://")


async def test_an_idle_connection_the_upstream_closed_is_not_reused(
    gateway: httpx.AsyncClient, upstream: ScriptedUpstream
) -> None:
    assert (await gateway.get("/webhooks/sfcrm/idle-close")).text == "once"
    await asyncio.sleep(0.2)  # the upstream has closed the pooled connection meanwhile
    reply = await gateway.post("/webhooks/sfcrm/ok", content=b"{}")
    assert reply.status_code == 202
    assert [seen.connection for seen in upstream.requests] == [1, 2]


async def test_a_get_is_resent_once_when_a_reused_connection_drops_it(
    gateway: httpx.AsyncClient, upstream: ScriptedUpstream
) -> None:
    assert (await gateway.get("/webhooks/sfcrm/drop-reused")).text == "first"
    reply = await gateway.get("/webhooks/sfcrm/drop-reused")
    assert reply.status_code == 200
    assert reply.text == "first"
    # sent on the reused connection (dropped unanswered), then once on a fresh one
    assert [seen.connection for seen in _for(upstream, "drop-reused")] == [1, 1, 2]


async def test_a_post_is_never_sent_twice(
    gateway: httpx.AsyncClient, upstream: ScriptedUpstream
) -> None:
    assert (await gateway.post("/webhooks/sfcrm/drop-reused", content=b"{}")).text == "first"
    reply = await gateway.post("/webhooks/sfcrm/drop-reused", content=b'{"once": true}')
    assert reply.status_code == 502
    assert reply.json()["code"] == "UPSTREAM_UNAVAILABLE"
    assert len(_for(upstream, "drop-reused")) == 2  # the second POST reached it exactly once


async def test_connection_close_and_http_1_0_answers_are_not_reused(
    gateway: httpx.AsyncClient, upstream: ScriptedUpstream
) -> None:
    for _ in range(2):
        assert (await gateway.get("/webhooks/sfcrm/close")).text == "bye"
    for _ in range(2):
        assert (await gateway.get("/webhooks/sfcrm/http10")).text == "old!"
    assert [seen.connection for seen in upstream.requests] == [1, 2, 3, 4]
    assert (await gateway.post("/webhooks/sfcrm/ok", content=b"{}")).status_code == 202


async def test_a_chunked_answer_is_relayed_intact(
    gateway: httpx.AsyncClient, upstream: ScriptedUpstream
) -> None:
    reply = await gateway.get("/webhooks/sfcrm/chunked")
    assert reply.status_code == 200
    assert reply.headers["x-kind"] == "chunked"
    assert reply.content == b"alpha,beta," + b"x" * 70_000 + b",omega"
    assert (await gateway.get("/webhooks/sfcrm/chunked")).content.endswith(b",omega")
    assert {seen.connection for seen in upstream.requests} == {1}  # chunked answers keep it


async def test_a_large_answer_is_streamed_intact(
    gateway: httpx.AsyncClient, upstream: ScriptedUpstream
) -> None:
    async with gateway.stream("GET", "/webhooks/sfcrm/large") as reply:
        assert reply.headers["content-length"] == str(len(LARGE))
        received = b"".join([chunk async for chunk in reply.aiter_raw()])
    assert received == LARGE
    assert (await gateway.post("/webhooks/sfcrm/ok", content=b"{}")).status_code == 202
    assert {seen.connection for seen in upstream.requests} == {1}


async def test_an_answer_without_a_length_ends_when_the_upstream_closes(
    gateway: httpx.AsyncClient,
) -> None:
    reply = await gateway.get("/webhooks/sfcrm/until-eof")
    assert reply.status_code == 200
    assert reply.text == "part one,part two"


async def test_interim_answers_are_not_relayed(gateway: httpx.AsyncClient) -> None:
    reply = await gateway.post("/webhooks/sfcrm/interim", content=b"{}")
    assert reply.status_code == 201
    assert reply.text == "made"


async def test_head_answers_have_no_body(
    gateway: httpx.AsyncClient, upstream: ScriptedUpstream
) -> None:
    reply = await gateway.head("/webhooks/sfcrm/head")
    assert reply.status_code == 200
    assert reply.headers["x-kind"] == "head"
    assert reply.headers["content-length"] == "1234"
    assert (await gateway.get("/webhooks/sfcrm/ok")).status_code == 202


async def test_hop_by_hop_and_request_id_answer_headers_are_dropped(
    gateway: httpx.AsyncClient,
) -> None:
    async with gateway.stream("GET", "/webhooks/sfcrm/hop-headers") as reply:
        raw = b"".join([chunk async for chunk in reply.aiter_raw()])
    assert "keep-alive" not in reply.headers
    assert reply.headers["x-request-id"] != "upstream-own-id"
    assert reply.headers.get_list("set-cookie") == ["a=1", "b=2"]
    assert reply.headers["content-encoding"] == "gzip"  # relayed as is, never decoded
    assert raw == b"{}"


async def test_the_request_target_and_headers_as_the_upstream_sees_them(
    gateway: httpx.AsyncClient, upstream: ScriptedUpstream
) -> None:
    reply = await gateway.post(
        "/webhooks/sfcrm/a%2Fb/ok?a=1&b=%20x",
        content=b"{}",
        headers={
            "x-nexus-delegation": "admin",
            "X-Nexus-Anything": "x",
            "x-forwarded-for": "10.0.0.1",
            "expect": "100-continue",
            "cookie": "sid=bob",
        },
    )
    assert reply.status_code == 202
    (seen,) = upstream.requests
    assert seen.path == "/hooks/sfcrm/a%2Fb/ok?a=1&b=%20x"  # the route's rewrite, raw path
    assert not [name for name in seen.headers if name.startswith("x-nexus-")]
    # the client's chain, then the client's address (as uvicorn's proxy-headers rule saw it)
    assert seen.headers["x-forwarded-for"].startswith("10.0.0.1, ")
    assert seen.headers["x-forwarded-host"] == gateway.base_url.netloc.decode()
    assert seen.headers["cookie"] == "sid=bob"
    assert "expect" not in seen.headers
    assert "accept-encoding" not in seen.headers or seen.headers["accept-encoding"] != "gzip"


async def test_504_when_the_upstream_goes_silent(
    gateway: httpx.AsyncClient, upstream: ScriptedUpstream
) -> None:
    reply = await gateway.get("/webhooks/sfcrm/slow")
    assert reply.status_code == 504
    assert reply.json()["code"] == "UPSTREAM_TIMEOUT"
    assert reply.json()["request_id"] == reply.headers["x-request-id"]
    assert (await gateway.post("/webhooks/sfcrm/ok", content=b"{}")).status_code == 202


async def test_the_read_timeout_is_between_reads_not_for_the_whole_answer(
    gateway: httpx.AsyncClient,
) -> None:
    reply = await gateway.get("/webhooks/sfcrm/trickle")
    assert reply.status_code == 200
    assert reply.text == "......"


async def test_502_when_the_upstream_breaks_off_a_small_answer(
    gateway: httpx.AsyncClient,
) -> None:
    reply = await gateway.get("/webhooks/sfcrm/break-small")
    assert reply.status_code == 502
    assert reply.json()["code"] == "UPSTREAM_UNAVAILABLE"


async def test_502_when_the_upstream_answers_garbage(gateway: httpx.AsyncClient) -> None:
    reply = await gateway.get("/webhooks/sfcrm/garbage")
    assert reply.status_code == 502
    assert reply.json()["code"] == "UPSTREAM_UNAVAILABLE"


async def test_a_large_answer_broken_off_is_cut_short_for_the_client(
    gateway: httpx.AsyncClient,
) -> None:
    with pytest.raises(httpx.RemoteProtocolError):
        await gateway.get("/webhooks/sfcrm/break-large")
    assert (await gateway.post("/webhooks/sfcrm/ok", content=b"{}")).status_code == 202


async def test_502_when_the_upstream_is_down(tmp_path) -> None:
    settings = load_settings(var_dir=tmp_path, **dict.fromkeys(UPSTREAM_FIELDS, closed_port_url()))
    async with serving_client(create_gateway_app(settings)) as client:
        reply = await client.post("/webhooks/sfcrm/ok", content=b"{}")
        assert reply.status_code == 502
        assert reply.json()["code"] == "UPSTREAM_UNAVAILABLE"
        ready = await client.get("/readyz")
        assert ready.status_code == 503
        assert {c["detail"] for c in ready.json()["checks"]} == {"unreachable (connect)"}


async def test_readiness_probes_go_through_the_pool(
    gateway: httpx.AsyncClient, upstream: ScriptedUpstream
) -> None:
    ready = await gateway.get("/readyz")
    assert ready.status_code == 200, ready.text
    assert {seen.path for seen in upstream.requests} == {"/readyz"}


async def test_413_before_sending_when_the_declared_length_is_over_the_limit(
    gateway: httpx.AsyncClient, upstream: ScriptedUpstream
) -> None:
    reply = await gateway.post("/webhooks/sfcrm/ok", content=b"x" * (BODY_LIMIT + 1))
    assert reply.status_code == 413
    assert reply.json()["code"] == "PAYLOAD_TOO_LARGE"
    assert upstream.requests == []
    assert upstream.connections == 0


async def test_413_and_an_aborted_request_when_a_chunked_body_passes_the_limit(
    gateway: httpx.AsyncClient, upstream: ScriptedUpstream
) -> None:
    async def body() -> AsyncIterator[bytes]:
        for _ in range(BODY_LIMIT // 4096 + 4):
            yield b"y" * 4096
            await asyncio.sleep(0)

    reply = await gateway.post("/webhooks/sfcrm/ok", content=body())
    assert reply.status_code == 413
    assert reply.json()["code"] == "PAYLOAD_TOO_LARGE"
    await asyncio.sleep(0.05)
    assert [seen.complete for seen in upstream.requests] in ([], [False])


async def test_a_chunked_body_below_the_limit_is_relayed_chunked(
    gateway: httpx.AsyncClient, upstream: ScriptedUpstream
) -> None:
    async def body() -> AsyncIterator[bytes]:
        for n in range(8):
            yield bytes([65 + n]) * 4096

    reply = await gateway.post("/webhooks/sfcrm/ok", content=body())
    assert reply.status_code == 202
    (seen,) = upstream.requests
    assert seen.headers["transfer-encoding"] == "chunked"
    assert seen.body == b"".join(bytes([65 + n]) * 4096 for n in range(8))


async def test_a_sized_body_above_the_buffered_limit_streams_with_its_length(
    upstream: ScriptedUpstream, tmp_path
) -> None:
    settings = load_settings(
        var_dir=tmp_path,
        gateway_body_limit_bytes=4 * 1024 * 1024,
        **dict.fromkeys(UPSTREAM_FIELDS, upstream.url),
    )
    async with serving_client(create_gateway_app(settings), timeout=10) as client:
        reply = await client.post("/webhooks/sfcrm/ok", content=LARGE)
        assert reply.status_code == 202
    (seen,) = upstream.requests
    assert seen.headers["content-length"] == str(len(LARGE))
    assert seen.body == LARGE


async def test_a_slow_reader_holds_the_upstream_back(upstream: ScriptedUpstream) -> None:
    """Backpressure: unread answer bytes stop the gateway reading the upstream's socket, so
    the upstream cannot push the whole (64 MiB) answer into the gateway's memory."""
    pool = UpstreamPool(upstream.url, limit=4, connect_timeout=1, read_timeout=5)
    request = b"GET /huge HTTP/1.1\r\nhost: x\r\n\r\n"
    conn = await exchange(pool, "GET", request, head_only=False)
    try:
        await asyncio.sleep(0.3)
        assert upstream.bytes_sent < 32 * len(LARGE)  # kernel buffers + the read-ahead only
        received = 0
        while chunk := await conn.next_chunk():
            received += len(chunk)
        assert received == 64 * len(LARGE)
    finally:
        pool.release(conn)
        await pool.close()


async def test_the_pool_is_bounded_and_closes_its_connections(
    upstream: ScriptedUpstream,
) -> None:
    pool = UpstreamPool(upstream.url, limit=2, connect_timeout=1, read_timeout=5)
    request = b"GET /ok HTTP/1.1\r\nhost: x\r\n\r\n"

    async def one() -> None:
        conn = await exchange(pool, "GET", request, head_only=False)
        try:
            await conn.read_body()
            await asyncio.sleep(0.01)
        finally:
            pool.release(conn)

    await asyncio.gather(*(one() for _ in range(10)))
    assert upstream.connections == 2
    await pool.close()
    await asyncio.sleep(0.05)
    assert upstream.closed_connections == 2
    with pytest.raises(UpstreamFailure):
        await pool.acquire()


async def test_https_upstreams_are_verified(tmp_path, monkeypatch) -> None:
    """An https:// upstream URL: TLS with the system's trust store (here pointed at the
    local CA), and a certificate nobody trusts is a 502."""
    role = FastAPI()

    @role.post("/hooks/{connector}/{route}")
    async def hook(connector: str, route: str) -> dict[str, str]:
        return {"route": route}

    tls = ensure_local_tls(tmp_path)
    https = {"ssl_certfile": str(tls.cert), "ssl_keyfile": str(tls.key)}
    async with serving(role, **https) as url:
        settings = load_settings(var_dir=tmp_path, **dict.fromkeys(UPSTREAM_FIELDS, url))
        async with serving_client(create_gateway_app(settings)) as untrusting:
            reply = await untrusting.post("/webhooks/sfcrm/contacts", content=b"{}")
            assert reply.status_code == 502
        monkeypatch.setenv("SSL_CERT_FILE", str(tls.ca_cert))
        async with serving_client(create_gateway_app(settings)) as client:
            for _ in range(2):
                reply = await client.post("/webhooks/sfcrm/contacts", content=b"{}")
                assert reply.status_code == 200
                assert reply.json() == {"route": "contacts"}


async def _the_slot_was_not_lost(
    pool: UpstreamPool, held: UpstreamConnection, upstream: ScriptedUpstream
) -> None:
    """Once `held` (the pool's one connection) is back, a request gets it again."""
    pool.release(held)
    again = await exchange(pool, "GET", b"GET /ok HTTP/1.1\r\nhost: x\r\n\r\n", head_only=False)
    assert await again.read_body()
    pool.release(again)
    assert upstream.connections == 1
    await pool.close()


async def test_a_request_waiting_for_a_full_pool_can_give_up(upstream: ScriptedUpstream) -> None:
    pool = UpstreamPool(upstream.url, limit=1, connect_timeout=1, read_timeout=5)
    request = b"GET /ok HTTP/1.1\r\nhost: x\r\n\r\n"
    held = await exchange(pool, "GET", request, head_only=False)
    await held.read_body()
    waiting = asyncio.create_task(pool.acquire())
    await asyncio.sleep(0.01)
    assert not waiting.done()  # the one connection is busy
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    await _the_slot_was_not_lost(pool, held, upstream)


async def test_a_request_waits_for_a_full_pool_at_most_the_connect_timeout(
    upstream: ScriptedUpstream,
) -> None:
    pool = UpstreamPool(upstream.url, limit=1, connect_timeout=0.2, read_timeout=5)
    request = b"GET /ok HTTP/1.1\r\nhost: x\r\n\r\n"
    held = await exchange(pool, "GET", request, head_only=False)
    await held.read_body()
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(UpstreamFailure) as failed:  # the gateway answers 503, sends nothing
        await exchange(pool, "POST", b"POST /ok HTTP/1.1\r\nhost: x\r\n\r\n", head_only=False)
    assert failed.value.kind == "busy"
    assert 0.15 < loop.time() - started < 1.0
    assert [seen.method for seen in upstream.requests] == ["GET"]
    await _the_slot_was_not_lost(pool, held, upstream)
