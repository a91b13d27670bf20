"""OAuth2 flows with authlib's own httpx client against a real runtime-api, both backends."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from authlib.common.security import generate_token
from authlib.integrations.httpx_client import AsyncOAuth2Client
from joserfc import jwt
from joserfc.jwk import KeySet

from nexus.identity import admin, service
from nexus.identity.repository import IdentityRepository
from nexus.platform.db.engine import unit_of_work
from tests.integration.identity.conftest import (
    ADMIN_PASSWORD,
    ALICE_PASSWORD,
    REDIRECT,
    STALENESS,
    Identity,
    sign_in_through_login_page,
)

pytestmark = pytest.mark.asyncio(loop_scope="module")
TOKEN_PATH = "/services/oauth2/token"


def oauth_client(identity: Identity, which: str, **kw: object) -> AsyncOAuth2Client:
    registered = getattr(identity, which)
    return AsyncOAuth2Client(
        client_id=registered.client_id,
        client_secret=registered.client_secret,
        base_url=identity.url,
        token_endpoint_auth_method="client_secret_post" if registered.client_secret else "none",
        **kw,
    )


async def userinfo(identity: Identity, access_token: str) -> httpx.Response:
    async with httpx.AsyncClient(base_url=identity.url) as client:
        return await client.get(
            "/services/oauth2/userinfo", headers={"Authorization": f"Bearer {access_token}"}
        )


async def test_password_grant_returns_the_salesforce_token_shape(identity: Identity) -> None:
    async with oauth_client(identity, "confidential") as client:
        token = await client.fetch_token(
            f"{identity.url}{TOKEN_PATH}",
            grant_type="password",
            username="alice@example.com",
            password=ALICE_PASSWORD,
        )
    for field in ("access_token", "instance_url", "id", "token_type", "issued_at", "signature"):
        assert field in token, field
    assert token["token_type"] == "Bearer"
    assert token["instance_url"] == "http://testserver.nexus"
    assert token["id"].startswith("http://testserver.nexus/id/00D")
    assert "refresh_token" not in token  # the password grant never returns one
    info = await userinfo(identity, token["access_token"])
    assert info.status_code == 200
    assert info.json()["preferred_username"] == "alice@example.com"
    assert info.json()["is_admin"] is False  # alice is a standard user


async def test_password_grant_without_client_uses_the_default_public_client(
    identity: Identity,
) -> None:
    async with httpx.AsyncClient(base_url=identity.url) as client:
        reply = await client.post(
            TOKEN_PATH,
            data={"grant_type": "password", "username": "admin", "password": ADMIN_PASSWORD},
        )
    assert reply.status_code == 200, reply.text
    assert reply.headers["cache-control"] == "no-store"
    info = await userinfo(identity, reply.json()["access_token"])
    assert info.json()["is_admin"] is True


async def test_client_credentials_act_as_the_run_as_user(identity: Identity) -> None:
    async with oauth_client(identity, "machine") as client:
        token = await client.fetch_token(
            f"{identity.url}{TOKEN_PATH}", grant_type="client_credentials"
        )
    info = await userinfo(identity, token["access_token"])
    assert info.json()["preferred_username"] == "alice@example.com"


@dataclass
class CodeFlow:
    token: dict[str, Any]  # the token response
    location: str  # where the sign-in redirected the browser (code and state)
    state: str
    verifier: str


async def alice_by_code(identity: Identity) -> CodeFlow:
    """Alice signs in on the public client: authorization code with PKCE, `api
    refresh_token`, through the login page; the code is exchanged once."""
    verifier = generate_token(64)
    async with oauth_client(
        identity,
        "public",
        redirect_uri=REDIRECT,
        scope="api refresh_token",
        code_challenge_method="S256",
    ) as client:
        url, state = client.create_authorization_url(
            f"{identity.url}/services/oauth2/authorize", code_verifier=verifier
        )
        async with httpx.AsyncClient(base_url=identity.url) as browser:
            answer = await sign_in_through_login_page(
                browser, url, username="alice@example.com", password=ALICE_PASSWORD
            )
        assert answer.status_code == 302
        location = answer.headers["location"]
        token = await client.fetch_token(
            f"{identity.url}{TOKEN_PATH}", authorization_response=location, code_verifier=verifier
        )
    return CodeFlow(dict(token), location, state, verifier)


async def test_authorization_code_with_pkce_then_refresh_rotation(identity: Identity) -> None:
    flow = await alice_by_code(identity)
    assert flow.location.startswith(REDIRECT)
    assert parse_qs(urlsplit(flow.location).query)["state"] == [flow.state]
    token = flow.token
    assert token["refresh_token"]
    assert set(token["scope"].split()) == {"api", "refresh_token"}
    assert (await userinfo(identity, token["access_token"])).status_code == 200

    async with oauth_client(identity, "public") as client:
        first_refresh = token["refresh_token"]
        rotated = await client.refresh_token(
            f"{identity.url}{TOKEN_PATH}", refresh_token=first_refresh
        )
        assert rotated["refresh_token"] != first_refresh
        assert (await userinfo(identity, rotated["access_token"])).status_code == 200

        # Reusing the rotated token: refused, and the whole family (session) is revoked.
        async with httpx.AsyncClient(base_url=identity.url) as raw:
            reuse = await raw.post(
                TOKEN_PATH,
                data={
                    "grant_type": "refresh_token",
                    "refresh_token": first_refresh,
                    "client_id": identity.public.client_id,
                },
            )
            assert reuse.status_code == 400
            assert reuse.json()["error"] == "invalid_grant"
            after = await raw.post(
                TOKEN_PATH,
                data={
                    "grant_type": "refresh_token",
                    "refresh_token": rotated["refresh_token"],
                    "client_id": identity.public.client_id,
                },
            )
            assert after.json()["error"] == "invalid_grant"
        await asyncio.sleep(STALENESS)
        assert (await userinfo(identity, rotated["access_token"])).status_code == 401


async def test_pkce_verifier_mismatch_is_refused(identity: Identity) -> None:
    async with oauth_client(
        identity, "public", redirect_uri=REDIRECT, code_challenge_method="S256"
    ) as client:
        url, _ = client.create_authorization_url(
            f"{identity.url}/services/oauth2/authorize", code_verifier=generate_token(64)
        )
        async with httpx.AsyncClient(base_url=identity.url) as browser:
            answer = await sign_in_through_login_page(
                browser, url, username="alice@example.com", password=ALICE_PASSWORD
            )
        code = parse_qs(urlsplit(answer.headers["location"]).query)["code"][0]
    async with httpx.AsyncClient(base_url=identity.url) as raw:
        reply = await raw.post(
            TOKEN_PATH,
            data={
                "grant_type": "authorization_code",
                "code": code,
                "redirect_uri": REDIRECT,
                "client_id": identity.public.client_id,
                "code_verifier": generate_token(64),
            },
        )
    assert reply.status_code == 400
    assert reply.json()["error"] == "invalid_grant"


async def test_public_clients_must_use_pkce(identity: Identity) -> None:
    async with httpx.AsyncClient(base_url=identity.url) as browser:
        page = await browser.get(
            "/services/oauth2/authorize",
            params={
                "response_type": "code",
                "client_id": identity.public.client_id,
                "redirect_uri": REDIRECT,
                "state": "s1",
            },
        )
    assert page.status_code == 302
    assert "error=invalid_request" in page.headers["location"]


async def test_redirect_uri_must_match_exactly_and_is_never_followed(identity: Identity) -> None:
    for bad in (REDIRECT + "/extra", REDIRECT + "?x=1", "http://127.0.0.1:9/other"):
        async with httpx.AsyncClient(base_url=identity.url) as browser:
            page = await browser.get(
                "/services/oauth2/authorize",
                params={
                    "response_type": "code",
                    "client_id": identity.confidential.client_id,
                    "redirect_uri": bad,
                    "state": "s1",
                },
            )
        assert page.status_code == 400, bad
        assert "location" not in page.headers
        assert "not valid" in page.text


async def test_wrong_password_and_unknown_user_fail_the_same_way(identity: Identity) -> None:
    async with httpx.AsyncClient(base_url=identity.url) as raw:
        replies = []
        for username in ("admin", "nobody@example.com"):
            replies.append(
                await raw.post(
                    TOKEN_PATH,
                    data={
                        "grant_type": "password",
                        "username": username,
                        "password": "not-the-password-1",
                    },
                )
            )
    assert [r.status_code for r in replies] == [400, 400]
    assert (
        replies[0].json()
        == replies[1].json()
        == {"error": "invalid_grant", "error_description": "authentication failure"}
    )


async def test_unknown_users_take_as_long_as_wrong_passwords(identity: Identity) -> None:
    """No fast path reveals which usernames exist: both run one argon2 verification."""

    async def median_ms(username: str) -> float:
        timings = []
        async with httpx.AsyncClient(base_url=identity.url) as raw:
            for _ in range(3):
                started = time.perf_counter()
                await raw.post(
                    TOKEN_PATH,
                    data={
                        "grant_type": "password",
                        "username": username,
                        "password": "no-such-pw-1",
                    },
                )
                timings.append((time.perf_counter() - started) * 1000)
        return sorted(timings)[1]

    await admin.create_user(
        identity.sessions,
        username="timing@example.com",
        password="timing-password-1",
        email=None,
        display_name=None,
        is_admin=False,
    )
    known = await median_ms("timing@example.com")
    unknown = await median_ms("nobody-at-all@example.com")
    assert unknown > 0.5 * known, (unknown, known)


async def test_lockout_after_repeated_failures(identity: Identity) -> None:
    await admin.create_user(
        identity.sessions,
        username="locky",
        password="locky-password-123",
        email=None,
        display_name=None,
        is_admin=False,
    )
    async with httpx.AsyncClient(base_url=identity.url) as raw:
        for _ in range(3):
            failed = await raw.post(
                TOKEN_PATH,
                data={
                    "grant_type": "password",
                    "username": "locky",
                    "password": "wrong-password-123",
                },
            )
            assert failed.json()["error"] == "invalid_grant"
        correct = await raw.post(
            TOKEN_PATH,
            data={
                "grant_type": "password",
                "username": "locky",
                "password": "locky-password-123",
            },
        )
    assert correct.status_code == 400
    assert correct.json()["error_description"] == "authentication failure"


async def test_a_client_of_another_org_cannot_sign_in_this_orgs_users(identity: Identity) -> None:
    async with oauth_client(identity, "other_org_client") as client:
        with pytest.raises(Exception, match="invalid_grant"):
            await client.fetch_token(
                f"{identity.url}{TOKEN_PATH}",
                grant_type="password",
                username="alice@example.com",
                password=ALICE_PASSWORD,
            )


async def test_revocation_takes_effect_within_the_staleness_bound(identity: Identity) -> None:
    async with oauth_client(identity, "confidential") as client:
        token = await client.fetch_token(
            f"{identity.url}{TOKEN_PATH}",
            grant_type="password",
            username="alice@example.com",
            password=ALICE_PASSWORD,
        )
        assert (await userinfo(identity, token["access_token"])).status_code == 200
        revoked = await client.revoke_token(
            f"{identity.url}/services/oauth2/revoke", token=token["access_token"]
        )
        assert revoked.status_code == 200
    # the replica that handled the logout refuses the token at once; others within the bound
    assert (await userinfo(identity, token["access_token"])).status_code == 401
    await asyncio.sleep(STALENESS)
    assert (await userinfo(identity, token["access_token"])).status_code == 401


async def test_deactivation_and_disabled_apps_cut_off_existing_tokens(identity: Identity) -> None:
    await admin.create_user(
        identity.sessions,
        username="temp@example.com",
        password="temp-password-1234",
        email=None,
        display_name=None,
        is_admin=False,
    )
    async with oauth_client(identity, "confidential") as client:
        user_token = await client.fetch_token(
            f"{identity.url}{TOKEN_PATH}",
            grant_type="password",
            username="temp@example.com",
            password="temp-password-1234",
        )
    async with oauth_client(identity, "machine") as client:
        app_token = await client.fetch_token(
            f"{identity.url}{TOKEN_PATH}", grant_type="client_credentials"
        )
    assert (await userinfo(identity, user_token["access_token"])).status_code == 200
    assert (await userinfo(identity, app_token["access_token"])).status_code == 200

    await admin.revoke_user(identity.sessions, username="temp@example.com", deactivate=True)
    async with unit_of_work(identity.sessions) as session:
        repo = IdentityRepository(session)
        client_row = await repo.client(identity.machine.client_id)
        await service.disable_client(
            repo, org_id=client_row["org_id"], client_id=identity.machine.client_id
        )
    await asyncio.sleep(STALENESS)
    assert (await userinfo(identity, user_token["access_token"])).status_code == 401
    assert (await userinfo(identity, app_token["access_token"])).status_code == 401
    async with oauth_client(identity, "machine") as client:
        with pytest.raises(Exception, match="invalid_client"):
            await client.fetch_token(f"{identity.url}{TOKEN_PATH}", grant_type="client_credentials")


async def test_openid_scope_returns_a_verifiable_id_token(identity: Identity) -> None:
    oidc = await admin.create_client(
        identity.sessions,
        name="OIDC app",
        redirect_uris=[REDIRECT],
        grant_types=["authorization_code"],
        scopes=["openid", "api"],
        run_as_username=None,
        public=True,
    )
    verifier = generate_token(64)
    async with AsyncOAuth2Client(
        client_id=oidc.client_id,
        token_endpoint_auth_method="none",
        redirect_uri=REDIRECT,
        scope="openid api",
        code_challenge_method="S256",
    ) as client:
        url, _ = client.create_authorization_url(
            f"{identity.url}/services/oauth2/authorize",
            code_verifier=verifier,
            nonce="n-0S6_WzA2Mj",
        )
        async with httpx.AsyncClient(base_url=identity.url) as browser:
            answer = await sign_in_through_login_page(
                browser, url, username="alice@example.com", password=ALICE_PASSWORD
            )
            jwks = (await browser.get("/.well-known/jwks.json")).json()
            discovery = (await browser.get("/.well-known/openid-configuration")).json()
        token = await client.fetch_token(
            f"{identity.url}{TOKEN_PATH}",
            authorization_response=answer.headers["location"],
            code_verifier=verifier,
        )
    id_token = jwt.decode(token["id_token"], KeySet.import_key_set(jwks), algorithms=["RS256"])
    assert id_token.claims["iss"] == discovery["issuer"] == "http://testserver.nexus"
    assert id_token.claims["aud"] == [oidc.client_id]
    assert id_token.claims["nonce"] == "n-0S6_WzA2Mj"
    assert id_token.claims["preferred_username"] == "alice@example.com"
    assert "at_hash" in id_token.claims
    # an ID token is not an access token
    assert (await userinfo(identity, token["id_token"])).status_code == 401
    assert (await userinfo(identity, token["access_token"])).status_code == 200
