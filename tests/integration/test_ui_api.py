"""The sfcrm UI API (`/ui-api/...`) against a real Runtime over real HTTP: navigation,
object-info, record-ui, list-ui and search, with every access decision made by Runtime
(docs/ui-api.md). A Read Only user sees nothing editable; a record outside sharing is 404."""

from __future__ import annotations

import csv
import io
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import pytest_asyncio

from tests.conftest import Backend
from tests.integration.ui_stack import UiStack, ui_stack

pytestmark = pytest.mark.asyncio(loop_scope="module")
V = "/services/data/v62.0"
BULK = 25


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(
    backend: Backend, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[UiStack]:
    async with ui_stack(backend, tmp_path_factory.mktemp("ui-api")) as running:
        yield running


async def get(stack: UiStack, user: str, path: str, **params: Any) -> httpx.Response:
    async with httpx.AsyncClient(base_url=stack.sfcrm_url, timeout=30) as client:
        return await client.get(f"{V}/ui-api/{path}", headers=stack.headers(user), params=params)


async def ok(stack: UiStack, user: str, path: str, **params: Any) -> dict[str, Any]:
    reply = await get(stack, user, path, **params)
    assert reply.status_code == 200, reply.text
    body: dict[str, Any] = reply.json()
    return body


async def write(stack: UiStack, user: str, method: str, path: str, fields: Any = None) -> Any:
    async with httpx.AsyncClient(base_url=stack.sfcrm_url, timeout=30) as client:
        reply = await client.request(
            method, f"{V}/sobjects/{path}", headers=stack.headers(user), json=fields
        )
    assert reply.status_code in (201, 204), reply.text
    return reply.json()["id"] if reply.status_code == 201 else None


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def records(stack: UiStack) -> dict[str, str]:
    acme = await write(stack, "rep1", "POST", "Account", {"Name": "Acme", "Industry": "Technology"})
    ada = await write(
        stack,
        "rep1",
        "POST",
        "Contact",
        {"Name": "Ada Lovelace", "LastName": "Lovelace", "AccountId": acme},
    )
    deal = await write(
        stack,
        "rep1",
        "POST",
        "Opportunity",
        {"Name": "Acme renewal", "StageName": "Prospecting", "AccountId": acme},
    )
    await write(stack, "rep1", "PATCH", f"Account/{acme}", {"Phone": "+44 1"})
    for i in range(BULK):
        await write(stack, "rep1", "POST", "Account", {"Name": f"Bulk {i:02d}", "Rating": "Hot"})
    return {"acme": acme, "ada": ada, "deal": deal}


async def test_navigation_lists_readable_objects_in_order_with_list_views(
    stack: UiStack,
) -> None:
    items = (await ok(stack, "rep1", "nav-items"))["navItems"]
    assert [i["objectApiName"] for i in items] == ["Account", "Contact", "Opportunity"]
    account = items[0]
    assert account["labelPlural"] == "Accounts"
    assert account["defaultListViewApiName"] == "All_Accounts"
    assert {v["apiName"] for v in account["listViews"]} == {"All_Accounts", "Hot_Accounts"}
    assert account["createable"] is True
    viewer = (await ok(stack, "viewer", "nav-items"))["navItems"]
    assert [i["createable"] for i in viewer] == [False, False, False]


async def test_object_info_has_types_picklists_references_layout_and_access(
    stack: UiStack,
) -> None:
    account = await ok(stack, "rep1", "object-info/Account")
    industry = account["fields"]["Industry"]
    assert industry["dataType"] == "Picklist"
    assert "Technology" in {v["value"] for v in industry["picklistValues"]}
    assert account["fields"]["Name"]["required"] is True
    assert account["fields"]["CreatedDate"]["updateable"] is False
    assert account["layout"]["sections"][0]["heading"] == "Account Information"
    assert account["layout"]["relatedLists"] == ["Contact", "Opportunity"]
    assert {c["childObjectApiName"] for c in account["childRelationships"]} >= {
        "Contact",
        "Opportunity",
    }
    assert {v["apiName"] for v in account["listViews"]} == {"All_Accounts", "Hot_Accounts"}
    contact = await ok(stack, "rep1", "object-info/Contact")
    lookup = contact["fields"]["AccountId"]
    assert lookup["dataType"] == "Reference"
    assert lookup["referenceToInfos"] == [{"apiName": "Account", "nameFields": ["Name"]}]
    assert contact["fields"]["Skills__c"]["dataType"] == "MultiPicklist"

    viewer = await ok(stack, "viewer", "object-info/Account")
    assert viewer["createable"] is viewer["updateable"] is viewer["deletable"] is False
    assert not any(f["createable"] or f["updateable"] for f in viewer["fields"].values())

    missing = await get(stack, "rep1", "object-info/Nope__c")
    assert missing.status_code == 404
    assert missing.json()[0]["errorCode"] == "NOT_FOUND"
    async with httpx.AsyncClient(base_url=stack.sfcrm_url) as client:
        anonymous = await client.get(f"{V}/ui-api/object-info/Account")
    assert anonymous.status_code == 401


async def test_record_ui_is_record_layout_access_related_and_history(
    stack: UiStack, records: dict[str, str]
) -> None:
    acme, ada = records["acme"], records["ada"]
    body = await ok(stack, "rep1", f"record-ui/{acme},{ada}")
    assert body["records"][acme]["fields"]["Name"]["value"] == "Acme"
    assert body["records"][ada]["fields"]["AccountId"] == {"value": acme, "displayValue": "Acme"}
    assert body["access"][acme] == {"readable": True, "editable": True, "deletable": True}
    sections = body["layouts"][acme]["sections"]
    assert [s["heading"] for s in sections] == [
        "Account Information",
        "Additional Information",
        "Description",
    ]
    first_row = sections[0]["layoutRows"][0]["layoutItems"]
    assert [i["field"] for i in first_row] == ["Name", "Type"]  # two columns a row
    assert first_row[0]["editableForUpdate"] is True
    assert [len(r["layoutItems"]) for r in sections[2]["layoutRows"]] == [1]  # one column
    related = {r["childObjectApiName"]: r for r in body["relatedLists"][acme]}
    assert related["Contact"]["records"] == [{"id": ada, "name": "Ada Lovelace"}]
    assert related["Opportunity"]["records"][0]["name"] == "Acme renewal"
    assert [(h["field"], h["newValue"]) for h in body["history"][acme]] == [("Phone", "+44 1")]
    assert set(body["objectInfos"]) == {"Account", "Contact"}

    viewer = await ok(stack, "viewer", f"record-ui/{acme}")
    assert viewer["access"][acme] == {"readable": True, "editable": False, "deletable": False}
    items = [
        item
        for section in viewer["layouts"][acme]["sections"]
        for row in section["layoutRows"]
        for item in row["layoutItems"]
    ]
    assert items
    assert not any(i["editableForUpdate"] for i in items)


async def test_a_record_outside_sharing_is_not_found(
    stack: UiStack, records: dict[str, str]
) -> None:
    deal = records["deal"]  # Opportunity is Private: rep2 does not see rep1's
    assert (await get(stack, "rep1", f"record-ui/{deal}")).status_code == 200
    hidden = await get(stack, "rep2", f"record-ui/{deal}")
    assert hidden.status_code == 404
    assert hidden.json()[0]["errorCode"] == "NOT_FOUND"
    both = await get(stack, "rep2", f"record-ui/{records['acme']},{deal}")
    assert both.status_code == 404
    assert (await get(stack, "rep1", "record-ui/not-an-id")).status_code == 404


async def test_list_ui_pages_sorts_filters_and_decides_row_actions(
    stack: UiStack, records: dict[str, str]
) -> None:
    del records
    first = await ok(stack, "rep1", "list-ui/Account/All_Accounts", pageSize=10, q="Bulk")
    info = first["info"]
    assert [c["fieldApiName"] for c in info["displayColumns"]][:2] == ["Name", "Type"]
    assert info["displayColumns"][0]["label"] == "Account Name"
    assert info["orderedByInfo"] == [
        {"fieldApiName": "Name", "isAscending": True, "label": "Account Name"}
    ]
    page = first["records"]
    assert page["count"] == BULK
    assert [r["fields"]["Name"]["value"] for r in page["records"]] == [
        f"Bulk {i:02d}" for i in range(10)
    ]
    assert all(r["access"] == {"editable": True, "deletable": True} for r in page["records"])
    assert page["previousPageToken"] is None
    seen = [r["id"] for r in page["records"]]
    token = page["nextPageToken"]
    while token is not None:
        page = (
            await ok(
                stack,
                "rep1",
                "list-ui/Account/All_Accounts",
                pageSize=10,
                q="Bulk",
                pageToken=token,
            )
        )["records"]
        seen += [r["id"] for r in page["records"]]
        token = page["nextPageToken"]
    assert len(seen) == len(set(seen)) == BULK
    assert page["previousPageToken"] == "10"

    descending = await ok(
        stack, "rep1", "list-ui/Account/All_Accounts", pageSize=10, q="Bulk", sortBy="-Name"
    )
    assert descending["records"]["records"][0]["fields"]["Name"]["value"] == "Bulk 24"

    hot = await ok(stack, "viewer", "list-ui/Account/Hot_Accounts", pageSize=10)
    assert hot["info"]["filteredByInfo"] == [
        {"fieldApiName": "Rating", "operator": "equals", "operandLabels": ["Hot"]}
    ]
    assert hot["records"]["count"] == BULK  # Acme is not Hot
    assert not any(r["access"]["editable"] for r in hot["records"]["records"])

    contacts = await ok(stack, "rep1", "list-ui/Contact/All_Contacts")
    row = contacts["records"]["records"][0]
    assert row["fields"]["Account.Name"]["value"] == "Acme"
    assert contacts["info"]["displayColumns"][1]["label"] == "Account Name"

    assert (await ok(stack, "rep2", "list-ui/Opportunity/__Recent"))["records"]["count"] == 0
    assert (await ok(stack, "rep1", "list-ui/Opportunity/__Recent"))["records"]["count"] == 1
    assert (await get(stack, "rep1", "list-ui/Contact/All_Accounts")).status_code == 404
    assert (await get(stack, "rep1", "list-ui/Account/All_Accounts", pageSize=0)).status_code == 400
    # `²` passes str.isdigit but is no number: a 400, never a 500
    superscript = await get(stack, "rep1", "list-ui/Account/All_Accounts", pageSize="\u00b2")
    assert superscript.status_code == 400
    assert (await get(stack, "rep1", "search", q="Acme", pageSize="\u00b2")).status_code == 400


async def test_search_groups_by_object_and_respects_sharing(
    stack: UiStack, records: dict[str, str]
) -> None:
    found = await ok(stack, "rep1", "search", q="Acme")
    groups = {g["objectApiName"]: g["records"] for g in found["results"]}
    assert {"id": records["acme"], "apiName": "Account", "name": "Acme"} in groups["Account"]
    assert [r["name"] for r in groups["Opportunity"]] == ["Acme renewal"]
    only = await ok(stack, "rep1", "search", q="Acme", objectApiName="Opportunity")
    assert [g["objectApiName"] for g in only["results"]] == ["Opportunity"]
    other = await ok(stack, "rep2", "search", q="Acme")
    assert "Opportunity" not in {g["objectApiName"] for g in other["results"]}
    assert (await get(stack, "rep1", "search", q="A")).status_code == 400


async def test_a_list_view_exports_as_csv_with_what_the_caller_may_see(
    stack: UiStack, records: dict[str, str]
) -> None:
    await write(stack, "rep1", "POST", "Account", {"Name": "=HYPERLINK(1)", "Rating": "Cold"})
    reply = await get(stack, "viewer", "list-ui/Account/All_Accounts/export", q="Bulk")
    assert reply.status_code == 200, reply.text
    assert reply.headers["content-type"].startswith("text/csv")
    assert 'filename="All Accounts.csv"' in reply.headers["content-disposition"]
    assert reply.headers["x-nexus-truncated"] == "false"
    rows = list(csv.reader(io.StringIO(reply.text)))
    assert rows[0] == [  # the field labels of the sfcrm package
        "Account Name",
        "Type",
        "Industry",
        "Account Rating",
        "Billing City",
        "Account Phone",
    ]
    assert [r[0] for r in rows[1:]] == [f"Bulk {i:02d}" for i in range(BULK)]
    assert {r[3] for r in rows[1:]} == {"Hot"}

    injected = await get(stack, "rep1", "list-ui/Account/All_Accounts/export", q="HYPERLINK")
    assert list(csv.reader(io.StringIO(injected.text)))[1][0] == "'=HYPERLINK(1)"
    contacts = await get(stack, "rep1", "list-ui/Contact/All_Contacts/export")
    assert list(csv.reader(io.StringIO(contacts.text)))[1][:2] == ["Ada Lovelace", "Acme"]
    hidden = await get(stack, "rep2", "list-ui/Opportunity/__Recent/export")
    assert hidden.text.splitlines() == ["Opportunity Name"]
    assert records["deal"]
