"""Identity use cases: orgs, users, Connected Apps, sessions, tokens, revocation.

Every function takes the repository of the caller's unit of work and reads the database
clock once. Revocations advance the org's SecurityEpoch in the same transaction.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import secrets
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import anyio
from sqlalchemy.engine import RowMapping

from nexus.identity.errors import AuthenticationFailed, InvalidIdentityInput, UnknownUser
from nexus.identity.handles import SessionHandles
from nexus.identity.keys import KeyRing
from nexus.identity.passwords import WeakPassword, check_policy, hash_password, verify_password
from nexus.identity.repository import IdentityRepository
from nexus.platform.db.clock import read_now_ms
from nexus.platform.ids import new_id
from nexus.platform.settings import IdentitySettings

ORG_PREFIX, USER_PREFIX, SESSION_PREFIX, ROLE_PREFIX = "00D", "005", "0Ak", "00E"
SCOPES = ("api", "refresh_token", "full", "admin", "openid")
GRANT_TYPES = ("password", "client_credentials", "authorization_code", "refresh_token")
ACCESS_TOKEN_TYPE = "at+jwt"  # noqa: S105  (a JWT typ header, not a secret)
_USERNAME = re.compile(r"^[a-z0-9._%+\-@]{3,255}$")


@dataclass(frozen=True)
class IdentityConfig:
    """What token issuance needs, built once per process."""

    settings: IdentitySettings
    keys: KeyRing
    issuer: str  # the gateway's public base URL
    signature_key: bytes  # for the Salesforce-style `signature` field of token responses

    @property
    def audience(self) -> str:
        return "nexus"

    @cached_property
    def handles(self) -> SessionHandles:
        """Access tokens: Salesforce-shaped session ids (`00D...!...`, `handles.py`)."""
        return SessionHandles(self.signature_key)


def digest(secret: str) -> str:
    """SHA-256 hex of a bearer secret (refresh token, authorization code, client secret)."""
    return hashlib.sha256(secret.encode()).hexdigest()


def new_secret() -> str:
    return secrets.token_urlsafe(32)


# ---------------------------------------------------------------------------- orgs and users


async def create_org(repo: IdentityRepository, *, name: str) -> str:
    org_id = new_id(ORG_PREFIX)
    await repo.insert_org(org_id=org_id, name=name, now_ms=await read_now_ms(repo.session))
    return org_id


async def create_user(
    repo: IdentityRepository,
    *,
    org_id: str,
    username: str,
    password: str | None,
    email: str | None = None,
    display_name: str | None = None,
    is_admin: bool = False,
    locale: str = "en_US",
    time_zone: str = "UTC",
    role_name: str | None = None,
) -> str:
    normalized = username.strip().lower()
    if not _USERNAME.fullmatch(normalized):
        raise InvalidIdentityInput(
            "a username is 3-255 characters of letters, digits and . _ % + - @",
            fields={"username": "invalid"},
        )
    if await repo.user_by_username(normalized) is not None:
        raise InvalidIdentityInput("that username is taken", fields={"username": "duplicate"})
    try:
        password_hash = (
            await anyio.to_thread.run_sync(hash_password, password) if password else None
        )
    except WeakPassword as exc:
        raise InvalidIdentityInput(str(exc), fields={"password": "weak"}) from None
    role_id = None
    if role_name:
        role = await repo.role_by_name(org_id, role_name)
        if role is None:
            raise InvalidIdentityInput(f"no role named {role_name!r}", fields={"role": "unknown"})
        role_id = role["role_id"]
    now = await read_now_ms(repo.session)
    user_id = new_id(USER_PREFIX)
    await repo.insert_user(
        org_id=org_id,
        user_id=user_id,
        username=normalized,
        email=(email or (normalized if "@" in normalized else "")).strip(),
        display_name=(display_name or normalized).strip(),
        is_active=True,
        is_admin=is_admin,
        locale=locale,
        time_zone=time_zone,
        role_id=role_id,
        password_hash=password_hash,
        failed_logins=0,
        created_at_ms=now,
        updated_at_ms=now,
    )
    return user_id


async def create_role(
    repo: IdentityRepository, *, org_id: str, name: str, parent: str | None = None
) -> str:
    parent_id = None
    if parent is not None:
        parent_row = await repo.role_by_name(org_id, parent)
        if parent_row is None:
            raise InvalidIdentityInput(f"no role named {parent!r}", fields={"parent": "unknown"})
        parent_id = parent_row["role_id"]
    role_id = new_id(ROLE_PREFIX)
    await repo.insert_role(
        org_id=org_id,
        role_id=role_id,
        name=name,
        parent_role_id=parent_id,
        created_at_ms=await read_now_ms(repo.session),
    )
    return role_id


async def authenticate_password(
    repo: IdentityRepository, cfg: IdentityConfig, *, username: str, password: str
) -> RowMapping:
    """The user whose password this is; AuthenticationFailed otherwise.

    Unknown users, wrong passwords, locked and inactive accounts fail identically and after
    one argon2 verification each. Failures count per user; reaching the limit locks the
    account for the lockout period (a correct password does not unlock it early).
    """
    user = await repo.user_by_username(username) if username else None
    stored = user["password_hash"] if user is not None else None
    matches = await anyio.to_thread.run_sync(verify_password, stored, password)
    if user is None:
        raise AuthenticationFailed
    now = await read_now_ms(repo.session)
    locked = user["locked_until_ms"] is not None and user["locked_until_ms"] > now
    if not matches or locked or not user["is_active"]:
        if not locked:
            await repo.record_login_failure(
                org_id=user["org_id"],
                user_id=user["user_id"],
                max_failures=cfg.settings.login_max_failures,
                lock_until_ms=now + cfg.settings.login_lockout_seconds * 1000,
                now_ms=now,
            )
        raise AuthenticationFailed
    await repo.record_login_success(org_id=user["org_id"], user_id=user["user_id"], now_ms=now)
    return user


# ---------------------------------------------------------------------------- connected apps


@dataclass(frozen=True)
class NewClient:
    client_id: str
    client_secret: str | None  # shown once; only its digest is stored


async def create_client(
    repo: IdentityRepository,
    *,
    org_id: str,
    name: str,
    redirect_uris: list[str],
    grant_types: list[str],
    scopes: list[str],
    run_as_user_id: str | None = None,
    confidential: bool = True,
) -> NewClient:
    unknown_grants = sorted(set(grant_types) - set(GRANT_TYPES))
    if unknown_grants or not grant_types:
        raise InvalidIdentityInput(
            f"grant types must be among {', '.join(GRANT_TYPES)}", fields={"grant_types": "invalid"}
        )
    unknown_scopes = sorted(set(scopes) - set(SCOPES))
    if unknown_scopes or not scopes:
        raise InvalidIdentityInput(
            f"scopes must be among {', '.join(SCOPES)}", fields={"scopes": "invalid"}
        )
    if "client_credentials" in grant_types:
        if not confidential:
            raise InvalidIdentityInput("client credentials need a confidential client")
        if run_as_user_id is None or await repo.user(org_id, run_as_user_id) is None:
            raise InvalidIdentityInput(
                "client credentials need a run-as user of this org", fields={"run_as": "missing"}
            )
    if "authorization_code" in grant_types and not redirect_uris:
        raise InvalidIdentityInput("the authorization code grant needs a redirect URI")
    for uri in redirect_uris:
        if not re.match(r"^(https://|http://(127\.0\.0\.1|localhost)[:/])", uri) or "#" in uri:
            raise InvalidIdentityInput(
                "redirect URIs are https (or http on loopback) without fragments",
                fields={"redirect_uris": "invalid"},
            )
    client_id = "3MVG" + secrets.token_urlsafe(24).replace("-", "A").replace("_", "b")
    secret = new_secret() if confidential else None
    await repo.insert_client(
        org_id=org_id,
        client_id=client_id,
        name=name,
        secret_hash=digest(secret) if secret else None,
        redirect_uris=redirect_uris,
        grant_types=grant_types,
        scopes=scopes,
        run_as_user_id=run_as_user_id,
        now_ms=await read_now_ms(repo.session),
    )
    return NewClient(client_id=client_id, client_secret=secret)


def client_lists(client: RowMapping) -> tuple[list[str], list[str], list[str]]:
    return (
        json.loads(client["redirect_uris"]),
        json.loads(client["grant_types"]),
        json.loads(client["scopes"]),
    )


# ---------------------------------------------------------------------------- sessions and tokens


@dataclass(frozen=True)
class IssuedTokens:
    body: dict[str, Any]  # the Salesforce-shaped token response
    session_id: str
    user: RowMapping


async def open_session(
    repo: IdentityRepository,
    cfg: IdentityConfig,
    *,
    user: RowMapping,
    client_id: str | None,
    scopes: list[str],
    auth_method: str,
    with_refresh_token: bool,
) -> IssuedTokens:
    """Start a session and issue its first access token (and refresh token when asked)."""
    now = await read_now_ms(repo.session)
    session_id = new_id(SESSION_PREFIX)
    await repo.insert_session(
        org_id=user["org_id"],
        session_id=session_id,
        user_id=user["user_id"],
        client_id=client_id,
        scopes=" ".join(sorted(set(scopes))),
        auth_method=auth_method,
        created_at_ms=now,
        expires_at_ms=now + cfg.settings.session_ttl_seconds * 1000,
    )
    refresh = None
    if with_refresh_token:
        refresh = await _new_refresh_token(
            repo, cfg, org_id=user["org_id"], session_id=session_id, now=now
        )
    return IssuedTokens(
        body=_token_body(
            cfg,
            org_id=user["org_id"],
            user_id=user["user_id"],
            session_id=session_id,
            scopes=scopes,
            now=now,
            refresh_token=refresh,
        ),
        session_id=session_id,
        user=user,
    )


#: What a partner-API (SOAP) login's session reaches: the data APIs and who the user is.
SOAP_SCOPES = ("api",)
SOAP_AUTH_METHOD = "soap_login"


async def open_soap_session(
    repo: IdentityRepository, cfg: IdentityConfig, *, user: RowMapping
) -> str:
    """A partner-API `login`: a session of no Connected App (Salesforce's SOAP sessions belong
    to none) for the data APIs; its session id is a handle that lives as long as the session."""
    now = await read_now_ms(repo.session)
    session_id = new_id(SESSION_PREFIX)
    expires_at_ms = now + cfg.settings.session_ttl_seconds * 1000
    await repo.insert_session(
        org_id=user["org_id"],
        session_id=session_id,
        user_id=user["user_id"],
        client_id=None,
        scopes=" ".join(SOAP_SCOPES),
        auth_method=SOAP_AUTH_METHOD,
        created_at_ms=now,
        expires_at_ms=expires_at_ms,
    )
    return cfg.handles.issue(
        org_id=user["org_id"], session_id=session_id, expires_at=expires_at_ms // 1000
    )


@dataclass(frozen=True)
class SoapLogin:
    session_id: str  # a session handle (`handles.py`), Salesforce's `sessionId`
    seconds_valid: int
    user: RowMapping
    org: RowMapping


async def soap_login(
    repo: IdentityRepository,
    cfg: IdentityConfig,
    *,
    username: str,
    password: str,
    org_id: str | None,
) -> SoapLogin:
    """A partner-API `login`: the one password check (lockout included) and a new session.

    Nexus has no security tokens (no per-user secret to append): the password is checked as
    given. A login scoped to an org (`LoginScopeHeader`, or the org of a `serverUrl`) fails
    like a wrong password for a user of another org.
    """
    user = await authenticate_password(repo, cfg, username=username, password=password)
    org = await repo.org(user["org_id"])
    if org is None or (org_id is not None and org_id != user["org_id"]):
        raise AuthenticationFailed
    handle = await open_soap_session(repo, cfg, user=user)
    return SoapLogin(
        session_id=handle, seconds_valid=cfg.settings.session_ttl_seconds, user=user, org=org
    )


async def _new_refresh_token(
    repo: IdentityRepository, cfg: IdentityConfig, *, org_id: str, session_id: str, now: int
) -> str:
    token = new_secret()
    await repo.insert_refresh_token(
        org_id=org_id,
        token_hash=digest(token),
        session_id=session_id,
        now_ms=now,
        expires_at_ms=now + cfg.settings.refresh_token_ttl_seconds * 1000,
    )
    return token


def _token_body(
    cfg: IdentityConfig,
    *,
    org_id: str,
    user_id: str,
    session_id: str,
    scopes: list[str],
    now: int,
    refresh_token: str | None,
) -> dict[str, Any]:
    """The Salesforce-shaped token response; its access token is a session handle
    (`00D<org>!<opaque>`, `handles.py`) that ends after `access_token_ttl_seconds`."""
    ttl = cfg.settings.access_token_ttl_seconds
    identity_url = f"{cfg.issuer}/id/{org_id}/{user_id}"
    issued_at = str(now)
    signature = base64.b64encode(
        hmac.new(cfg.signature_key, (identity_url + issued_at).encode(), hashlib.sha256).digest()
    ).decode()
    body: dict[str, Any] = {
        "access_token": cfg.handles.issue(
            org_id=org_id, session_id=session_id, expires_at=now // 1000 + ttl
        ),
        "instance_url": cfg.issuer,
        "id": identity_url,
        "token_type": "Bearer",
        "issued_at": issued_at,
        "signature": signature,
        "scope": " ".join(sorted(set(scopes))),
        "expires_in": ttl,
    }
    if refresh_token is not None:
        body["refresh_token"] = refresh_token
    return body


async def refresh_session(
    repo: IdentityRepository, cfg: IdentityConfig, *, refresh_token: str, client_id: str
) -> IssuedTokens | None:
    """Rotate a refresh token. None when it is not valid for this client.

    Presenting a token that was already rotated revokes its whole session (a refresh-token
    family is a session): someone holds a stolen copy.
    """
    row = await repo.refresh_token(digest(refresh_token))
    if row is None:
        return None
    now = await read_now_ms(repo.session)
    org_id, session_id = row["org_id"], row["session_id"]
    if row["status"] == "rotated":
        await revoke(repo, org_id=org_id, reason="refresh_token_reuse", session_id=session_id)
        return None
    state = await repo.session_state(org_id, session_id)
    if (
        row["status"] != "active"
        or row["expires_at_ms"] <= now
        or state is None
        or state["client_id"] != client_id
        or not session_usable(state, now)
    ):
        return None
    if not await repo.rotate_refresh_token(org_id=org_id, token_hash=row["token_hash"], now_ms=now):
        await revoke(repo, org_id=org_id, reason="refresh_token_reuse", session_id=session_id)
        return None
    fresh = await _new_refresh_token(repo, cfg, org_id=org_id, session_id=session_id, now=now)
    user = await repo.user(org_id, state["user_id"])
    if user is None:  # pragma: no cover - sessions are revoked before users can vanish
        return None
    return IssuedTokens(
        body=_token_body(
            cfg,
            org_id=org_id,
            user_id=state["user_id"],
            session_id=session_id,
            scopes=state["scopes"].split(),
            now=now,
            refresh_token=fresh,
        ),
        session_id=session_id,
        user=user,
    )


def session_usable(state: RowMapping, now: int) -> bool:
    """Not revoked, not expired, its user active and its client (if any) enabled."""
    return (
        state["revoked_at_ms"] is None
        and state["expires_at_ms"] > now
        and bool(state["user_active"])
        and (state["client_id"] is None or bool(state["client_enabled"]))
    )


# ---------------------------------------------------------------------------- revocation


async def revoke(
    repo: IdentityRepository,
    *,
    org_id: str,
    reason: str,
    session_id: str | None = None,
    user_id: str | None = None,
    client_id: str | None = None,
) -> int:
    """Revoke matching sessions (and their refresh tokens); advance the SecurityEpoch."""
    now = await read_now_ms(repo.session)
    count = await repo.revoke_sessions(
        org_id=org_id,
        reason=reason,
        now_ms=now,
        session_id=session_id,
        user_id=user_id,
        client_id=client_id,
    )
    await repo.advance_security_epoch(org_id)
    return count


async def set_user_active(
    repo: IdentityRepository, *, org_id: str, user_id: str, active: bool
) -> None:
    now = await read_now_ms(repo.session)
    if not await repo.set_user_active(org_id=org_id, user_id=user_id, active=active, now_ms=now):
        raise UnknownUser("no such user")
    if not active:
        await revoke(repo, org_id=org_id, reason="user_deactivated", user_id=user_id)


async def disable_client(repo: IdentityRepository, *, org_id: str, client_id: str) -> None:
    now = await read_now_ms(repo.session)
    if not await repo.disable_client(org_id=org_id, client_id=client_id, now_ms=now):
        raise UnknownUser("no such connected app")
    await revoke(repo, org_id=org_id, reason="client_disabled", client_id=client_id)


async def reset_password(
    repo: IdentityRepository, *, org_id: str, user_id: str, password: str
) -> None:
    """A new password for an existing user; failed sign-ins are forgotten, sessions end."""
    try:
        check_policy(password)
    except WeakPassword as exc:
        raise InvalidIdentityInput(str(exc), fields={"password": "weak"}) from None
    if await repo.user(org_id, user_id) is None:
        raise UnknownUser("no such user")
    password_hash = await anyio.to_thread.run_sync(hash_password, password)
    now = await read_now_ms(repo.session)
    await repo.set_password(org_id=org_id, user_id=user_id, password_hash=password_hash, now_ms=now)
    await revoke(repo, org_id=org_id, reason="password_reset", user_id=user_id)


async def set_user_role(
    repo: IdentityRepository, *, org_id: str, user_id: str, role_name: str | None
) -> None:
    """Move a user in the role hierarchy (None: no role); sharing follows at once."""
    if await repo.user(org_id, user_id) is None:
        raise UnknownUser("no such user")
    role_id = None
    if role_name:
        role = await repo.role_by_name(org_id, role_name)
        if role is None:
            raise UnknownUser(f"no role named {role_name!r}")
        role_id = role["role_id"]
    now = await read_now_ms(repo.session)
    await repo.set_user_role(org_id=org_id, user_id=user_id, role_id=role_id, now_ms=now)
    await repo.advance_security_epoch(org_id)
