"""The partner SOAP API subset (login, getUserInfo, logout), Salesforce-shaped session ids and
revocation by the token alone (issue 26; ADR 0075), against a real runtime-api on a socket.

simple-salesforce's own `SalesforceLogin` logs in (its `scratch_url` is how it is pointed at a
login host that is not `<domain>.salesforce.com`); the other calls are the envelopes jsforce
and simple-salesforce send, over real HTTP."""

from __future__ import annotations

import asyncio
import logging
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterator

import httpx
import pytest
import requests
import structlog
from simple_salesforce import SalesforceLogin
from simple_salesforce.exceptions import SalesforceAuthenticationFailed

from nexus.identity import admin, service
from nexus.identity.repository import IdentityRepository
from nexus.platform.db.engine import unit_of_work
from nexus.platform.observability import configure_logging
from tests.integration.identity.conftest import ALICE_PASSWORD, STALENESS, Identity

pytestmark = pytest.mark.asyncio(loop_scope="module")

VERSION = "59.0"
ISSUER = "http://testserver.nexus"
#: what `sf org login access-token` accepts (@salesforce/core `sfdc.accessTokenRegex`)
SF_CLI_ACCESS_TOKEN = re.compile(r"(00D\w{12,15})![.\w]*")
NS = {
    "env": "http://schemas.xmlsoap.org/soap/envelope/",
    "p": "urn:partner.soap.sforce.com",
    "sf": "urn:fault.partner.soap.sforce.com",
}
BOB_PASSWORD = "bob-other-org-password-1"


def envelope(body: str, *, session_id: str | None = None, header: str = "") -> str:
    if session_id is not None:
        header += (
            '<SessionHeader xmlns="urn:partner.soap.sforce.com">'
            f"<sessionId>{session_id}</sessionId></SessionHeader>"
        )
    return (
        '<se:Envelope xmlns:se="http://schemas.xmlsoap.org/soap/envelope/">'
        f"<se:Header>{header}</se:Header><se:Body>{body}</se:Body></se:Envelope>"
    )


def login_body(username: str, password: str) -> str:
    return (
        '<login xmlns="urn:partner.soap.sforce.com">'
        f"<username>{username}</username><password>{password}</password></login>"
    )


async def soap(
    identity: Identity, xml: str, *, path: str = f"/services/Soap/u/{VERSION}"
) -> httpx.Response:
    async with httpx.AsyncClient(base_url=identity.url) as client:
        return await client.post(
            path, content=xml, headers={"Content-Type": "text/xml", "SOAPAction": '""'}
        )


async def sf_login(
    identity: Identity, username: str, password: str, **extra: str
) -> tuple[str, str]:
    """simple-salesforce's SOAP login, in a thread (the server shares this event loop).
    `security_token`: Nexus has none, so it is empty unless a test says otherwise."""
    arguments: dict[str, str | None] = {"security_token": ""}
    arguments.update(extra)
    if "organizationId" in arguments:
        arguments.pop("security_token")

    def login() -> tuple[str, str]:
        return SalesforceLogin(
            username=username,
            password=password,
            sf_version=VERSION,
            scratch_url=identity.url,
            session=requests.Session(),
            **arguments,
        )

    return await asyncio.to_thread(login)


def fault(reply: httpx.Response) -> tuple[str, str, str | None]:
    """(faultcode, faultstring, sf:exceptionCode) of a SOAP fault answer."""
    root = ET.fromstring(reply.content)  # noqa: S314
    found = root.find("env:Body/env:Fault", NS)
    assert found is not None, reply.text
    code = found.find("detail/*/sf:exceptionCode", NS)
    return (
        found.findtext("faultcode") or "",
        found.findtext("faultstring") or "",
        code.text if code is not None else None,
    )


async def userinfo(identity: Identity, token: str) -> httpx.Response:
    async with httpx.AsyncClient(base_url=identity.url) as client:
        return await client.get(
            "/services/oauth2/userinfo", headers={"Authorization": f"Bearer {token}"}
        )


async def password_grant(identity: Identity, username: str, password: str) -> httpx.Response:
    async with httpx.AsyncClient(base_url=identity.url) as client:
        return await client.post(
            "/services/oauth2/token",
            data={
                "grant_type": "password",
                "username": username,
                "password": password,
                "client_id": identity.confidential.client_id,
                "client_secret": identity.confidential.client_secret,
            },
        )


async def alice_org(identity: Identity) -> str:
    async with unit_of_work(identity.sessions) as session:  # type: ignore[arg-type]
        user = await IdentityRepository(session).user_by_username("alice@example.com")
    assert user is not None
    return str(user["org_id"])


async def bob_in_the_other_org(identity: Identity) -> str:
    """bob@other.example, a user of the fixture's second org; returns that org's id."""
    async with unit_of_work(identity.sessions) as session:  # type: ignore[arg-type]
        repo = IdentityRepository(session)
        client = await repo.client(identity.other_org_client.client_id)
        assert client is not None
        org_id = str(client["org_id"])
        if await repo.user_by_username("bob@other.example") is None:
            await service.create_user(
                repo, org_id=org_id, username="bob@other.example", password=BOB_PASSWORD
            )
    return org_id


async def test_simple_salesforce_logs_in_and_its_session_id_is_a_salesforce_session_id(
    identity: Identity,
) -> None:
    session_id, instance = await sf_login(identity, "alice@example.com", ALICE_PASSWORD)
    org_id = await alice_org(identity)
    assert SF_CLI_ACCESS_TOKEN.fullmatch(session_id), session_id
    assert session_id.startswith(f"{org_id}!")
    assert instance == "testserver.nexus"  # the host of serverUrl: where its REST calls go
    # the same session at the REST side of Identity: accepted like any access token
    who = await userinfo(identity, session_id)
    assert who.status_code == 200, who.text
    assert who.json()["preferred_username"] == "alice@example.com"
    assert who.json()["organization_id"] == org_id


async def test_the_login_response_is_the_partner_wsdls(identity: Identity) -> None:
    reply = await soap(identity, envelope(login_body("Alice@Example.com", ALICE_PASSWORD)))
    assert reply.status_code == 200, reply.text
    assert reply.headers["content-type"].startswith("text/xml")
    org_id = await alice_org(identity)
    result = ET.fromstring(reply.content).find("env:Body/p:loginResponse/p:result", NS)  # noqa: S314
    assert result is not None, reply.text
    assert [child.tag.split("}")[1] for child in result] == [
        "metadataServerUrl",
        "passwordExpired",
        "sandbox",
        "serverUrl",
        "sessionId",
        "userId",
        "userInfo",
    ]
    assert result.findtext("p:serverUrl", namespaces=NS) == (
        f"{ISSUER}/services/Soap/u/{VERSION}/{org_id}"
    )
    assert result.findtext("p:passwordExpired", namespaces=NS) == "false"
    info = result.find("p:userInfo", NS)
    assert info is not None
    user_id = result.findtext("p:userId", namespaces=NS)
    assert info.findtext("p:userId", namespaces=NS) == user_id
    assert info.findtext("p:organizationId", namespaces=NS) == org_id
    assert info.findtext("p:userName", namespaces=NS) == "alice@example.com"
    assert info.findtext("p:userEmail", namespaces=NS) == "alice@example.com"
    assert info.findtext("p:userFullName", namespaces=NS) == "Alice"
    assert info.findtext("p:sessionSecondsValid", namespaces=NS) == str(12 * 3600)


async def test_a_wrong_password_is_salesforces_invalid_login(identity: Identity) -> None:
    with pytest.raises(SalesforceAuthenticationFailed) as raised:
        await sf_login(identity, "alice@example.com", "not-her-password")
    assert raised.value.code == "INVALID_LOGIN"
    assert (
        raised.value.auth_message
        == "Invalid username, password, security token; or user locked out."
    )
    reply = await soap(identity, envelope(login_body("nobody@example.com", "whatever")))
    assert reply.status_code == 500
    assert fault(reply) == (
        "sf:INVALID_LOGIN",
        "INVALID_LOGIN: Invalid username, password, security token; or user locked out.",
        "INVALID_LOGIN",
    )
    # a password with a security token appended is a wrong password: Nexus has none
    with pytest.raises(SalesforceAuthenticationFailed):
        await sf_login(identity, "alice@example.com", ALICE_PASSWORD, security_token="AbCdEf123456")


async def test_soap_and_oauth_share_one_lockout(identity: Identity) -> None:
    """Failures through SOAP count like the password grant's: the fixture locks at 3."""
    await admin.create_user(
        identity.sessions,  # type: ignore[arg-type]
        username="locked@example.com",
        password="locked-password-1234",
        email=None,
        display_name=None,
        is_admin=False,
    )
    # one failure short of the limit, on each door: the right password still signs in (on
    # MariaDB too, whose UPDATE assignments see each other) and starts the count afresh
    assert (await password_grant(identity, "locked@example.com", "wrong-1")).status_code == 400
    reply = await soap(identity, envelope(login_body("locked@example.com", "wrong-2")))
    assert fault(reply)[2] == "INVALID_LOGIN"
    await sf_login(identity, "locked@example.com", "locked-password-1234")
    assert (await password_grant(identity, "locked@example.com", "wrong-1")).status_code == 400
    for attempt in ("wrong-2", "wrong-3"):
        reply = await soap(identity, envelope(login_body("locked@example.com", attempt)))
        assert fault(reply)[2] == "INVALID_LOGIN"
    # locked now: the right password fails on both doors, identically
    reply = await soap(identity, envelope(login_body("locked@example.com", "locked-password-1234")))
    assert reply.status_code == 500
    assert fault(reply)[2] == "INVALID_LOGIN"
    granted = await password_grant(identity, "locked@example.com", "locked-password-1234")
    assert granted.status_code == 400
    assert granted.json()["error"] == "invalid_grant"


async def test_get_user_info_and_logout_take_the_session_header(identity: Identity) -> None:
    session_id, _ = await sf_login(identity, "alice@example.com", ALICE_PASSWORD)
    info = await soap(
        identity,
        envelope('<getUserInfo xmlns="urn:partner.soap.sforce.com"/>', session_id=session_id),
    )
    assert info.status_code == 200, info.text
    result = ET.fromstring(info.content).find("env:Body/p:getUserInfoResponse/p:result", NS)  # noqa: S314
    assert result is not None
    assert result.findtext("p:userName", namespaces=NS) == "alice@example.com"

    # jsforce's logout() goes to the login URL's path, without the org
    out = await soap(
        identity, envelope('<logout xmlns="urn:partner.soap.sforce.com"/>', session_id=session_id)
    )
    assert out.status_code == 200, out.text
    assert ET.fromstring(out.content).find("env:Body/p:logoutResponse", NS) is not None  # noqa: S314
    assert (await userinfo(identity, session_id)).status_code == 401  # at once on this replica
    again = await soap(
        identity,
        envelope('<getUserInfo xmlns="urn:partner.soap.sforce.com"/>', session_id=session_id),
    )
    assert again.status_code == 500
    assert fault(again)[0] == "sf:INVALID_SESSION_ID"
    assert fault(again)[1].startswith(
        "INVALID_SESSION_ID: Invalid Session ID found in SessionHeader"
    )
    missing = await soap(identity, envelope('<getUserInfo xmlns="urn:partner.soap.sforce.com"/>'))
    assert fault(missing)[2] == "INVALID_SESSION_ID"


async def test_the_oauth_access_token_is_a_session_id_too(identity: Identity) -> None:
    reply = await password_grant(identity, "alice@example.com", ALICE_PASSWORD)
    assert reply.status_code == 200
    token = reply.json()["access_token"]
    assert SF_CLI_ACCESS_TOKEN.fullmatch(token), token
    assert (await userinfo(identity, token)).status_code == 200
    # and the partner API takes it as a session
    info = await soap(
        identity, envelope('<getUserInfo xmlns="urn:partner.soap.sforce.com"/>', session_id=token)
    )
    assert info.status_code == 200, info.text


async def test_revoke_takes_the_token_alone(identity: Identity) -> None:
    """What jsforce's `logout()` of an OAuth session sends: `token=...`, no client."""
    for kind in ("oauth", "soap"):
        if kind == "oauth":
            token = (await password_grant(identity, "alice@example.com", ALICE_PASSWORD)).json()[
                "access_token"
            ]
        else:
            token, _ = await sf_login(identity, "alice@example.com", ALICE_PASSWORD)
        assert (await userinfo(identity, token)).status_code == 200
        async with httpx.AsyncClient(base_url=identity.url) as client:
            revoked = await client.post("/services/oauth2/revoke", data={"token": token})
        assert revoked.status_code == 200, (kind, revoked.text)
        assert (await userinfo(identity, token)).status_code == 401
        await asyncio.sleep(STALENESS)
        assert (await userinfo(identity, token)).status_code == 401
    async with httpx.AsyncClient(base_url=identity.url) as client:
        # an unknown token is no error (RFC 7009 §2.2); a wrong client secret still is
        assert (
            await client.post("/services/oauth2/revoke", data={"token": "nope"})
        ).status_code == 200
        wrong = await client.post(
            "/services/oauth2/revoke",
            data={
                "token": "nope",
                "client_id": identity.confidential.client_id,
                "client_secret": "not-the-secret",
            },
        )
        assert wrong.status_code == 401


async def test_a_refresh_token_is_revoked_by_itself(identity: Identity) -> None:
    async with httpx.AsyncClient(base_url=identity.url) as client:
        flow_token = await _refreshable_token(identity, client)
        revoked = await client.post(
            "/services/oauth2/revoke", data={"token": flow_token["refresh_token"]}
        )
        assert revoked.status_code == 200
        refreshed = await client.post(
            "/services/oauth2/token",
            data={
                "grant_type": "refresh_token",
                "refresh_token": flow_token["refresh_token"],
                "client_id": identity.public.client_id,
            },
        )
    assert refreshed.status_code == 400
    assert (await userinfo(identity, flow_token["access_token"])).status_code == 401


async def _refreshable_token(identity: Identity, client: httpx.AsyncClient) -> dict[str, str]:
    from tests.integration.identity.test_oauth_flows import alice_by_code  # noqa: PLC0415

    flow = await alice_by_code(identity)
    assert "refresh_token" in flow.token
    return dict(flow.token)


async def test_a_session_id_of_one_org_never_works_for_another(identity: Identity) -> None:
    other_org = await bob_in_the_other_org(identity)
    alice_org_id = await alice_org(identity)
    bob_session, _ = await sf_login(identity, "bob@other.example", BOB_PASSWORD)
    assert bob_session.startswith(f"{other_org}!")
    who = await userinfo(identity, bob_session)
    assert who.status_code == 200
    assert who.json()["organization_id"] == other_org

    # the same opaque part under alice's org id: not a session of that org
    forged = alice_org_id + bob_session[len(other_org) :]
    assert (await userinfo(identity, forged)).status_code == 401
    # bob's session at the serverUrl of alice's org: refused
    info = await soap(
        identity,
        envelope('<getUserInfo xmlns="urn:partner.soap.sforce.com"/>', session_id=bob_session),
        path=f"/services/Soap/u/{VERSION}/{alice_org_id}",
    )
    assert fault(info)[2] == "INVALID_SESSION_ID"
    # a login scoped to alice's org (LoginScopeHeader, or its serverUrl) fails for bob
    with pytest.raises(SalesforceAuthenticationFailed) as raised:
        await sf_login(identity, "bob@other.example", BOB_PASSWORD, organizationId=alice_org_id)
    assert raised.value.code == "INVALID_LOGIN"
    scoped = await soap(
        identity,
        envelope(login_body("bob@other.example", BOB_PASSWORD)),
        path=f"/services/Soap/u/{VERSION}/{alice_org_id}",
    )
    assert fault(scoped)[2] == "INVALID_LOGIN"
    # and bob's own org's serverUrl answers him
    own = await soap(
        identity,
        envelope('<getUserInfo xmlns="urn:partner.soap.sforce.com"/>', session_id=bob_session),
        path=f"/services/Soap/u/{VERSION}/{other_org}",
    )
    assert own.status_code == 200, own.text


BILLION_LAUGHS = (
    '<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol">'
    '<!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">]>'
    '<se:Envelope xmlns:se="http://schemas.xmlsoap.org/soap/envelope/"><se:Body>'
    '<login xmlns="urn:partner.soap.sforce.com"><username>&lol2;</username>'
    "<password>x</password></login></se:Body></se:Envelope>"
)
EXTERNAL_ENTITY = (
    '<?xml version="1.0"?><!DOCTYPE x [<!ENTITY e SYSTEM "file:///etc/passwd">]>'
    '<se:Envelope xmlns:se="http://schemas.xmlsoap.org/soap/envelope/"><se:Body>'
    '<login xmlns="urn:partner.soap.sforce.com"><username>&e;</username>'
    "<password>x</password></login></se:Body></se:Envelope>"
)


@pytest.mark.parametrize(
    ("xml", "expected"),
    [
        (BILLION_LAUGHS, "DTDs and entity declarations are not accepted"),
        (EXTERNAL_ENTITY, "DTDs and entity declarations are not accepted"),
        ("<se:Envelope", "the document is not well-formed XML"),
        ("<Envelope/>", "the request is not a SOAP 1.1 envelope"),
        (
            envelope('<query xmlns="urn:partner.soap.sforce.com"/>'),
            "No operation available for request {urn:partner.soap.sforce.com}query",
        ),
        (
            envelope('<login xmlns="urn:enterprise.soap.sforce.com"/>'),
            "No operation available for request {urn:enterprise.soap.sforce.com}login",
        ),
        ("<a>" * 40 + "</a>" * 40, "the document has too many elements"),
    ],
)
async def test_bad_envelopes_are_client_faults(identity: Identity, xml: str, expected: str) -> None:
    reply = await soap(identity, xml)
    assert reply.status_code == 500
    code, message, _ = fault(reply)
    assert code == "soapenv:Client"
    assert message.startswith(expected), message


async def test_other_methods_versions_and_sizes_are_refused_with_faults(identity: Identity) -> None:
    async with httpx.AsyncClient(base_url=identity.url) as client:
        got = await client.get(f"/services/Soap/u/{VERSION}")
        assert got.status_code == 405
        assert got.headers["allow"] == "POST"
        assert fault(got)[0] == "soapenv:Client"
    for version in ("9.0", "30.0", "65.0", "abc", "59.5"):
        reply = await soap(
            identity,
            envelope(login_body("alice@example.com", ALICE_PASSWORD)),
            path=f"/services/Soap/u/{version}",
        )
        assert reply.status_code == 500
        assert fault(reply)[2] == "UNSUPPORTED_API_VERSION"
    huge = await soap(identity, envelope(login_body("alice@example.com", "x" * 70_000)))
    assert huge.status_code == 413
    assert fault(huge)[0] == "soapenv:Client"


@pytest.fixture
def json_logs(capsys: pytest.CaptureFixture[str]) -> Iterator[pytest.CaptureFixture[str]]:
    configure_logging(role="runtime-api", level="debug", fmt="json")
    yield capsys
    logging.getLogger().handlers.clear()
    structlog.reset_defaults()


async def test_soap_sign_in_logs_no_credentials(
    identity: Identity, json_logs: pytest.CaptureFixture[str]
) -> None:
    """Passwords (right and wrong) and session ids stay out of every log line."""
    session_id, _ = await sf_login(identity, "alice@example.com", ALICE_PASSWORD)
    await soap(identity, envelope(login_body("alice@example.com", "a-wrong-soap-password-7")))
    await soap(
        identity,
        envelope('<getUserInfo xmlns="urn:partner.soap.sforce.com"/>', session_id=session_id),
    )
    await soap(
        identity, envelope('<logout xmlns="urn:partner.soap.sforce.com"/>', session_id=session_id)
    )
    logs = json_logs.readouterr()
    text = logs.err + logs.out
    assert "http.request" in text  # the calls were logged at all
    assert "identity.soap_fault" in text
    _, _, opaque = session_id.partition("!")
    for secret in (ALICE_PASSWORD, "a-wrong-soap-password-7", session_id, opaque):
        assert secret not in text, secret[:6] + "..."
