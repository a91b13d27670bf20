"""Salesforce clients sign in to `nexus up` the way they sign in to Salesforce (issue 26; ADR
0075): the partner SOAP API's login (simple-salesforce, jsforce's default `login()`), its
session id used by the REST dialect, logout and token-only revocation, over HTTPS.

simple-salesforce 1.12's `Salesforce(username=, password=, security_token=, domain=)` builds
its login URL as `https://<domain>.salesforce.com/services/Soap/u/NN.N` and cannot reach any
other host; its `SalesforceLogin(..., scratch_url=)` is the documented way to post the same
login to a direct URL, then `Salesforce(session_id=, instance=)` uses the session."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import pytest
import requests
from simple_salesforce import Salesforce, SalesforceLogin
from simple_salesforce.exceptions import SalesforceAuthenticationFailed, SalesforceExpiredSession

from tests.conftest import Backend
from tests.e2e.sfcrm_stack import PASSWORD, VERSION, Stack, run_jsforce, sfcrm_stack

pytestmark = pytest.mark.e2e
STALENESS = 1.0  # the stack's NEXUS_MAX_SECURITY_STALENESS_SECONDS
#: what `sf org login access-token` accepts (@salesforce/core `sfdc.accessTokenRegex`)
SF_CLI_ACCESS_TOKEN = re.compile(r"(00D\w{12,15})![.\w]*")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, backend: Backend) -> Iterator[Stack]:
    with sfcrm_stack(
        tmp_path_factory.mktemp("sfcrm-login"),
        backend,
        NEXUS_MAX_SECURITY_STALENESS_SECONDS=str(STALENESS),
    ) as running:
        yield running


def http_session(stack: Stack) -> requests.Session:
    session = requests.Session()
    session.verify = str(stack.ca)
    session.trust_env = False  # else REQUESTS_CA_BUNDLE from the environment overrides verify
    return session


def soap_login(stack: Stack, username: str, password: str) -> tuple[str, str]:
    """simple-salesforce's SOAP login; Nexus has no security tokens, so the token is empty."""
    return SalesforceLogin(
        username=username,
        password=password,
        security_token="",
        sf_version=VERSION,
        scratch_url=stack.https,
        session=http_session(stack),
    )


def client(stack: Stack, session_id: str, instance: str) -> Salesforce:
    return Salesforce(
        session_id=session_id, instance=instance, version=VERSION, session=http_session(stack)
    )


def refused_within_staleness(sf: Salesforce) -> SalesforceExpiredSession:
    until = time.monotonic() + STALENESS + 2
    while True:
        try:
            sf.query("SELECT Id FROM Account")
        except SalesforceExpiredSession as exc:
            return exc
        assert time.monotonic() < until, "the ended session still worked past the bound"
        time.sleep(0.2)


def test_simple_salesforce_signs_in_by_soap_and_queries(stack: Stack) -> None:
    session_id, instance = soap_login(stack, "rep1", PASSWORD)
    assert SF_CLI_ACCESS_TOKEN.fullmatch(session_id), session_id
    assert f"https://{instance}" == stack.https  # the login's serverUrl names the gateway
    sf = client(stack, session_id, instance)
    created = sf.Account.create({"Name": "SOAP Account"})
    assert created["success"] is True
    found = sf.query("SELECT Id, Name FROM Account WHERE Name = 'SOAP Account'")
    assert [r["Id"] for r in found["records"]] == [created["id"]]
    # the same person through OAuth sees the same records: one identity, two doors
    oauth = Salesforce(
        instance_url=stack.https,
        session_id=stack.tokens["rep1"],
        version=VERSION,
        session=http_session(stack),
    )
    assert oauth.Account.get(created["id"])["Name"] == "SOAP Account"


def test_a_wrong_password_is_simple_salesforces_authentication_error(stack: Stack) -> None:
    with pytest.raises(SalesforceAuthenticationFailed) as raised:
        soap_login(stack, "rep2", "not-the-password")
    assert raised.value.code == "INVALID_LOGIN"
    assert raised.value.auth_message == (
        "Invalid username, password, security token; or user locked out."
    )


def test_a_revoked_session_is_invalid_session_id_on_the_next_call(stack: Stack) -> None:
    session_id, instance = soap_login(stack, "rep2", PASSWORD)
    sf = client(stack, session_id, instance)
    assert sf.query("SELECT Id FROM Account")["done"] is True
    revoked = requests.post(
        f"{stack.https}/services/oauth2/revoke",
        data={"token": session_id},
        verify=str(stack.ca),
        timeout=10,
    )
    assert revoked.status_code == 200, revoked.text
    refused = refused_within_staleness(sf)
    assert refused.status == 401
    assert refused.content[0]["errorCode"] == "INVALID_SESSION_ID"


def test_a_session_id_under_another_orgs_id_is_refused(stack: Stack) -> None:
    session_id, instance = soap_login(stack, "viewer", PASSWORD)
    org_id, _, opaque = session_id.partition("!")
    other_org = "00D" + ("B" * 15 if org_id[3:] != "B" * 15 else "C" * 15)
    forged = client(stack, f"{other_org}!{opaque}", instance)
    with pytest.raises(SalesforceExpiredSession) as raised:
        forged.query("SELECT Id FROM Account")
    assert raised.value.content[0]["errorCode"] == "INVALID_SESSION_ID"
    assert client(stack, session_id, instance).query("SELECT Id FROM Account")["done"] is True


def test_jsforce_default_login_query_and_logout(stack: Stack) -> None:
    config = {
        "loginUrl": stack.https,
        "clientId": stack.client_id,
        "clientSecret": stack.client_secret,
        "username": "fuzzer",
        "password": PASSWORD,
        "version": VERSION,
        "stalenessSeconds": STALENESS,
    }
    results = run_jsforce(stack, "login.mjs", config)
    assert results["ok"] is True, results
