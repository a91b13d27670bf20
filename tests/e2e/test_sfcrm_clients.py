"""The Salesforce REST dialect through the gateway over HTTPS, driven by real Salesforce clients
(simple-salesforce; jsforce from the npm registry on Node.js) against `nexus up`."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import requests
from simple_salesforce import Salesforce
from simple_salesforce.exceptions import (
    SalesforceExpiredSession,
    SalesforceMalformedRequest,
    SalesforceRefusedRequest,
    SalesforceResourceNotFound,
)

from tests.conftest import Backend
from tests.e2e.sfcrm_stack import (
    ADMIN_PASSWORD,
    PASSWORD,
    VERSION,
    Stack,
    run_jsforce,
    sfcrm_stack,
)

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, backend: Backend) -> Iterator[Stack]:
    with sfcrm_stack(tmp_path_factory.mktemp("sfcrm"), backend) as running:
        yield running


def client(stack: Stack, user: str = "rep1", token: str | None = None) -> Salesforce:
    session = requests.Session()
    session.verify = str(stack.ca)
    session.trust_env = False  # else REQUESTS_CA_BUNDLE from the environment overrides verify
    return Salesforce(
        instance_url=stack.https,
        session_id=token or stack.tokens[user],
        version=VERSION,
        session=session,
    )


def error_code(exc: Any) -> str:
    return str(exc.content[0]["errorCode"])


def test_record_crud_and_external_ids(stack: Stack) -> None:
    sf = client(stack)
    created = sf.Account.create(
        {"Name": "Acme", "External_Customer_Id__c": "A-1", "AnnualRevenue": 10}
    )
    assert created["success"] is True
    assert created["errors"] == []
    account_id = created["id"]
    assert len(account_id) == 18
    assert account_id.startswith("001")

    record = sf.Account.get(account_id)
    assert record["Name"] == "Acme"
    assert record["attributes"] == {
        "type": "Account",
        "url": f"/services/data/v{VERSION}/sobjects/Account/{account_id}",
    }
    assert sf.Account.get_by_custom_id("External_Customer_Id__c", "A-1")["Id"] == account_id

    assert sf.Account.update(account_id, {"Name": "Acme Corp"}) == 204
    assert sf.Account.get(account_id)["Name"] == "Acme Corp"

    assert sf.Account.upsert("External_Customer_Id__c/A-1", {"Name": "Acme Inc"}) == 200  # update
    assert sf.Account.upsert("External_Customer_Id__c/A-2", {"Name": "Beta"}) == 201  # create
    beta = sf.Account.get_by_custom_id("External_Customer_Id__c", "A-2")
    assert beta["Name"] == "Beta"
    assert sf.Account.get(account_id)["Name"] == "Acme Inc"

    assert sf.Account.delete(beta["Id"]) == 204
    with pytest.raises(SalesforceResourceNotFound) as gone:
        sf.Account.get(beta["Id"])
    assert error_code(gone.value) == "NOT_FOUND"

    assert sf.Account.upsert("External_Customer_Id__c/A-3", {"Name": "Gamma"}) == 201
    gamma = sf.Account.get_by_custom_id("External_Customer_Id__c", "A-3")["Id"]
    assert sf.Account.delete("External_Customer_Id__c/A-3") == 204  # by external id
    with pytest.raises(SalesforceResourceNotFound):
        sf.Account.get(gamma)
    with pytest.raises(SalesforceResourceNotFound) as again:
        sf.Account.delete("External_Customer_Id__c/A-3")
    assert error_code(again.value) == "NOT_FOUND"


def test_describe_global_and_object(stack: Stack) -> None:
    sf = client(stack)
    described = sf.describe()
    assert described is not None
    assert described["maxBatchSize"] == 200
    names = {o["name"]: o for o in described["sobjects"]}
    assert names["Account"]["keyPrefix"] == "001"
    assert names["Account"]["createable"] is True
    assert (
        names["Account"]["urls"]["describe"]
        == f"/services/data/v{VERSION}/sobjects/Account/describe"
    )

    account = sf.Account.describe()
    fields = {f["name"]: f for f in account["fields"]}
    assert fields["Id"]["type"] == "id"
    assert fields["External_Customer_Id__c"]["externalId"] is True
    assert fields["External_Customer_Id__c"]["unique"] is True
    assert fields["AnnualRevenue"]["type"] == "currency"
    assert "Banking" in [p["value"] for p in fields["Industry"]["picklistValues"]]
    assert fields["Type"]["type"] == "picklist"  # Salesforce's name (sfcrm 1.1.0, ADR 0034)
    assert "Customer - Direct" in [p["value"] for p in fields["Type"]["picklistValues"]]
    assert any(c["childSObject"] == "Contact" for c in account["childRelationships"])
    contact = {f["name"]: f for f in sf.Contact.describe()["fields"]}
    assert contact["AccountId"]["referenceTo"] == ["Account"]
    assert contact["AccountId"]["relationshipName"] == "Account"

    viewer = {o["name"]: o for o in client(stack, "viewer").describe()["sobjects"]}  # type: ignore[index]
    assert viewer["Account"]["createable"] is False  # computed for the caller
    assert sf.Account.metadata()["objectDescribe"]["name"] == "Account"


def test_query_pages_and_parent_fields(stack: Stack) -> None:
    sf = client(stack)
    parent = sf.Account.create({"Name": "Paging Parent"})["id"]
    for start in (0, 200, 400):
        records = [
            {
                "attributes": {"type": "Contact"},
                "LastName": f"Page{i:04d}",
                "Name": f"P {i}",
                "AccountId": parent,
            }
            for i in range(start, min(start + 200, 450))
        ]
        results = sf.restful(
            "composite/sobjects", method="POST", json={"allOrNone": True, "records": records}
        )
        assert all(r["success"] for r in results), results  # type: ignore[union-attr]

    soql = (
        "SELECT Id, LastName, Account.Name FROM Contact WHERE LastName LIKE 'Page%' "
        "ORDER BY LastName"
    )
    first = sf.query(soql, headers={"Sforce-Query-Options": "batchSize=200"})
    assert first["totalSize"] == 450
    assert first["done"] is False
    assert len(first["records"]) == 200
    assert first["nextRecordsUrl"].startswith(f"/services/data/v{VERSION}/query/")
    row = first["records"][0]
    assert row["Account"]["Name"] == "Paging Parent"
    assert row["Account"]["attributes"]["type"] == "Account"

    everything = sf.query_all(soql, headers={"Sforce-Query-Options": "batchSize=200"})
    assert everything["totalSize"] == 450
    names = [r["LastName"] for r in everything["records"]]
    assert names == [f"Page{i:04d}" for i in range(450)]  # three pages, in order, no repeats

    count = sf.query("SELECT COUNT() FROM Contact WHERE LastName LIKE 'Page%'")
    assert count["totalSize"] == 450

    sf.Contact.delete(everything["records"][0]["Id"])  # queryAll still sees it, as deleted
    live = sf.query_all("SELECT Id FROM Contact WHERE LastName LIKE 'Page%'")
    assert live["totalSize"] == 449
    with_deleted = sf.query_all(
        "SELECT Id, IsDeleted FROM Contact WHERE LastName = 'Page0000'", include_deleted=True
    )
    assert [r["IsDeleted"] for r in with_deleted["records"]] == [True]


def test_composite_request_with_references(stack: Stack) -> None:
    sf = client(stack)
    base = f"/services/data/v{VERSION}"
    answer = sf.restful(
        "composite",
        method="POST",
        json={
            "allOrNone": True,
            "compositeRequest": [
                {
                    "method": "POST",
                    "url": f"{base}/sobjects/Account",
                    "referenceId": "acct",
                    "body": {"Name": "Composite Co"},
                },
                {
                    "method": "POST",
                    "url": f"{base}/sobjects/Contact",
                    "referenceId": "person",
                    "body": {"LastName": "Ref", "Name": "Ref", "AccountId": "@{acct.id}"},
                },
                {
                    "method": "GET",
                    "url": f"{base}/sobjects/Contact/@{{person.id}}?fields=AccountId",
                    "referenceId": "read",
                },
            ],
        },
    )
    responses = answer["compositeResponse"]  # type: ignore[index]
    assert [r["httpStatusCode"] for r in responses] == [201, 201, 200]
    assert responses[2]["body"]["AccountId"] == responses[0]["body"]["id"]

    halted = sf.restful(
        "composite",
        method="POST",
        json={
            "allOrNone": True,
            "compositeRequest": [
                {
                    "method": "POST",
                    "url": f"{base}/sobjects/Account",
                    "referenceId": "ok",
                    "body": {"Name": "Rolled Back"},
                },
                {
                    "method": "POST",
                    "url": f"{base}/sobjects/Account",
                    "referenceId": "bad",
                    "body": {"Nope__c": 1},
                },
            ],
        },
    )
    codes = [r["httpStatusCode"] for r in halted["compositeResponse"]]  # type: ignore[index]
    assert codes == [400, 400]
    assert sf.query("SELECT Id FROM Account WHERE Name = 'Rolled Back'")["totalSize"] == 0

    # collections: update, retrieve, upsert, delete
    ids = [responses[0]["body"]["id"]]
    updated = sf.restful(
        "composite/sobjects",
        method="PATCH",
        json={
            "records": [{"attributes": {"type": "Account"}, "id": ids[0], "Industry": "Banking"}]
        },
    )
    assert updated == [{"id": ids[0], "success": True, "errors": []}]
    fetched = sf.restful(
        "composite/sobjects/Account",
        method="POST",
        json={"ids": [*ids, "001000000000000AAA"], "fields": ["Name", "Industry"]},
    )
    assert fetched[0]["Industry"] == "Banking"
    assert fetched[0]["Name"] == "Composite Co"
    assert fetched[1] is None  # type: ignore[index]
    upserted = sf.restful(
        "composite/sobjects/Account/External_Customer_Id__c",
        method="PATCH",
        json={
            "records": [
                {"attributes": {"type": "Account"}, "External_Customer_Id__c": "C-1", "Name": "Col"}
            ]
        },
    )
    assert upserted[0]["created"] is True  # type: ignore[index]
    deleted = sf.restful("composite/sobjects", method="DELETE", params={"ids": ",".join(ids)})
    assert deleted[0]["success"] is True  # type: ignore[index]


def test_composite_all_or_none_undoes_earlier_updates_and_deletes(stack: Stack) -> None:
    """One Runtime call, one transaction: a failing subrequest rolls back the update and the
    delete that ran before it; without allOrNone they stay and only the failure is reported."""
    sf = client(stack)
    base = f"/services/data/v{VERSION}"
    kept = sf.Account.create({"Name": "Undo Me"})["id"]
    doomed = sf.Account.create({"Name": "Delete Me"})["id"]

    def run(all_or_none: bool) -> list[dict[str, Any]]:
        answer = sf.restful(
            "composite",
            method="POST",
            json={
                "allOrNone": all_or_none,
                "compositeRequest": [
                    {
                        "method": "GET",
                        "url": f"{base}/sobjects/Account/{kept}?fields=Name",
                        "referenceId": "before",
                    },
                    {
                        "method": "PATCH",
                        "url": f"{base}/sobjects/Account/@{{before.Id}}",
                        "referenceId": "rename",
                        "body": {"Name": "Renamed"},
                    },
                    {
                        "method": "DELETE",
                        "url": f"{base}/sobjects/Account/{doomed}",
                        "referenceId": "drop",
                    },
                    {
                        "method": "POST",
                        "url": f"{base}/sobjects/Account",
                        "referenceId": "bad",
                        "body": {"Name": "Bad", "AnnualRevenue": -5},  # validation rule
                    },
                ],
            },
        )
        return answer["compositeResponse"]  # type: ignore[index,no-any-return]

    undone = run(True)
    assert [r["httpStatusCode"] for r in undone] == [400, 400, 400, 400]
    assert [r["body"][0]["errorCode"] for r in undone[:3]] == ["PROCESSING_HALTED"] * 3
    assert undone[3]["body"][0]["errorCode"] == "FIELD_CUSTOM_VALIDATION_EXCEPTION"
    assert sf.Account.get(kept)["Name"] == "Undo Me"  # the update was rolled back
    assert sf.Account.get(doomed)["Name"] == "Delete Me"  # and so was the delete

    applied = run(False)
    assert [r["httpStatusCode"] for r in applied] == [200, 204, 204, 400]
    assert applied[0]["body"]["Name"] == "Undo Me"
    assert sf.Account.get(kept)["Name"] == "Renamed"
    with pytest.raises(SalesforceResourceNotFound):
        sf.Account.get(doomed)
    assert sf.query("SELECT Id FROM Account WHERE Name = 'Bad'")["totalSize"] == 0


def test_every_error_class_simple_salesforce_maps(stack: Stack) -> None:
    sf = client(stack)
    with pytest.raises(SalesforceMalformedRequest) as malformed:  # 400
        sf.query("SELEKT Id FROM Account")
    assert error_code(malformed.value) == "MALFORMED_QUERY"
    with pytest.raises(SalesforceMalformedRequest) as invalid:
        sf.Account.create({"Name": "X", "No_Such_Field__c": 1})
    assert error_code(invalid.value) == "INVALID_FIELD"
    with pytest.raises(SalesforceMalformedRequest) as rule:
        sf.Account.create({"Name": "Negative", "AnnualRevenue": -5})
    assert error_code(rule.value) == "FIELD_CUSTOM_VALIDATION_EXCEPTION"
    assert rule.value.content[0]["message"] == "revenue cannot be negative"
    sf.Account.create({"Name": "Dup", "External_Customer_Id__c": "DUP-1"})
    with pytest.raises(SalesforceMalformedRequest) as duplicate:
        sf.Account.create({"Name": "Dup again", "External_Customer_Id__c": "DUP-1"})
    assert error_code(duplicate.value) == "DUPLICATE_VALUE"
    with pytest.raises(SalesforceMalformedRequest) as bad_json:
        sf.restful("sobjects/Account", method="POST", data="{not json")
    assert error_code(bad_json.value) == "JSON_PARSER_ERROR"
    with pytest.raises(SalesforceMalformedRequest) as bad_type:
        sf.query("SELECT Id FROM NoSuchObject")
    assert error_code(bad_type.value) in ("INVALID_TYPE", "INVALID_FIELD")

    with pytest.raises(SalesforceExpiredSession) as expired:  # 401
        client(stack, token="not-a-token").Account.get("001000000000000AAA")
    assert error_code(expired.value) == "INVALID_SESSION_ID"

    with pytest.raises(SalesforceRefusedRequest) as refused:  # 403: Read Only may not create
        client(stack, "viewer").Account.create({"Name": "Nope"})
    assert error_code(refused.value) == "INSUFFICIENT_ACCESS_OR_READONLY"

    with pytest.raises(SalesforceResourceNotFound):  # 404
        sf.Account.get("001000000000000AAA")
    with pytest.raises(SalesforceResourceNotFound):
        sf.Account.get_by_custom_id("External_Customer_Id__c", "never-made")
    with pytest.raises(SalesforceResourceNotFound):
        sf.restful("sobjects/NoSuchObject/describe")


def test_sharing_hides_records_from_get_and_query(stack: Stack) -> None:
    """Opportunity is Private in the sfcrm package: a rep sees only their own."""
    rep1, rep2 = client(stack, "rep1"), client(stack, "rep2")
    deal = {"StageName": "Prospecting", "CloseDate": "2027-01-31"}
    private = rep1.Opportunity.create({"Name": "Rep1 Secret", **deal})["id"]
    rep2.Opportunity.create({"Name": "Rep2 Own", **deal})
    with pytest.raises(SalesforceResourceNotFound):
        rep2.Opportunity.get(private)
    seen = rep2.query("SELECT Id, Name FROM Opportunity WHERE Name LIKE 'Rep%'")
    assert [r["Name"] for r in seen["records"]] == ["Rep2 Own"]
    assert seen["totalSize"] == 1
    assert rep1.query("SELECT Id FROM Opportunity WHERE Name = 'Rep1 Secret'")["totalSize"] == 1


def test_directory_search_limits_and_usage_header(stack: Stack) -> None:
    sf = client(stack)
    sf.Account.create({"Name": "Findable Widgets"})
    found = sf.search("FIND {Findable} IN ALL FIELDS RETURNING Account(Id, Name)")
    assert [r["Name"] for r in found["searchRecords"]] == ["Findable Widgets"]
    assert found["searchRecords"][0]["attributes"]["type"] == "Account"
    assert sf.restful("parameterizedSearch", params={"q": "Findable"})["searchRecords"]  # type: ignore[index]

    limits = sf.limits()
    assert limits["DailyApiRequests"]["Max"] == 100_000
    assert sf.api_usage["api-usage"].total == 100_000
    used = sf.api_usage["api-usage"].used
    sf.describe()
    assert sf.api_usage["api-usage"].used == used + 1  # counted per user
    client(stack, "rep2").describe()  # someone else's requests are not rep1's
    sf.describe()
    assert sf.api_usage["api-usage"].used == used + 2

    with httpx.Client(base_url=stack.https, verify=stack.tls(), timeout=10) as http:
        versions = http.get("/services/data/")
        assert versions.status_code == 200
        assert {
            "version": VERSION,
            "label": f"v{VERSION}",
            "url": f"/services/data/v{VERSION}",
        } in versions.json()
        auth = {"Authorization": f"Bearer {stack.tokens['rep1']}"}
        for path in (f"/services/data/v{VERSION}", f"/services/data/v{VERSION}/"):
            resources = http.get(path, headers=auth)
            assert resources.status_code == 200  # with and without the slash, no redirect
            assert {
                "sobjects",
                "query",
                "queryAll",
                "search",
                "composite",
                "limits",
                "identity",
            } <= set(resources.json())
        identity = http.get(resources.json()["identity"], headers=auth)
        assert identity.status_code == 200
        assert identity.json()["username"] == "rep1"
        assert http.get("/services/data/v19.0/sobjects", headers=auth).status_code == 404


def test_jsforce(stack: Stack, tmp_path: Path) -> None:
    config = {
        "loginUrl": stack.https,
        "clientId": stack.client_id,
        "clientSecret": stack.client_secret,
        "username": "rep1",
        "password": "sfcrm-user-password-1",
        "version": VERSION,
    }
    results = run_jsforce(stack, "suite.mjs", config)
    assert results["ok"] is True, results


def test_schemathesis_finds_no_server_errors_or_schema_violations(
    stack: Stack, tmp_path: Path
) -> None:
    """Generated requests against every operation of the dialect's OpenAPI document."""
    st = Path(sys.executable).with_name("st")
    done = subprocess.run(
        [
            str(st),
            "run",
            f"{stack.https}/services/data/openapi.json",
            "--header",
            f"Authorization: Bearer {stack.tokens['fuzzer']}",
            "--tls-verify",
            str(stack.ca),
            "--checks",
            "not_a_server_error,status_code_conformance,content_type_conformance,"
            "response_schema_conformance",
            "--phases",
            "examples,coverage,fuzzing",
            "--max-examples",
            "4",  # per operation, for ~44 of them: ~15 s in all (the coverage phase is most)
            "--workers",
            "1",  # hypothesis describes strategies with ast: not thread-safe on Python 3.11
            "--seed",
            "8",
            "--generation-codec",
            "utf-8",
            "--no-color",
        ],
        env={k: v for k, v in os.environ.items() if not k.startswith(("REQUESTS_CA", "CURL_CA"))},
        cwd=tmp_path,  # schemathesis keeps its example cache in the working directory
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]


# ------------------------------------------------------------ the browser's server APIs
# (docs/ui-api.md): the UI API, the Runtime admin API routed by the gateway, and a CSV import
# run by the runtime-worker process, on this module's stack (no stack of their own).

BROWSER_UI = "/services/data/v62.0/ui-api"


def browser_call(
    stack: Stack, user: str, method: str, path: str, body: Any = None
) -> httpx.Response:
    with httpx.Client(base_url=stack.https, verify=stack.tls(), timeout=30) as client:
        headers = {"Authorization": f"Bearer {stack.tokens[user]}"}
        return client.request(method, path, headers=headers, json=body)


def test_ui_api_admin_api_and_an_import_through_the_gateway(stack: Stack) -> None:
    info = browser_call(stack, "viewer", "GET", f"{BROWSER_UI}/object-info/Account")
    assert info.status_code == 200, info.text
    assert info.json()["createable"] is False
    assert info.json()["fields"]["Name"]["dataType"] == "String"

    refused = browser_call(stack, "rep1", "GET", "/admin/v1/runtime/users")
    assert refused.status_code == 403
    users = browser_call(stack, "admin", "GET", "/admin/v1/runtime/users")
    assert users.status_code == 200, users.text
    assert {"admin", "rep1", "viewer"} <= {u["username"] for u in users.json()["users"]}
    dead = browser_call(stack, "admin", "GET", "/admin/v1/runtime/dead-letters?queue=outbox")
    assert dead.status_code == 200

    rows = "Name,AnnualRevenue\n" + "".join(f"Gateway {n},{n}\n" for n in range(50)) + "Bad,-1\n"
    created = browser_call(
        stack, "rep1", "POST", f"{BROWSER_UI}/imports", {"objectApiName": "Account", "csv": rows}
    )
    assert created.status_code == 201, created.text
    job_id = created.json()["id"]
    deadline = time.monotonic() + 60
    while True:
        job = browser_call(stack, "rep1", "GET", f"{BROWSER_UI}/imports/{job_id}").json()
        if job["state"] == "done" or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert (job["state"], job["succeeded"], job["failed"]) == ("done", 50, 1)
    report = browser_call(stack, "rep1", "GET", f"{BROWSER_UI}/imports/{job_id}/errors")
    assert report.text.splitlines() == ["Row,Error", "51,revenue cannot be negative"]
    found = browser_call(
        stack, "rep1", "GET", f"{BROWSER_UI}/search?q=Gateway&objectApiName=Account"
    )
    assert found.status_code == 200
    assert found.json()["results"][0]["records"]


# ------------------------------------------------------------ last: what the logs kept
# (issue 25): runs after every test above, so the roles' logs hold the whole module's traffic


def test_the_roles_logs_hold_no_token_secret_or_value_a_client_sent(stack: Stack) -> None:
    sf = client(stack)
    name, external_id, literal = "Zebra Quokka 7781", "ZQ-7781-ext", "Quokka-Lit-7781"
    assert sf.Account.upsert(f"External_Customer_Id__c/{external_id}", {"Name": name}) == 201
    sf.query(f"SELECT Id FROM Account WHERE Name = '{literal}'")
    answer = browser_call(stack, "rep1", "GET", f"/services/data/v{VERSION}/sobjects/Account")
    assert answer.headers["x-content-type-options"] == "nosniff"
    assert answer.headers["strict-transport-security"].startswith("max-age=")
    time.sleep(1)  # the supervisor pumps each role's output into its log line by line
    logs = Path(stack.env["NEXUS_VAR_DIR"]) / "logs"
    logged = "\n".join(p.read_text(errors="replace") for p in sorted(logs.glob("*.log")))
    assert "http.request" in logged  # the access log is there: the scan reads real lines
    sent = {
        "record name": name,
        "external id": external_id,
        "SOQL literal": literal,
        "admin password": ADMIN_PASSWORD,
        "user password": PASSWORD,
        "client secret": stack.client_secret,
        **{f"{user}'s token": token for user, token in stack.tokens.items()},
    }
    leaked = [what for what, value in sent.items() if value and value in logged]
    assert not leaked, f"the roles' logs hold: {leaked}"
