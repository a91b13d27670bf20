"""A full sign-in story leaves no password, secret, code or token in the logs."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
import structlog
from authlib.common.security import generate_token
from authlib.integrations.httpx_client import AsyncOAuth2Client

from nexus.platform.observability import configure_logging
from tests.integration.identity.conftest import (
    ALICE_PASSWORD,
    REDIRECT,
    Identity,
    sign_in_through_login_page,
)

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest.fixture
def json_logs(capsys: pytest.CaptureFixture[str]) -> Iterator[pytest.CaptureFixture[str]]:
    configure_logging(role="runtime-api", level="debug", fmt="json")
    yield capsys
    logging.getLogger().handlers.clear()
    structlog.reset_defaults()


async def test_login_flows_log_no_credentials(identity: Identity, json_logs) -> None:
    secrets_seen: list[str] = [ALICE_PASSWORD, identity.confidential.client_secret]
    token_url = f"{identity.url}/services/oauth2/token"
    async with AsyncOAuth2Client(
        client_id=identity.confidential.client_id,
        client_secret=identity.confidential.client_secret,
        token_endpoint_auth_method="client_secret_post",
        redirect_uri=REDIRECT,
        scope="api refresh_token",
        code_challenge_method="S256",
    ) as client:
        password_token = await client.fetch_token(
            token_url, grant_type="password", username="alice@example.com", password=ALICE_PASSWORD
        )
        verifier = generate_token(64)
        url, _ = client.create_authorization_url(
            f"{identity.url}/services/oauth2/authorize", code_verifier=verifier
        )
        async with httpx.AsyncClient(base_url=identity.url) as browser:
            answer = await sign_in_through_login_page(
                browser, url, username="alice@example.com", password=ALICE_PASSWORD
            )
            failed = await browser.post(
                "/services/oauth2/token",
                data={
                    "grant_type": "password",
                    "username": "alice@example.com",
                    "password": "a-wrong-password-42",
                },
            )
            assert failed.status_code == 400
        code = parse_qs(urlsplit(answer.headers["location"]).query)["code"][0]
        code_token = await client.fetch_token(
            token_url, authorization_response=answer.headers["location"], code_verifier=verifier
        )
        refreshed = await client.refresh_token(token_url, refresh_token=code_token["refresh_token"])
        await client.revoke_token(
            f"{identity.url}/services/oauth2/revoke", token=refreshed["access_token"]
        )
    secrets_seen += [
        "a-wrong-password-42",
        code,
        verifier,
        password_token["access_token"],
        code_token["access_token"],
        code_token["refresh_token"],
        refreshed["access_token"],
        refreshed["refresh_token"],
    ]
    logs = json_logs.readouterr()
    text = logs.err + logs.out
    assert "http.request" in text  # the flow was logged at all
    leaked = [s[:6] + "..." for s in secrets_seen if s and s in text]
    assert not leaked, f"credentials in logs: {leaked}"
    assert "eyJ" not in text  # no JWT fragment of any kind
