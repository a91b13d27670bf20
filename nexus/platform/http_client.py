"""The HTTP client one role uses to call another (`/internal/v1/...`).

httpx's API over aiohttp's connection pool (`httpx-aiohttp`), the choice ADR 0007 made for
the gateway (which since relays with its own lean client, ADR 0051; role-to-role calls keep
this one): httpcore's pool costs grow with the number of pooled connections, measured here at ~25
AcceptCommand calls/s with 64 in flight against a local server, where aiohttp's pool serves
hundreds. No cookies, no proxies or settings from the environment, no decompression.

The transport maps aiohttp's exceptions to httpx's: a refused connection arrives as
`httpx.ConnectError` or `httpx.ConnectTimeout`, a silent server as `httpx.ReadTimeout`; the
original is the exception's `__cause__`.

`InternalClient` is the one way to make a signed call (workload token, delegation,
deadline) and read its answer; callers map its two errors to their own.
"""

from __future__ import annotations

import time
from typing import Any, TypeVar, overload

import aiohttp
import httpx
from httpx_aiohttp import AiohttpTransport
from pydantic import BaseModel

from nexus.platform.workload import WorkloadSigner

M = TypeVar("M", bound=BaseModel)


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


class InternalUnreachable(Exception):
    """Nothing came back: the connection failed, or no answer before the timeout. The message
    names the transport error's class only (never a URL with data, a header or a body)."""

    def __init__(self, error: BaseException) -> None:
        self.timed_out = isinstance(error, httpx.TimeoutException)
        self.error = type(error).__name__
        super().__init__(f"no answer ({self.error})")


class InternalRefused(Exception):
    """The other role answered, but not 200: its status and its error (`code`, `message`,
    `fields`, as `nexus.contracts.errors` renders them; empty when the body is not one)."""

    def __init__(self, status: int, error: Any) -> None:
        error = error if isinstance(error, dict) else {}
        fields = error.get("fields")
        self.status = status
        self.code = str(error.get("code") or "")
        self.message = str(error.get("message") or "")
        self.fields: dict[str, Any] | None = fields if isinstance(fields, dict) else None
        super().__init__(f"answered {status} {self.code}".strip())


class InternalClient:
    """Signed calls to one other role: `post(path, body, delegation=..., model=...)`.

    Each call carries this role's workload token for `audience`, the caller's delegation
    when it acts for a user, and a deadline (`x-nexus-deadline`) of its timeout. A 200 answer
    is returned (validated as `model` when given); anything else raises `InternalRefused`,
    and a transport failure `InternalUnreachable`, so each caller maps errors to its own
    terms in one place.
    """

    def __init__(
        self,
        *,
        base_url: str,
        signer: WorkloadSigner,
        audience: str,
        client: httpx.AsyncClient,
        timeout_s: float,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.signer = signer
        self.audience = audience
        self.client = client
        self.timeout_s = timeout_s

    @overload
    async def post(
        self, path: str, body: dict[str, Any], *, delegation: str | None = None, model: None = None
    ) -> Any: ...

    @overload
    async def post(
        self, path: str, body: dict[str, Any], *, delegation: str | None = None, model: type[M]
    ) -> M: ...

    async def post(
        self,
        path: str,
        body: dict[str, Any],
        *,
        delegation: str | None = None,
        model: type[M] | None = None,
    ) -> Any:
        deadline_ms = int((time.time() + self.timeout_s) * 1000)
        headers = self.signer.headers(self.audience, deadline_ms=deadline_ms, delegation=delegation)
        try:
            reply = await self.client.post(
                f"{self.base_url}{path}", json=body, headers=headers, timeout=self.timeout_s
            )
        except httpx.HTTPError as exc:
            raise InternalUnreachable(exc) from None
        try:
            answer = reply.json() if reply.content else None
        except ValueError:
            answer = None
        if reply.status_code != 200:
            raise InternalRefused(reply.status_code, answer)
        return answer if model is None else model.model_validate(answer)
