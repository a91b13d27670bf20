"""The single authoritative interceptor: a request's credentials -> `TrustedCall`.

No other code parses tokens. Access tokens are session handles (`00D<org>!<opaque>`, the shape
of a Salesforce session id, `handles.py`) or, issued before ADR 0075, RS256 JWTs; both are
bound to a session row. The session (with its user and client) is re-read from the database
at least every `MaxSecurityStaleness` seconds, so logout, revocation, deactivation and client
disabling take effect for every later request within that bound (the security SLO).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from sqlalchemy.engine import RowMapping
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from nexus.contracts.identity import TrustedCall
from nexus.identity.errors import InvalidToken
from nexus.identity.handles import looks_like_handle
from nexus.identity.keys import TokenInvalid
from nexus.identity.repository import IdentityRepository
from nexus.identity.service import ACCESS_TOKEN_TYPE, IdentityConfig, session_usable
from nexus.platform.db.clock import read_now_ms
from nexus.platform.db.engine import unit_of_work

_REQUIRED = ("iss", "aud", "sub", "org", "sid", "scp", "sep", "iat", "exp")


@dataclass
class _CachedSession:
    state: RowMapping | None
    fetched: float  # time.monotonic()
    db_now_ms: int


class Authenticator:
    """Per-process; caches session state for at most the staleness bound (minus a margin)."""

    def __init__(self, cfg: IdentityConfig, sessions: async_sessionmaker[AsyncSession]) -> None:
        self.cfg = cfg
        self.sessions = sessions
        self.max_age = cfg.settings.max_security_staleness_seconds * 0.8
        self._cache: dict[tuple[str, str], _CachedSession] = {}

    def _claims(self, token: str) -> dict[str, Any]:
        try:
            claims = self.cfg.keys.verify(token, typ=ACCESS_TOKEN_TYPE)
        except TokenInvalid:
            raise InvalidToken from None
        if any(name not in claims for name in _REQUIRED):
            raise InvalidToken
        if claims["iss"] != self.cfg.issuer or claims["aud"] != self.cfg.audience:
            raise InvalidToken
        return claims

    async def _session(self, org_id: str, session_id: str) -> _CachedSession:
        key = (org_id, session_id)
        cached = self._cache.get(key)
        if cached is not None and time.monotonic() - cached.fetched < self.max_age:
            return cached
        async with unit_of_work(self.sessions, readonly=True) as session:
            repo = IdentityRepository(session)
            state = await repo.session_state(org_id, session_id)
            now = await read_now_ms(session)
        fresh = _CachedSession(state=state, fetched=time.monotonic(), db_now_ms=now)
        if len(self._cache) > 100_000:
            self._cache.clear()
        self._cache[key] = fresh
        return fresh

    async def _live_session(self, claims: dict[str, Any]) -> tuple[RowMapping, int]:
        """The claims' session state, if it is still usable for the claimed user; and `now`."""
        cached = await self._session(str(claims["org"]), str(claims["sid"]))
        # the database clock, advanced by the time since it was read
        now_ms = cached.db_now_ms + int((time.monotonic() - cached.fetched) * 1000)
        state = cached.state
        if state is None or state["user_id"] != claims["sub"] or not session_usable(state, now_ms):
            raise InvalidToken
        return state, now_ms

    async def from_access_token(self, token: str) -> TrustedCall:
        if looks_like_handle(token):
            return await self._from_handle(token)
        claims = self._claims(token)
        state, now_ms = await self._live_session(claims)
        if int(claims["exp"]) * 1000 <= now_ms:
            raise InvalidToken
        return _trusted(claims, state, via="access_token", token_expires_at=int(claims["exp"]))

    async def _from_handle(self, token: str) -> TrustedCall:
        """A session handle: who and what it reaches come from its session row."""
        handle = self.cfg.handles.read(token)
        if handle is None:
            raise InvalidToken
        cached = await self._session(handle.org_id, handle.session_id)
        now_ms = cached.db_now_ms + int((time.monotonic() - cached.fetched) * 1000)
        state = cached.state
        if state is None or not session_usable(state, now_ms) or handle.expires_at * 1000 <= now_ms:
            raise InvalidToken
        claims = {
            "org": handle.org_id,
            "sub": state["user_id"],
            "sid": handle.session_id,
            "cid": state["client_id"],
            "scp": state["scopes"],
        }
        return _trusted(claims, state, via="access_token", token_expires_at=handle.expires_at)

    async def from_delegation(
        self, claims: dict[str, Any], *, workload: str, deadline_ms: int
    ) -> TrustedCall:
        """A verified delegation -> TrustedCall, if its session is still good and its epoch is
        not below the org's current SecurityEpoch (any revocation since forces a new one)."""
        state, _ = await self._live_session(claims)
        if int(claims["sep"]) < int(state["security_epoch"]):
            raise InvalidToken("delegation no longer valid")
        return _trusted(
            claims,
            state,
            via="delegation",
            workload=workload,
            app_installation_id=claims.get("ain"),
            deadline_ms=deadline_ms,
        )

    def forget(self, org_id: str, session_id: str) -> None:
        """Drop a cached session at once (this process revoked it)."""
        self._cache.pop((org_id, session_id), None)


def _trusted(claims: dict[str, Any], state: RowMapping, **extra: Any) -> TrustedCall:
    return TrustedCall(
        org_id=str(claims["org"]),
        user_id=str(claims["sub"]),
        session_id=str(claims["sid"]),
        client_id=claims.get("cid"),
        scopes=frozenset(str(claims["scp"]).split()),
        security_epoch=int(state["security_epoch"]),
        **extra,
    )


def bearer_token(authorization: str | None) -> str | None:
    if not authorization:
        return None
    scheme, _, value = authorization.partition(" ")
    if scheme.lower() not in ("bearer", "oauth") or not value.strip():
        return None
    return value.strip()
