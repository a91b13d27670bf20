"""The scope model (`nexus.identity.scopes`), enforced in Runtime: a token reaches only what its
scopes allow, whatever its user may do. One client registered with every scope; the System
Administrator signs in asking for fewer, and each token is tried on the data API (a
delegated records call, as the dialect makes it), the Runtime admin API, the operator check
Catalog and Integration ask, and userinfo."""

from __future__ import annotations

import time

import httpx
import pytest
import pytest_asyncio

from nexus.apps.sfcrm.errors import from_runtime
from nexus.contracts.operators import OPERATOR_CHECK_PATH
from nexus.identity import admin
from nexus.identity.service import NewClient
from nexus.platform.secrets import workload_signer
from tests.integration.identity.conftest import ADMIN_PASSWORD, Identity

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def every_scope(identity: Identity) -> NewClient:
    return await admin.create_client(
        identity.sessions,
        name="Every scope",
        redirect_uris=[],
        grant_types=["password"],
        scopes=["api", "admin", "openid", "refresh_token"],
        run_as_username=None,
        public=False,
    )


async def sign_in(identity: Identity, client: NewClient | None, scope: str) -> httpx.Response:
    """The admin user's password sign-in through `client` (None: the deployment's default
    password client), asking for `scope` (empty: the client's default)."""
    credentials = (
        {}
        if client is None
        else {"client_id": client.client_id, "client_secret": client.client_secret or ""}
    )
    async with httpx.AsyncClient(base_url=identity.url) as http:
        return await http.post(
            "/services/oauth2/token",
            data={
                "grant_type": "password",
                "username": "admin",
                "password": ADMIN_PASSWORD,
                **credentials,
                **({"scope": scope} if scope else {}),
            },
        )


async def token(identity: Identity, client: NewClient | None, scope: str) -> tuple[str, str]:
    """(access token, the scopes it was granted) for the admin user, asking for `scope`."""
    answer = await sign_in(identity, client, scope)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    return body["access_token"], body.get("scope", "")


async def delegated(identity: Identity, access_token: str, workload: str) -> dict[str, str]:
    signer = workload_signer(identity.settings, workload)
    deadline = int((time.time() + 10) * 1000)
    async with httpx.AsyncClient(base_url=identity.url) as http:
        exchanged = await http.post(
            "/internal/v1/identity/exchange",
            json={"credential": access_token},
            headers=signer.headers("runtime-api", deadline_ms=deadline),
        )
    assert exchanged.status_code == 200, exchanged.text
    return signer.headers(
        "runtime-api", deadline_ms=deadline, delegation=exchanged.json()["delegation"]
    )


async def reaches(identity: Identity, access_token: str) -> dict[str, int]:
    """The status each surface answers this token with."""
    records = await delegated(identity, access_token, "app-sfcrm")
    operator = await delegated(identity, access_token, "catalog")
    bearer = {"Authorization": f"Bearer {access_token}"}
    async with httpx.AsyncClient(base_url=identity.url) as http:
        answers = {
            "data": await http.post("/internal/v1/runtime/describe/global", headers=records),
            "admin": await http.get("/admin/v1/runtime/users", headers=bearer),
            "operator": await http.post(
                OPERATOR_CHECK_PATH, json={"area": "catalog"}, headers=operator
            ),
            "userinfo": await http.get("/services/oauth2/userinfo", headers=bearer),
        }
    for name, answer in answers.items():
        if answer.status_code == 403:
            assert answer.json()["code"] == "INSUFFICIENT_SCOPE", (name, answer.text)
    return {name: answer.status_code for name, answer in answers.items()}


@pytest.mark.parametrize(
    ("asked", "granted", "expected"),
    [
        ("openid", "openid", {"data": 403, "admin": 403, "operator": 403, "userinfo": 200}),
        ("api", "api", {"data": 200, "admin": 403, "operator": 403, "userinfo": 200}),
        ("admin", "admin", {"data": 403, "admin": 200, "operator": 200, "userinfo": 200}),
        (
            "refresh_token",
            "refresh_token",
            dict.fromkeys(("data", "admin", "operator", "userinfo"), 403),
        ),
        ("api admin", "admin api", {"data": 200, "admin": 200, "operator": 200, "userinfo": 200}),
    ],
)
async def test_a_token_reaches_only_what_its_scopes_allow(
    identity: Identity, every_scope: NewClient, asked: str, granted: str, expected: dict[str, int]
) -> None:
    access_token, scope = await token(identity, every_scope, asked)
    assert set(scope.split()) == set(granted.split())
    assert await reaches(identity, access_token) == expected


async def test_a_scope_the_client_lacks_is_refused_at_issuance(
    identity: Identity, every_scope: NewClient
) -> None:
    answer = await sign_in(identity, every_scope, "full")  # not one this client holds
    assert answer.status_code == 400
    assert answer.json()["error"] == "invalid_scope"


async def test_full_reaches_everything(identity: Identity) -> None:
    # the password sign-in client of a new deployment holds `api full`
    access_token, scope = await token(identity, None, "")
    assert "full" in scope.split()
    assert set((await reaches(identity, access_token)).values()) == {200}


async def test_the_dialect_answers_a_token_without_api_as_salesforce_does() -> None:
    refused = from_runtime(403, {"code": "INSUFFICIENT_SCOPE", "message": "needs api"})
    assert (refused.status, refused.code) == (401, "INVALID_SESSION_ID")
    assert refused.message == "This session is not valid for use with the REST API"
