"""The integration admin API through `nexus up` and the gateway: Runtime decides who may use
it (no token 401, a user who is not a System Administrator 403); an administrator lists a dead
letter with its context (never its payload), replays it, and finds the action in the audit."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from nexus.contracts.roles import LogicalService
from nexus.identity import admin
from nexus.integration.routing.routes import parse_route_file
from nexus.integration.routing.service import apply_routes
from nexus.platform.db.engine import create_engine, session_factory
from tests.conftest import Backend
from tests.e2e.test_stack import running_stack
from tests.support.integration_rows import DIE, Routed, execute, route_delivery

pytestmark = pytest.mark.e2e
PASSWORD = "operator-password-for-tests-1"
API = "/admin/v1/integration"


def urls(tmp_path: Path, backend: Backend) -> dict[LogicalService, str]:
    if backend.name == "mariadb":
        return backend.urls
    var = (tmp_path / "var").resolve()
    return {s: f"sqlite+aiosqlite:///{var / s.value}.sqlite3" for s in LogicalService}


async def seed(where: dict[LogicalService, str], org_id: str) -> Routed:
    """A second user who is not an administrator, a route, and a dead letter on it."""
    runtime = create_engine(where[LogicalService.RUNTIME], application_name="e2e-seed")
    integration = create_engine(where[LogicalService.INTEGRATION], application_name="e2e-seed")
    try:
        await admin.create_user(
            session_factory(runtime),
            username="bob@example.com",
            password=PASSWORD,
            email=None,
            display_name=None,
            is_admin=False,
        )
        route = {
            "connector": "shop",
            "route": "orders",
            "signature": {"scheme": "standard_webhooks"},
            "secrets": ["shop-orders"],
            "command": {
                "op": "upsert",
                "object": "Contact",
                "external_id_field": "External_Id__c",
                "fields": {"External_Id__c": "/data/id"},
            },
        }
        await apply_routes(
            integration, org_id=org_id, route_file=parse_route_file({"routes": [route]})
        )
        routed = await route_delivery(
            integration,
            org_id=org_id,
            connector="shop",
            route="orders",
            route_version=1,
            payload={"data": {"id": "card-4111111111111111"}},
        )
        await execute(integration, "routes:shop", DIE, org_id=org_id)
        return routed
    finally:
        await runtime.dispose()
        await integration.dispose()


def token(gateway: str, username: str, password: str) -> str:
    reply = httpx.post(
        f"{gateway}/services/oauth2/token",
        data={"grant_type": "password", "username": username, "password": password},
        timeout=10,
    )
    assert reply.status_code == 200, reply.text
    return str(reply.json()["access_token"])


def test_only_a_system_administrator_operates_the_integration(
    tmp_path: Path, backend: Backend
) -> None:
    admin_password = "first-admin-password-for-tests-1"
    with running_stack(tmp_path, backend, NEXUS_BOOTSTRAP_ADMIN_PASSWORD=admin_password) as (
        _proc,
        base,
        _elapsed,
    ):
        gateway = f"http://127.0.0.1:{base}"
        admin_token = token(gateway, "admin", admin_password)
        me = httpx.get(
            f"{gateway}/services/oauth2/userinfo",
            headers={"authorization": f"Bearer {admin_token}"},
            timeout=10,
        ).json()
        routed = asyncio.run(seed(urls(tmp_path, backend), me["organization_id"]))
        bob = {"authorization": f"Bearer {token(gateway, 'bob@example.com', PASSWORD)}"}
        boss = {"authorization": f"Bearer {admin_token}"}
        with httpx.Client(base_url=gateway, timeout=15) as client:
            anonymous = client.get(f"{API}/dead-letters")
            assert anonymous.status_code == 401, anonymous.text
            refused = client.get(f"{API}/dead-letters", headers=bob)
            assert refused.status_code == 403, refused.text
            assert refused.json()["code"] == "INSUFFICIENT_ACCESS"
            replay = client.post(
                f"{API}/dead-letters/replay", json={"work_ids": [routed.work_id]}, headers=bob
            )
            assert replay.status_code == 403
            for method, path, body in (
                ("GET", "failed-receipts", None),
                ("POST", "failed-receipts/replay", {"receipt_ids": ["r"]}),
                ("POST", "dead-letters/reroute", {"work_ids": ["w"]}),
            ):
                answer = client.request(method, f"{API}/{path}", json=body, headers=bob)
                assert answer.status_code == 403, (path, answer.text)

            listed = client.get(f"{API}/dead-letters", params={"route": "orders"}, headers=boss)
            assert listed.status_code == 200, listed.text
            (item,) = listed.json()["items"]
            assert (item["work_id"], item["state"], item["failure_class"]) == (
                routed.work_id,
                "dead",
                "terminal",
            )
            assert item["event"]["event_id"] == routed.event_id
            assert item["receipt"]["delivery_id"] == routed.delivery_id
            assert "4111111111111111" not in listed.text  # never the payload
            found = client.get(
                f"{API}/receipts", params={"delivery_id": routed.delivery_id}, headers=boss
            )
            assert found.status_code == 200, found.text
            (receipt,) = found.json()["receipts"]
            assert (receipt["receipt_id"], receipt["events"][0]["state"]) == (
                routed.receipt_id,
                "dead",
            )
            assert "4111111111111111" not in found.text
            depth = client.get(f"{API}/queues", headers=boss).json()
            assert {"pack": "routes:shop", "state": "dead", "count": 1}.items() <= next(
                q for q in depth if q["pack"] == "routes:shop" and q["state"] == "dead"
            ).items()

            replay = client.post(
                f"{API}/dead-letters/replay", json={"work_ids": [routed.work_id]}, headers=boss
            )
            assert replay.status_code == 200, replay.text
            assert replay.json()["decisions"] == [
                {"work_id": routed.work_id, "outcome": "replayed", "code": None, "reason": None}
            ]
            audit = client.get(f"{API}/audit", headers=boss).json()
            assert [(a["action"], a["target"], a["outcome"], a["actor"]) for a in audit] == [
                ("replay", routed.work_id, "replayed", me["user_id"])
            ]

            failed = client.get(f"{API}/failed-receipts", headers=boss)
            assert failed.json() == {"items": [], "next_cursor": None}, failed.text
            unknown = client.post(
                f"{API}/failed-receipts/replay", json={"receipt_ids": ["nope"]}, headers=boss
            ).json()
            assert (unknown["done"], unknown["decisions"][0]["code"]) == (0, "NOT_FOUND")
            audit = client.get(f"{API}/audit", headers=boss).json()
            assert (audit[0]["action"], audit[0]["target"], audit[0]["outcome"]) == (
                "replay_receipt",
                "nope",
                "refused",
            )
            rerouted = client.post(
                f"{API}/dead-letters/reroute", json={"work_ids": ["nope"]}, headers=boss
            ).json()
            assert (rerouted["refused"], rerouted["decisions"][0]["code"]) == (1, "NOT_FOUND")
