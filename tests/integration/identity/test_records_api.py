"""The internal records and describe API over HTTP, with workload + delegation."""

from __future__ import annotations

import httpx
import pytest

from nexus.identity.repository import IdentityRepository
from nexus.platform.db.engine import unit_of_work
from nexus.runtime.access.service import assign_permission_set
from tests.integration.identity.conftest import ADMIN_PASSWORD, ALICE_PASSWORD, Identity
from tests.integration.identity.test_metadata_api import delegated_headers

pytestmark = pytest.mark.asyncio(loop_scope="module")
API = "/internal/v1/runtime"
LEAD = {
    "api_name": "Lead__c",
    "label": "Lead",
    "plural_label": "Leads",
    "key_prefix": "a0L",
    "sharing_model": "ReadWrite",
    "name_field": {"api_name": "Name", "label": "Name", "type": "text", "length": 80},
    "fields": [
        {"api_name": "Email__c", "label": "Email", "type": "email"},
        {"api_name": "Score__c", "label": "Score", "type": "number", "precision": 3, "scale": 0},
    ],
}
LEAD_ACCESS = {
    "api_name": "Lead_Desk",
    "label": "Lead desk",
    "objects": [{"object": "Lead__c", "create": True, "read": True, "edit": True}],
    "fields": [
        {"field": "Lead__c.Email__c", "read": True, "edit": True},
        {"field": "Lead__c.Score__c", "read": True},
    ],
}


async def test_records_and_describe_over_http(identity: Identity) -> None:
    admin = await delegated_headers(identity, "admin", ADMIN_PASSWORD)
    async with httpx.AsyncClient(base_url=identity.url) as client:
        applied = await client.post(
            f"{API}/metadata/apply",
            headers=admin,
            json={"objects": [LEAD], "permission_sets": [LEAD_ACCESS]},
        )
        assert applied.status_code == 200, applied.text

        alice = await delegated_headers(identity, "alice@example.com", ALICE_PASSWORD)
        listed = await client.post(f"{API}/describe/global", headers=alice)
        assert "Lead__c" not in {o["name"] for o in listed.json()}
        hidden = await client.post(
            f"{API}/describe/object", headers=alice, json={"object": "Lead__c"}
        )
        assert hidden.status_code == 404

        async with unit_of_work(identity.sessions) as session:
            user = await IdentityRepository(session).user_by_username("alice@example.com")
            await assign_permission_set(
                session, org_id=user["org_id"], user_id=user["user_id"], permission_set="Lead_Desk"
            )
        alice = await delegated_headers(identity, "alice@example.com", ALICE_PASSWORD)  # new epoch
        described = (
            await client.post(f"{API}/describe/object", headers=alice, json={"object": "Lead__c"})
        ).json()
        fields = {f["name"]: f for f in described["fields"]}
        assert fields["Email__c"]["createable"] is True
        assert fields["Score__c"]["createable"] is False  # read-only by field-level security

        created = (
            await client.post(
                f"{API}/records/mutate",
                headers=alice,
                json={
                    "items": [
                        {
                            "op": "create",
                            "object": "Lead__c",
                            "fields": {"Name": "Ada", "Email__c": "ada@x.io"},
                        },
                        {
                            "op": "create",
                            "object": "Lead__c",
                            "fields": {"Name": "Bob", "Score__c": 5},
                        },
                    ]
                },
            )
        ).json()["results"]
        assert created[0]["success"] is True
        assert created[1]["errors"][0]["category"] == "INVALID_FIELD"
        record = (
            await client.post(f"{API}/records/read", headers=alice, json={"id": created[0]["id"]})
        ).json()
        assert record["fields"]["Email__c"] == "ada@x.io"
        decisions = (
            await client.post(
                f"{API}/records/access", headers=alice, json={"ids": [created[0]["id"]]}
            )
        ).json()
        assert decisions[created[0]["id"]] == {
            "read": True,
            "edit": True,
            "delete": False,
            "locked": False,
        }
        too_many = await client.post(
            f"{API}/records/mutate",
            headers=alice,
            json={"items": [{"op": "create", "object": "Lead__c", "fields": {"Name": "x"}}] * 201},
        )
        assert too_many.status_code == 400
        assert too_many.json()["code"] == "LIMIT_EXCEEDED"


async def test_query_pages_with_locators_bound_to_the_user(identity: Identity) -> None:
    admin = await delegated_headers(identity, "admin", ADMIN_PASSWORD)
    async with httpx.AsyncClient(base_url=identity.url) as client:
        for start in range(0, 250, 200):
            items = [
                {"op": "create", "object": "Lead__c", "fields": {"Name": f"P{i:03d}"}}
                for i in range(start, min(250, start + 200))
            ]
            created = await client.post(
                f"{API}/records/mutate", headers=admin, json={"items": items}
            )
            assert all(r["success"] for r in created.json()["results"])
        first = (
            await client.post(
                f"{API}/query",
                headers=admin,
                json={
                    "soql": "SELECT Name FROM Lead__c WHERE Name LIKE 'P%' ORDER BY Name",
                    "page_size": 200,
                },
            )
        ).json()
        assert first["total_size"] == 250
        assert first["done"] is False
        assert len(first["records"]) == 200
        more = (
            await client.post(
                f"{API}/query", headers=admin, json={"locator": first["next_locator"]}
            )
        ).json()
        assert more["done"] is True
        assert [r["Name"] for r in more["records"]][:2] == ["P200", "P201"]
        assert len(more["records"]) == 50
        alice = await delegated_headers(identity, "alice@example.com", ALICE_PASSWORD)
        stolen = await client.post(
            f"{API}/query", headers=alice, json={"locator": first["next_locator"]}
        )
        assert stolen.status_code == 400
        assert stolen.json()["code"] == "INVALID_QUERY_LOCATOR"
        listed = await client.post(
            f"{API}/metadata/apply",
            headers=admin,
            json={
                "list_views": [
                    {
                        "api_name": "All_P",
                        "object": "Lead__c",
                        "label": "All P",
                        "columns": ["Name"],
                        "filters": [{"field": "Name", "operator": "starts_with", "value": "P"}],
                        "sort": [{"field": "Name", "descending": True}],
                    }
                ]
            },
        )
        assert listed.status_code == 200, listed.text
        run = (
            await client.post(
                f"{API}/list-views/run", headers=admin, json={"name": "All_P", "page_size": 200}
            )
        ).json()
        assert run["page"]["total_size"] == 250
        assert run["page"]["records"][0]["Name"] == "P249"
        rest = (
            await client.post(
                f"{API}/query", headers=admin, json={"locator": run["page"]["next_locator"]}
            )
        ).json()
        assert len(rest["records"]) == 50
        bad = await client.post(f"{API}/query", headers=admin, json={"soql": "SELECT FROM"})
        assert bad.status_code == 400
        assert bad.json()["code"] == "MALFORMED_QUERY"


async def test_search_over_http(identity: Identity) -> None:
    admin = await delegated_headers(identity, "admin", ADMIN_PASSWORD)
    async with httpx.AsyncClient(base_url=identity.url) as client:
        created = await client.post(
            f"{API}/records/mutate",
            headers=admin,
            json={
                "items": [
                    {"op": "create", "object": "Lead__c", "fields": {"Name": "Saffronvale"}},
                    {
                        "op": "create",
                        "object": "Lead__c",
                        "fields": {"Name": "Other", "Email__c": "saffronvale@example.com"},
                    },
                ]
            },
        )
        assert all(r["success"] for r in created.json()["results"]), created.text
        simple = await client.post(f"{API}/search", headers=admin, json={"term": "saffronvale"})
        assert simple.status_code == 200, simple.text
        hits = simple.json()["searchRecords"]
        assert [(h["attributes"]["type"], h["Name"]) for h in hits] == [
            ("Lead__c", "Saffronvale"),  # the Name match ranks first
            ("Lead__c", "Other"),
        ]
        sosl = await client.post(
            f"{API}/search",
            headers=admin,
            json={"search": "FIND {saffronvale} IN EMAIL FIELDS RETURNING Lead__c(Name, Email__c)"},
        )
        assert sosl.json()["searchRecords"] == [
            {
                "attributes": {"type": "Lead__c"},
                "Id": created.json()["results"][1]["id"],
                "Name": "Other",
                "Email__c": "saffronvale@example.com",
            }
        ]
        malformed = await client.post(
            f"{API}/search", headers=admin, json={"search": "FIND {x} RETURNING"}
        )
        assert malformed.status_code == 400
        assert malformed.json()["code"] == "MALFORMED_SEARCH"


VENDOR = {
    "api_name": "Vendor__c",
    "label": "Vendor",
    "plural_label": "Vendors",
    "key_prefix": "a0V",
    "sharing_model": "Private",
    "name_field": {"api_name": "Name", "label": "Name", "type": "text", "length": 80},
    "fields": [
        {"api_name": "Code__c", "label": "Code", "type": "text", "length": 20, "external_id": True},
        {"api_name": "Note__c", "label": "Note", "type": "text", "length": 20},
    ],
}
VENDOR_ACCESS = {
    "api_name": "Vendor_Desk",
    "label": "Vendor desk",
    "objects": [{"object": "Vendor__c", "create": True, "read": True, "all_fields": "edit"}],
}


async def test_read_by_external_id_over_http(identity: Identity) -> None:
    admin = await delegated_headers(identity, "admin", ADMIN_PASSWORD)
    async with httpx.AsyncClient(base_url=identity.url) as client:
        applied = await client.post(
            f"{API}/metadata/apply",
            headers=admin,
            json={"objects": [VENDOR], "permission_sets": [VENDOR_ACCESS]},
        )
        assert applied.status_code == 200, applied.text
        async with unit_of_work(identity.sessions) as session:
            user = await IdentityRepository(session).user_by_username("alice@example.com")
            await assign_permission_set(
                session,
                org_id=user["org_id"],
                user_id=user["user_id"],
                permission_set="Vendor_Desk",
            )
        alice = await delegated_headers(identity, "alice@example.com", ALICE_PASSWORD)
        admin = await delegated_headers(identity, "admin", ADMIN_PASSWORD)  # the epoch moved

        async def create(headers: dict[str, str], code: str) -> str:
            item = {
                "op": "create",
                "object": "Vendor__c",
                "fields": {"Name": code, "Code__c": code},
            }
            reply = await client.post(
                f"{API}/records/mutate", headers=headers, json={"items": [item]}
            )
            assert reply.status_code == 200, reply.text
            result = reply.json()["results"][0]
            assert result["success"] is True, result
            return str(result["id"])

        mine = await create(alice, "V-1")
        await create(admin, "V-2")  # private to the admin

        async def read(code: str, field: str = "Code__c") -> httpx.Response:
            body = {"object": "Vendor__c", "external_id_field": field, "external_id": code}
            return await client.post(f"{API}/records/read", headers=alice, json=body)

        found = await read("V-1")
        assert found.status_code == 200
        assert found.json()["id"] == mine
        assert found.json()["fields"]["Code__c"] == "V-1"
        assert (await read("V-2")).status_code == 404  # outside alice's sharing: not found
        assert (await read("V-3")).status_code == 404
        not_external = await read("x", field="Note__c")
        assert not_external.status_code == 400
        assert not_external.json()["code"] == "INVALID_FIELD"


async def test_composite_is_one_transaction_authorized_per_item(identity: Identity) -> None:
    """`records/composite`: references resolved in Runtime, every item authorized as alone
    (alice may edit leads but not delete them, nor write the read-only Score__c), and with
    all_or_none a later failure undoes the earlier update."""
    alice = await delegated_headers(identity, "alice@example.com", ALICE_PASSWORD)
    async with httpx.AsyncClient(base_url=identity.url) as client:

        async def composite(items: list[dict[str, object]], all_or_none: bool) -> dict:  # type: ignore[type-arg]
            reply = await client.post(
                f"{API}/records/composite",
                headers=alice,
                json={"items": items, "all_or_none": all_or_none},
            )
            assert reply.status_code == 200, reply.text
            return reply.json()  # type: ignore[no-any-return]

        made = await composite(
            [
                {"ref": "new", "op": "create", "object": "Lead__c", "fields": {"Name": "Cy"}},
                {"ref": "again", "op": "read", "object": "Lead__c", "id": "@{new.id}"},
                {
                    "op": "update",
                    "object": "Lead__c",
                    "id": "@{again.Id}",
                    "fields": {"Email__c": "@{again.Name}@x.io"},
                },
            ],
            all_or_none=True,
        )
        assert [o["state"] for o in made["outcomes"]] == ["done", "done", "done"]
        lead = made["outcomes"][0]["result"]["id"]

        async def email() -> str:
            read = await client.post(f"{API}/records/read", headers=alice, json={"id": lead})
            return str(read.json()["fields"]["Email__c"])

        assert await email() == "Cy@x.io"
        update = {"op": "update", "object": "Lead__c", "id": lead, "fields": {"Email__c": "z@x.io"}}
        refused = [
            update,
            {"op": "delete", "object": "Lead__c", "id": lead},
            {"op": "update", "object": "Lead__c", "id": lead, "fields": {"Score__c": 9}},
        ]
        undone = await composite(refused, all_or_none=True)
        assert undone["rolled_back"] is True
        assert [o["state"] for o in undone["outcomes"]] == ["rolled_back", "failed", "halted"]
        assert undone["outcomes"][1]["result"]["errors"][0]["category"] == "INSUFFICIENT_ACCESS"
        assert await email() == "Cy@x.io"  # the update before the failure was rolled back

        kept = await composite(refused, all_or_none=False)
        assert [o["state"] for o in kept["outcomes"]] == ["done", "failed", "failed"]
        assert kept["outcomes"][2]["result"]["errors"][0]["category"] == "INVALID_FIELD"
        assert await email() == "z@x.io"

        dangling = await composite(
            [{"op": "read", "object": "Lead__c", "id": "@{nothing.id}"}], all_or_none=False
        )
        assert dangling["outcomes"][0]["state"] == "unresolved"
