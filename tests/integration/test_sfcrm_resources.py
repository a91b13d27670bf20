"""The sfcrm resources Salesforce clients call beyond CRUD and query, through simple-salesforce
over real HTTPS against a real Runtime, on both databases: Get Updated / Get Deleted,
composite tree, composite batch, sObject Collections GET, recent items and relationship
reads. Every answer holds only what the caller may see: Opportunity is Private, so one
sales rep's opportunities never reach another."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import pytest
import pytest_asyncio
import requests
from simple_salesforce import Salesforce
from simple_salesforce.exceptions import SalesforceMalformedRequest, SalesforceResourceNotFound

from nexus.apps.sfcrm.app import create_app
from nexus.platform.settings import load_settings
from nexus.platform.tls import ensure_local_tls
from tests.conftest import Backend
from tests.integration.ui_stack import UiStack, ui_stack
from tests.support.servers import serving

pytestmark = pytest.mark.asyncio(loop_scope="module")
T = TypeVar("T")


@dataclass
class Resources:
    stack: UiStack
    url: str
    ca: Path
    sessions: list[requests.Session]

    def sf(self, user: str) -> Salesforce:
        session = requests.Session()
        session.trust_env = False
        session.verify = str(self.ca)
        # an idle kept-alive TLS connection holds a stopping uvicorn for the TLS close timeout
        session.headers["Connection"] = "close"
        self.sessions.append(session)
        token = self.stack.tokens[user]
        return Salesforce(instance_url=self.url, session_id=token, version="62.0", session=session)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def env(
    backend: Backend, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Resources]:
    var = tmp_path_factory.mktemp("sfcrm-resources")
    async with ui_stack(backend, var) as stack:
        tls = ensure_local_tls(var)
        settings = load_settings(var_dir=var, runtime_api_url=stack.runtime_url)
        https = {"ssl_certfile": str(tls.cert), "ssl_keyfile": str(tls.key)}
        async with serving(create_app(settings), **https) as url:
            resources = Resources(stack=stack, url=url, ca=tls.ca_cert, sessions=[])
            yield resources
            for session in resources.sessions:
                session.close()


async def run(call: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """A simple-salesforce call (blocking requests) off the loop that serves the stack."""
    return await asyncio.to_thread(call, *args, **kwargs)


def window() -> tuple[datetime, datetime]:
    now = datetime.now(UTC)
    return now - timedelta(minutes=10), now + timedelta(minutes=5)


async def test_updated_and_deleted_list_what_the_caller_may_see(env: Resources) -> None:
    rep1, rep2 = env.sf("rep1"), env.sf("rep2")
    kept = (await run(rep1.Contact.create, {"Name": "Kept", "LastName": "Kept"}))["id"]
    gone = (await run(rep1.Contact.create, {"Name": "Gone", "LastName": "Gone"}))["id"]
    await run(rep1.Contact.delete, gone)
    mine = (await run(rep1.Opportunity.create, {"Name": "Mine", "StageName": "Prospecting"}))["id"]
    theirs = (await run(rep2.Opportunity.create, {"Name": "Theirs", "StageName": "Prospecting"}))[
        "id"
    ]
    their_gone = (
        await run(rep2.Opportunity.create, {"Name": "Theirs gone", "StageName": "Prospecting"})
    )["id"]
    await run(rep2.Opportunity.delete, their_gone)
    start, end = window()

    updated = await run(rep1.Contact.updated, start, end)
    assert kept in updated["ids"]
    assert gone not in updated["ids"]
    assert updated["latestDateCovered"].endswith("+0000")
    covered = datetime.strptime(updated["latestDateCovered"], "%Y-%m-%dT%H:%M:%S.%f%z")
    assert start - timedelta(minutes=1) <= covered <= datetime.now(UTC)
    deleted = await run(rep1.Contact.deleted, start, end)
    assert [r["id"] for r in deleted["deletedRecords"]] == [gone]
    deleted_at = datetime.strptime(
        deleted["deletedRecords"][0]["deletedDate"], "%Y-%m-%dT%H:%M:%S.%f%z"
    )
    assert start <= deleted_at <= datetime.now(UTC) + timedelta(seconds=5)
    assert deleted["earliestDateAvailable"] <= deleted["latestDateCovered"]

    # Opportunity is Private: rep2's records, live or deleted, are not rep1's to replicate
    assert (await run(rep1.Opportunity.updated, start, end))["ids"] == [mine]
    assert (await run(rep1.Opportunity.deleted, start, end))["deletedRecords"] == []
    assert theirs in (await run(rep2.Opportunity.updated, start, end))["ids"]
    assert [
        r["id"] for r in (await run(rep2.Opportunity.deleted, start, end))["deletedRecords"]
    ] == [their_gone]


async def test_replication_windows_are_checked(env: Resources) -> None:
    rep1 = env.sf("rep1")
    now = datetime.now(UTC)
    with pytest.raises(SalesforceMalformedRequest) as too_old:
        await run(rep1.Contact.updated, now - timedelta(days=31), now)
    assert too_old.value.content[0]["errorCode"] == "INVALID_REPLICATION_DATE"
    with pytest.raises(SalesforceMalformedRequest) as backwards:
        await run(rep1.Contact.deleted, now, now - timedelta(hours=1))
    assert backwards.value.content[0]["errorCode"] == "INVALID_REPLICATION_DATE"
    with pytest.raises(SalesforceMalformedRequest) as malformed:
        await run(rep1.restful, "sobjects/Contact/updated", {"start": "yesterday", "end": "now"})
    assert malformed.value.content[0]["errorCode"] == "INVALID_REPLICATION_DATE"
    assert malformed.value.content[0]["fields"] == ["start"]
    with pytest.raises(SalesforceMalformedRequest) as missing:
        await run(rep1.restful, "sobjects/Contact/deleted", {"start": now.isoformat()})
    assert missing.value.content[0]["errorCode"] == "MISSING_ARGUMENT"
    with pytest.raises(SalesforceResourceNotFound):
        await run(
            rep1.restful,
            "sobjects/NoSuchThing/updated",
            {"start": now.isoformat(), "end": now.isoformat()},
        )


def tree(prefix: str, *, contact_last_name: str | None = "Lovelace") -> dict[str, Any]:
    contact: dict[str, Any] = {"attributes": {"type": "Contact", "referenceId": f"{prefix}c1"}}
    if contact_last_name is not None:
        contact["LastName"] = contact["Name"] = contact_last_name
    return {
        "records": [
            {
                "attributes": {"type": "Account", "referenceId": f"{prefix}a1"},
                "Name": f"{prefix} Analytical",
                "Contacts": {
                    "records": [
                        contact,
                        {
                            "attributes": {"type": "Contact", "referenceId": f"{prefix}c2"},
                            "Name": "Babbage",
                            "LastName": "Babbage",
                        },
                    ]
                },
                "Opportunities": {
                    "records": [
                        {
                            "attributes": {"type": "Opportunity", "referenceId": f"{prefix}o1"},
                            "Name": "Engine",
                            "StageName": "Prospecting",
                        }
                    ]
                },
            },
            {
                "attributes": {"type": "Account", "referenceId": f"{prefix}a2"},
                "Name": f"{prefix} Solo",
            },
        ]
    }


async def test_composite_tree_creates_parents_with_their_children(env: Resources) -> None:
    rep1 = env.sf("rep1")
    answer = await run(rep1.restful, "composite/tree/Account", method="POST", json=tree("T1"))
    assert answer["hasErrors"] is False
    ids = {r["referenceId"]: r["id"] for r in answer["results"]}
    assert sorted(ids) == ["T1a1", "T1a2", "T1c1", "T1c2", "T1o1"]
    found = await run(
        rep1.query, f"SELECT Id, LastName, AccountId FROM Contact WHERE AccountId = '{ids['T1a1']}'"
    )
    assert sorted(r["LastName"] for r in found["records"]) == ["Babbage", "Lovelace"]
    assert (await run(rep1.Opportunity.get, ids["T1o1"]))["AccountId"] == ids["T1a1"]


async def test_composite_tree_is_all_or_none(env: Resources) -> None:
    rep1 = env.sf("rep1")
    with pytest.raises(SalesforceMalformedRequest) as failed:
        await run(
            rep1.restful,
            "composite/tree/Account",
            method="POST",
            json=tree("T2", contact_last_name=None),
        )
    body = failed.value.content
    assert body["hasErrors"] is True
    assert [r["referenceId"] for r in body["results"]] == ["T2c1"]
    assert body["results"][0]["errors"][0]["statusCode"] == "REQUIRED_FIELD_MISSING"
    left = await run(rep1.query, "SELECT Id FROM Account WHERE Name LIKE 'T2 %'")
    assert left["totalSize"] == 0  # the accounts of the level before were rolled back
    broken = tree("T3")
    broken["records"][0]["Cases"] = broken["records"][0].pop("Contacts")
    with pytest.raises(SalesforceMalformedRequest) as unknown:
        await run(rep1.restful, "composite/tree/Account", method="POST", json=broken)
    assert unknown.value.content["results"][0]["referenceId"] == "T3a1"
    with pytest.raises(SalesforceMalformedRequest) as wrong_type:
        await run(
            rep1.restful,
            "composite/tree/Contact",
            method="POST",
            json={"records": tree("T4")["records"][1:]},
        )
    assert wrong_type.value.content[0]["errorCode"] == "INVALID_INPUT"
    twice = tree("T5")
    twice["records"][1]["attributes"]["referenceId"] = "T5a1"
    with pytest.raises(SalesforceMalformedRequest) as duplicated:
        await run(rep1.restful, "composite/tree/Account", method="POST", json=twice)
    assert duplicated.value.content["results"][0]["referenceId"] == "T5a1"
    too_many = {
        "records": [
            {"attributes": {"type": "Account", "referenceId": f"r{i}"}, "Name": f"T6 {i}"}
            for i in range(201)
        ]
    }
    with pytest.raises(SalesforceMalformedRequest) as over:
        await run(rep1.restful, "composite/tree/Account", method="POST", json=too_many)
    assert over.value.content[0]["errorCode"] == "LIMIT_EXCEEDED"
    for prefix in ("T3", "T4", "T5", "T6"):
        found = await run(rep1.query, f"SELECT Id FROM Account WHERE Name LIKE '{prefix} %'")
        assert found["totalSize"] == 0, prefix


async def test_composite_batch_runs_each_subrequest_on_its_own(env: Resources) -> None:
    rep1, rep2 = env.sf("rep1"), env.sf("rep2")
    account = (await run(rep1.Account.create, {"Name": "Batch Co"}))["id"]
    private = (await run(rep2.Opportunity.create, {"Name": "Hidden", "StageName": "Prospecting"}))[
        "id"
    ]
    batch = {
        "batchRequests": [
            {
                "method": "PATCH",
                "url": f"v62.0/sobjects/Account/{account}",
                "richInput": {"Phone": "+1 555"},
            },
            {"method": "GET", "url": f"v62.0/sobjects/Opportunity/{private}"},
            {"method": "GET", "url": f"v62.0/sobjects/Account/{account}?fields=Name,Phone"},
            {"method": "GET", "url": "v62.0/query?q=SELECT+Id+FROM+Account+WHERE+Name='Batch Co'"},
        ],
        "haltOnError": False,
    }
    answer = await run(rep1.restful, "composite/batch", method="POST", json=batch)
    assert answer["hasErrors"] is True
    assert [r["statusCode"] for r in answer["results"]] == [204, 404, 200, 200]
    assert answer["results"][1]["result"][0]["errorCode"] == "NOT_FOUND"
    assert answer["results"][2]["result"]["Phone"] == "+1 555"  # the PATCH before it stayed
    assert answer["results"][3]["result"]["totalSize"] == 1

    batch["haltOnError"] = True
    halted = await run(rep1.restful, "composite/batch", method="POST", json=batch)
    assert [r["statusCode"] for r in halted["results"]] == [204, 404, 412, 412]
    assert halted["results"][2]["result"][0]["errorCode"] == "BATCH_PROCESSING_HALTED"
    many = {"batchRequests": [{"method": "GET", "url": "v62.0/limits"}] * 26}
    with pytest.raises(SalesforceMalformedRequest) as too_many:
        await run(rep1.restful, "composite/batch", method="POST", json=many)
    assert too_many.value.content[0]["errorCode"] == "LIMIT_EXCEEDED"


async def test_collections_get_answers_null_for_what_the_caller_cannot_see(env: Resources) -> None:
    rep1, rep2 = env.sf("rep1"), env.sf("rep2")
    mine = (await run(rep1.Opportunity.create, {"Name": "Visible", "StageName": "Prospecting"}))[
        "id"
    ]
    theirs = (
        await run(rep2.Opportunity.create, {"Name": "Invisible", "StageName": "Prospecting"})
    )["id"]
    params = {"ids": f"{mine},{theirs}", "fields": "Name,StageName"}
    records = await run(rep1.restful, "composite/sobjects/Opportunity", params)
    assert records[1] is None
    assert records[0]["Name"] == "Visible"
    assert records[0]["attributes"]["type"] == "Opportunity"
    assert "Id" not in records[0]
    posted = await run(
        rep1.restful,
        "composite/sobjects/Opportunity",
        method="POST",
        json={"ids": [theirs, mine], "fields": ["Id", "Name"]},
    )
    assert posted[0] is None
    assert posted[1]["Id"] == mine
    with pytest.raises(SalesforceMalformedRequest) as no_fields:
        await run(rep1.restful, "composite/sobjects/Opportunity", {"ids": mine})
    assert no_fields.value.content[0]["errorCode"] == "MISSING_ARGUMENT"


async def test_recent_lists_the_callers_latest_changes_it_may_still_see(env: Resources) -> None:
    rep1, rep2 = env.sf("rep1"), env.sf("rep2")
    theirs = (await run(rep2.Opportunity.create, {"Name": "Not mine", "StageName": "Prospecting"}))[
        "id"
    ]
    binned = (await run(rep1.Account.create, {"Name": "Binned"}))["id"]
    await run(rep1.Account.delete, binned)  # rep1 changed it last: it is in the recycle bin
    probe = (await run(rep1.Account.create, {"Name": "Recent probe"}))["id"]
    recent = await run(rep1.restful, "recent", {"limit": 3})
    assert recent[0]["Id"] == probe
    assert recent[0]["Name"] == "Recent probe"
    assert recent[0]["attributes"] == {
        "type": "Account",
        "url": f"/services/data/v62.0/sobjects/Account/{probe}",
    }
    assert len(recent) == 3
    everything = await run(rep1.restful, "recent")
    assert binned not in [r["Id"] for r in everything]
    assert theirs not in [r["Id"] for r in everything]
    assert theirs in [r["Id"] for r in await run(rep2.restful, "recent")]
    info = await run(rep1.restful, "sobjects/Account")
    assert info["objectDescribe"]["name"] == "Account"
    assert info["recentItems"][0]["Id"] == probe
    # the viewer changed nothing: `[]`, which simple-salesforce answers as None
    assert await run(env.sf("viewer").restful, "recent") is None
    with pytest.raises(SalesforceMalformedRequest):
        await run(rep1.restful, "recent", {"limit": "many"})


async def test_relationships_read_parents_and_visible_children(env: Resources) -> None:
    rep1, rep2 = env.sf("rep1"), env.sf("rep2")
    acme = (await run(rep1.Account.create, {"Name": "Rel Acme"}))["id"]
    ada = (await run(rep1.Contact.create, {"Name": "Ada", "LastName": "Ada", "AccountId": acme}))[
        "id"
    ]
    mine = (
        await run(
            rep1.Opportunity.create, {"Name": "R1", "StageName": "Prospecting", "AccountId": acme}
        )
    )["id"]
    theirs = (
        await run(
            rep2.Opportunity.create, {"Name": "R2", "StageName": "Prospecting", "AccountId": acme}
        )
    )["id"]

    parent = await run(rep1.restful, f"sobjects/Contact/{ada}/Account")
    assert parent["Id"] == acme
    assert parent["Name"] == "Rel Acme"
    assert parent["attributes"]["type"] == "Account"
    contacts = await run(rep1.restful, f"sobjects/Account/{acme}/Contacts", {"fields": "LastName"})
    assert contacts["totalSize"] == 1
    assert contacts["done"] is True
    assert contacts["records"][0]["LastName"] == "Ada"
    opportunities = await run(rep1.restful, f"sobjects/Account/{acme}/Opportunities")
    assert [r["Id"] for r in opportunities["records"]] == [mine]
    assert opportunities["records"][0]["StageName"] == "Prospecting"  # every readable field
    both = await run(rep2.restful, f"sobjects/Account/{acme}/Opportunities", {"fields": "Name"})
    assert [r["Id"] for r in both["records"]] == [theirs]
    with pytest.raises(SalesforceResourceNotFound):
        await run(rep1.restful, f"sobjects/Opportunity/{theirs}/Account")
    with pytest.raises(SalesforceResourceNotFound):
        await run(rep1.restful, f"sobjects/Account/{acme}/NoSuchRelationship")
    # a read by external id keeps its path shape
    with pytest.raises(SalesforceMalformedRequest):
        await run(rep1.restful, "sobjects/Account/NotAnExternalIdField/x")


async def test_odd_numbers_and_names_are_salesforce_errors_not_server_errors(
    env: Resources,
) -> None:
    """What the fuzzing of the OpenAPI document led to: values `str.isdigit` takes and `int`
    refuses, and names longer than Runtime takes, each a clear 4xx."""
    rep1 = env.sf("rep1")
    for limit in ("²", "9" * 5000):
        with pytest.raises(SalesforceMalformedRequest) as odd:
            await run(rep1.restful, "recent", {"limit": limit})
        assert odd.value.content[0]["errorCode"] == "INVALID_QUERY_PARAMETER_VALUE"
        assert odd.value.content[0]["fields"] == ["limit"]
    start, end = window()
    dates = {"start": start.isoformat(), "end": end.isoformat()}
    with pytest.raises(SalesforceResourceNotFound) as long_name:
        await run(rep1.restful, f"sobjects/{'A' * 81}/updated", dates)
    assert long_name.value.content[0]["errorCode"] == "NOT_FOUND"
    with pytest.raises(SalesforceResourceNotFound):
        await run(rep1.restful, f"sobjects/{'A' * 81}")
    acme = (await run(rep1.Account.create, {"Name": "Odd Acme"}))["id"]
    with pytest.raises(SalesforceResourceNotFound):
        await run(rep1.restful, f"sobjects/Account/{acme}/{'C' * 81}")
    with pytest.raises(SalesforceMalformedRequest) as too_many:
        await run(rep1.restful, f"sobjects/Account/{acme}/Contacts", {"fields": "Id," * 501})
    assert too_many.value.content[0]["errorCode"] == "LIMIT_EXCEEDED"
    with pytest.raises(SalesforceMalformedRequest) as too_long:
        await run(rep1.restful, f"sobjects/Account/{acme}/Contacts", {"fields": "A" * 256})
    assert too_long.value.content[0]["message"] == "fields must be field names"


async def test_composite_batch_runs_no_composite_and_no_head(env: Resources) -> None:
    rep1 = env.sf("rep1")
    inner = {"batchRequests": [{"method": "POST", "url": "v62.0/sobjects/Account"}]}
    hidden = {  # the path is routed decoded: `%63omposite` is `composite`
        "batchRequests": [
            {"method": "POST", "url": "v62.0/%63omposite/batch", "richInput": inner},
            {"method": "POST", "url": "v62.0/composite%2Fbatch", "richInput": inner},
            {"method": "GET", "url": "v62.0/limits"},
        ]
    }
    answer = await run(rep1.restful, "composite/batch", method="POST", json=hidden)
    assert [r["statusCode"] for r in answer["results"]] == [400, 400, 200]
    assert answer["results"][0]["result"][0]["errorCode"] == "INVALID_BATCH_REQUEST"
    assert answer["results"][1]["result"][0]["errorCode"] == "INVALID_BATCH_REQUEST"
    head = {"batchRequests": [{"method": "HEAD", "url": "v62.0/limits"}]}
    with pytest.raises(SalesforceMalformedRequest) as refused:
        await run(rep1.restful, "composite/batch", method="POST", json=head)
    assert refused.value.content[0]["errorCode"] == "INVALID_BATCH_REQUEST"


async def test_system_objects_have_object_info_and_take_no_tree(env: Resources) -> None:
    rep1 = env.sf("rep1")
    info = await run(rep1.restful, "sobjects/User")
    assert info["objectDescribe"]["name"] == "User"
    assert info["objectDescribe"]["createable"] is False
    assert info["recentItems"] == []
    users = {"records": [{"attributes": {"type": "User", "referenceId": "u1"}, "LastName": "X"}]}
    with pytest.raises(SalesforceMalformedRequest) as refused:
        await run(rep1.restful, "composite/tree/User", method="POST", json=users)
    assert refused.value.content[0]["errorCode"] == "INVALID_TYPE_FOR_OPERATION"
    assert "User" in refused.value.content[0]["message"]


async def test_contact_names_are_composed_as_on_salesforce(env: Resources) -> None:
    rep1 = env.sf("rep1")
    created = await run(rep1.Contact.create, {"FirstName": "Ada", "LastName": "Byron"})
    assert created["success"] is True
    assert (await run(rep1.Contact.get, created["id"]))["Name"] == "Ada Byron"
    await run(rep1.Contact.update, created["id"], {"LastName": "Lovelace"})
    assert (await run(rep1.Contact.get, created["id"]))["Name"] == "Ada Lovelace"
    with pytest.raises(SalesforceMalformedRequest) as refused:
        await run(rep1.Contact.create, {"FirstName": "Ada"})
    assert refused.value.content == [
        {
            "message": "required field missing: LastName",
            "errorCode": "REQUIRED_FIELD_MISSING",
            "fields": ["LastName"],
        }
    ]
    exported = {  # Contacts as `sf data export tree` writes them: no Name
        "records": [
            {
                "attributes": {"type": "Contact", "referenceId": f"ContactRef{n}"},
                "FirstName": first,
                "LastName": "Herschel",
            }
            for n, first in enumerate(("Caroline", "William"))
        ]
    }
    tree_answer = await run(rep1.restful, "composite/tree/Contact", method="POST", json=exported)
    assert tree_answer["hasErrors"] is False
    found = await run(rep1.query, "SELECT Name FROM Contact WHERE LastName = 'Herschel'")
    assert sorted(r["Name"] for r in found["records"]) == ["Caroline Herschel", "William Herschel"]


JSFORCE = Path(__file__).parents[1] / "e2e" / "jsforce"


async def test_jsforce_calls_the_same_resources(env: Resources) -> None:
    node = shutil.which("node")
    assert node is not None, "Node.js is required"
    assert (JSFORCE / "node_modules" / "jsforce").is_dir(), "npm ci in tests/e2e/jsforce"
    config = {"instanceUrl": env.url, "accessToken": env.stack.tokens["rep1"], "version": "62.0"}
    process = await asyncio.create_subprocess_exec(
        node,
        str(JSFORCE / "resources.mjs"),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=dict(os.environ, NODE_EXTRA_CA_CERTS=str(env.ca)),
    )
    async with asyncio.timeout(120):
        out, err = await process.communicate(json.dumps(config).encode())
    assert process.returncode == 0, (out + err).decode()
    assert json.loads(out.decode().strip().splitlines()[-1]) == {"ok": True}
