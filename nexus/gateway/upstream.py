"""The gateway's upstream client: HTTP/1.1 on asyncio Protocols, a keep-alive pool per upstream.

aiohttp's client was a third of the gateway's CPU per relayed webhook (request and payload
objects, stream writer, response handler, connector bookkeeping; ADR 0051). The relay needs
far less: write one request (head and buffered body in one `transport.write`), parse the
answer with httptools (uvicorn's parser, already installed), hand the bytes on. This module
does only that; `nexus.gateway.proxy` decides what is written and how the answer is relayed.

Reuse rules (ADR 0051): a pooled connection is reused only while it is open, idle for less
than `IDLE_SECONDS` and its last answer allowed keep-alive (HTTP/1.1 without
`Connection: close`, fully read). A request that fails on a reused connection before any
answer byte arrived is sent again on a fresh connection only when it is idempotent and its
body was buffered; anything else is a 502.
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from typing import Literal
from urllib.parse import urlsplit

import httptools

FailureKind = Literal["connect", "busy", "timeout", "broken"]

#: Idle connections older than this are closed instead of reused. Below uvicorn's 5 s
#: keep-alive timeout (every Nexus role), so the gateway gives a connection up before the
#: upstream does, and a request is not written to a socket the upstream is closing.
IDLE_SECONDS = 4.0
#: Answer bytes held for a slow client before the upstream socket stops being read.
READ_AHEAD_BYTES = 256 * 1024
#: RFC 9110 idempotent methods: sending one of them twice has the effect of sending it once.
IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"})


class UpstreamFailure(Exception):
    """The exchange failed: `connect` (no connection), `busy` (every pooled connection stayed
    busy for the connect timeout), `timeout` (the upstream went silent for the read
    timeout), `broken` (the upstream closed or sent something unparseable)."""

    def __init__(self, kind: FailureKind) -> None:
        super().__init__(kind)
        self.kind: FailureKind = kind


class UpstreamConnection(asyncio.Protocol):
    """One keep-alive connection and the state of the exchange it is carrying.

    The protocol callbacks (transport and httptools parser) only record what arrived and wake
    the one task waiting on the exchange; that task reads the recorded state.
    """

    def __init__(self, pool: UpstreamPool) -> None:
        self._pool = pool
        self._loop = pool.loop
        self._parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.busy = True  # created for an exchange; idle only while in the pool
        self.reused = False  # carried an earlier exchange
        self.idle_since = 0.0
        self._waiter: asyncio.Future[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._last_read = 0.0
        self._write_paused = False
        self._reading_paused = False
        self._start(head_only=False)

    def _start(self, *, head_only: bool) -> None:
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self.content_length: int | None = None
        self.head_done = False
        self.complete = False
        self.keep_alive = False
        self.sent = False  # bytes of this exchange's request went to a live connection
        self.got_bytes = False  # any byte of this exchange's answer arrived
        self.failure: FailureKind | None = None
        self._chunked = False
        self._interim = False
        self._head_only = head_only
        self._body: list[bytes] = []
        self._body_bytes = 0

    # -- the exchange, for the task relaying it ------------------------------------------

    def begin(self, *, head_only: bool) -> None:
        """A new exchange on this connection (a HEAD request's answer has no body)."""
        self.busy = True
        self._start(head_only=head_only)
        if self.closed:  # closed while it was handed over: nothing was written to it
            self.failure = "broken"

    def write(self, data: bytes) -> None:
        if self.transport is not None and not self.closed:
            self.sent = True
            self.transport.write(data)

    async def drain(self) -> None:
        """Until the upstream has taken what was written (the read timeout bounds the wait)."""
        while self._write_paused and not self.closed:
            await self._wait()

    async def read_head(self) -> None:
        """Until the answer's status and headers are in (raises `UpstreamFailure`)."""
        while not self.head_done:
            await self._wait()

    async def read_body(self) -> bytes:
        """The rest of the answer, whole (for answers known to be small)."""
        while not self.complete:
            await self._wait()
        return self._take()

    async def next_chunk(self) -> bytes:
        """The answer's next bytes as they arrive; b"" once it is complete."""
        while not self._body:
            if self.complete:
                return b""
            await self._wait()
        return self._take()

    def usable(self, now: float) -> bool:
        """Whether an idle connection may carry the next exchange: still open (the upstream
        has not closed it) and idle for less than `IDLE_SECONDS`."""
        transport = self.transport
        if self.closed or transport is None or transport.is_closing():
            return False
        return now - self.idle_since <= IDLE_SECONDS

    def reusable(self) -> bool:
        return self.complete and self.keep_alive and not self.closed and self.failure is None

    def abort(self) -> None:
        """Drop the connection at once: the upstream must not see a complete request."""
        if self.transport is not None:
            self.transport.abort()
        self.closed = True

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()
        self.closed = True

    def _take(self) -> bytes:
        body = self._body
        data = body[0] if len(body) == 1 else b"".join(body)
        self._body = []
        self._body_bytes = 0
        if self._reading_paused and self.transport is not None and not self.closed:
            self._reading_paused = False
            self.transport.resume_reading()
        return data

    async def _wait(self) -> None:
        """Until the exchange makes progress; a silence of the read timeout fails it."""
        if self.failure is not None:
            raise UpstreamFailure(self.failure)
        loop = self._loop
        waiter = self._waiter = loop.create_future()
        self._last_read = loop.time()
        self._timer = loop.call_later(self._pool.read_timeout, self._check_silence)
        try:
            await waiter
        finally:
            self._waiter = None
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
        if self.failure is not None:
            raise UpstreamFailure(self.failure)

    def _check_silence(self) -> None:
        remaining = self._pool.read_timeout - (self._loop.time() - self._last_read)
        if remaining > 0:  # bytes arrived meanwhile (a header in pieces): wait the rest
            self._timer = self._loop.call_later(remaining, self._check_silence)
            return
        self._timer = None
        self._fail("timeout")

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _fail(self, kind: FailureKind) -> None:
        if self.failure is None:
            self.failure = kind
        self.abort()
        self._wake()

    # -- asyncio.Protocol ----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # a TCP connection's transport

    def data_received(self, data: bytes) -> None:
        if not self.busy or self.complete:
            # bytes nobody asked for (after an answer, or while idle): the stream is out of
            # step with our requests, so nothing more read from it can be trusted
            self.close()
            return
        self.got_bytes = True
        self._last_read = self._loop.time()
        try:
            self._parser.feed_data(data)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade):
            self._fail("broken")

    def eof_received(self) -> bool | None:
        return None  # close the transport; connection_lost decides what the EOF meant

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if not self.busy:
            self._pool.forget(self)
            return
        if not self.complete and self.failure is None:
            if self.head_done and self._ends_at_close():
                self.complete = True  # an answer without a length ends when the upstream closes
            else:
                self.failure = "broken"
        self._wake()

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        self._wake()

    # -- httptools callbacks -------------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        name = name.lower()
        if name == b"content-length":
            self.content_length = int(value) if value.isdigit() else None
        elif name == b"transfer-encoding":
            self._chunked = True
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        parser = self._parser
        status = parser.get_status_code()
        if status < 200:  # interim answer (100 Continue, 103 Early Hints): not relayed
            self._interim = True
            self.headers = []
            self.content_length = None
            self._chunked = False
            return
        self.status = status
        self.keep_alive = parser.should_keep_alive() and parser.get_http_version() == "1.1"
        self.head_done = True
        if self._head_only:
            # the parser cannot be told that a HEAD answer has no body: the answer ends
            # here and the connection is not reused
            self.complete = True
            self.keep_alive = False
        self._wake()

    def on_body(self, body: bytes) -> None:
        if self._interim or self._head_only:
            return
        self._body.append(body)
        self._body_bytes += len(body)
        if self._body_bytes > READ_AHEAD_BYTES and not self._reading_paused:
            self._reading_paused = True
            if self.transport is not None:
                self.transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        if self._interim:
            self._interim = False
            return
        self.complete = True
        self._wake()

    def _ends_at_close(self) -> bool:
        no_body = self.status in (204, 304)
        return not no_body and self.content_length is None and not self._chunked


class UpstreamPool:
    """Keep-alive connections to one upstream, at most `limit` open at once (LIFO reuse: the
    most recently used connection is the least likely to have been closed by the upstream)."""

    def __init__(
        self, base_url: str, *, limit: int, connect_timeout: float, read_timeout: float
    ) -> None:
        url = urlsplit(base_url)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError("upstream must be an http:// or https:// URL with a host")
        self.host = url.hostname
        self.port = url.port or (443 if url.scheme == "https" else 80)
        #: what `Host` says upstream (the URL's host[:port], without any user info)
        self.host_header = url.netloc.rpartition("@")[2].encode("latin-1")
        #: a path the upstream's URL carries, put in front of every request path
        self.path_prefix = url.path.rstrip("/")
        self.limit = limit
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self._tls = ssl.create_default_context() if url.scheme == "https" else None
        self._idle: deque[UpstreamConnection] = deque()
        self._size = 0  # connections open or being opened, idle ones included
        self._waiters: deque[asyncio.Future[UpstreamConnection | None]] = deque()
        self._closed = False
        self.loop = asyncio.get_running_loop()

    async def acquire(self, *, fresh: bool = False) -> UpstreamConnection:
        """A connection for one exchange: an idle one that is still usable, else a new one
        (`fresh`: always a new one); waits while `limit` connections are busy, at most the
        connect timeout (then `busy`: nothing was sent)."""
        if self._closed:
            raise UpstreamFailure("connect")
        now = self.loop.time()
        while self._idle and not fresh:
            conn = self._idle.pop()
            if conn.usable(now):
                conn.busy = True
                return conn
            self._discard(conn)
        if self._size >= self.limit and fresh and self._idle:
            self._discard(self._idle.popleft())  # make room for the fresh one
        if self._size < self.limit:
            self._size += 1
        else:
            try:
                async with asyncio.timeout(self.connect_timeout):
                    handed = await self._wait_for_slot()
            except TimeoutError:
                raise UpstreamFailure("busy") from None
            if handed is not None:
                return handed
            # else a slot was passed on to us: count already includes it
        try:
            return await self._connect()
        except BaseException:
            self._free_slot()
            raise

    def release(self, conn: UpstreamConnection) -> None:
        """Back to the pool if the exchange ended cleanly and allows keep-alive; else closed."""
        conn.busy = False
        if self._closed or not conn.reusable():
            if conn.complete:
                conn.close()
            else:  # mid-exchange: the upstream must not take a cut-off request for a whole one
                conn.abort()
            self._free_slot()
            return
        conn.reused = True
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                conn.busy = True
                waiter.set_result(conn)
                return
        now = self.loop.time()
        conn.idle_since = now
        self._idle.append(conn)
        oldest = self._idle[0]
        if now - oldest.idle_since > IDLE_SECONDS:  # one expired connection per release
            self._idle.popleft()
            self._discard(oldest)

    def forget(self, conn: UpstreamConnection) -> None:
        """An idle connection closed (by the upstream, or expired): its slot is free."""
        try:
            self._idle.remove(conn)
        except ValueError:
            return  # already taken out of the pool (discarded, or just acquired)
        self._free_slot()

    async def close(self) -> None:
        """Shut the pool: idle connections closed now, busy ones when they are released."""
        self._closed = True
        while self._idle:
            self._discard(self._idle.pop())
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_exception(UpstreamFailure("connect"))
        await asyncio.sleep(0)  # let the transports run their connection_lost callbacks

    def _discard(self, conn: UpstreamConnection) -> None:
        conn.busy = True  # its connection_lost must not look for it among the idle ones
        conn.close()
        self._free_slot()

    def _free_slot(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)  # the slot passes to the waiter: the count stays
                return
        self._size -= 1

    async def _wait_for_slot(self) -> UpstreamConnection | None:
        waiter: asyncio.Future[UpstreamConnection | None] = self.loop.create_future()
        self._waiters.append(waiter)
        try:
            return await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                handed = waiter.result()  # handed over just as we were cancelled: pass it on
                if handed is None:
                    self._free_slot()
                else:
                    self.release(handed)  # still in its last exchange's (reusable) state
            raise

    async def _connect(self) -> UpstreamConnection:
        try:
            async with asyncio.timeout(self.connect_timeout):
                _, conn = await self.loop.create_connection(
                    lambda: UpstreamConnection(self),
                    self.host,
                    self.port,
                    ssl=self._tls,
                    server_hostname=self.host if self._tls is not None else None,
                )
        except (OSError, TimeoutError):
            raise UpstreamFailure("connect") from None
        return conn


async def begin_exchange(pool: UpstreamPool, *, head_only: bool) -> UpstreamConnection:
    """A connection with a new exchange begun on it; one that turned out closed when its
    turn came (nothing was written to it) is replaced by a fresh one."""
    conn = await pool.acquire()
    conn.begin(head_only=head_only)
    if conn.failure is None:
        return conn
    pool.release(conn)
    conn = await pool.acquire(fresh=True)
    conn.begin(head_only=head_only)
    return conn


async def exchange(
    pool: UpstreamPool, method: str, request: bytes, *, head_only: bool
) -> UpstreamConnection:
    """Send one fully buffered request (head and body in `request`) and wait for the answer's
    head; the caller reads the body and releases the connection.

    Sent once more, on a fresh connection, only as `_may_resend` allows: a request that may
    have reached the upstream is re-sent only when it is idempotent (a POST never twice).
    """
    conn = await pool.acquire()
    try:
        conn.begin(head_only=head_only)
        conn.write(request)
        await conn.read_head()
        return conn
    except UpstreamFailure as failure:
        pool.release(conn)
        if not _may_resend(conn, failure, method):
            raise
    except BaseException:
        pool.release(conn)
        raise
    conn = await pool.acquire(fresh=True)
    try:
        conn.begin(head_only=head_only)
        conn.write(request)
        await conn.read_head()
    except BaseException:
        pool.release(conn)
        raise
    return conn


def _may_resend(conn: UpstreamConnection, failure: UpstreamFailure, method: str) -> bool:
    """Whether a failed exchange may be sent again on a fresh connection: when the request
    never went to a live connection; or when a reused connection broke before any byte of
    the answer (the upstream closed it as the request left) and the method is idempotent."""
    if failure.kind != "broken":
        return False
    if not conn.sent:
        return True
    return conn.reused and not conn.got_bytes and method in IDEMPOTENT_METHODS
