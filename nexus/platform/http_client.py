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

import json
import time
from dataclasses import dataclass
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
    names the transport error's class only (never a URL with data, a header or a body).
    `nothing_sent`: no connection was made (refused, or the connect timed out), so the other
    role cannot have acted on the request; otherwise it may have."""

    def __init__(self, error: BaseException) -> None:
        root = error
        while root.__cause__ is not None:  # the transport's own exception, under httpx's
            root = root.__cause__
        if isinstance(root, aiohttp.ClientError):
            # httpx_aiohttp maps every aiohttp connection error to ConnectTimeout, including a
            # server that closed the connection after the request went out (a crash after its
            # commit): only a failed connect, or a timed-out one, sent nothing
            self.nothing_sent = isinstance(
                root, aiohttp.ClientConnectorError | aiohttp.ConnectionTimeoutError
            )
            self.timed_out = isinstance(root, aiohttp.ServerTimeoutError)
        else:
            self.nothing_sent = isinstance(error, httpx.ConnectError | httpx.ConnectTimeout)
            self.timed_out = isinstance(error, httpx.TimeoutException)
        self.error = type(error).__name__
        self.cause = type(root).__name__
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


@dataclass(frozen=True)
class RawAnswer:
    """An answer of any status, as bytes (cut past the caller's limit)."""

    status: int
    body: bytes
    retry_after: str | None


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
        try:
            reply = await self.client.post(
                f"{self.base_url}{path}",
                json=body,
                headers=self._headers(delegation),
                timeout=self.timeout_s,
            )
        except httpx.HTTPError as exc:
            raise InternalUnreachable(exc) from None
        return self._answer(reply.status_code, reply.content, model)

    async def get(self, path: str, *, params: dict[str, str] | None = None) -> Any:
        """A signed GET; the 200 answer's JSON (None when it is not JSON). Errors as `post`."""
        try:
            reply = await self.client.get(
                f"{self.base_url}{path}",
                params=params,
                headers=self._headers(None),
                timeout=self.timeout_s,
            )
        except httpx.HTTPError as exc:
            raise InternalUnreachable(exc) from None
        return self._answer(reply.status_code, reply.content, None)

    async def exchange(
        self,
        path: str,
        content: bytes,
        *,
        answer_limit: int,
        error_limit: int,
        org: str | None = None,
    ) -> RawAnswer:
        """A signed POST of a body the caller serialized, answered with ANY status (the caller
        reads it per item): the bytes of a 2xx answer up to `answer_limit`, of any other up to
        `error_limit`, read as they stream. Only transport failures raise
        (`InternalUnreachable`). `org`: the org the call acts in, signed into its token."""
        headers = self._headers(None, org)
        headers["content-type"] = "application/json"
        try:
            async with self.client.stream(
                "POST",
                f"{self.base_url}{path}",
                content=content,
                headers=headers,
                timeout=self.timeout_s,
            ) as response:
                status = response.status_code
                limit = answer_limit if 200 <= status < 300 else error_limit
                raw = b""
                async for chunk in response.aiter_bytes():
                    raw += chunk
                    if len(raw) > limit:
                        break
                return RawAnswer(status, raw, response.headers.get("retry-after"))
        except httpx.HTTPError as exc:
            raise InternalUnreachable(exc) from None

    def _headers(self, delegation: str | None, org: str | None = None) -> dict[str, str]:
        deadline_ms = int((time.time() + self.timeout_s) * 1000)
        return self.signer.headers(
            self.audience, deadline_ms=deadline_ms, delegation=delegation, org=org
        )

    @staticmethod
    def _answer(status: int, content: bytes, model: type[M] | None) -> Any:
        try:
            answer = json.loads(content) if content else None
        except ValueError:
            answer = None
        if status != 200:
            raise InternalRefused(status, answer)
        return answer if model is None else model.model_validate(answer)
