"""SOQL aggregates, semi-/anti-joins, FIELDS(), toLabel()/FORMAT(), `FIND {term}` and
`columns=true` through simple-salesforce, over real HTTPS to a real sfcrm AppService (on a
local CA: simple-salesforce always speaks https) and a real runtime-api
(tests/integration/ui_stack.py), on both backends. Opportunity is private to its owner: what
rep2 cannot see is neither counted nor matched."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import requests
from simple_salesforce import Salesforce
from simple_salesforce.exceptions import SalesforceMalformedRequest

from nexus.apps.sfcrm.app import create_app
from nexus.platform.settings import load_settings
from nexus.platform.tls import ensure_local_tls
from tests.conftest import Backend
from tests.integration.ui_stack import UiStack, ui_stack
from tests.support.servers import serving

pytestmark = pytest.mark.asyncio(loop_scope="module")
VERSION = "62.0"
SESSIONS: list[requests.Session] = []


@dataclass
class Stack:
    ui: UiStack
    https: str  # the sfcrm AppService over TLS
    ca: Path

    @property
    def tokens(self) -> dict[str, str]:
        return self.ui.tokens


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(backend: Backend, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    var = Path(tmp_path_factory.mktemp("sfcrm-soql"))
    async with ui_stack(backend, var) as running:
        tls = ensure_local_tls(var)
        settings = load_settings(var_dir=var, runtime_api_url=running.runtime_url)
        https = {"ssl_certfile": str(tls.cert), "ssl_keyfile": str(tls.key)}
        async with serving(create_app(settings), **https) as url:
            yield Stack(running, url, tls.ca_cert)
            for session in SESSIONS:
                session.close()


def client(stack: Stack, user: str) -> Salesforce:
    session = requests.Session()
    session.trust_env = False
    session.verify = str(stack.ca)
    # an idle kept-alive TLS connection holds a stopping uvicorn for the TLS close timeout
    session.headers["Connection"] = "close"
    SESSIONS.append(session)
    return Salesforce(
        instance_url=stack.https, session_id=stack.tokens[user], version=VERSION, session=session
    )


async def call(function: Any, *args: Any, **kwargs: Any) -> Any:
    """A blocking client call off the loop (the servers run on it)."""
    return await asyncio.to_thread(function, *args, **kwargs)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def records(stack: Stack) -> dict[str, str]:
    rep1, rep2 = client(stack, "rep1"), client(stack, "rep2")
    ids: dict[str, str] = {}
    for sf, name, industry, revenue in (
        (rep1, "Soql Acme", "Technology", 1000),
        (rep1, "Soql Globex", "Banking", 2500),
        (rep2, "Soql Initech", "Technology", 700),
    ):
        created = await call(
            sf.Account.create, {"Name": name, "Industry": industry, "AnnualRevenue": revenue}
        )
        ids[name] = created["id"]
    for sf, name, account, stage, amount in (
        (rep1, "Acme renewal", "Soql Acme", "Prospecting", 1234.5),
        (rep1, "Acme upsell", "Soql Acme", "Closed Won", 100),
        (rep1, "Globex deal", "Soql Globex", "Closed Won", 50),
        (rep2, "Initech deal", "Soql Initech", "Closed Won", 10),
    ):
        created = await call(
            sf.Opportunity.create,
            {
                "Name": name,
                "AccountId": ids[account],
                "StageName": stage,
                "Amount": amount,
                "CloseDate": "2026-06-30",
            },
        )
        ids[name] = created["id"]
    return ids


async def test_group_by_with_aggregates_through_query_and_query_all(
    stack: Stack, records: dict[str, str]
) -> None:
    sf = client(stack, "rep1")
    soql = (
        "SELECT Industry, COUNT(Id), SUM(AnnualRevenue) total, MAX(Name) FROM Account "
        "WHERE Name LIKE 'Soql %' GROUP BY Industry ORDER BY SUM(AnnualRevenue) DESC"
    )
    answer = await call(sf.query, soql)
    assert answer["totalSize"] == 2
    assert answer["done"] is True
    assert answer["records"] == [
        {
            "attributes": {"type": "AggregateResult"},
            "Industry": "Banking",
            "expr0": 1,
            "total": 2500,
            "expr1": "Soql Globex",
        },
        {
            "attributes": {"type": "AggregateResult"},
            "Industry": "Technology",
            "expr0": 2,
            "total": 1700,
            "expr1": "Soql Initech",
        },
    ]
    every = await call(sf.query_all, soql)
    assert every["records"] == answer["records"]
    counted = await call(sf.query, "SELECT COUNT() FROM Account WHERE Name LIKE 'Soql %'")
    assert (counted["totalSize"], counted["records"]) == (3, [])


async def test_aggregates_and_semi_joins_skip_records_outside_sharing(
    stack: Stack, records: dict[str, str]
) -> None:
    stages = (
        "SELECT StageName, COUNT(Id) n, SUM(Amount) FROM Opportunity "
        "WHERE Account.Name LIKE 'Soql %' GROUP BY StageName ORDER BY StageName"
    )
    rep2 = client(stack, "rep2")
    assert [
        (r["StageName"], r["n"], r["expr0"]) for r in (await call(rep2.query, stages))["records"]
    ] == [("Closed Won", 1, 10.0)]
    rep1 = client(stack, "rep1")
    assert [
        (r["StageName"], r["n"], r["expr0"]) for r in (await call(rep1.query, stages))["records"]
    ] == [("Closed Won", 2, 150.0), ("Prospecting", 1, 1234.5)]
    won = (
        "SELECT Name FROM Account WHERE Id {} (SELECT AccountId FROM Opportunity "
        "WHERE StageName = 'Closed Won') AND Name LIKE 'Soql %' ORDER BY Name"
    )
    # every account is readable by both reps; the opportunities that decide are not
    assert [r["Name"] for r in (await call(rep2.query_all, won.format("IN")))["records"]] == [
        "Soql Initech"
    ]
    assert [r["Name"] for r in (await call(rep1.query_all, won.format("IN")))["records"]] == [
        "Soql Acme",
        "Soql Globex",
    ]
    assert [r["Name"] for r in (await call(rep2.query, won.format("NOT IN")))["records"]] == [
        "Soql Acme",
        "Soql Globex",
    ]
    on_reference = await call(
        rep1.query,
        "SELECT Name FROM Opportunity WHERE AccountId IN (SELECT Id FROM Account "
        "WHERE Industry = 'Banking' AND Name LIKE 'Soql %')",
    )
    assert [r["Name"] for r in on_reference["records"]] == ["Globex deal"]


async def test_fields_to_label_and_format(stack: Stack, records: dict[str, str]) -> None:
    sf = client(stack, "rep1")
    every = await call(
        sf.query, "SELECT FIELDS(ALL) FROM Account WHERE Name = 'Soql Acme' LIMIT 200"
    )
    record = every["records"][0]
    assert record["attributes"]["url"].endswith(f"/sobjects/Account/{records['Soql Acme']}")
    assert {"Id", "Name", "Industry", "AnnualRevenue", "OwnerId", "External_Id__c"} <= set(record)
    with pytest.raises(SalesforceMalformedRequest) as unbounded:
        await call(sf.query, "SELECT FIELDS(ALL) FROM Account")
    error: Any = unbounded.value.content
    assert error[0]["errorCode"] == "MALFORMED_QUERY"
    assert "LIMIT of at most 200" in error[0]["message"]
    shown = await call(
        sf.query,
        "SELECT toLabel(StageName), FORMAT(Amount) amount FROM Opportunity "
        "WHERE Name = 'Acme renewal'",
    )
    assert shown["records"][0]["StageName"] == "Prospecting"  # the package sets no labels
    assert shown["records"][0]["amount"] == "1,234.50"


async def test_aggregate_errors_reach_the_client_in_salesforce_shape(
    stack: Stack, records: dict[str, str]
) -> None:
    sf = client(stack, "rep1")
    with pytest.raises(SalesforceMalformedRequest) as ungrouped:
        await call(sf.query, "SELECT Name, COUNT(Id) FROM Account GROUP BY Industry")
    error: Any = ungrouped.value.content
    assert error == [
        {
            "message": "Field must be grouped or aggregated: Name (line 1, column 8)",
            "errorCode": "MALFORMED_QUERY",
            "fields": [],
        }
    ]
    with pytest.raises(SalesforceMalformedRequest) as summed:
        await call(sf.query, "SELECT SUM(Name) FROM Account")
    assert summed.value.content[0]["errorCode"] == "INVALID_FIELD"  # type: ignore[index]


async def test_quick_search_finds_across_objects_without_returning(
    stack: Stack, records: dict[str, str]
) -> None:
    found = await call(client(stack, "rep2").quick_search, "Acme")
    hits = {(r["attributes"]["type"], r["Id"]) for r in found["searchRecords"]}
    assert ("Account", records["Soql Acme"]) in hits  # accounts are readable by everyone
    assert ("Opportunity", records["Acme renewal"]) not in hits  # rep1's, private
    mine = await call(client(stack, "rep1").quick_search, "Acme")
    opportunities = [r for r in mine["searchRecords"] if r["attributes"]["type"] == "Opportunity"]
    assert {r["Id"] for r in opportunities} == {records["Acme renewal"], records["Acme upsell"]}
    assert all(set(r) == {"attributes", "Id"} for r in mine["searchRecords"])
    assert opportunities[0]["attributes"]["url"].startswith(f"/services/data/v{VERSION}/sobjects/")


async def test_columns_true_answers_column_metadata(stack: Stack, records: dict[str, str]) -> None:
    sf = client(stack, "rep1")
    plain = await call(
        sf.restful,
        "query",
        params={"q": "SELECT Name, Account.Name, Amount FROM Opportunity", "columns": "true"},
    )
    assert (plain["entityName"], plain["keyPrefix"], plain["idSelected"], plain["groupBy"]) == (
        "Opportunity",
        "006",
        False,
        False,
    )
    name, account, amount = plain["columnMetadata"]
    assert name == {
        "aggregate": False,
        "apexType": "String",
        "booleanType": False,
        "columnName": "Name",
        "custom": False,
        "displayName": "Name",
        "foreignKeyName": None,
        "insertable": True,
        "joinColumns": [],
        "numberType": False,
        "textType": True,
        "updatable": True,
    }
    assert (account["columnName"], account["foreignKeyName"], account["apexType"]) == (
        "Account",
        "AccountId",
        None,
    )
    assert [c["columnName"] for c in account["joinColumns"]] == ["Name"]
    assert (amount["apexType"], amount["numberType"]) == ("Decimal", True)
    grouped = await call(
        sf.restful,
        "query",
        params={
            "q": "SELECT StageName, AVG(Amount) FROM Opportunity GROUP BY StageName",
            "columns": "true",
        },
    )
    assert grouped["groupBy"] is True
    assert [
        (c["columnName"], c["displayName"], c["aggregate"]) for c in grouped["columnMetadata"]
    ] == [("StageName", "StageName", False), ("expr0", "AVG(Amount)", True)]


async def test_odd_batch_sizes_and_search_limits_are_read_as_salesforce_does(
    stack: Stack, records: dict[str, str]
) -> None:
    """`Sforce-Query-Options: batchSize=` and `overallLimit` hold whatever a client sends:
    more digits than `int` reads is the largest size, a non-ASCII digit no size at all."""
    sf = client(stack, "rep1")
    soql = "SELECT Id FROM Account WHERE Name LIKE 'Soql%'"
    for options in ("batchSize=" + "9" * 5000, "batchSize=²", "batchSize=1"):
        page = await call(sf.query, soql, headers={"Sforce-Query-Options": options})
        assert (page["totalSize"], page["done"]) == (3, True), options
    for limit in ("²", "9" * 5000, "1"):
        found = await call(
            sf.restful,
            "parameterizedSearch",
            params={"q": "Soql", "sobject": "Account", "overallLimit": limit},
        )
        ids = {r["Id"] for r in found["searchRecords"]}
        accounts = {records[name] for name in ("Soql Acme", "Soql Globex", "Soql Initech")}
        assert ids <= accounts, limit
        assert len(ids) == (1 if limit == "1" else 3), limit
