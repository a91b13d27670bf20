"""A small subset of Salesforce's partner SOAP API: `login`, `getUserInfo` and `logout`.

`POST /services/Soap/u/{version}` (and the `serverUrl` a login returns,
`/services/Soap/u/{version}/{orgId}`) is where simple-salesforce's and jsforce's default
username/password login goes. The answers are the partner WSDL's (`loginResponse`,
`getUserInfoResponse`, `logoutResponse`) and failures are SOAP faults as Salesforce sends
them: HTTP 500, `faultcode sf:<CODE>`, `faultstring "<CODE>: <message>"` and a detail with
`sf:exceptionCode`/`sf:exceptionMessage` (what both clients read). Identity answers it inside
runtime-api (ADR 0075): a login is a password check and a new session, both Identity's.

Request bodies are bounded and parsed by expat with every DTD and entity declaration refused
(no entity expansion, no external entities), with a bound on elements and depth.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
from xml.sax.saxutils import escape

from fastapi import APIRouter, Request, Response
from sqlalchemy.engine import RowMapping

from nexus.identity import service
from nexus.identity.endpoints import identity_state
from nexus.identity.errors import AuthenticationFailed, InvalidToken
from nexus.identity.repository import IdentityRepository
from nexus.identity.scopes import WHO_AM_I
from nexus.platform.bounded_xml import UnsafeXml, XmlElement, parse_bounded
from nexus.platform.db.engine import unit_of_work
from nexus.platform.observability import get_logger

log = get_logger(__name__)
router = APIRouter()

SOAP_ENV = "http://schemas.xmlsoap.org/soap/envelope/"
PARTNER = "urn:partner.soap.sforce.com"
BODY_LIMIT = 64 * 1024
MAX_ELEMENTS = 256
MAX_DEPTH = 16
#: API versions whose partner `login()` Nexus answers: those the REST dialect serves (21.0-30.0
#: were retired in Summer '25) up to 64.0 (Salesforce ends SOAP `login()` at 65.0).
MIN_VERSION, MAX_VERSION = 31.0, 64.0
_VERSION = re.compile(r"^\d{2}\.0$")
_ORG_ID = re.compile(r"^00D[0-9A-Za-z]{15}$")
XML = "text/xml; charset=utf-8"

INVALID_LOGIN = "Invalid username, password, security token; or user locked out."
INVALID_SESSION = "Invalid Session ID found in SessionHeader: Illegal Session"


class SoapFault(Exception):
    """A SOAP fault to answer. `code` is an `sf:` exception code, or None for a client fault
    about the envelope itself (`soapenv:Client`)."""

    def __init__(
        self, code: str | None, message: str, *, status: int = 500, kind: str = "UnexpectedError"
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status
        self.kind = kind


# ---------------------------------------------------------------------------- parsing


Element = XmlElement


def parse_envelope(body: bytes) -> Element:
    """The document's root element; SoapFault(None, ...) when it is not well-formed XML, holds
    a DTD or entity declaration, or passes the element or depth bound."""
    try:
        return parse_bounded(body, max_elements=MAX_ELEMENTS, max_depth=MAX_DEPTH)
    except UnsafeXml as exc:
        raise SoapFault(None, str(exc)) from None


@dataclass(frozen=True)
class Call:
    operation: str
    body: Element
    session_id: str | None  # SessionHeader/sessionId
    organization_id: str | None  # LoginScopeHeader/organizationId


def read_call(root: Element) -> Call:
    if root.namespace != SOAP_ENV or root.name != "Envelope":
        raise SoapFault(None, "the request is not a SOAP 1.1 envelope")
    body = root.child(SOAP_ENV, "Body")
    if body is None or len(body.children) != 1:
        raise SoapFault(None, "the SOAP body must hold exactly one operation")
    operation = body.children[0]
    if operation.namespace != PARTNER or operation.name not in OPERATIONS:
        raise SoapFault(
            None, f"No operation available for request {{{operation.namespace}}}{operation.name}"
        )
    header = root.child(SOAP_ENV, "Header")
    session_id = organization_id = None
    if header is not None:
        session = header.child(PARTNER, "SessionHeader")
        found = session.child(PARTNER, "sessionId") if session is not None else None
        session_id = found.text.strip() if found is not None else None
        scope = header.child(PARTNER, "LoginScopeHeader")
        org = scope.child(PARTNER, "organizationId") if scope is not None else None
        organization_id = org.text.strip() if org is not None else None
    return Call(operation.name, operation, session_id, organization_id)


# ---------------------------------------------------------------------------- writing

_ENVELOPE = (
    '<?xml version="1.0" encoding="UTF-8"?>'
    '<soapenv:Envelope xmlns:soapenv="http://schemas.xmlsoap.org/soap/envelope/"'
    ' xmlns="urn:partner.soap.sforce.com"'
    ' xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">'
    "<soapenv:Body>{body}</soapenv:Body></soapenv:Envelope>"
)
_FAULT_ENVELOPE = (
    '<?xml version="1.0" encoding="UTF-8"?>'
    '<soapenv:Envelope xmlns:soapenv="http://schemas.xmlsoap.org/soap/envelope/"'
    ' xmlns:sf="urn:fault.partner.soap.sforce.com"'
    ' xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">'
    "<soapenv:Body><soapenv:Fault>{fault}</soapenv:Fault></soapenv:Body></soapenv:Envelope>"
)


def _value(name: str, value: object) -> str:
    if value is None:
        return f'<{name} xsi:nil="true"/>'
    if isinstance(value, bool):
        value = "true" if value else "false"
    return f"<{name}>{escape(str(value))}</{name}>"


def _fields(values: dict[str, object]) -> str:
    return "".join(_value(name, value) for name, value in values.items())


def fault_response(fault: SoapFault) -> Response:
    if fault.code is None:
        body = _value("faultcode", "soapenv:Client") + _value("faultstring", fault.message)
    else:
        kind = fault.kind
        body = (
            _value("faultcode", f"sf:{fault.code}")
            + _value("faultstring", f"{fault.code}: {fault.message}")
            + f'<detail><sf:{kind}Fault xsi:type="sf:{kind}Fault">'
            + _value("sf:exceptionCode", fault.code)
            + _value("sf:exceptionMessage", fault.message)
            + f"</sf:{kind}Fault></detail>"
        )
    headers = {"Allow": "POST"} if fault.status == 405 else None
    return Response(
        _FAULT_ENVELOPE.format(fault=body),
        status_code=fault.status,
        media_type=XML,
        headers=headers,
    )


def _ok(body: str) -> Response:
    return Response(_ENVELOPE.format(body=body), media_type=XML)


def user_info(user: RowMapping, org: RowMapping, *, seconds_valid: int) -> dict[str, object]:
    """The partner WSDL's GetUserInfoResult, in its order."""
    return {
        "accessibilityMode": False,
        "chatterExternal": False,
        "currencySymbol": None,
        "orgAttachmentFileSizeLimit": 5242880,
        "orgDefaultCurrencyIsoCode": None,
        "orgDefaultCurrencyLocale": None,
        "orgDisallowHtmlAttachments": False,
        "orgHasPersonAccounts": False,
        "organizationId": org["org_id"],
        "organizationMultiCurrency": False,
        "organizationName": org["name"],
        "profileId": None,
        "roleId": user["role_id"],
        "sessionSecondsValid": seconds_valid,
        "userDefaultCurrencyIsoCode": None,
        "userEmail": user["email"],
        "userFullName": user["display_name"],
        "userId": user["user_id"],
        "userLanguage": user["locale"],
        "userLocale": user["locale"],
        "userName": user["username"],
        "userTimeZone": user["time_zone"],
        "userType": "Standard",
        "userUiSkin": "Theme3",
    }


# ---------------------------------------------------------------------------- the endpoint


async def _read_body(request: Request) -> bytes:
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > BODY_LIMIT:
            raise SoapFault(None, "the request body is too large", status=413)
    return body


def _check_version(version: str) -> None:
    if not _VERSION.fullmatch(version) or not MIN_VERSION <= float(version) <= MAX_VERSION:
        raise SoapFault(
            "UNSUPPORTED_API_VERSION",
            f"Invalid Api version specified on URL (supported: {MIN_VERSION}-{MAX_VERSION})",
        )


METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]


@router.api_route("/services/Soap/u/{version}", methods=METHODS, include_in_schema=False)
async def partner_api(request: Request, version: str) -> Response:
    """The login endpoint (`https://<host>/services/Soap/u/NN.N`)."""
    return await _answer(request, version, None)


@router.api_route("/services/Soap/u/{version}/{org_id}", methods=METHODS, include_in_schema=False)
async def partner_api_of_org(request: Request, version: str, org_id: str) -> Response:
    """A login's `serverUrl`: the calls of a session of this org."""
    return await _answer(request, version, org_id)


async def _answer(request: Request, version: str, org_id: str | None) -> Response:
    try:
        if request.method != "POST":
            raise SoapFault(None, "the partner API answers POST only", status=405)
        _check_version(version)
        if org_id is not None and not _ORG_ID.fullmatch(org_id):
            raise SoapFault(None, "the URL does not name an organization", status=404)
        call = read_call(parse_envelope(await _read_body(request)))
        return await OPERATIONS[call.operation](request, call, version, org_id)
    except SoapFault as fault:
        if fault.code is not None:
            log.info("identity.soap_fault", code=fault.code)
        return fault_response(fault)


def _text(call: Call, name: str) -> str:
    found = call.body.child(PARTNER, name)
    return found.text if found is not None else ""


async def _login(request: Request, call: Call, version: str, url_org: str | None) -> Response:
    state = identity_state(request)
    username, password = _text(call, "username").strip(), _text(call, "password")
    wanted_org = call.organization_id or url_org
    async with unit_of_work(state.sessions) as session:
        repo = IdentityRepository(session)
        try:
            login = await service.soap_login(
                repo, state.cfg, username=username, password=password, org_id=wanted_org
            )
        except AuthenticationFailed:
            login = None  # the failure count must commit: no exception leaves the unit of work
    if login is None:
        raise SoapFault("INVALID_LOGIN", INVALID_LOGIN, kind="Login")
    org_id = login.org["org_id"]
    issuer = state.cfg.issuer
    result = _fields(
        {
            "metadataServerUrl": f"{issuer}/services/Soap/m/{version}/{org_id}",
            "passwordExpired": False,
            "sandbox": False,
            "serverUrl": f"{issuer}/services/Soap/u/{version}/{org_id}",
            "sessionId": login.session_id,
            "userId": login.user["user_id"],
        }
    )
    info = _fields(user_info(login.user, login.org, seconds_valid=login.seconds_valid))
    return _ok(
        f"<loginResponse><result>{result}<userInfo>{info}</userInfo></result></loginResponse>"
    )


async def _session_caller(request: Request, call: Call, url_org: str | None) -> Any:
    if not call.session_id:
        raise SoapFault("INVALID_SESSION_ID", INVALID_SESSION)
    try:
        caller = await identity_state(request).authenticator.from_access_token(call.session_id)
    except InvalidToken:
        raise SoapFault("INVALID_SESSION_ID", INVALID_SESSION) from None
    if url_org is not None and caller.org_id != url_org:  # another org's URL: fail closed
        raise SoapFault("INVALID_SESSION_ID", INVALID_SESSION)
    return caller


async def _get_user_info(
    request: Request, call: Call, version: str, url_org: str | None
) -> Response:
    caller = await _session_caller(request, call, url_org)
    if not any(caller.has_scope(scope) for scope in WHO_AM_I):
        raise SoapFault("INSUFFICIENT_ACCESS", "this session may not read who its user is")
    state = identity_state(request)
    async with unit_of_work(state.sessions, readonly=True) as session:
        repo = IdentityRepository(session)
        user = await repo.user(caller.org_id, caller.user_id)
        org = await repo.org(caller.org_id)
    if user is None or org is None:
        raise SoapFault("INVALID_SESSION_ID", INVALID_SESSION)
    seconds = state.cfg.settings.session_ttl_seconds
    info = _fields(user_info(user, org, seconds_valid=seconds))
    return _ok(f"<getUserInfoResponse><result>{info}</result></getUserInfoResponse>")


async def _logout(request: Request, call: Call, version: str, url_org: str | None) -> Response:
    caller = await _session_caller(request, call, url_org)
    state = identity_state(request)
    async with unit_of_work(state.sessions) as session:
        await service.revoke(
            IdentityRepository(session),
            org_id=caller.org_id,
            reason="logout",
            session_id=caller.session_id,
        )
    state.authenticator.forget(caller.org_id, caller.session_id)
    return _ok("<logoutResponse/>")


OPERATIONS = {"login": _login, "getUserInfo": _get_user_info, "logout": _logout}
