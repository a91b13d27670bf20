"""Workload identity + user delegation on internal calls; every gap fails closed."""

from __future__ import annotations

import asyncio
import base64
import json
import time

import httpx
import pytest
from joserfc.jwk import ECKey

from nexus.contracts.errors import Forbidden, Unauthorized, UpstreamError
from nexus.contracts.roles import RUNTIME_AUDIENCE
from nexus.identity import admin
from nexus.identity.keys import KeyRing, key_dir
from nexus.platform.http_client import InternalClient
from nexus.platform.operator_gate import OperatorGate
from nexus.platform.secrets import secrets_dir, workload_signer
from nexus.platform.workload import WorkloadSigner
from tests.integration.identity.conftest import (
    ADMIN_PASSWORD,
    ALICE_PASSWORD,
    STALENESS,
    Identity,
)

pytestmark = pytest.mark.asyncio(loop_scope="module")
EXCHANGE = "/internal/v1/identity/exchange"
WHOAMI = "/internal/v1/identity/whoami"


def deadline(seconds: float = 10) -> int:
    return int((time.time() + seconds) * 1000)


async def user_token(
    identity: Identity, username: str = "alice@example.com", password: str = ALICE_PASSWORD
) -> str:
    async with httpx.AsyncClient(base_url=identity.url) as client:
        reply = await client.post(
            "/services/oauth2/token",
            data={
                "grant_type": "password",
                "username": username,
                "password": password,
            },
        )
    assert reply.status_code == 200, reply.text
    return reply.json()["access_token"]


def signer(identity: Identity, name: str) -> WorkloadSigner:
    return workload_signer(identity.settings, name)


async def exchange(identity: Identity, token: str, workload: str = "app-sfcrm") -> httpx.Response:
    headers = signer(identity, workload).headers("runtime-api", deadline_ms=deadline())
    async with httpx.AsyncClient(base_url=identity.url) as client:
        return await client.post(EXCHANGE, json={"credential": token}, headers=headers)


async def whoami(identity: Identity, headers: dict[str, str]) -> httpx.Response:
    async with httpx.AsyncClient(base_url=identity.url) as client:
        return await client.post(WHOAMI, headers=headers)


async def test_exchange_then_an_internal_call_carries_the_user(identity: Identity) -> None:
    reply = await exchange(identity, await user_token(identity))
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert body["expires_in"] <= 60
    headers = signer(identity, "app-sfcrm").headers(
        "runtime-api", deadline_ms=deadline(), delegation=body["delegation"]
    )
    me = await whoami(identity, headers)
    assert me.status_code == 200, me.text
    call = me.json()
    assert call["user_id"] == body["user_id"]
    assert call["org_id"] == body["org_id"]
    assert call["via"] == "delegation"
    assert call["workload"] == "app-sfcrm"
    assert call["deadline_ms"] == int(headers["x-nexus-deadline"])


async def test_a_workload_without_the_capability_is_forbidden(identity: Identity) -> None:
    reply = await exchange(identity, await user_token(identity), workload="gateway")
    assert reply.status_code == 403
    assert reply.json()["code"] == "WORKLOAD_NOT_ALLOWED"


async def test_missing_forged_or_misdirected_workload_tokens_are_401(identity: Identity) -> None:
    token = await user_token(identity)
    stranger = WorkloadSigner("app-sfcrm", ECKey.generate_key("P-256", private=True))
    genuine = signer(identity, "app-sfcrm")
    cases = [
        {"x-nexus-deadline": str(deadline())},
        stranger.headers("runtime-api", deadline_ms=deadline()),
        genuine.headers("catalog", deadline_ms=deadline()),  # meant for another receiver
    ]
    async with httpx.AsyncClient(base_url=identity.url) as client:
        for headers in cases:
            reply = await client.post(EXCHANGE, json={"credential": token}, headers=headers)
            assert reply.status_code == 401, headers
            assert reply.json()["code"] == "INVALID_WORKLOAD"


async def test_deadlines_are_required_and_honoured(identity: Identity) -> None:
    token = await user_token(identity)
    headers = signer(identity, "app-sfcrm").headers("runtime-api", deadline_ms=deadline())
    async with httpx.AsyncClient(base_url=identity.url) as client:
        missing = {k: v for k, v in headers.items() if k != "x-nexus-deadline"}
        assert (
            await client.post(EXCHANGE, json={"credential": token}, headers=missing)
        ).status_code == 400
        passed = {**headers, "x-nexus-deadline": str(deadline(-1))}
        late = await client.post(EXCHANGE, json={"credential": token}, headers=passed)
        assert late.status_code == 504


async def test_delegations_fail_closed(identity: Identity) -> None:
    body = (await exchange(identity, await user_token(identity))).json()
    sfcrm = signer(identity, "app-sfcrm")
    ring = KeyRing.load(key_dir(secrets_dir(identity.var_dir)), retire_after_seconds=3600)
    part = body["delegation"].split(".")[1]
    claims = json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))
    expired = ring.sign({**claims, "exp": int(time.time()) - 1}, typ="delegation+jwt")
    other_audience = ring.sign({**claims, "aud": "catalog"}, typ="delegation+jwt")
    as_access_token = ring.sign(claims, typ="at+jwt")
    for delegation in (None, "garbage", expired, other_audience, as_access_token):
        headers = sfcrm.headers("runtime-api", deadline_ms=deadline(), delegation=delegation)
        assert (await whoami(identity, headers)).status_code == 401, delegation
    # a delegation issued to app-sfcrm cannot be replayed by another workload
    stolen = signer(identity, "integration").headers(
        "runtime-api", deadline_ms=deadline(), delegation=body["delegation"]
    )
    assert (await whoami(identity, stolen)).status_code == 401


async def test_a_revocation_in_the_org_invalidates_outstanding_delegations(
    identity: Identity,
) -> None:
    body = (await exchange(identity, await user_token(identity))).json()
    headers = signer(identity, "app-sfcrm").headers(
        "runtime-api", deadline_ms=deadline(), delegation=body["delegation"]
    )
    assert (await whoami(identity, headers)).status_code == 200
    # somebody else's session is revoked: the org's SecurityEpoch advances
    await admin.create_user(
        identity.sessions,
        username="bob@example.com",
        password="bob-password-12345",
        email=None,
        display_name=None,
        is_admin=False,
    )
    await user_token(identity, "bob@example.com", "bob-password-12345")
    await admin.revoke_user(identity.sessions, username="bob@example.com", deactivate=False)
    await asyncio.sleep(STALENESS)
    assert (await whoami(identity, headers)).status_code == 401  # below the minimum epoch
    fresh = (await exchange(identity, await user_token(identity))).json()
    renewed = signer(identity, "app-sfcrm").headers(
        "runtime-api", deadline_ms=deadline(), delegation=fresh["delegation"]
    )
    assert (await whoami(identity, renewed)).status_code == 200


async def test_exchange_refuses_a_revoked_user_token(identity: Identity) -> None:
    await admin.create_user(
        identity.sessions,
        username="carol@example.com",
        password="carol-password-1234",
        email=None,
        display_name=None,
        is_admin=False,
    )
    token = await user_token(identity, "carol@example.com", "carol-password-1234")
    await admin.revoke_user(identity.sessions, username="carol@example.com", deactivate=True)
    await asyncio.sleep(STALENESS)
    reply = await exchange(identity, token)
    assert reply.status_code == 401


# ------------------------------------------------------------------ operator checks
# Who may operate the integration is Runtime's decision: Integration's `OperatorGate`
# exchanges the user's token and asks `/internal/v1/runtime/operators/check`.


def gate(
    identity: Identity, client: httpx.AsyncClient, workload: str = "integration"
) -> OperatorGate:
    runtime = InternalClient(
        base_url=identity.url,
        signer=workload_signer(identity.settings, workload),  # type: ignore[arg-type]
        audience=RUNTIME_AUDIENCE,
        client=client,
        timeout_s=5.0,
    )
    return OperatorGate(runtime, area="integration")


async def test_a_system_administrator_may_operate_the_integration(identity: Identity) -> None:
    token = await user_token(identity, "admin", ADMIN_PASSWORD)
    async with httpx.AsyncClient() as client:
        operator = await gate(identity, client).operator(f"Bearer {token}")
    async with httpx.AsyncClient(base_url=identity.url) as client:
        me = await client.get(
            "/services/oauth2/userinfo", headers={"authorization": f"Bearer {token}"}
        )
    assert me.status_code == 200, me.text
    assert operator.user_id == me.json()["user_id"]
    assert operator.org_id == me.json()["organization_id"]


async def test_anyone_else_is_refused_and_nothing_is_decided_without_a_valid_token(
    identity: Identity,
) -> None:
    alice = await user_token(identity)
    async with httpx.AsyncClient() as client:
        with pytest.raises(Forbidden, match="operating integration needs a System Administrator"):
            await gate(identity, client).operator(f"Bearer {alice}")
        for header in (None, "", "Basic abc", f"Bearer {alice}x"):
            with pytest.raises(Unauthorized):
                await gate(identity, client).operator(header)


async def test_a_workload_without_the_capabilities_cannot_ask(identity: Identity) -> None:
    token = await user_token(identity, "admin", ADMIN_PASSWORD)
    async with httpx.AsyncClient() as client:
        with pytest.raises(UpstreamError, match="could not authorize the operator"):
            await gate(identity, client, workload="gateway").operator(f"Bearer {token}")
