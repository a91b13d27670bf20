"""Run an ASGI app on a real loopback socket inside the test's event loop."""

from __future__ import annotations

import asyncio
import io
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import uvicorn

from nexus.platform.serving import server_config

SHUTDOWN_SECONDS = 60.0


@asynccontextmanager
async def serving(app: Any, **config_options: Any) -> AsyncIterator[str]:
    """Serve `app` over HTTP on a free loopback port; yields its base URL. With uvicorn's
    `ssl_certfile` and `ssl_keyfile` options it serves HTTPS."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = server_config(app, **config_options)  # the protocol and options `nexus serve` uses
    server = uvicorn.Server(config)
    server.install_signal_handlers = lambda: None  # type: ignore[method-assign]
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            if task.done():
                task.result()
            await asyncio.sleep(0.01)
        scheme = "https" if config_options.get("ssl_certfile") else "http"
        yield f"{scheme}://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        try:
            async with asyncio.timeout(SHUTDOWN_SECONDS):
                await asyncio.shield(task)
        except TimeoutError:  # a shutdown that hangs fails the test, naming what it waits on
            stuck = _tasks()
            raise AssertionError(
                f"the app did not stop in {SHUTDOWN_SECONDS:.0f} s:\n{stuck}"
            ) from None
        finally:
            sock.close()


def _tasks() -> str:
    out = io.StringIO()
    for task in asyncio.all_tasks():
        task.print_stack(limit=12, file=out)
    return out.getvalue()


def closed_port_url() -> str:
    """A loopback URL nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


@asynccontextmanager
async def serving_client(app: Any, **client_options: Any) -> AsyncIterator[httpx.AsyncClient]:
    """Serve `app` on a real socket and yield an HTTP client pointed at it."""
    async with serving(app) as url, httpx.AsyncClient(base_url=url, **client_options) as client:
        yield client
