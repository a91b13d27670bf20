"""The internal metadata API: a System Administrator's delegation applies a batch."""

from __future__ import annotations

import time

import httpx
import pytest

from nexus.platform.secrets import workload_signer
from tests.integration.identity.conftest import ADMIN_PASSWORD, ALICE_PASSWORD, Identity

pytestmark = pytest.mark.asyncio(loop_scope="module")
BATCH = {
    "objects": [
        {
            "api_name": "Ticket__c",
            "label": "Ticket",
            "plural_label": "Tickets",
            "key_prefix": "a0T",
            "name_field": {"api_name": "Name", "label": "Subject", "type": "text", "length": 120},
            "fields": [
                {
                    "api_name": "Severity__c",
                    "label": "Severity",
                    "type": "picklist",
                    "values": [{"value": "Low"}, {"value": "High"}],
                }
            ],
        }
    ]
}


async def delegated_headers(identity: Identity, username: str, password: str) -> dict[str, str]:
    signer = workload_signer(identity.settings, "app-sfcrm")
    deadline = int((time.time() + 10) * 1000)
    async with httpx.AsyncClient(base_url=identity.url) as client:
        token = (
            await client.post(
                "/services/oauth2/token",
                data={
                    "grant_type": "password",
                    "username": username,
                    "password": password,
                },
            )
        ).json()["access_token"]
        exchanged = await client.post(
            "/internal/v1/identity/exchange",
            json={"credential": token},
            headers=signer.headers("runtime-api", deadline_ms=deadline),
        )
    return signer.headers(
        "runtime-api", deadline_ms=deadline, delegation=exchanged.json()["delegation"]
    )


async def test_an_admin_applies_metadata_and_others_may_not(identity: Identity) -> None:
    admin = await delegated_headers(identity, "admin", ADMIN_PASSWORD)
    alice = await delegated_headers(identity, "alice@example.com", ALICE_PASSWORD)
    async with httpx.AsyncClient(base_url=identity.url) as client:
        denied = await client.post("/internal/v1/runtime/metadata/apply", json=BATCH, headers=alice)
        assert denied.status_code == 403
        assert denied.json()["code"] == "INSUFFICIENT_ACCESS"
        applied = await client.post(
            "/internal/v1/runtime/metadata/apply", json=BATCH, headers=admin
        )
        assert applied.status_code == 200, applied.text
        assert applied.json()["versions"] == [{"kind": "object", "name": "Ticket__c", "version": 1}]
        assert applied.json()["state"] == "active"
        broken = {"objects": [{**BATCH["objects"][0], "key_prefix": "00D"}]}
        invalid = await client.post(
            "/internal/v1/runtime/metadata/apply", json=broken, headers=admin
        )
        assert invalid.status_code == 400
        assert invalid.json()["code"] == "INVALID_METADATA"
        assert "objects[0].key_prefix" in invalid.json()["fields"]
        no_delegation = {k: v for k, v in admin.items() if k != "x-nexus-delegation"}
        refused = await client.post(
            "/internal/v1/runtime/metadata/apply", json=BATCH, headers=no_delegation
        )
        assert refused.status_code == 401
