"""How every role process speaks HTTP: uvicorn on uvloop + httptools, one write per response.

uvicorn writes a response's status line and headers on `http.response.start` and its body
on `http.response.body`: two `send()` system calls for every small response. On loopback
each costs about as much as the rest of a trivial request (measured: a bare ASGI app
9.1k -> 12.6-14.5k req/s, FastAPI `/healthz` 3.3-4.2k -> 4.5-5.7k req/s with one write).
`OneWriteHttpProtocol` hands uvicorn a transport that gathers the writes of one event-loop
iteration and sends them together at the end of it. Large writes go straight through, so
uvicorn's flow control (pause/resume writing on the real transport) still bounds memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from types import FrameType
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from nexus.platform.draining import start_draining

#: Writes at least this large, or pending writes adding up to it, are sent at once.
DIRECT_WRITE_BYTES = 16 * 1024


class _GatheringTransport:
    """A transport proxy: writes made in one loop iteration leave in one `write()`."""

    __slots__ = ("_loop", "_pending", "_pending_bytes", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] | None = None
        self._pending_bytes = 0

    def write(self, data: bytes | bytearray | memoryview) -> None:
        chunk = bytes(data)
        if self._pending is None:
            if len(chunk) >= DIRECT_WRITE_BYTES:
                self._transport.write(chunk)
                return
            self._pending = [chunk]
            self._pending_bytes = len(chunk)
            self._loop.call_soon(self.flush)
            return
        self._pending.append(chunk)
        self._pending_bytes += len(chunk)
        if self._pending_bytes >= DIRECT_WRITE_BYTES:
            self.flush()

    def writelines(self, chunks: Any) -> None:
        for chunk in chunks:
            self.write(chunk)

    def flush(self) -> None:
        pending, self._pending = self._pending, None
        if not pending or self._transport.is_closing():
            return
        self._transport.write(pending[0] if len(pending) == 1 else b"".join(pending))

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def abort(self) -> None:
        self._pending = None
        self._transport.abort()

    def __getattr__(self, name: str) -> Any:  # everything else is the real transport's
        return getattr(self._transport, name)


class OneWriteHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol over `_GatheringTransport`."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        gathering = _GatheringTransport(transport, asyncio.get_running_loop())
        super().connection_made(gathering)  # type: ignore[arg-type]  # a transport proxy


def server_config(app: Any, **options: Any) -> uvicorn.Config:
    """A uvicorn config with the role defaults: our protocol, uvloop, no uvicorn logging."""
    defaults: dict[str, Any] = {
        "lifespan": "on",
        "log_config": None,
        "access_log": False,  # RequestContextMiddleware logs each request once
        "server_header": False,
        "loop": "uvloop",
        "http": OneWriteHttpProtocol,
    }
    return uvicorn.Config(app, **(defaults | options))


class DrainingServer(uvicorn.Server):
    """uvicorn's server with a stop delay: the first SIGTERM/SIGINT marks the process as
    draining (/readyz answers 503) and keeps it serving for `delay_seconds`, so a load
    balancer or Kubernetes stops routing to it before its listener closes; then it stops as
    uvicorn does, in-flight requests draining within the graceful timeout. A second signal
    during the delay stops it at once."""

    def __init__(self, config: uvicorn.Config, *, delay_seconds: float = 0.0) -> None:
        super().__init__(config)
        self.delay_seconds = delay_seconds
        self._stop_at: float | None = None

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        start_draining()
        if self._stop_at is None and self.delay_seconds > 0 and not self.should_exit:
            self._captured_signals.append(sig)
            self._stop_at = time.monotonic() + self.delay_seconds
            return
        super().handle_exit(sig, frame)

    async def on_tick(self, counter: int) -> bool:
        if self._stop_at is not None and time.monotonic() >= self._stop_at:
            self.should_exit = True
        return await super().on_tick(counter)


async def serve_with_tls(
    server: uvicorn.Server,
    sock: Any,
    tls_server: uvicorn.Server,
    tls_sock: Any,
) -> None:
    """Serve one app over plain HTTP (`server`, which owns the lifespan and the signals) and
    over HTTPS (`tls_server`, lifespan off), in one event loop. HTTPS opens once the app has
    started and stops when the plain server is asked to stop."""
    tls_server.capture_signals = contextlib.nullcontext  # type: ignore[method-assign,assignment]  # one owner

    async def follow() -> None:
        while not server.started:
            if server.should_exit:
                return
            await asyncio.sleep(0.02)
        tls_task = asyncio.create_task(tls_server.serve(sockets=[tls_sock]))
        # uvicorn's stop request is a plain flag: there is no event to wait on
        while not server.should_exit and not tls_task.done():  # noqa: ASYNC110 - see above
            await asyncio.sleep(0.1)
        tls_server.should_exit = True
        await tls_task

    follower = asyncio.create_task(follow())
    try:
        await server.serve(sockets=[sock])
    finally:
        server.should_exit = True
        await follower
