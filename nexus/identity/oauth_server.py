"""The OAuth2 authorization server, built on authlib's server components.

authlib's grants are synchronous; Nexus's storage is async. Each OAuth request therefore
runs authlib in a worker thread (`anyio.to_thread.run_sync`) and every storage hook hops
back to the event loop with `anyio.from_thread.run`, inside the request's one unit of work.
A server object is built per request around that unit of work's repository.
"""

from __future__ import annotations

import hmac
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import anyio.from_thread
from authlib.oauth2 import AuthorizationServer
from authlib.oauth2.rfc6749 import ClientMixin, OAuth2Request, grants
from authlib.oauth2.rfc6749.errors import (
    InvalidGrantError,
    InvalidRequestError,
    InvalidScopeError,
)
from authlib.oauth2.rfc6749.requests import BasicOAuth2Payload
from authlib.oauth2.rfc7009 import RevocationEndpoint
from authlib.oauth2.rfc7636 import CodeChallenge
from authlib.oidc.core.grants import OpenIDCode
from sqlalchemy.engine import RowMapping

from nexus.identity import service
from nexus.identity.errors import AuthenticationFailed
from nexus.identity.handles import looks_like_handle
from nexus.identity.keys import ALGORITHM, TokenInvalid
from nexus.identity.repository import IdentityRepository
from nexus.identity.service import IdentityConfig
from nexus.platform.db.clock import read_now_ms

T = TypeVar("T")
AUTHORIZATION_CODE_TTL_MS = 60_000
CLIENT_AUTH_METHODS = ["client_secret_basic", "client_secret_post", "none"]


def on_loop(func: Callable[..., Awaitable[T]], *args: Any) -> T:
    """Run an async storage call on the event loop from authlib's worker thread."""
    return anyio.from_thread.run(func, *args)  # type: ignore[arg-type]  # any awaitable factory


class NexusRequest(OAuth2Request):  # type: ignore[misc]  # authlib is untyped
    """An OAuth2 request from already-read form/query data (no framework object inside)."""

    def __init__(self, method: str, uri: str, headers: Mapping[str, str], data: dict[str, str]):
        super().__init__(method=method, uri=uri, headers=headers)
        self.payload = BasicOAuth2Payload(data)
        self._data = data

    @property
    def form(self) -> dict[str, str]:
        return self._data

    @property
    def args(self) -> dict[str, str]:
        return self._data


@dataclass
class Client(ClientMixin):  # type: ignore[misc]  # authlib's mixins are untyped
    row: RowMapping
    redirect_uris: list[str] = field(init=False)
    grant_types: list[str] = field(init=False)
    scopes: list[str] = field(init=False)

    def __post_init__(self) -> None:
        self.redirect_uris, self.grant_types, self.scopes = service.client_lists(self.row)

    @property
    def client_id(self) -> str:
        return str(self.row["client_id"])

    @property
    def is_public(self) -> bool:
        return self.row["secret_hash"] is None

    def get_client_id(self) -> str:
        return self.client_id

    def get_default_redirect_uri(self) -> str | None:
        return self.redirect_uris[0] if self.redirect_uris else None

    def get_allowed_scope(self, scope: str | None) -> str:
        if not scope:
            return " ".join(s for s in self.scopes if s != "openid")
        return " ".join(s for s in scope.split() if s in self.scopes)

    def check_redirect_uri(self, redirect_uri: str) -> bool:
        return redirect_uri in self.redirect_uris  # exact match, no prefixes or wildcards

    def check_client_secret(self, client_secret: str) -> bool:
        stored = self.row["secret_hash"]
        return stored is not None and hmac.compare_digest(stored, service.digest(client_secret))

    def check_endpoint_auth_method(self, method: str, endpoint: str) -> bool:
        return (method == "none") == self.is_public

    def check_response_type(self, response_type: str) -> bool:
        return response_type == "code" and "authorization_code" in self.grant_types

    def check_grant_type(self, grant_type: str) -> bool:
        return grant_type in self.grant_types


@dataclass
class User:
    row: RowMapping

    def get_user_id(self) -> str:
        return str(self.row["user_id"])


@dataclass
class AuthorizationCode:
    row: RowMapping

    def get_redirect_uri(self) -> str:
        return str(self.row["redirect_uri"])

    def get_scope(self) -> str:
        return str(self.row["scope"])

    def get_nonce(self) -> str | None:
        value = self.row["nonce"]
        return str(value) if value else None

    def get_auth_time(self) -> int:
        return int(self.row["created_at_ms"]) // 1000

    def get_acr(self) -> None:
        return None

    def get_amr(self) -> list[str]:
        return ["pwd"]

    @property
    def code_challenge(self) -> str | None:
        value = self.row["code_challenge"]
        return str(value) if value is not None else None

    @property
    def code_challenge_method(self) -> str | None:
        value = self.row["code_challenge_method"]
        return str(value) if value is not None else None


class S256Only(CodeChallenge):  # type: ignore[misc]  # authlib is untyped
    """PKCE with S256 only; mandatory for public clients at the authorization step."""

    DEFAULT_CODE_CHALLENGE_METHOD = "S256"
    SUPPORTED_CODE_CHALLENGE_METHOD = ["S256"]

    def validate_code_challenge(self, grant: Any, redirect_uri: str) -> None:
        if grant.client.is_public and not grant.request.payload.data.get("code_challenge"):
            raise InvalidRequestError("PKCE (code_challenge, S256) is required for public clients")
        super().validate_code_challenge(grant, redirect_uri)


class OpenIDConnect(OpenIDCode):  # type: ignore[misc]  # authlib is untyped
    """ID tokens for the `openid` scope of the authorization code flow (RS256, our key ring)."""

    def __init__(self, server: NexusAuthorizationServer) -> None:
        super().__init__(require_nonce=False)
        self.server = server

    def resolve_client_private_key(self, client: Client) -> Any:
        return self.server.cfg.keys.active

    def get_client_algorithm(self, client: Client) -> str:
        return ALGORITHM

    def get_encode_header(self, client: Client) -> dict[str, str]:
        return {"alg": ALGORITHM, "kid": self.server.cfg.keys.active_kid, "typ": "JWT"}

    def get_client_claims(self, client: Client) -> dict[str, Any]:
        now = int(time.time())
        return {
            "iss": self.server.cfg.issuer,
            "aud": [client.client_id],
            "exp": now + self.server.cfg.settings.access_token_ttl_seconds,
        }

    def exists_nonce(self, nonce: str, request: NexusRequest) -> bool:
        """A nonce already bound to an authorization code of this client is a replay."""
        found: bool = on_loop(self.server.repo.nonce_used, request.payload.client_id, nonce)
        return found

    def generate_user_info(self, user: User, scope: str) -> dict[str, Any]:
        row = user.row
        return {
            "sub": row["user_id"],
            "name": row["display_name"],
            "preferred_username": row["username"],
            "email": row["email"],
            "locale": row["locale"],
            "zoneinfo": row["time_zone"],
            "organization_id": row["org_id"],
        }


class PasswordGrant(grants.ResourceOwnerPasswordCredentialsGrant):  # type: ignore[misc]
    TOKEN_ENDPOINT_AUTH_METHODS = CLIENT_AUTH_METHODS

    def authenticate_user(self, username: str, password: str) -> User:
        server: NexusAuthorizationServer = self.server
        try:
            row = on_loop(_authenticate, server.repo, server.cfg, username, password)
        except AuthenticationFailed:
            raise InvalidGrantError(description="authentication failure") from None
        return User(row)


async def _authenticate(
    repo: IdentityRepository, cfg: IdentityConfig, username: str, password: str
) -> RowMapping:
    return await service.authenticate_password(repo, cfg, username=username, password=password)


class ClientCredentialsGrant(grants.ClientCredentialsGrant):  # type: ignore[misc]
    TOKEN_ENDPOINT_AUTH_METHODS = ["client_secret_basic", "client_secret_post"]


class AuthorizationCodeGrant(grants.AuthorizationCodeGrant):  # type: ignore[misc]
    TOKEN_ENDPOINT_AUTH_METHODS = CLIENT_AUTH_METHODS

    def save_authorization_code(self, code: str, request: NexusRequest) -> None:
        server: NexusAuthorizationServer = self.server
        data = request.payload.data
        user: User = request.user
        on_loop(server.save_code, code, self.client, user, data)

    def query_authorization_code(self, code: str, client: Client) -> AuthorizationCode | None:
        server: NexusAuthorizationServer = self.server
        row = on_loop(server.repo.authorization_code, service.digest(code))
        if row is None or row["client_id"] != client.client_id:
            return None
        if row["used_at_ms"] is not None:  # a replay: what the first use issued is revoked too
            if row["session_id"] is not None:
                on_loop(server.revoke_session, row["org_id"], row["session_id"], "code_replayed")
            return None
        return AuthorizationCode(row)  # expiry is checked on the database clock when redeemed

    def delete_authorization_code(self, authorization_code: AuthorizationCode) -> None:
        server: NexusAuthorizationServer = self.server
        if not on_loop(server.redeem_code, authorization_code.row):
            raise InvalidGrantError(description="authorization code already used or expired")

    def authenticate_user(self, authorization_code: AuthorizationCode) -> User | None:
        server: NexusAuthorizationServer = self.server
        row = authorization_code.row
        user = on_loop(server.repo.user, row["org_id"], row["user_id"])
        return User(user) if user is not None and user["is_active"] else None


class RefreshTokenGrant(grants.RefreshTokenGrant):  # type: ignore[misc]
    TOKEN_ENDPOINT_AUTH_METHODS = CLIENT_AUTH_METHODS
    INCLUDE_NEW_REFRESH_TOKEN = True

    def authenticate_refresh_token(self, refresh_token: str) -> Any:
        server: NexusAuthorizationServer = self.server
        issued = on_loop(server.rotate_refresh, refresh_token, self.client.client_id)
        if issued is None:
            return None
        server.refreshed = issued
        return _RefreshCredential(issued)

    def authenticate_user(self, credential: _RefreshCredential) -> User:
        return credential.user

    def revoke_old_credential(self, credential: _RefreshCredential) -> None:
        """Already rotated by compare-and-set in `authenticate_refresh_token`."""


@dataclass
class _RefreshCredential:
    issued: service.IssuedTokens

    @property
    def user(self) -> User:
        return User(self.issued.user)

    def get_scope(self) -> str:
        return str(self.issued.body["scope"])

    def check_client(self, client: Client) -> bool:
        return True  # checked during rotation

    def is_expired(self) -> bool:
        return False  # checked during rotation

    def is_revoked(self) -> bool:
        return False  # checked during rotation


class Revocation(RevocationEndpoint):  # type: ignore[misc]
    """RFC 7009 revocation as Salesforce answers it: the token alone is enough (holding it is
    what proves the right to end its session; jsforce's `logout()` sends nothing else). A
    caller that does present client credentials is authenticated, and may revoke only its
    own client's tokens."""

    CLIENT_AUTH_METHODS = CLIENT_AUTH_METHODS

    def authenticate_endpoint_client(self, request: NexusRequest) -> Client | None:
        if "authorization" not in request.headers and not request.form.get("client_id"):
            request.client = None
            return None
        client: Client = super().authenticate_endpoint_client(request)
        return client

    def authenticate_token(self, request: NexusRequest, client: Client | None) -> Any:
        if client is not None:
            return super().authenticate_token(request, client)
        self.check_params(request, client)
        return self.query_token(request.form["token"], request.form.get("token_type_hint"))

    def query_token(self, token_string: str, token_type_hint: str | None) -> Any:
        server: NexusAuthorizationServer = self.server
        return on_loop(server.find_revocable, token_string)

    def revoke_token(self, token: _Revocable, request: NexusRequest) -> None:
        server: NexusAuthorizationServer = self.server
        on_loop(server.revoke_session, token.org_id, token.session_id)


@dataclass
class _Revocable:
    org_id: str
    session_id: str
    client_id: str | None

    def check_client(self, client: Client) -> bool:
        return self.client_id == client.client_id


class NexusAuthorizationServer(AuthorizationServer):  # type: ignore[misc]
    """One per OAuth request, bound to that request's unit of work."""

    def __init__(self, repo: IdentityRepository, cfg: IdentityConfig) -> None:
        super().__init__(scopes_supported=list(service.SCOPES))
        self.repo = repo
        self.cfg = cfg
        self.refreshed: service.IssuedTokens | None = None
        self.revoked: list[tuple[str, str]] = []  # (org_id, session_id) revoked by this request
        self.opened: service.IssuedTokens | None = None  # the session this request opened
        self.register_grant(PasswordGrant)
        self.register_grant(ClientCredentialsGrant)
        self.register_grant(AuthorizationCodeGrant, [S256Only(required=True), OpenIDConnect(self)])
        self.register_grant(RefreshTokenGrant)
        self.register_endpoint(Revocation)
        self.register_token_generator("default", self._generate)

    # --- authlib hooks -------------------------------------------------------------
    def query_client(self, client_id: str) -> Client | None:
        row = on_loop(self.repo.client, client_id)
        return Client(row) if row is not None and row["is_enabled"] else None

    def save_token(self, token: dict[str, Any], request: Any) -> None:
        """Sessions and refresh tokens are stored while the token is generated."""

    def send_signal(self, name: str, *args: Any, **kwargs: Any) -> None:
        pass

    def create_oauth2_request(self, request: NexusRequest) -> NexusRequest:
        return request

    def create_json_request(self, request: Any) -> Any:
        raise NotImplementedError

    def handle_response(self, status: int, body: Any, headers: Any) -> tuple[int, Any, Any]:
        return status, body, headers

    # --- token generation ----------------------------------------------------------
    def _generate(  # noqa: PLR0917  (authlib's token generator signature)
        self,
        grant_type: str,
        client: Client,
        user: User | None = None,
        scope: str | None = None,
        expires_in: int | None = None,
        include_refresh_token: bool = True,
    ) -> dict[str, Any]:
        if grant_type == "refresh_token":
            if self.refreshed is None:  # pragma: no cover - authlib calls authenticate first
                raise InvalidGrantError()
            return self.refreshed.body
        scopes = client.get_allowed_scope(scope).split()
        if not scopes:  # none of what was asked is this client's: a token would reach nothing
            raise InvalidScopeError(description="none of the requested scopes is the client's")
        issued: service.IssuedTokens = on_loop(
            self._open_session, grant_type, client, user, scopes, include_refresh_token
        )
        self.opened = issued
        return issued.body

    async def _open_session(
        self,
        grant_type: str,
        client: Client,
        user: User | None,
        scopes: list[str],
        include_refresh_token: bool,
    ) -> service.IssuedTokens:
        if grant_type == "client_credentials":
            run_as = client.row["run_as_user_id"]
            row = await self.repo.user(client.row["org_id"], run_as) if run_as else None
            if row is None or not row["is_active"]:
                raise InvalidGrantError(description="the connected app's run-as user is inactive")
        else:
            if user is None:  # pragma: no cover - every user grant authenticates first
                raise InvalidGrantError()
            row = user.row
            if row["org_id"] != client.row["org_id"]:
                raise InvalidGrantError(description="authentication failure")
        refresh = (
            grant_type == "authorization_code"
            and include_refresh_token
            and "refresh_token" in scopes
            and "refresh_token" in client.grant_types
        )
        return await service.open_session(
            self.repo,
            self.cfg,
            user=row,
            client_id=client.client_id,
            scopes=scopes,
            auth_method=grant_type,
            with_refresh_token=refresh,
        )

    # --- storage helpers called on the loop ---------------------------------------
    async def save_code(self, code: str, client: Client, user: User, data: dict[str, str]) -> None:
        if user.row["org_id"] != client.row["org_id"]:
            raise InvalidRequestError("this connected app belongs to another org")
        now = await read_now_ms(self.repo.session)
        await self.repo.insert_authorization_code(
            org_id=client.row["org_id"],
            code_hash=service.digest(code),
            client_id=client.client_id,
            user_id=user.get_user_id(),
            redirect_uri=data.get("redirect_uri") or client.get_default_redirect_uri() or "",
            scope=client.get_allowed_scope(data.get("scope")),
            code_challenge=data.get("code_challenge"),
            code_challenge_method=data.get("code_challenge_method") or "S256",
            nonce=data.get("nonce"),
            created_at_ms=now,
            expires_at_ms=now + AUTHORIZATION_CODE_TTL_MS,
        )

    async def redeem_code(self, row: RowMapping) -> bool:
        """Mark the code used, with the session its tokens were just issued in."""
        now = await read_now_ms(self.repo.session)
        if row["expires_at_ms"] <= now:
            return False
        return await self.repo.use_authorization_code(
            org_id=row["org_id"],
            code_hash=row["code_hash"],
            now_ms=now,
            session_id=self.opened.session_id if self.opened is not None else None,
        )

    async def rotate_refresh(self, token: str, client_id: str) -> service.IssuedTokens | None:
        return await service.refresh_session(
            self.repo, self.cfg, refresh_token=token, client_id=client_id
        )

    async def _revocable_handle(self, token: str) -> _Revocable | None:
        handle = self.cfg.handles.read(token)
        if handle is None:
            return None
        state = await self.repo.session_state(handle.org_id, handle.session_id)
        if state is None:
            return None
        return _Revocable(handle.org_id, handle.session_id, state["client_id"])

    async def find_revocable(self, token: str) -> _Revocable | None:
        """The session a token (handle, pre-ADR-0075 JWT or refresh token) belongs to."""
        if looks_like_handle(token):
            return await self._revocable_handle(token)
        if token.count(".") == 2:
            try:
                claims = self.cfg.keys.verify(token, typ=service.ACCESS_TOKEN_TYPE)
            except TokenInvalid:
                return None
            return _Revocable(str(claims["org"]), str(claims["sid"]), claims.get("cid"))
        row = await self.repo.refresh_token(service.digest(token))
        if row is None:
            return None
        state = await self.repo.session_state(row["org_id"], row["session_id"])
        client_id = state["client_id"] if state is not None else None
        return _Revocable(row["org_id"], row["session_id"], client_id)

    async def revoke_session(self, org_id: str, session_id: str, reason: str = "revoked") -> None:
        await service.revoke(self.repo, org_id=org_id, reason=reason, session_id=session_id)
        self.revoked.append((org_id, session_id))
