"""Runtime's admin API (`/admin/v1/runtime/...`) over real HTTP against a real runtime-api
and database: System Administrator only (decided by Runtime), every action audited, secrets
shown once, and each action has the effect a user notices (a deactivated user cannot sign
in, a reset password works, a revoked session's token stops working, a replayed dead command
is pending again, a new field is in object-info at once)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import pytest_asyncio
from sqlalchemy import select, update

from nexus.gateway.route_table import load_route_table
from nexus.platform.db.clock import db_now_ms
from nexus.platform.db.engine import reading
from nexus.platform.workqueue.keys import family_key
from nexus.platform.workqueue.store import NewItem, WorkStore
from nexus.runtime.admin import models as admin_tables
from nexus.runtime.inbox import models as inbox_tables
from tests.conftest import Backend
from tests.integration.ui_stack import PASSWORD, STALENESS, UiStack, ui_stack

pytestmark = pytest.mark.asyncio(loop_scope="module")
API = "/admin/v1/runtime"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(
    backend: Backend, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[UiStack]:
    async with ui_stack(backend, tmp_path_factory.mktemp("runtime-admin")) as running:
        yield running


async def call(
    stack: UiStack, user: str, method: str, path: str, body: Any = None, **params: Any
) -> httpx.Response:
    async with httpx.AsyncClient(base_url=stack.runtime_url, timeout=30) as client:
        return await client.request(
            method, f"{API}{path}", headers=stack.headers(user), json=body, params=params
        )


async def ok(stack: UiStack, method: str, path: str, body: Any = None, **params: Any) -> Any:
    reply = await call(stack, "admin", method, path, body, **params)
    assert reply.status_code in (200, 201), reply.text
    return reply.json()


async def audited(stack: UiStack) -> list[tuple[str, str]]:
    async with stack.engine.connect() as conn:
        rows = await conn.execute(
            select(
                admin_tables.operator_audit.c.action, admin_tables.operator_audit.c.target
            ).order_by(admin_tables.operator_audit.c.at_ms)
        )
        return [(r.action, r.target) for r in rows]


async def sign_in(stack: UiStack, username: str, password: str) -> int:
    async with httpx.AsyncClient(base_url=stack.runtime_url) as client:
        reply = await client.post(
            "/services/oauth2/token",
            data={"grant_type": "password", "username": username, "password": password},
        )
    return reply.status_code


async def test_the_gateway_routes_the_admin_api_to_runtime() -> None:
    route = load_route_table().match("/admin/v1/runtime/users")
    assert route is not None
    assert route.upstream == "runtime-api"


async def test_only_a_system_administrator_may_use_it(stack: UiStack) -> None:
    refused = await call(stack, "rep1", "GET", "/users")
    assert refused.status_code == 403
    assert refused.json()["code"] == "INSUFFICIENT_ACCESS"
    assert (await call(stack, "viewer", "POST", "/users", {"username": "x"})).status_code == 403
    async with httpx.AsyncClient(base_url=stack.runtime_url) as client:
        assert (await client.get(f"{API}/users")).status_code == 401
        bad = {"Authorization": "Bearer not-a-token"}
        assert (await client.get(f"{API}/users", headers=bad)).status_code == 401


async def test_users_create_assign_reset_and_deactivate(stack: UiStack) -> None:
    created = await ok(
        stack,
        "POST",
        "/users",
        {
            "username": "newrep",
            "email": "newrep@example.com",
            "permissionSets": ["Sfcrm_Test_Sales"],
        },
    )
    user_id, first_password = created["userId"], created["generatedPassword"]
    assert first_password
    assert await sign_in(stack, "newrep", first_password) == 200
    listed = {u["username"]: u for u in (await ok(stack, "GET", "/users"))["users"]}
    assert listed["newrep"]["permissionSets"] == ["Sfcrm_Test_Sales"]
    assert listed["newrep"]["isActive"] is True
    assert listed["admin"]["isAdmin"] is True
    assert "password_hash" not in str(listed)

    sets = await ok(
        stack,
        "PUT",
        f"/users/{user_id}/permission-sets",
        {"permissionSets": ["Sfcrm_Test_Read_Only"]},
    )
    assert sets["permissionSets"] == ["Sfcrm_Test_Read_Only"]
    listed = {u["username"]: u for u in (await ok(stack, "GET", "/users"))["users"]}
    assert listed["newrep"]["permissionSets"] == ["Sfcrm_Test_Read_Only"]
    roles = [r["name"] for r in (await ok(stack, "GET", "/roles"))["roles"]]
    assert "CEO" in roles
    assert (await ok(stack, "PUT", f"/users/{user_id}/role", {"role": "CEO"}))["role"] == "CEO"
    assert (
        await call(stack, "admin", "PUT", f"/users/{user_id}/role", {"role": "Nope"})
    ).status_code == 404
    permission_sets = {
        p["apiName"] for p in (await ok(stack, "GET", "/permission-sets"))["permissionSets"]
    }
    assert {"Sfcrm_Test_Sales", "Sfcrm_Test_Read_Only"} <= permission_sets

    weak = await call(stack, "admin", "POST", f"/users/{user_id}/password", {"password": "short"})
    assert weak.status_code == 400  # the policy's reason, not a server error
    assert "12 characters" in weak.json()["message"]
    assert await sign_in(stack, "newrep", first_password) == 200  # nothing changed
    await ok(stack, "POST", f"/users/{user_id}/password", {"password": "a-new-password-42"})
    assert await sign_in(stack, "newrep", first_password) == 400
    assert await sign_in(stack, "newrep", "a-new-password-42") == 200

    await ok(stack, "POST", f"/users/{user_id}/deactivate")
    assert await sign_in(stack, "newrep", "a-new-password-42") == 400
    listed = {u["username"]: u for u in (await ok(stack, "GET", "/users"))["users"]}
    assert listed["newrep"]["isActive"] is False
    me = stack.user_ids.get("admin")
    del me
    actions = [a for a, t in await audited(stack) if t.startswith(f"user:{user_id}")]
    assert actions == [
        "user.create",
        "user.permission_sets",
        "user.role",
        "user.reset_password",
        "user.deactivate",
    ]
    text = str(await audited(stack))
    assert "a-new-password-42" not in text
    assert first_password not in text


async def test_connected_apps_show_the_secret_once_and_disable(stack: UiStack) -> None:
    created = await ok(
        stack,
        "POST",
        "/connected-apps",
        {
            "name": "Sync job",
            "grantTypes": ["client_credentials"],
            "scopes": ["api"],
            "runAsUsername": "rep1",
        },
    )
    client_id, secret = created["clientId"], created["clientSecret"]
    assert secret
    assert created["enabled"] is True

    async def client_token() -> int:
        async with httpx.AsyncClient(base_url=stack.runtime_url) as client:
            reply = await client.post(
                "/services/oauth2/token",
                data={"grant_type": "client_credentials"},
                auth=(client_id, secret),
            )
        return reply.status_code

    assert await client_token() == 200
    listed = {
        a["clientId"]: a for a in (await ok(stack, "GET", "/connected-apps"))["connectedApps"]
    }
    assert listed[client_id]["name"] == "Sync job"
    assert secret not in str(listed)
    await ok(stack, "POST", f"/connected-apps/{client_id}/disable")
    assert await client_token() == 401
    listed = {
        a["clientId"]: a for a in (await ok(stack, "GET", "/connected-apps"))["connectedApps"]
    }
    assert listed[client_id]["enabled"] is False
    assert ("connected_app.disable", f"client:{client_id}") in await audited(stack)


async def test_a_revoked_session_stops_working(stack: UiStack) -> None:
    token = await stack.token("rep2", PASSWORD)
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=stack.runtime_url) as client:
        assert (await client.get("/services/oauth2/userinfo", headers=headers)).status_code == 200
        sessions = (await ok(stack, "GET", f"/users/{stack.user_ids['rep2']}/sessions"))["sessions"]
        assert len(sessions) >= 2  # the fixture's and this one
        assert token not in str(sessions)
        for s in sessions:
            revoked = await ok(stack, "POST", f"/sessions/{s['sessionId']}/revoke")
            assert revoked["revoked"] is True
        await asyncio.sleep(STALENESS * 2)  # the security staleness bound
        assert (await client.get("/services/oauth2/userinfo", headers=headers)).status_code == 401
    assert (await ok(stack, "GET", f"/users/{stack.user_ids['rep2']}/sessions"))["sessions"] == []
    stack.tokens["rep2"] = await stack.token("rep2", PASSWORD)


async def test_dead_commands_are_listed_sanitized_and_replayed(stack: UiStack) -> None:
    store = WorkStore(inbox_tables.inbox, owner="runtime-inbox-test")
    mine_family = family_key(stack.org_id, "runtime.test")
    theirs_family = family_key("00D0000000OTHERAAA", "runtime.test")
    async with stack.engine.begin() as conn:
        [item_id] = await store.enqueue(conn, [NewItem(mine_family, "default", '{"secret": 1}')])
        [other_id] = await store.enqueue(conn, [NewItem(theirs_family, "default", "{}")])
        await conn.execute(
            update(inbox_tables.inbox.items)
            .where(inbox_tables.inbox.items.c.id.in_([item_id, other_id]))
            .values(
                state="dead",
                attempt=3,
                failure_class="permanent",
                last_error="ValueError: no such field",
                finished_at=db_now_ms(),
            )
        )
    dead = (await ok(stack, "GET", "/dead-letters", queue="inbox"))["deadLetters"]
    mine = next(d for d in dead if d["id"] == item_id)
    assert mine["error"] == "ValueError: no such field"
    assert mine["attempts"] == 3
    assert "secret" not in str(dead)
    assert other_id not in {d["id"] for d in dead}  # another org's dead command: not shown
    assert (await ok(stack, "GET", "/dead-letters", queue="outbox"))["deadLetters"] == []

    done = await ok(
        stack,
        "POST",
        "/dead-letters/replay",
        {"queue": "inbox", "ids": [item_id, "nope", other_id]},
    )
    assert done["replayed"] == [item_id]
    # another org's item is refused as unknown (its existence is not revealed), and untouched
    assert done["refused"] == {"nope": "NOT_FOUND", other_id: "NOT_FOUND"}
    async with reading(stack.engine) as conn:
        state = select(inbox_tables.inbox.items.c.state).where(
            inbox_tables.inbox.items.c.id == other_id
        )
        assert (await conn.execute(state)).scalar_one() == "dead"
    async with stack.engine.connect() as conn:
        state = (
            await conn.execute(
                select(inbox_tables.inbox.items.c.state).where(
                    inbox_tables.inbox.items.c.id == item_id
                )
            )
        ).scalar_one()
    assert state == "pending"
    again = await ok(stack, "POST", "/dead-letters/replay", {"queue": "inbox", "ids": [item_id]})
    assert again == {"replayed": [], "refused": {item_id: "NOT_PARKED"}}
    assert ("replay", f"inbox:{item_id}") in await audited(stack)


async def test_a_field_or_object_added_online_is_in_object_info_at_once(stack: UiStack) -> None:
    async def object_info(user: str, name: str) -> httpx.Response:
        async with httpx.AsyncClient(base_url=stack.sfcrm_url, timeout=30) as client:
            return await client.get(
                f"/services/data/v62.0/ui-api/object-info/{name}", headers=stack.headers(user)
            )

    region = {
        "api_name": "Region__c",
        "label": "Region",
        "type": "picklist",
        "values": [{"value": "EMEA"}, {"value": "APAC"}],
    }
    added = await ok(stack, "POST", "/metadata/fields", {"object": "Account", "field": region})
    assert added["field"] == "Region__c"
    fields = (await object_info("admin", "Account")).json()["fields"]
    assert [v["value"] for v in fields["Region__c"]["picklistValues"]] == ["EMEA", "APAC"]
    assert "Phone" in fields  # the object's other fields are kept
    layout = (await object_info("admin", "Account")).json()["layout"]["sections"]
    assert not any("Region__c" in s["fields"] for s in layout)  # only when asked
    tier = {"api_name": "Tier__c", "label": "Tier", "type": "text", "length": 20}
    await ok(
        stack, "POST", "/metadata/fields", {"object": "Account", "field": tier, "addToLayout": True}
    )
    layout = (await object_info("admin", "Account")).json()["layout"]["sections"]
    assert layout[-1]["fields"][-1] == "Tier__c"
    assert "Phone" in [f for s in layout for f in s["fields"]]  # the rest of the layout stays
    # the sales reps' permission set grants all fields of Account
    assert "Region__c" in (await object_info("rep1", "Account")).json()["fields"]
    twice = await call(
        stack, "admin", "POST", "/metadata/fields", {"object": "Account", "field": region}
    )
    assert twice.status_code == 400
    invalid = await call(
        stack,
        "admin",
        "POST",
        "/metadata/fields",
        {"object": "Account", "field": {"api_name": "Bad__c", "label": "Bad", "type": "text"}},
    )
    assert invalid.status_code == 400
    assert invalid.json()["code"] == "INVALID_METADATA"
    assert "Bad__c" not in (await object_info("admin", "Account")).json()["fields"]

    project = {
        "api_name": "Project__c",
        "label": "Project",
        "plural_label": "Projects",
        "key_prefix": "a0P",
        "name_field": {"api_name": "Name", "label": "Project Name", "type": "text", "length": 80},
        "fields": [{"api_name": "Budget__c", "label": "Budget", "type": "currency"}],
    }
    await ok(stack, "POST", "/metadata/objects", {"object": project})
    info = (await object_info("admin", "Project__c")).json()
    assert info["labelPlural"] == "Projects"
    assert info["fields"]["Budget__c"]["dataType"] == "Currency"
    assert (await object_info("rep1", "Project__c")).status_code == 404  # not granted
    assert (
        await call(stack, "rep1", "POST", "/metadata/objects", {"object": project})
    ).status_code == 403
    assert ("metadata.apply", "object:Project__c") in await audited(stack)
