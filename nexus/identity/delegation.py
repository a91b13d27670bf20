"""Workload identity checks, the capability policy, and user delegation for internal calls.

A user-facing role never forwards a user's token to Runtime. It calls
`POST /internal/v1/identity/exchange` with the user's credential and its own workload token
and receives a delegation: an RS256 JWT (at most 60 s) naming org, user, session, scopes,
SecurityEpoch, the audience (Runtime) and the workload it was issued to (`azp`). Every later
internal call carries workload token + delegation + deadline; Runtime fails closed when any is
missing, expired, for another audience or workload, or below the org's current epoch.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from joserfc import jwt
from joserfc.errors import JoseError
from joserfc.jwk import ECKey

from nexus.contracts.identity import TrustedCall
from nexus.contracts.roles import RUNTIME_AUDIENCE
from nexus.identity.errors import InvalidToken
from nexus.identity.keys import TokenInvalid
from nexus.identity.service import IdentityConfig
from nexus.platform.workload import (
    WORKLOAD_ALGORITHM,
    WORKLOAD_TOKEN_TYPE,
)

DELEGATION_TYPE = "delegation+jwt"
CLOCK_SKEW_SECONDS = 5

#: Which workload may call which internal Runtime capability. Runtime decides; callers only
#: present who they are.
CAPABILITIES: Mapping[str, frozenset[str]] = {
    "app-sfcrm": frozenset(
        {
            "identity.exchange",
            "identity.read",
            "runtime.metadata.apply",
            "runtime.records",
            "runtime.usage",
        }
    ),
    # exchange + operators.check: the integration admin API asks Runtime about its users;
    # commands: AcceptCommand (its executor delivers work items to Runtime)
    "integration": frozenset(
        {
            "identity.exchange",
            "identity.read",
            "runtime.records",
            "runtime.operators.check",
            "runtime.commands",
        }
    ),
    # releases: install App releases (as itself: a resumed job has no user left);
    # exchange + operators.check: the catalog admin API asks Runtime about its users
    "catalog": frozenset(
        {
            "runtime.metadata.apply",
            "runtime.releases",
            "identity.exchange",
            "runtime.operators.check",
        }
    ),
    "gateway": frozenset(),
    "runtime-worker": frozenset({"identity.read"}),
}


class WorkloadRejected(Exception):
    """The workload token is missing or invalid (401), or lacks the capability (403)."""

    def __init__(self, message: str, *, forbidden: bool = False) -> None:
        super().__init__(message)
        self.forbidden = forbidden


@dataclass(frozen=True)
class VerifiedWorkload:
    """A genuine workload token: who calls, and the org it signed for (None: not org-bound)."""

    name: str
    org: str | None


class WorkloadVerifier:
    def __init__(self, public_keys: Mapping[str, ECKey], *, audience: str) -> None:
        self.public_keys = dict(public_keys)
        self.audience = audience

    def verify(self, token: str | None, *, capability: str) -> VerifiedWorkload:
        """The calling workload, when its token is genuine and it holds `capability`."""
        if not token:
            raise WorkloadRejected("missing workload token")
        name = _unverified_kid(token)
        key = self.public_keys.get(name)
        if key is None:
            raise WorkloadRejected("unknown workload")
        try:
            decoded = jwt.decode(token, key, algorithms=[WORKLOAD_ALGORITHM])
        except (JoseError, ValueError, KeyError, TypeError):
            raise WorkloadRejected("workload token rejected") from None
        claims = decoded.claims
        now = time.time()
        if (
            decoded.header.get("typ") != WORKLOAD_TOKEN_TYPE
            or claims.get("iss") != name
            or claims.get("aud") != self.audience
            or float(claims.get("exp", 0)) + CLOCK_SKEW_SECONDS < now
            or float(claims.get("iat", 0)) - CLOCK_SKEW_SECONDS > now
        ):
            raise WorkloadRejected("workload token rejected")
        if capability not in CAPABILITIES.get(name, frozenset()):
            raise WorkloadRejected(f"workload {name} may not use {capability}", forbidden=True)
        org = claims.get("org")
        return VerifiedWorkload(name, org if isinstance(org, str) and org else None)


def _unverified_kid(token: str) -> str:
    """The `kid` of a compact JWS header, only to choose the key that will verify it."""
    try:
        header_part = token.split(".", 1)[0]
        header = json.loads(base64.urlsafe_b64decode(header_part + "=" * (-len(header_part) % 4)))
        return str(header.get("kid", "")) if isinstance(header, dict) else ""
    except (ValueError, UnicodeDecodeError):
        return ""


def issue_delegation(cfg: IdentityConfig, caller: TrustedCall, *, workload: str) -> tuple[str, int]:
    """A delegation for `workload` to act for the caller's session; returns (jwt, ttl). It
    expires with the caller's access token at the latest, so a role that keeps it for its
    life never serves an expired token's requests."""
    now = int(time.time())
    ttl = min(cfg.settings.delegation_ttl_seconds, 60)
    if caller.token_expires_at is not None:
        ttl = max(0, min(ttl, caller.token_expires_at - now))
    claims = {
        "iss": cfg.issuer,
        "aud": RUNTIME_AUDIENCE,
        "azp": workload,
        "sub": caller.user_id,
        "org": caller.org_id,
        "sid": caller.session_id,
        "cid": caller.client_id,
        "ain": caller.app_installation_id,
        "scp": " ".join(sorted(caller.scopes)),
        "sep": caller.security_epoch,
        "iat": now,
        "exp": now + ttl,
    }
    return cfg.keys.sign(claims, typ=DELEGATION_TYPE), ttl


def read_delegation(cfg: IdentityConfig, token: str | None, *, workload: str) -> dict[str, Any]:
    """Verified delegation claims (signature, type, audience, holder, expiry)."""
    if not token:
        raise InvalidToken("missing delegation")
    try:
        claims = cfg.keys.verify(token, typ=DELEGATION_TYPE)
    except TokenInvalid:
        raise InvalidToken("delegation rejected") from None
    if (
        claims.get("iss") != cfg.issuer
        or claims.get("aud") != RUNTIME_AUDIENCE
        or claims.get("azp") != workload
        or int(claims.get("exp", 0)) <= time.time()
    ):
        raise InvalidToken("delegation rejected")
    return claims
