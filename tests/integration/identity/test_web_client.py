"""The browser CRM's public client that `nexus up` registers: idempotent, follows the gateway's
origins, and signs a person in with authorization code + PKCE (S256) and rotating refresh."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from authlib.common.security import generate_token
from authlib.integrations.httpx_client import AsyncOAuth2Client

from nexus.identity import service
from nexus.identity.repository import IdentityRepository
from nexus.identity.setup import WEB_CLIENT_ID, ensure_web_client
from nexus.platform.db.engine import unit_of_work
from tests.integration.identity.conftest import (
    ALICE_PASSWORD,
    Identity,
    sign_in_through_login_page,
)

pytestmark = pytest.mark.asyncio(loop_scope="module")
ORIGIN = "http://127.0.0.1:9"
CALLBACK = f"{ORIGIN}/auth/callback"


async def _redirect_uris(identity: Identity) -> list[str]:
    async with unit_of_work(identity.sessions) as session:  # type: ignore[arg-type]
        row = await IdentityRepository(session).client(WEB_CLIENT_ID)
    assert row is not None
    assert row["secret_hash"] is None  # public: a browser cannot keep a secret
    return service.client_lists(row)[0]


async def test_registration_is_idempotent_and_follows_the_origins(identity: Identity) -> None:
    sessions = identity.sessions
    assert await ensure_web_client(sessions, origins=["http://h:1", "https://h:2/"])  # type: ignore[arg-type]
    assert await _redirect_uris(identity) == [
        "http://h:1/auth/callback",
        "https://h:2/auth/callback",
    ]
    assert not await ensure_web_client(sessions, origins=["https://h:2", "http://h:1"])  # type: ignore[arg-type]
    assert await ensure_web_client(sessions, origins=[ORIGIN])  # type: ignore[arg-type]
    assert await _redirect_uris(identity) == [CALLBACK]


async def test_signs_in_with_pkce_and_refreshes_by_rotation(identity: Identity) -> None:
    await ensure_web_client(identity.sessions, origins=[ORIGIN])  # type: ignore[arg-type]
    verifier = generate_token(64)
    async with AsyncOAuth2Client(
        client_id=WEB_CLIENT_ID,
        base_url=identity.url,
        token_endpoint_auth_method="none",
        redirect_uri=CALLBACK,
        scope="api refresh_token",
        code_challenge_method="S256",
    ) as client:
        url, _state = client.create_authorization_url(
            f"{identity.url}/services/oauth2/authorize", code_verifier=verifier
        )
        async with httpx.AsyncClient(base_url=identity.url) as browser:
            answer = await sign_in_through_login_page(
                browser, url, username="alice@example.com", password=ALICE_PASSWORD
            )
            assert answer.status_code == 302
            assert answer.headers["location"].startswith(CALLBACK + "?")
            code = parse_qs(urlsplit(answer.headers["location"]).query)["code"][0]
            token = await browser.post(
                "/services/oauth2/token",
                data={
                    "grant_type": "authorization_code",
                    "code": code,
                    "redirect_uri": CALLBACK,
                    "client_id": WEB_CLIENT_ID,
                    "code_verifier": verifier,
                },
            )
            assert token.status_code == 200, token.text
            first = token.json()
            rotated = await browser.post(
                "/services/oauth2/token",
                data={
                    "grant_type": "refresh_token",
                    "refresh_token": first["refresh_token"],
                    "client_id": WEB_CLIENT_ID,
                },
            )
            assert rotated.status_code == 200
            assert rotated.json()["refresh_token"] != first["refresh_token"]
            revoked = await browser.post(
                "/services/oauth2/revoke",
                data={"token": rotated.json()["refresh_token"], "client_id": WEB_CLIENT_ID},
            )
            assert revoked.status_code == 200
            again = await browser.post(
                "/services/oauth2/token",
                data={
                    "grant_type": "refresh_token",
                    "refresh_token": rotated.json()["refresh_token"],
                    "client_id": WEB_CLIENT_ID,
                },
            )
            assert again.status_code == 400


async def test_a_foreign_redirect_uri_is_refused(identity: Identity) -> None:
    await ensure_web_client(identity.sessions, origins=[ORIGIN])  # type: ignore[arg-type]
    async with httpx.AsyncClient(base_url=identity.url) as browser:
        page = await browser.get(
            "/services/oauth2/authorize",
            params={
                "response_type": "code",
                "client_id": WEB_CLIENT_ID,
                "redirect_uri": "https://evil.example/auth/callback",
                "code_challenge": "x" * 43,
                "code_challenge_method": "S256",
            },
        )
    assert page.status_code == 400
    assert "evil.example" not in page.headers.get("location", "")
