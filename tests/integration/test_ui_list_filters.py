"""List screens filtered by the user (issue 9): `filter=Field:operator:value` on the sfcrm UI
API's list-ui and export, checked by Runtime against the object's metadata and the caller's
field-level security, on a real Runtime and database (SQLite and MariaDB)."""

from __future__ import annotations

import csv
import io
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import pytest_asyncio

from nexus.identity import admin
from nexus.platform.db.engine import unit_of_work
from nexus.runtime.access.service import assign_permission_set
from nexus.runtime.metadata.service import apply_metadata
from tests.conftest import Backend
from tests.integration.ui_stack import PASSWORD, UiStack, ui_stack

pytestmark = pytest.mark.asyncio(loop_scope="module")
V = "/services/data/v62.0"
ALL = "list-ui/Account/All_Accounts"
#: An object with the field types the sales objects lack (checkbox, datetime).
PROBE = {
    "api_name": "Filter_Probe__c",
    "label": "Filter Probe",
    "plural_label": "Filter Probes",
    "key_prefix": "a7F",
    "sharing_model": "ReadWrite",
    "name_field": {"api_name": "Name", "label": "Name", "type": "text", "length": 80},
    "fields": [
        {"api_name": "Done__c", "label": "Done", "type": "checkbox"},
        {"api_name": "Due__c", "label": "Due", "type": "datetime"},
    ],
}
EXTRA = {
    "objects": [PROBE],
    "permission_sets": [
        {
            "api_name": "Filter_Test_Probe",
            "label": "Filter probes (tests)",
            "objects": [
                {
                    "object": "Filter_Probe__c",
                    "create": True,
                    "read": True,
                    "edit": True,
                    "all_fields": "edit",
                }
            ],
        },
        {  # Accounts, but of their fields only Industry (and Name)
            "api_name": "Filter_Test_Narrow",
            "label": "Narrow (tests)",
            "objects": [{"object": "Account", "read": True}],
            "fields": [{"field": "Account.Industry", "read": True}],
        },
    ],
}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(
    backend: Backend, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[UiStack]:
    async with ui_stack(backend, tmp_path_factory.mktemp("ui-filters")) as running:
        await apply_metadata(running.engine, org_id=running.org_id, raw=EXTRA)
        created = await admin.create_user(
            running.sessions,
            username="narrow",
            password=PASSWORD,
            email="narrow@example.com",
            display_name="Narrow",
            is_admin=False,
        )
        async with unit_of_work(running.sessions) as session:
            for user_id, pset in (
                (created.user_id, "Filter_Test_Narrow"),
                (running.user_ids["rep1"], "Filter_Test_Probe"),
            ):
                await assign_permission_set(
                    session, org_id=running.org_id, user_id=user_id, permission_set=pset
                )
        running.tokens["narrow"] = await running.token("narrow", PASSWORD)
        yield running


async def get(stack: UiStack, user: str, path: str, *filters: str, **params: Any) -> httpx.Response:
    query = [*params.items(), *(("filter", f) for f in filters)]
    async with httpx.AsyncClient(base_url=stack.sfcrm_url, timeout=30) as client:
        return await client.get(f"{V}/ui-api/{path}", headers=stack.headers(user), params=query)


async def names(stack: UiStack, path: str, *filters: str, user: str = "rep1") -> list[str]:
    reply = await get(stack, user, path, *filters, pageSize=50, sortBy="Name")
    assert reply.status_code == 200, reply.text
    return [r["fields"]["Name"]["value"] for r in reply.json()["records"]["records"]]


async def refused(stack: UiStack, *filters: str, user: str = "rep1", path: str = ALL) -> str:
    reply = await get(stack, user, path, *filters)
    assert reply.status_code == 400, reply.text
    error = reply.json()[0]
    assert error["errorCode"] == "INVALID_FILTER"
    return str(error["message"])


async def create(stack: UiStack, object_name: str, fields: dict[str, Any]) -> str:
    async with httpx.AsyncClient(base_url=stack.sfcrm_url, timeout=30) as client:
        reply = await client.post(
            f"{V}/sobjects/{object_name}", headers=stack.headers("rep1"), json=fields
        )
    assert reply.status_code == 201, reply.text
    return str(reply.json()["id"])


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def records(stack: UiStack) -> dict[str, str]:
    accounts = (
        ("Alpha Energy", "Energy", "Hot", 1000, 10),
        ("Beta Bank", "Banking", "Warm", 2500, 200),
        ("Gamma Grid", "Energy", "Cold", 5000, 30),
        ("Delta, Media", "Media", "Hot", None, None),
    )
    ids = {}
    for name, industry, rating, revenue, employees in accounts:
        fields: dict[str, Any] = {"Name": name, "Industry": industry, "Rating": rating}
        if revenue is not None:
            fields |= {"AnnualRevenue": revenue, "NumberOfEmployees": employees}
        ids[name] = await create(stack, "Account", fields)
    for name, close in (("Q1 deal", "2026-03-31"), ("Q2 deal", "2026-06-30")):
        await create(
            stack,
            "Opportunity",
            {"Name": name, "StageName": "Prospecting", "CloseDate": close},
        )
    await create(
        stack, "Contact", {"Name": "Ada", "LastName": "Ada", "AccountId": ids["Alpha Energy"]}
    )
    await create(
        stack, "Contact", {"Name": "Bob", "LastName": "Bob", "AccountId": ids["Beta Bank"]}
    )
    for name, done, due in (
        ("Probe 1", True, "2026-01-01T09:00:00Z"),
        ("Probe 2", False, "2026-01-02T09:00:00Z"),
    ):
        await create(stack, "Filter_Probe__c", {"Name": name, "Done__c": done, "Due__c": due})
    return ids


async def test_text_filters_equal_contain_and_start_with(
    stack: UiStack, records: dict[str, str]
) -> None:
    assert await names(stack, ALL, "Name:equals:Beta Bank") == ["Beta Bank"]
    assert await names(stack, ALL, "Name:contains:a G") == ["Gamma Grid"]
    assert await names(stack, ALL, "Name:starts_with:Delta,") == ["Delta, Media"]
    assert await names(stack, ALL, "Name:contains:%") == []  # a wildcard is just a character


async def test_picklist_filters_equal_or_in_and_combine_with_and(
    stack: UiStack, records: dict[str, str]
) -> None:
    assert await names(stack, ALL, "Industry:equals:Energy") == ["Alpha Energy", "Gamma Grid"]
    assert await names(stack, ALL, "Industry:in:Energy,Media") == [
        "Alpha Energy",
        "Delta, Media",
        "Gamma Grid",
    ]
    both = await get(stack, "rep1", ALL, "Industry:equals:Energy", "Rating:equals:Hot")
    assert [r["fields"]["Name"]["value"] for r in both.json()["records"]["records"]] == [
        "Alpha Energy"
    ]
    assert both.json()["records"]["count"] == 1
    assert both.json()["info"]["filteredByInfo"] == [
        {"fieldApiName": "Industry", "operator": "equals", "operandLabels": ["Energy"]},
        {"fieldApiName": "Rating", "operator": "equals", "operandLabels": ["Hot"]},
    ]
    # ANDed with the list view's own filter (Rating = Hot)
    hot = "list-ui/Account/Hot_Accounts"
    assert await names(stack, hot, "Industry:equals:Media") == ["Delta, Media"]


async def test_number_currency_date_datetime_and_checkbox_compare(
    stack: UiStack, records: dict[str, str]
) -> None:
    assert await names(stack, ALL, "AnnualRevenue:greater:1000") == ["Beta Bank", "Gamma Grid"]
    assert await names(stack, ALL, "AnnualRevenue:greater_or_equal:1000") == [
        "Alpha Energy",
        "Beta Bank",
        "Gamma Grid",
    ]
    assert await names(stack, ALL, "AnnualRevenue:equals:2500.00") == ["Beta Bank"]
    assert await names(stack, ALL, "NumberOfEmployees:less:30") == ["Alpha Energy"]
    assert await names(stack, ALL, "NumberOfEmployees:less_or_equal:30") == [
        "Alpha Energy",
        "Gamma Grid",
    ]
    deals = "list-ui/Opportunity/__Recent"
    assert await names(stack, deals, "CloseDate:less:2026-06-30") == ["Q1 deal"]
    assert await names(stack, deals, "CloseDate:greater_or_equal:2026-04-01") == ["Q2 deal"]
    assert await names(stack, deals, "CloseDate:equals:2026-03-31") == ["Q1 deal"]
    probes = "list-ui/Filter_Probe__c/__Recent"
    assert await names(stack, probes, "Done__c:equals:true") == ["Probe 1"]
    assert await names(stack, probes, "Done__c:equals:false") == ["Probe 2"]
    assert await names(stack, probes, "Due__c:greater:2026-01-01T12:00:00Z") == ["Probe 2"]
    assert await names(stack, probes, "Due__c:less_or_equal:2026-01-01T10:00:00+01:00") == [
        "Probe 1"
    ]
    # the record's system dates too (the database clock wrote them: today, whatever it is)
    assert await names(stack, probes, "CreatedDate:greater:2000-01-01") == ["Probe 1", "Probe 2"]
    assert await names(stack, probes, "LastModifiedDate:less:2000-01-01T00:00:00Z") == []
    assert "'in' is not one of" in await refused(stack, "CreatedDate:in:2000-01-01")


async def test_lookup_filters_by_record_id(stack: UiStack, records: dict[str, str]) -> None:
    contacts = "list-ui/Contact/All_Contacts"
    reply = await get(stack, "rep1", contacts, f"AccountId:equals:{records['Beta Bank']}")
    assert reply.status_code == 200, reply.text
    assert reply.json()["records"]["count"] == 1
    assert await refused(stack, "AccountId:equals:Beta Bank", path=contacts) == (
        "filter on 'AccountId': each value must be a record id"
    )


async def test_bad_filters_are_400_naming_the_field(
    stack: UiStack, records: dict[str, str]
) -> None:
    assert await refused(stack, "Nope__c:equals:x") == (
        "filter on 'Nope__c': no filterable field with that name on Account"
    )
    assert await refused(stack, "Industry:contains:Ener") == (
        "filter on 'Industry': 'contains' is not one of equals, in for a picklist"
    )
    assert "picklist values" in await refused(stack, "Industry:equals:Spaceflight")
    assert "a number" in await refused(stack, "AnnualRevenue:greater:lots")
    assert "a number" in await refused(stack, "AnnualRevenue:greater:1e400")
    assert "picklist values" in await refused(stack, "Industry:equals:Energy,Media")
    assert "'in' is not one of" in await refused(stack, "Name:in:a,b")
    deals = "list-ui/Opportunity/__Recent"
    assert "a date (YYYY-MM-DD)" in await refused(stack, "CloseDate:less:31/03/2026", path=deals)
    assert "a date (YYYY-MM-DD)" in await refused(stack, "CloseDate:less:2026-02-30", path=deals)
    assert await refused(stack, "Industry") == "a filter is Field:operator:value"
    assert await refused(stack, "X" * 81 + ":equals:x") == "a filter is Field:operator:value"
    assert await refused(stack, *["Name:contains:a"] * 11) == "at most 10 filters"
    assert await refused(stack, "Name:contains:" + "x" * 256) == (
        "filter on 'Name': a value is at most 255 characters"
    )
    assert await refused(stack, "Industry:in:" + ",".join(["Energy"] * 21)) == (
        "filter on 'Industry': at most 20 values"
    )
    quoted = await get(stack, "rep1", ALL, "Name:contains:x' OR 1=1 --")
    assert quoted.json()["info"]["filteredByInfo"][-1]["operandLabels"] == ["x' OR 1=1 --"]
    injected = await names(stack, ALL, "Name:contains:x' OR 1=1 --")
    assert injected == []


async def test_a_field_the_caller_cannot_read_is_refused_like_an_unknown_one(
    stack: UiStack, records: dict[str, str]
) -> None:
    recent = "list-ui/Account/__Recent"
    assert await names(stack, recent, "Industry:equals:Banking", user="narrow") == ["Beta Bank"]
    assert await refused(stack, "AnnualRevenue:greater:0", user="narrow", path=recent) == (
        "filter on 'AnnualRevenue': no filterable field with that name on Account"
    )


async def test_export_honours_the_filters(stack: UiStack, records: dict[str, str]) -> None:
    reply = await get(stack, "rep1", f"{ALL}/export", "Industry:in:Energy,Banking", sortBy="Name")
    assert reply.status_code == 200, reply.text
    rows = list(csv.reader(io.StringIO(reply.text)))
    assert [r[0] for r in rows[1:]] == ["Alpha Energy", "Beta Bank", "Gamma Grid"]
    assert (await get(stack, "rep1", f"{ALL}/export", "Industry:like:x")).status_code == 400
