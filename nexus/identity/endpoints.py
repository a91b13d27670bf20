"""Identity's HTTP surface: the OAuth2/OIDC endpoints at Salesforce-compatible paths."""

from __future__ import annotations

import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, Any
from urllib.parse import parse_qsl

import anyio
from authlib.oauth2 import OAuth2Error
from authlib.oauth2.rfc6749.errors import InvalidRequestError, InvalidScopeError
from fastapi import APIRouter, Depends, Header, Request, Response
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from nexus.contracts.errors import BadRequest, Forbidden, NotFound, Unauthorized, UpstreamTimeout
from nexus.contracts.identity import TrustedCall
from nexus.identity import service
from nexus.identity.delegation import (
    VerifiedWorkload,
    WorkloadRejected,
    WorkloadVerifier,
    issue_delegation,
    read_delegation,
)
from nexus.identity.errors import AuthenticationFailed, InvalidToken
from nexus.identity.interceptor import Authenticator, bearer_token
from nexus.identity.login_page import render_error, render_login
from nexus.identity.oauth_server import Client, NexusAuthorizationServer, NexusRequest, User
from nexus.identity.repository import IdentityRepository
from nexus.identity.scopes import DELEGATED, WHO_AM_I, require_scope
from nexus.identity.service import IdentityConfig
from nexus.platform.db.engine import unit_of_work
from nexus.platform.workload import DEADLINE_HEADER, DELEGATION_HEADER, WORKLOAD_HEADER

#: A public client created with the first org, so legacy password-grant callers that send
#: no client_id still authenticate through a registered client.
DEFAULT_CLIENT_ID = "nexus_default"
FORM_LIMIT = 64 * 1024
CONTROL = re.compile(r"[\x00-\x1f\x7f]")

router = APIRouter()


@dataclass
class IdentityState:
    cfg: IdentityConfig
    authenticator: Authenticator
    sessions: async_sessionmaker[AsyncSession]
    workloads: WorkloadVerifier


def identity_state(request: Request) -> IdentityState:
    state: IdentityState = request.app.state.identity
    return state


async def trusted_call(
    request: Request, authorization: Annotated[str | None, Header()] = None
) -> TrustedCall:
    """The reusable dependency: a request's bearer access token -> TrustedCall, or 401."""
    token = bearer_token(authorization)
    if token is None:
        raise InvalidToken("Session expired or invalid")
    return await identity_state(request).authenticator.from_access_token(token)


def _deadline(raw: str | None) -> int:
    """Internal calls must say until when the caller waits; a passed deadline is not worked on."""
    if raw is None or not raw.isdigit():
        raise BadRequest(f"missing or malformed {DEADLINE_HEADER} header")
    deadline = int(raw)
    if deadline <= time.time() * 1000:
        raise UpstreamTimeout("the caller's deadline has passed", code="DEADLINE_EXCEEDED")
    return deadline


def _workload(request: Request, capability: str) -> VerifiedWorkload:
    try:
        return identity_state(request).workloads.verify(
            request.headers.get(WORKLOAD_HEADER), capability=capability
        )
    except WorkloadRejected as exc:
        if exc.forbidden:
            raise Forbidden(str(exc), code="WORKLOAD_NOT_ALLOWED") from None
        raise Unauthorized("workload authentication failed", code="INVALID_WORKLOAD") from None


@dataclass(frozen=True)
class WorkloadCall:
    """An internal call a workload makes on its own behalf (no user): who, in which org (as
    its token signed it; None for a token without one), and until when."""

    workload: str
    deadline_ms: int
    org: str | None = None


def workload_call(capability: str) -> Callable[[Request], Awaitable[WorkloadCall]]:
    """The dependency of internal endpoints a workload calls for itself, not for a user
    (AcceptCommand): a workload token holding `capability`, and a deadline. Whom the work
    then runs as is the endpoint's decision (fail closed), never the caller's."""

    async def dependency(request: Request) -> WorkloadCall:
        verified = _workload(request, capability)
        deadline = _deadline(request.headers.get(DEADLINE_HEADER))
        return WorkloadCall(verified.name, deadline, verified.org)

    return dependency


def internal_call(capability: str) -> Callable[[Request], Awaitable[TrustedCall]]:
    """The dependency of every internal Runtime endpoint: workload + delegation + deadline,
    and the user's token holding a scope the capability needs (`scopes.DELEGATED`)."""
    needs = DELEGATED[capability]  # a capability without a scope rule fails at start-up

    async def dependency(request: Request) -> TrustedCall:
        state = identity_state(request)
        workload = _workload(request, capability).name
        deadline = _deadline(request.headers.get(DEADLINE_HEADER))
        claims = read_delegation(
            state.cfg, request.headers.get(DELEGATION_HEADER), workload=workload
        )
        caller = await state.authenticator.from_delegation(
            claims, workload=workload, deadline_ms=deadline
        )
        require_scope(caller, needs, what=capability)
        return caller

    return dependency


State = Annotated[IdentityState, Depends(identity_state)]
Caller = Annotated[TrustedCall, Depends(trusted_call)]


async def _oauth_request(request: Request) -> NexusRequest:
    """An OAuth request's parameters: a GET's from its query, a POST's from its form body only
    (a URL is logged and cached along the way: credentials never belong in one, RFC 6749
    §2.3.1, so a POST with a query string is refused)."""
    if request.method == "POST" and request.url.query:
        raise InvalidRequestError("parameters belong in the request body, not in the URL")
    data: dict[str, str] = dict(request.query_params.items())
    if request.method == "POST":
        content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if content_type != "application/x-www-form-urlencoded":
            raise InvalidRequestError("the body must be application/x-www-form-urlencoded")
        body = b""
        async for chunk in request.stream():
            body += chunk
            if len(body) > FORM_LIMIT:
                raise InvalidRequestError("request body too large")
        try:
            pairs = parse_qsl(body.decode("utf-8"), keep_blank_values=True, strict_parsing=False)
        except (UnicodeDecodeError, ValueError):
            raise InvalidRequestError("malformed form body") from None
        if len({k for k, _ in pairs}) != len(pairs):
            raise InvalidRequestError("a parameter appears more than once")
        data.update(pairs)
    # authlib refuses plain HTTP except on loopback; the gateway sets x-forwarded-* (and
    # replaces any a client sent), so this sees the transport the caller really used.
    scheme = request.headers.get("x-forwarded-proto", request.url.scheme).split(",")[0].strip()
    host = request.headers.get("x-forwarded-host") or request.headers.get("host", "")
    uri = f"{scheme}://{host}{request.url.path}"
    if request.url.query:
        uri += f"?{request.url.query}"
    return NexusRequest(request.method, uri, request.headers, data)  # case-insensitive


async def _authorize_request(request: Request) -> NexusRequest:
    """An authorize request with printable parameters, as RFC 6749 defines them (the person's
    password aside): authlib quotes redirect_uri and response_type in error descriptions and
    raises, instead of answering, when one holds a control character such as CR/LF."""
    oauth_request = await _oauth_request(request)
    for name, value in oauth_request.payload.data.items():
        if CONTROL.search(name) or (name != "password" and CONTROL.search(value)):
            raise InvalidRequestError("a parameter holds a control character")
    return oauth_request


def _response(status: int, body: Any, headers: Any) -> Response:
    header_map = dict(headers or [])
    if status in (301, 302, 303, 307) and "Location" in header_map:
        return RedirectResponse(header_map["Location"], status_code=302)
    return JSONResponse(body, status_code=status, headers=header_map)


def _error_response(error: OAuth2Error) -> Response:
    status, body, headers = error()
    return _response(status, body, headers)


@router.post("/services/oauth2/token")
async def token(request: Request, state: State) -> Response:
    try:
        oauth_request = await _oauth_request(request)
    except OAuth2Error as error:
        return _error_response(error)
    data = oauth_request.payload.data
    if (
        data.get("grant_type") == "password"
        and not data.get("client_id")
        and "authorization" not in request.headers
    ):
        data["client_id"] = DEFAULT_CLIENT_ID
    async with unit_of_work(state.sessions) as session:
        server = NexusAuthorizationServer(IdentityRepository(session), state.cfg)
        status, body, headers = await anyio.to_thread.run_sync(
            server.create_token_response, oauth_request
        )
    for org_id, session_id in server.revoked:  # a replayed code's session: forgotten at once
        state.authenticator.forget(org_id, session_id)
    return _response(status, body, headers)


@router.post("/services/oauth2/revoke")
async def revoke(request: Request, state: State) -> Response:
    try:
        oauth_request = await _oauth_request(request)
    except OAuth2Error as error:
        return _error_response(error)
    async with unit_of_work(state.sessions) as session:
        server = NexusAuthorizationServer(IdentityRepository(session), state.cfg)
        status, body, headers = await anyio.to_thread.run_sync(
            server.create_endpoint_response, "revocation", oauth_request
        )
    for org_id, session_id in server.revoked:  # committed: this replica forgets at once
        state.authenticator.forget(org_id, session_id)
    return _response(status, body, headers)


@router.get("/services/oauth2/authorize")
async def authorize_page(request: Request, state: State) -> Response:
    try:
        oauth_request = await _authorize_request(request)
    except OAuth2Error as error:
        return _authorize_error(error)
    async with unit_of_work(state.sessions, readonly=True) as session:
        server = NexusAuthorizationServer(IdentityRepository(session), state.cfg)
        try:
            grant = await anyio.to_thread.run_sync(server.get_consent_grant, oauth_request)
        except OAuth2Error as error:
            return _authorize_error(error)
    client: Client = grant.client
    params = dict(oauth_request.payload.data)
    scopes = client.get_allowed_scope(params.get("scope")).split()
    if not scopes:
        return _authorize_error(
            InvalidScopeError(description="none of the requested scopes is the client's")
        )
    return HTMLResponse(
        render_login(client_name=client.row["name"], scopes=scopes, params=params),
        headers=_page_headers(),
    )


@router.post("/services/oauth2/authorize")
async def authorize_submit(request: Request, state: State) -> Response:
    try:
        oauth_request = await _authorize_request(request)
    except OAuth2Error as error:
        return _authorize_error(error)
    data = oauth_request.payload.data
    username, password = data.pop("username", ""), data.pop("password", "")
    decision = data.pop("decision", "deny")
    async with unit_of_work(state.sessions) as session:
        repo = IdentityRepository(session)
        server = NexusAuthorizationServer(repo, state.cfg)
        try:
            grant = await anyio.to_thread.run_sync(server.get_consent_grant, oauth_request)
        except OAuth2Error as error:
            return _authorize_error(error)
        user = None
        if decision == "allow":
            try:
                row = await service.authenticate_password(
                    repo, state.cfg, username=username, password=password
                )
            except AuthenticationFailed:
                client: Client = grant.client
                scopes = client.get_allowed_scope(data.get("scope")).split()
                page = render_login(
                    client_name=client.row["name"],
                    scopes=scopes,
                    params=dict(data),
                    error="Authentication failure: check your username and password.",
                )
                return HTMLResponse(page, status_code=401, headers=_page_headers())
            user = User(row)
        status, body, headers = await anyio.to_thread.run_sync(
            server.create_authorization_response, oauth_request, user, grant
        )
    return _response(status, body, headers)


def _authorize_error(error: OAuth2Error) -> Response:
    status, body, headers = error()
    if status == 302:
        return _response(status, body, headers)
    message = getattr(error, "description", None) or getattr(error, "error", "invalid request")
    return HTMLResponse(render_error(str(message)), status_code=400, headers=_page_headers())


def _page_headers() -> dict[str, str]:
    return {
        "Cache-Control": "no-store",
        "X-Frame-Options": "DENY",
        "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; "
        "form-action 'self'; frame-ancestors 'none'",
        "Referrer-Policy": "no-referrer",
    }


@router.get("/services/oauth2/userinfo")
async def userinfo(caller: Caller, state: State) -> dict[str, Any]:
    require_scope(caller, WHO_AM_I, what="userinfo")
    async with unit_of_work(state.sessions, readonly=True) as session:
        user = await IdentityRepository(session).user(caller.org_id, caller.user_id)
    if user is None:
        raise InvalidToken
    return {
        "sub": user["user_id"],
        "user_id": user["user_id"],
        "organization_id": user["org_id"],
        "preferred_username": user["username"],
        "name": user["display_name"],
        "email": user["email"],
        "locale": user["locale"],
        "zoneinfo": user["time_zone"],
        "active": bool(user["is_active"]),
        # Nexus's own claim: the browser CRM shows its Admin link to administrators only
        # (hiding a link is all it does: each admin request is still decided in Runtime)
        "is_admin": bool(user["is_admin"]),
    }


@router.get("/id/{org_id}/{user_id}")
async def identity_document(
    org_id: str, user_id: str, caller: Caller, state: State
) -> dict[str, Any]:
    """The identity URL of the token response (`id`): who this user is, in the caller's org."""
    require_scope(caller, WHO_AM_I, what="the identity URL")
    if org_id != caller.org_id:
        raise Forbidden("not your organization", code="INSUFFICIENT_ACCESS")
    async with unit_of_work(state.sessions, readonly=True) as session:
        user = await IdentityRepository(session).user(caller.org_id, user_id)
    if user is None:
        raise NotFound("no such user")
    issuer = state.cfg.issuer
    rest = "/services/data/v{version}/"
    return {
        "id": f"{issuer}/id/{org_id}/{user_id}",
        "asserted_user": user_id == caller.user_id,
        "user_id": user["user_id"],
        "organization_id": user["org_id"],
        "username": user["username"],
        "nick_name": user["username"],
        "display_name": user["display_name"],
        "email": user["email"],
        "email_verified": False,
        "first_name": None,
        "last_name": user["display_name"],
        "timezone": user["time_zone"],
        "active": bool(user["is_active"]),
        "user_type": "STANDARD",
        "language": user["locale"],
        "locale": user["locale"],
        "utcOffset": 0,
        "is_app_installed": True,
        "urls": {
            "rest": f"{issuer}{rest}",
            "sobjects": f"{issuer}{rest}sobjects/",
            "search": f"{issuer}{rest}search/",
            "query": f"{issuer}{rest}query/",
            "profile": f"{issuer}/{user_id}",
        },
    }


@router.get("/.well-known/openid-configuration")
async def openid_configuration(state: State) -> dict[str, Any]:
    issuer = state.cfg.issuer
    return {
        "issuer": issuer,
        "authorization_endpoint": f"{issuer}/services/oauth2/authorize",
        "token_endpoint": f"{issuer}/services/oauth2/token",
        "revocation_endpoint": f"{issuer}/services/oauth2/revoke",
        "userinfo_endpoint": f"{issuer}/services/oauth2/userinfo",
        "jwks_uri": f"{issuer}/.well-known/jwks.json",
        "scopes_supported": list(service.SCOPES),
        "response_types_supported": ["code"],
        "grant_types_supported": list(service.GRANT_TYPES),
        "code_challenge_methods_supported": ["S256"],
        "token_endpoint_auth_methods_supported": [
            "client_secret_basic",
            "client_secret_post",
            "none",
        ],
        "subject_types_supported": ["public"],
        "id_token_signing_alg_values_supported": ["RS256"],
    }


@router.get("/.well-known/jwks.json")
async def jwks(state: State) -> dict[str, Any]:
    return state.cfg.keys.jwks()


class ExchangeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    credential: str = Field(min_length=1, max_length=8192, repr=False)


class ExchangeResponse(BaseModel):
    delegation: str = Field(repr=False)
    expires_in: int
    org_id: str
    user_id: str
    session_id: str
    scopes: list[str]
    security_epoch: int


@router.post("/internal/v1/identity/exchange", response_model=ExchangeResponse)
async def exchange(request: Request, body: ExchangeRequest, state: State) -> ExchangeResponse:
    """IdentityContext.Exchange: a user's access token + the caller's workload -> delegation."""
    workload = _workload(request, "identity.exchange").name
    _deadline(request.headers.get(DEADLINE_HEADER))
    caller = await state.authenticator.from_access_token(body.credential)
    token, ttl = issue_delegation(state.cfg, caller, workload=workload)
    return ExchangeResponse(
        delegation=token,
        expires_in=ttl,
        org_id=caller.org_id,
        user_id=caller.user_id,
        session_id=caller.session_id,
        scopes=sorted(caller.scopes),
        security_epoch=caller.security_epoch,
    )


@router.post("/internal/v1/identity/whoami", response_model=TrustedCall)
async def whoami(
    caller: Annotated[TrustedCall, Depends(internal_call("identity.read"))],
) -> TrustedCall:
    """The trusted context Runtime derived for this internal call (diagnostics, identity URL)."""
    return caller
