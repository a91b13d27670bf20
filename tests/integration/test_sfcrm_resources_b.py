"""The sfcrm dialect's setup resources (issue 26, set B) through the real gateway over HTTPS:
versions and the resource map, describe layouts, list views, search suggestions and scope
order, the Tooling API's EntityDefinition/FieldDefinition, Salesforce's error codes for bad
values, and Salesforce's NOT_FOUND for every path under `/services` nothing serves.

A real runtime-api and sfcrm AppService (both backends) behind the real gateway; clients are
simple-salesforce 1.12 and plain httpx, over real sockets."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

import httpx
import pytest
import pytest_asyncio
import requests
from simple_salesforce import Salesforce
from simple_salesforce.exceptions import (
    SalesforceError,
    SalesforceMalformedRequest,
    SalesforceResourceNotFound,
)

from nexus.apps.sfcrm.context import LATEST_VERSION, MIN_VERSION
from nexus.gateway.app import create_app as create_gateway_app
from nexus.platform.settings import load_settings
from nexus.platform.tls import ensure_local_tls
from tests.conftest import Backend
from tests.integration.ui_stack import UiStack, ui_stack
from tests.support.servers import closed_port_url, serving

pytestmark = pytest.mark.asyncio(loop_scope="module")
VERSION = "59.0"
T = TypeVar("T")
NOT_FOUND = "The requested resource does not exist"
#: Resources whose root itself is no resource in Salesforce either: one below it.
BELOW = {"jobs": "/ingest", "ui-api": "/nav-items"}


@dataclass
class Stack:
    ui: UiStack
    url: str  # the gateway, HTTPS
    ca: Path
    sessions: list[requests.Session]

    def sf(self, user: str = "rep1") -> Salesforce:
        session = requests.Session()
        session.trust_env = False
        session.verify = str(self.ca)
        session.headers["Connection"] = "close"  # no kept-alive TLS holding a stopping server
        self.sessions.append(session)
        token = self.ui.tokens[user]
        return Salesforce(instance_url=self.url, session_id=token, version=VERSION, session=session)

    def http(self) -> httpx.AsyncClient:
        trusted = ssl.create_default_context(cafile=str(self.ca))
        return httpx.AsyncClient(base_url=self.url, verify=trusted, timeout=60)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(backend: Backend, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    var = Path(tmp_path_factory.mktemp("sfcrm-resources-b"))
    async with ui_stack(backend, var) as ui:
        closed = closed_port_url()
        settings = load_settings(
            var_dir=var,
            runtime_api_url=ui.runtime_url,
            app_sfcrm_url=ui.sfcrm_url,
            runtime_worker_url=closed,
            catalog_url=closed,
            integration_url=closed,
        )
        tls = ensure_local_tls(var)
        https = {"ssl_certfile": str(tls.cert), "ssl_keyfile": str(tls.key)}
        async with serving(create_gateway_app(settings), **https) as url:
            running = Stack(ui=ui, url=url, ca=tls.ca_cert, sessions=[])
            yield running
            for session in running.sessions:
                session.close()


async def call(fn: Callable[..., T], *args: Any, **kw: Any) -> T:
    """A blocking client call off the event loop that serves the stack."""
    return await asyncio.to_thread(fn, *args, **kw)


def dialect_error(reply: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert reply.status_code == status, reply.text
    body = reply.json()
    assert isinstance(body, list), body  # Salesforce's list, not the gateway's object
    assert body[0]["errorCode"] == code, body
    return dict(body[0])


def code_of(exc: SalesforceError) -> str:
    content: Any = exc.content
    return str(content[0]["errorCode"])


# ---------------------------------------------------------------------------- versions, map


async def test_versions_and_unknown_versions(stack: Stack) -> None:
    async with stack.http() as http:
        versions = (await http.get("/services/data")).json()
        assert [v["version"] for v in versions] == [
            f"{n}.0" for n in range(MIN_VERSION, LATEST_VERSION + 1)
        ]
        assert versions[-1] == {
            "label": f"v{LATEST_VERSION}.0",
            "url": f"/services/data/v{LATEST_VERSION}.0",
            "version": f"{LATEST_VERSION}.0",
        }
        auth = stack.ui.headers("rep1")
        latest = await http.get(f"/services/data/v{LATEST_VERSION}.0/limits", headers=auth)
        assert latest.status_code == 200, latest.text
        for version in ("v99.0", "v19.0", "v60.5", f"v{LATEST_VERSION + 1}.0"):
            for path in (f"/services/data/{version}", f"/services/data/{version}/sobjects"):
                error = dialect_error(await http.get(path, headers=auth), 404, "NOT_FOUND")
                assert error["message"] == NOT_FOUND


async def test_every_resource_in_the_map_exists(stack: Stack) -> None:
    sf = stack.sf()
    resources: Any = await call(sf.restful, "")
    for name in ("sobjects", "query", "search", "composite", "limits", "tooling", "ui-api"):
        assert resources[name] == f"/services/data/v{VERSION}/{name}", name
    assert resources["identity"].startswith("/id/")
    async with stack.http() as http:
        for name, url in resources.items():
            if name == "identity":
                continue
            # a resource may want parameters or another method (composite is POST), but it
            # is there: one of them is not NOT_FOUND
            below = url + BELOW.get(name, "")
            codes = []
            for method in ("GET", "POST"):
                reply = await http.request(method, below, headers=stack.ui.headers("rep1"), json={})
                codes.append(reply.status_code)
            assert codes != [404, 404], name


@pytest.mark.parametrize(
    "path",
    [
        "/services/data/v59.0/jobs/nope",  # (`/services/async/...` is Bulk API 1.0's)
        "/services/apexrest/x",
        "/services/foo",
        "/services",
        "/services/data/v59.0/no-such-resource",
        "/services/data/v59.0/tooling/sobjects/SourceMember/describe",
    ],
)
async def test_unknown_services_paths_are_salesforce_not_found(stack: Stack, path: str) -> None:
    async with stack.http() as http:
        for method in ("GET", "POST"):
            reply = await http.request(method, path, headers=stack.ui.headers("rep1"))
            if method == "POST" and path.endswith("/describe"):
                assert reply.status_code in (404, 405)
                continue
            error = dialect_error(reply, 404, "NOT_FOUND")
            assert error["message"] == NOT_FOUND
            assert "request_id" not in error  # the dialect's shape, not the gateway's


# ---------------------------------------------------------------------------- layouts


async def test_describe_layouts(stack: Stack) -> None:
    sf = stack.sf()
    described: Any = await call(sf.restful, "sobjects/Account/describe/layouts")
    (layout,) = described["layouts"]
    sections = layout["detailLayoutSections"]
    items = [
        item for section in sections for row in section["layoutRows"] for item in row["layoutItems"]
    ]
    by_field = {i["layoutComponents"][0]["value"]: i for i in items}
    assert {"Name", "Industry"} <= set(by_field)
    assert by_field["Name"]["label"] == "Account Name"
    assert by_field["Name"]["required"] is True
    assert by_field["Industry"]["layoutComponents"][0]["details"]["type"] == "picklist"
    assert all(len(r["layoutItems"]) <= s["columns"] for s in sections for r in s["layoutRows"])
    assert {r["sobject"] for r in layout["relatedLists"]} >= {"Contact", "Opportunity"}
    mapping = described["recordTypeMappings"][0]
    assert (mapping["master"], mapping["layoutId"]) == (True, layout["id"])
    assert described["recordTypeSelectorRequired"] == [False]

    # simple-salesforce's describe_layout: the one layout of the Master record type
    one: Any = await call(sf.Account.describe_layout, mapping["recordTypeId"])
    assert one["id"] == layout["id"]
    edit_items = [
        i for s in one["editLayoutSections"] for r in s["layoutRows"] for i in r["layoutItems"]
    ]
    assert any(i["editableForUpdate"] for i in edit_items)
    # a read-only user sees the same fields, none editable
    viewer: Any = await call(stack.sf("viewer").Account.describe_layout, mapping["recordTypeId"])
    viewer_items = [
        i for s in viewer["editLayoutSections"] for r in s["layoutRows"] for i in r["layoutItems"]
    ]
    assert viewer_items
    assert not any(i["editableForUpdate"] for i in viewer_items)

    with pytest.raises(SalesforceResourceNotFound):
        await call(sf.Account.describe_layout, "012000000000001AAA")
    with pytest.raises(SalesforceMalformedRequest) as malformed:
        await call(sf.Account.describe_layout, "not-an-id")
    assert code_of(malformed.value) == "MALFORMED_ID"
    with pytest.raises(SalesforceResourceNotFound):
        await call(sf.restful, "sobjects/NoSuchThing/describe/layouts")


# ---------------------------------------------------------------------------- list views


async def test_list_views_describe_and_results(stack: Stack) -> None:
    sf = stack.sf()
    for n in range(3):
        await call(sf.Account.create, {"Name": f"Listview Hot {n}", "Rating": "Hot"})
    listed: Any = await call(sf.restful, "sobjects/Account/listviews")
    assert listed["sobjectType"] == "Account"
    assert listed["size"] == len(listed["listviews"])
    views = {v["developerName"]: v for v in listed["listviews"]}
    hot = views["Hot_Accounts"]
    assert hot["label"] == "Hot Accounts"
    assert hot["id"].startswith("00B")
    assert len(hot["id"]) == 18
    again: Any = await call(sf.restful, "sobjects/Account/listviews")
    assert {v["id"] for v in again["listviews"]} == {v["id"] for v in views.values()}  # stable

    base = f"/services/data/v{VERSION}/"
    info: Any = await call(sf.restful, hot["url"].removeprefix(base))
    assert (info["developerName"], info["id"]) == ("Hot_Accounts", hot["id"])

    described: Any = await call(sf.restful, hot["describeUrl"].removeprefix(base))
    assert [c["fieldNameOrPath"] for c in described["columns"]] == [
        "Name",
        "Industry",
        "AnnualRevenue",
    ]
    assert described["orderBy"][0]["fieldNameOrPath"] == "AnnualRevenue"
    # the view's query is SOQL the client can run itself, with the same rows
    ran: Any = await call(sf.query_all, described["query"])

    results: Any = await call(sf.restful, hot["resultsUrl"].removeprefix(base), params={"limit": 2})
    assert results["developerName"] == "Hot_Accounts"
    assert results["size"] == ran["totalSize"] >= 3
    assert len(results["records"]) == 2
    assert results["done"] is False
    names = {
        cell["value"]
        for record in results["records"]
        for cell in record["columns"]
        if cell["fieldNameOrPath"] == "Name"
    }
    assert names <= {r["Name"] for r in ran["records"]}
    rest: Any = await call(
        sf.restful, hot["resultsUrl"].removeprefix(base), params={"limit": 200, "offset": 2}
    )
    assert len(rest["records"]) == results["size"] - 2
    assert rest["done"] is True
    ids = {
        c["value"] for r in rest["records"] for c in r["columns"] if c["fieldNameOrPath"] == "Id"
    }
    assert len(ids) == len(rest["records"])  # every row carries its record id

    by_name: Any = await call(sf.restful, "sobjects/Account/listviews/Hot_Accounts/results")
    assert by_name["id"] == hot["id"]
    with pytest.raises(SalesforceResourceNotFound):
        await call(sf.restful, "sobjects/Account/listviews/00B000000000000AAA/results")
    with pytest.raises(SalesforceResourceNotFound):  # a view of another object
        await call(sf.restful, "sobjects/Contact/listviews/Hot_Accounts/results")
    with pytest.raises(SalesforceMalformedRequest):
        await call(sf.restful, hot["resultsUrl"].removeprefix(base), params={"limit": 0})


async def test_list_view_results_follow_sharing(stack: Stack) -> None:
    """Opportunity is Private: another rep's list view results leave rep1's deal out."""
    deal = {"StageName": "Prospecting", "CloseDate": "2027-01-31"}
    await call(stack.sf("rep1").Opportunity.create, {"Name": "Rep1 Private Deal", **deal})
    for user, expected in (("rep1", True), ("rep2", False)):
        sf = stack.sf(user)
        listed: Any = await call(sf.restful, "sobjects/Opportunity/listviews")
        view = listed["listviews"][0]
        url = view["resultsUrl"].removeprefix(f"/services/data/v{VERSION}/")
        results: Any = await call(sf.restful, url, params={"limit": 2000})
        values = {c["value"] for r in results["records"] for c in r["columns"]}
        assert ("Rep1 Private Deal" in values) is expected, user


# ---------------------------------------------------------------------------- search


async def test_search_suggestions_and_scope_order(stack: Stack) -> None:
    sf = stack.sf()
    for n in range(3):
        await call(sf.Account.create, {"Name": f"Zebracorn Holdings {n}"})
    await call(sf.Contact.create, {"Name": "Zebracorn Person", "LastName": "Zebracorn"})
    found: Any = await call(
        sf.restful, "search/suggestions", params={"q": "Zebracorn", "sobject": "Account"}
    )
    names = sorted(r["Name"] for r in found["autoSuggestResults"])
    assert names == [f"Zebracorn Holdings {n}" for n in range(3)]
    assert found["hasMoreResults"] is False
    first = found["autoSuggestResults"][0]
    assert first["attributes"] == {
        "type": "Account",
        "url": f"/services/data/v{VERSION}/sobjects/Account/{first['Id']}",
    }
    fewer: Any = await call(
        sf.restful,
        "search/suggestions",
        params={"q": "Zebracorn", "sobject": "Account", "limit": 2},
    )
    assert len(fewer["autoSuggestResults"]) == 2
    assert fewer["hasMoreResults"] is True
    both: Any = await call(
        sf.restful, "search/suggestions", params={"q": "Zebracorn", "sobject": "Account,Contact"}
    )
    assert {r["attributes"]["type"] for r in both["autoSuggestResults"]} == {"Account", "Contact"}
    short: Any = await call(
        sf.restful, "search/suggestions", params={"q": "Ze", "sobject": "Account"}
    )
    assert short == {"autoSuggestResults": [], "hasMoreResults": False}
    with pytest.raises(SalesforceMalformedRequest) as missing:
        await call(sf.restful, "search/suggestions", params={"q": "Zebracorn"})
    assert code_of(missing.value) == "MISSING_ARGUMENT"
    with pytest.raises(SalesforceError) as unknown:
        await call(sf.restful, "search/suggestions", params={"q": "Zebracorn", "sobject": "Nope"})
    assert (unknown.value.status, code_of(unknown.value)) == (400, "INVALID_TYPE")

    order: Any = await call(sf.restful, "search/scopeOrder")
    assert [o["type"] for o in order] == ["Account", "Contact", "Opportunity"]
    assert order[0]["url"] == f"/services/data/v{VERSION}/sobjects/Account/describe"


# ---------------------------------------------------------------------------- tooling


async def test_tooling_entity_and_field_definitions(stack: Stack) -> None:
    sf = stack.sf()

    def tooling(soql: str) -> Any:
        return sf.toolingexecute(f"query/?q={quote(soql)}")

    entities = await call(
        tooling, "SELECT QualifiedApiName, Label, KeyPrefix FROM EntityDefinition ORDER BY Label"
    )
    assert entities["entityTypeName"] == "EntityDefinition"
    labels = [e["Label"] for e in entities["records"]]
    assert labels == sorted(labels, key=str.lower)
    by_api_name = {e["QualifiedApiName"]: e for e in entities["records"]}
    assert {"Account", "Contact", "Opportunity", "User"} <= set(by_api_name)
    assert by_api_name["Account"]["KeyPrefix"] == "001"
    assert set(by_api_name["Account"]) == {"attributes", "QualifiedApiName", "Label", "KeyPrefix"}
    one = await call(
        tooling,
        "SELECT DurableId FROM EntityDefinition WHERE QualifiedApiName IN ('Contact', 'Nope')",
    )
    assert [e["DurableId"] for e in one["records"]] == ["Contact"]

    fields = await call(
        tooling,
        "SELECT QualifiedApiName, DataType, EntityDefinition.QualifiedApiName FROM "
        "FieldDefinition WHERE EntityDefinition.QualifiedApiName = 'Opportunity'",
    )
    by_name = {f["QualifiedApiName"]: f for f in fields["records"]}
    assert by_name["StageName"]["DataType"] == "Picklist"
    assert by_name["Amount"]["DataType"] == "Currency(14, 2)"
    assert by_name["AccountId"]["DataType"] == "Lookup(Account)"
    assert by_name["Id"]["DataType"] == "Lookup()"
    assert by_name["Amount"]["EntityDefinition"]["QualifiedApiName"] == "Opportunity"
    # `sf data query --use-tooling-api` lays its table out from `columns=true`
    columns = await call(
        sf.toolingexecute,
        "query/?columns=true&q="
        + quote("SELECT QualifiedApiName, EntityDefinition.Label FROM FieldDefinition "
                "WHERE EntityDefinitionId = 'Account'"),
    )  # fmt: skip
    assert columns["entityName"] == "FieldDefinition"
    assert [c["columnName"] for c in columns["columnMetadata"]] == [
        "QualifiedApiName",
        "EntityDefinition",
    ]
    joined = columns["columnMetadata"][1]["joinColumns"]
    assert [(c["columnName"], c["textType"]) for c in joined] == [("Label", True)]
    liked = await call(
        tooling,
        "SELECT QualifiedApiName FROM FieldDefinition WHERE EntityDefinitionId = 'Account' "
        "AND QualifiedApiName LIKE 'Billing%' ORDER BY QualifiedApiName DESC LIMIT 5",
    )
    assert [f["QualifiedApiName"] for f in liked["records"]] == ["BillingCountry", "BillingCity"]

    assert set(await call(sf.restful, "tooling")) == {"sobjects", "query"}  # type: ignore[arg-type]
    directory: Any = await call(sf.restful, "tooling/sobjects")
    assert {s["name"] for s in directory["sobjects"]} == {"EntityDefinition", "FieldDefinition"}
    described: Any = await call(sf.restful, "tooling/sobjects/FieldDefinition/describe")
    assert "QualifiedApiName" in {f["name"] for f in described["fields"]}

    with pytest.raises(SalesforceMalformedRequest) as unsupported:
        await call(tooling, "SELECT Id, Name FROM ApexClass")
    assert code_of(unsupported.value) == "INVALID_TYPE"
    with pytest.raises(SalesforceMalformedRequest) as unfiltered:
        await call(tooling, "SELECT QualifiedApiName FROM FieldDefinition")
    assert code_of(unfiltered.value) == "MALFORMED_QUERY"
    with pytest.raises(SalesforceMalformedRequest) as no_column:
        await call(tooling, "SELECT Bogus FROM EntityDefinition")
    assert code_of(no_column.value) == "INVALID_FIELD"
    with pytest.raises(SalesforceMalformedRequest) as broken:
        await call(tooling, "SELECT FROM WHERE")
    assert code_of(broken.value) == "MALFORMED_QUERY"
    # the `sf` CLI's source-tracking probe: an object the org does not have
    with pytest.raises(SalesforceResourceNotFound) as probe:
        await call(sf.restful, "tooling/sobjects/SourceMember/describe")
    assert str(probe.value.content[0]["message"]) == NOT_FOUND  # type: ignore[index]


async def test_odd_numbers_and_unknown_columns_are_salesforce_errors(stack: Stack) -> None:
    """What the fuzzing of the OpenAPI document led to: `²` is a digit to `str.isdigit` and
    not to `int`, 5,000 digits are more than `int` reads, and a column is unknown whether or
    not a row matches."""
    sf = stack.sf()
    results = "sobjects/Account/listviews/Hot_Accounts/results"
    for params in ({"limit": "²"}, {"limit": "9" * 5000}, {"offset": "٣"}, {"offset": 2001}):
        with pytest.raises(SalesforceMalformedRequest) as odd:
            await call(sf.restful, results, params=params)
        assert code_of(odd.value) == "INVALID_QUERY_PARAMETER_VALUE", params
        assert odd.value.content[0]["fields"] == list(params)  # type: ignore[index]
    last: Any = await call(sf.restful, results, params={"offset": 2000})
    assert last["records"] == []  # Salesforce's largest offset
    with pytest.raises(SalesforceMalformedRequest) as odd_limit:
        await call(
            sf.restful,
            "search/suggestions",
            params={"q": "Acme", "sobject": "Account", "limit": "²"},
        )
    assert code_of(odd_limit.value) == "INVALID_QUERY_PARAMETER_VALUE"

    def tooling(soql: str, columns: bool = False) -> Any:
        return sf.toolingexecute(f"query/?q={quote(soql)}&columns={str(columns).lower()}")

    entities = "SELECT Label FROM EntityDefinition"
    for limit in ("9" * 5000, "٣"):  # SOQL's digits are ASCII ones
        with pytest.raises(SalesforceMalformedRequest) as malformed:
            await call(tooling, f"{entities} LIMIT {limit}")
        assert code_of(malformed.value) == "MALFORMED_QUERY"
    with pytest.raises(SalesforceMalformedRequest) as long_number:
        await call(tooling, f"{entities} WHERE Label = {'9' * 5000}")
    assert code_of(long_number.value) == "MALFORMED_QUERY"
    unseen = "SELECT Bogus FROM FieldDefinition WHERE EntityDefinitionId = 'NoSuchObject'"
    for columns in (False, True):
        with pytest.raises(SalesforceMalformedRequest) as no_column:
            await call(tooling, unseen, columns)
        assert code_of(no_column.value) == "INVALID_FIELD"
    with pytest.raises(SalesforceMalformedRequest) as no_order_column:
        await call(tooling, f"{entities} ORDER BY Bogus", True)
    assert code_of(no_order_column.value) == "INVALID_FIELD"


# ---------------------------------------------------------------------------- error codes


async def test_salesforce_error_codes_for_bad_values(stack: Stack) -> None:
    sf = stack.sf()
    account = (await call(sf.Account.create, {"Name": "Error Codes Inc"}))["id"]
    cases: list[tuple[Any, tuple[Any, ...], str, list[str]]] = [
        (sf.Account.create, ({"Name": "Too Big", "NumberOfEmployees": 123456789},),
         "NUMBER_OUTSIDE_VALID_RANGE", ["NumberOfEmployees"]),
        (sf.Contact.create, ({"LastName": "Lost", "AccountId": "not-an-id"},),
         "MALFORMED_ID", ["AccountId"]),
        (sf.Account.create, ({"Name": "Backdated", "CreatedDate": "2020-01-01T00:00:00Z"},),
         "INVALID_FIELD_FOR_INSERT_UPDATE", ["CreatedDate"]),
        (sf.Account.update, (account, {"SystemModstamp": "2020-01-01T00:00:00Z"}),
         "INVALID_FIELD_FOR_INSERT_UPDATE", ["SystemModstamp"]),
        (sf.Account.update, (account, {"Id": account}),
         "INVALID_FIELD_FOR_INSERT_UPDATE", ["Id"]),
        (sf.Opportunity.create,
         ({"Name": "Odd", "StageName": "Daydreaming", "CloseDate": "2027-01-31"},),
         "INVALID_OR_NULL_FOR_RESTRICTED_PICKLIST", ["StageName"]),
    ]  # fmt: skip
    for method, args, code, fields in cases:
        with pytest.raises(SalesforceMalformedRequest) as refused:  # 400
            await call(method, *args)
        content: Any = refused.value.content
        assert (content[0]["errorCode"], content[0]["fields"]) == (code, fields), content
    # nothing was saved by the refused creates
    counted = await call(sf.query, "SELECT Id FROM Account WHERE Name IN ('Too Big', 'Backdated')")
    assert counted["totalSize"] == 0
    # the same codes per record in an sObject Collection
    saved: Any = await call(
        sf.restful,
        "composite/sobjects",
        method="POST",
        json={
            "allOrNone": False,
            "records": [
                {"attributes": {"type": "Account"}, "Name": "Fine Collection"},
                {"attributes": {"type": "Account"}, "Name": "X", "NumberOfEmployees": 10**9},
                {"attributes": {"type": "Account"}, "Name": "Y", "LastModifiedDate": None},
            ],
        },
    )
    assert [r["success"] for r in saved] == [True, False, False]
    assert [r["errors"][0]["statusCode"] for r in saved[1:]] == [
        "NUMBER_OUTSIDE_VALID_RANGE",
        "INVALID_FIELD_FOR_INSERT_UPDATE",
    ]
    # a record id that is no id (its case-safe suffix is wrong) in a collection update
    wrong = account[:15] + ("AAA" if account[15:] != "AAA" else "BBB")
    updated: Any = await call(
        sf.restful,
        "composite/sobjects",
        method="PATCH",
        json={
            "allOrNone": False,
            "records": [
                {"attributes": {"type": "Account"}, "id": account, "Name": "Renamed Inc"},
                {"attributes": {"type": "Account"}, "id": wrong, "Name": "No"},
            ],
        },
    )
    assert [r["success"] for r in updated] == [True, False]
    assert updated[1]["errors"][0]["statusCode"] == "MALFORMED_ID"
