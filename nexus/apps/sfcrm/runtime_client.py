"""The AppService's one way into Runtime: coarse use-case calls carrying the caller's delegation.

A request's bearer token is exchanged for a delegation (`/internal/v1/identity/exchange`);
the delegation is kept for most of its life (at most a minute) under a hash of the token, so
a client's next requests cost one Runtime call each. Keeping it decides nothing: Runtime
re-checks the session, the SecurityEpoch and every permission on each call, and a call it
refuses with 401 drops the kept delegation at once. Tokens and delegations are never logged.

The hop is on the dialect's hot path, so it is kept lean (ADR 0035): aiohttp's pool without
httpx on top, bodies encoded and decoded with orjson, and this process's workload token
minted once and reused for half of its one-minute life (an ES256 signature per call was
about a tenth of the AppService's CPU). Reusing it changes no decision: Runtime verifies it
on every call, and it names only this workload, never a user.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson

from nexus.apps.sfcrm.errors import SfError, from_runtime
from nexus.contracts.identity import EXCHANGE_PATH
from nexus.contracts.roles import RUNTIME_AUDIENCE
from nexus.platform.observability import get_logger
from nexus.platform.workload import (
    DEADLINE_HEADER,
    DELEGATION_HEADER,
    WORKLOAD_HEADER,
    WORKLOAD_TOKEN_TTL_SECONDS,
    WorkloadSigner,
)

log = get_logger(__name__)

RUNTIME_PREFIX = "/internal/v1/runtime"
#: A kept delegation is used until this many seconds before it expires.
DELEGATION_MARGIN_SECONDS = 15
MAX_KEPT_DELEGATIONS = 50_000
#: The workload token is minted again after this many seconds (it lives 60).
WORKLOAD_TOKEN_REUSE_SECONDS = WORKLOAD_TOKEN_TTL_SECONDS // 2
JSON = {"content-type": "application/json"}


@dataclass(frozen=True)
class Caller:
    """Who a dialect request acts for (as Runtime said at the exchange)."""

    org_id: str
    user_id: str
    delegation: str
    token_key: str


def bearer(authorization: str | None) -> str | None:
    if not authorization:
        return None
    scheme, _, token = authorization.partition(" ")
    token = token.strip()
    return token if scheme.lower() in ("bearer", "oauth") and token else None


def runtime_session(*, connections: int) -> aiohttp.ClientSession:
    """The AppService's pool of connections to Runtime: no cookies, no proxies or settings
    from the environment, no decompression (as `nexus.platform.http_client`)."""
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=connections, keepalive_timeout=30),
        auto_decompress=False,
        trust_env=False,
        cookie_jar=aiohttp.DummyCookieJar(),
    )


class RuntimeClient:
    def __init__(
        self,
        *,
        signer: WorkloadSigner,
        session: aiohttp.ClientSession,
        base_url: str,
        timeout_s: float = 30.0,
    ) -> None:
        self.signer = signer
        self.session = session
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._kept: dict[str, tuple[float, Caller]] = {}
        self._workload: tuple[float, str] = (0.0, "")

    def _workload_token(self) -> str:
        now = time.monotonic()
        renew_at, token = self._workload
        if now >= renew_at:
            token = self.signer.token(RUNTIME_AUDIENCE)
            self._workload = (now + WORKLOAD_TOKEN_REUSE_SECONDS, token)
        return token

    async def caller(self, authorization: str | None) -> Caller:
        """The caller behind a request's bearer token, or 401 INVALID_SESSION_ID."""
        token = bearer(authorization)
        if token is None:
            raise SfError(401, "INVALID_SESSION_ID", "Session expired or invalid")
        key = hashlib.sha256(token.encode()).hexdigest()
        kept = self._kept.get(key)
        now = time.monotonic()
        if kept is not None and kept[0] > now:
            return kept[1]
        answer = await self._post(EXCHANGE_PATH, {"credential": token}, delegation=None)
        caller = Caller(
            org_id=str(answer["org_id"]),
            user_id=str(answer["user_id"]),
            delegation=str(answer["delegation"]),
            token_key=key,
        )
        ttl = max(0, int(answer.get("expires_in", 0)) - DELEGATION_MARGIN_SECONDS)
        if len(self._kept) >= MAX_KEPT_DELEGATIONS:
            self._kept.clear()
        self._kept[key] = (now + ttl, caller)
        return caller

    async def call(self, caller: Caller, use_case: str, body: dict[str, Any]) -> Any:
        """One Runtime use case (`records/mutate`, `query`, ...) for the caller."""
        try:
            return await self._post(
                f"{RUNTIME_PREFIX}/{use_case}", body, delegation=caller.delegation
            )
        except SfError as exc:
            if exc.status == 401:
                self._kept.pop(caller.token_key, None)
            raise

    async def open_stream(
        self, caller: Caller, use_case: str, body: dict[str, Any]
    ) -> aiohttp.ClientResponse:
        """A use case whose answer is streamed (bulk results): the open response, which the
        caller reads and releases; an error answer raises as `call` does. The timeout bounds
        each read, not the whole body."""
        headers = {
            **JSON,
            WORKLOAD_HEADER: self._workload_token(),
            DEADLINE_HEADER: str(int((time.time() + self.timeout_s) * 1000)),
            DELEGATION_HEADER: caller.delegation,
        }
        timeout = aiohttp.ClientTimeout(sock_connect=self.timeout_s, sock_read=self.timeout_s)
        try:
            reply = await self.session.post(
                f"{self.base_url}{RUNTIME_PREFIX}/{use_case}",
                data=orjson.dumps(body),
                headers=headers,
                timeout=timeout,
            )
        except (TimeoutError, aiohttp.ClientError) as exc:
            log.warning("sfcrm.runtime_unreachable", error=type(exc).__name__)
            raise SfError(503, "SERVER_UNAVAILABLE", "Runtime cannot be reached") from None
        if reply.status == 200:
            return reply
        try:
            raw = await reply.read()
        finally:
            reply.release()
        try:
            answer = orjson.loads(raw) if raw else None
        except orjson.JSONDecodeError:
            answer = None
        if reply.status == 401:
            self._kept.pop(caller.token_key, None)
        raise from_runtime(reply.status, answer)

    async def workload_call(self, path: str, body: dict[str, Any]) -> Any:
        """A call the AppService makes for itself (no user): API usage reports."""
        return await self._post(path, body, delegation=None)

    async def _post(self, path: str, body: dict[str, Any], *, delegation: str | None) -> Any:
        deadline_ms = int((time.time() + self.timeout_s) * 1000)
        headers = {
            **JSON,
            WORKLOAD_HEADER: self._workload_token(),
            DEADLINE_HEADER: str(deadline_ms),
        }
        if delegation is not None:
            headers[DELEGATION_HEADER] = delegation
        try:
            async with self.session.post(
                self.base_url + path,
                data=orjson.dumps(body),
                headers=headers,
                timeout=self._timeout,
            ) as reply:
                status, raw = reply.status, await reply.read()
        except TimeoutError:
            raise SfError(503, "SERVER_UNAVAILABLE", "Runtime did not answer in time") from None
        except aiohttp.ClientError as exc:
            log.warning("sfcrm.runtime_unreachable", error=type(exc).__name__)
            raise SfError(503, "SERVER_UNAVAILABLE", "Runtime cannot be reached") from None
        try:
            answer = orjson.loads(raw) if raw else None
        except orjson.JSONDecodeError:
            answer = None
        if status == 200:
            return answer
        if status >= 500 or (status == 403 and _workload_refused(answer)):
            log.warning("sfcrm.runtime_failed", status=status, path=path)
        raise from_runtime(status, answer)


def _workload_refused(answer: Any) -> bool:
    return isinstance(answer, dict) and answer.get("code") in (
        "WORKLOAD_NOT_ALLOWED",
        "INVALID_WORKLOAD",
    )
