"""What a token is derived from bounds it (issue 25, point 5): a delegation expires with the
access token it was exchanged for, a replayed authorization code revokes the tokens its first
use issued (RFC 6749 §4.1.2), and the token endpoint takes no parameters from its URL."""

from __future__ import annotations

import time
from urllib.parse import urlencode

import httpx
import pytest

from nexus.platform.secrets import workload_signer
from tests.integration.identity.conftest import (
    ALICE_PASSWORD,
    REDIRECT,
    Identity,
)
from tests.integration.identity.test_oauth_flows import TOKEN_PATH, alice_by_code, userinfo
from tests.integration.identity.test_token_validation import _ring, _valid_token

pytestmark = pytest.mark.asyncio(loop_scope="module")


async def exchange(identity: Identity, access_token: str) -> httpx.Response:
    signer = workload_signer(identity.settings, "app-sfcrm")
    deadline = int((time.time() + 10) * 1000)
    async with httpx.AsyncClient(base_url=identity.url) as client:
        return await client.post(
            "/internal/v1/identity/exchange",
            json={"credential": access_token},
            headers=signer.headers("runtime-api", deadline_ms=deadline),
        )


async def test_a_delegation_expires_with_its_access_token(identity: Identity) -> None:
    genuine, _, claims = await _valid_token(identity)
    assert (await exchange(identity, genuine)).json()["expires_in"] == 60  # the usual life
    now = int(time.time())
    # the same session's token with 20 s left: the delegation (and so what the dialect keeps
    # of it, `expires_in` minus its margin) ends with it, not 60 s later
    ending = _ring(identity).sign({**claims, "exp": now + 20}, typ="at+jwt")
    answer = await exchange(identity, ending)
    assert answer.status_code == 200, answer.text
    assert 0 < answer.json()["expires_in"] <= 20
    expired = _ring(identity).sign({**claims, "exp": now - 1}, typ="at+jwt")
    assert (await exchange(identity, expired)).status_code == 401


async def test_a_replayed_code_is_refused_and_revokes_what_it_issued(identity: Identity) -> None:
    flow = await alice_by_code(identity)
    token = flow.token
    assert (await userinfo(identity, token["access_token"])).status_code == 200
    code = dict(httpx.URL(flow.location).params)["code"]
    async with httpx.AsyncClient(base_url=identity.url) as raw:
        replay = await raw.post(
            TOKEN_PATH,
            data={
                "grant_type": "authorization_code",
                "code": code,
                "redirect_uri": REDIRECT,
                "code_verifier": flow.verifier,
                "client_id": identity.public.client_id,
            },
        )
        assert replay.status_code == 400
        assert replay.json()["error"] == "invalid_grant"
        refreshed = await raw.post(
            TOKEN_PATH,
            data={
                "grant_type": "refresh_token",
                "refresh_token": token["refresh_token"],
                "client_id": identity.public.client_id,
            },
        )
    assert refreshed.status_code == 400  # the first use's refresh token is revoked
    assert (await userinfo(identity, token["access_token"])).status_code == 401  # and its token


@pytest.mark.parametrize("in_body", [False, True])
async def test_the_token_endpoint_takes_no_credentials_from_its_url(
    identity: Identity, in_body: bool
) -> None:
    credentials = {
        "grant_type": "password",
        "username": "alice@example.com",
        "password": ALICE_PASSWORD,
        "client_id": identity.confidential.client_id,
        "client_secret": identity.confidential.client_secret or "",
    }
    async with httpx.AsyncClient(base_url=identity.url) as client:
        answer = await client.post(
            f"{TOKEN_PATH}?{urlencode(credentials)}",
            data=credentials if in_body else {"grant_type": "password"},
        )
        assert answer.status_code == 400
        assert answer.json()["error"] == "invalid_request"
        plain = await client.post(TOKEN_PATH, data=credentials)
    assert plain.status_code == 200  # the same credentials in the body
