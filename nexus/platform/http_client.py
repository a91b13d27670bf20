"""The HTTP client one role uses to call another (`/internal/v1/...`).

httpx's API over aiohttp's connection pool (`httpx-aiohttp`), the choice ADR 0007 made for
the gateway (which since relays with its own lean client, ADR 0051; role-to-role calls keep
this one): httpcore's pool costs grow with the number of pooled connections, measured here at ~25
AcceptCommand calls/s with 64 in flight against a local server, where aiohttp's pool serves
hundreds. No cookies, no proxies or settings from the environment, no decompression.

The transport maps aiohttp's exceptions to httpx's: a refused connection arrives as
`httpx.ConnectError` or `httpx.ConnectTimeout`, a silent server as `httpx.ReadTimeout`; the
original is the exception's `__cause__`.
"""

from __future__ import annotations

import aiohttp
import httpx
from httpx_aiohttp import AiohttpTransport


def internal_client(
    *, base_url: str, timeout_seconds: float, connections: int
) -> httpx.AsyncClient:
    transport = AiohttpTransport(
        client=lambda: aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=connections, keepalive_timeout=30),
            auto_decompress=False,
            trust_env=False,
            cookie_jar=aiohttp.DummyCookieJar(),
        )
    )
    return httpx.AsyncClient(
        base_url=base_url,
        transport=transport,
        timeout=timeout_seconds,
        follow_redirects=False,
        trust_env=False,
    )
