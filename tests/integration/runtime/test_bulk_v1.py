"""Bulk API 1.0 jobs and batches (issue 26, ADR 0077 "Bulk API 1.0") over the sfcrm dialect
with a real runtime-api, runtime-worker and sfcrm AppService on sockets, on SQLite and
MariaDB: JSON jobs with JSON batches (as simple-salesforce), XML jobs with CSV batches (as
jsforce), XML batches, query batches and their results in each format, close and abort,
Bulk API 1.0's error shapes, another user's job and another org's job."""

from __future__ import annotations

import asyncio
import csv
import io
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any
from xml.etree import ElementTree

import httpx
import pytest
import pytest_asyncio

from nexus.contracts.errors import NotFound
from nexus.contracts.identity import TrustedCall
from nexus.platform.db.engine import unit_of_work
from nexus.runtime.bulk import batches
from tests.conftest import Backend
from tests.integration.ui_stack import UiStack, ui_stack

pytestmark = pytest.mark.asyncio(loop_scope="module")
ASYNC = "/services/async/59.0"
NS = "{http://www.force.com/2009/06/asyncapi/dataload}"
JSON_HEADERS = {"Content-Type": "application/json"}
XML_HEADERS = {"Content-Type": "application/xml; charset=utf-8"}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(
    backend: Backend, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[UiStack]:
    async with ui_stack(backend, tmp_path_factory.mktemp("bulk1"), worker=True) as running:
        yield running


async def call(
    stack: UiStack, user: str | None, method: str, path: str, **kwargs: Any
) -> httpx.Response:
    headers = {**kwargs.pop("headers", {})}
    if user is not None:
        headers["X-SFDC-Session"] = stack.tokens[user]
    async with httpx.AsyncClient(base_url=stack.sfcrm_url, timeout=60) as client:
        return await client.request(method, f"{ASYNC}/{path}", headers=headers, **kwargs)


async def json_job(stack: UiStack, user: str, **job: Any) -> dict[str, Any]:
    body = {"contentType": "JSON", "concurrencyMode": 0, **job}
    reply = await call(stack, user, "POST", "job", json=body)
    assert reply.status_code == 201, reply.text
    return dict(reply.json())


async def wait_batch(
    stack: UiStack, user: str, job_id: str, batch_id: str, within: float = 120
) -> dict[str, Any]:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        reply = await call(
            stack, user, "GET", f"job/{job_id}/batch/{batch_id}", headers=JSON_HEADERS
        )
        assert reply.status_code == 200, reply.text
        info = dict(reply.json())
        if info["state"] in ("Completed", "Failed", "NotProcessed"):
            return info
        await asyncio.sleep(0.05)
    raise AssertionError(f"the batch did not end: {info}")


def xml(reply: httpx.Response) -> ElementTree.Element:
    assert reply.headers["content-type"].startswith("application/xml"), reply.text
    return ElementTree.fromstring(reply.content)  # noqa: S314 - our own answer


def text(element: ElementTree.Element, name: str) -> str | None:
    found = element.find(NS + name)
    return None if found is None else found.text


async def test_json_insert_two_batches_results_and_close(stack: UiStack) -> None:
    tag = uuid.uuid4().hex[:6]
    job = await json_job(stack, "rep1", operation="insert", object="Contact")
    assert (job["state"], job["contentType"], job["object"]) == ("Open", "JSON", "Contact")
    assert job["id"].startswith("750")
    assert job["numberBatchesTotal"] == 0
    first = [{"LastName": f"V1 {tag} {n:03d}", "Name": "A", "Title": None} for n in range(1, 1201)]
    second = [{"LastName": None, "Name": "No last name"}, {"LastName": f"V1 {tag} x", "Name": "B"}]
    added = []
    for records in (first, second):
        reply = await call(stack, "rep1", "POST", f"job/{job['id']}/batch", json=records)
        assert reply.status_code == 201, reply.text
        added.append(reply.json())
    assert all(b["id"].startswith("751") and b["jobId"] == job["id"] for b in added)
    assert added[0]["state"] in ("Queued", "InProgress", "Completed")
    done = [await wait_batch(stack, "rep1", job["id"], b["id"]) for b in added]
    assert [(d["state"], d["numberRecordsProcessed"], d["numberRecordsFailed"]) for d in done] == [
        ("Completed", 1200, 0),
        ("Completed", 2, 1),
    ]
    results = await call(
        stack, "rep1", "GET", f"job/{job['id']}/batch/{added[1]['id']}/result", headers=JSON_HEADERS
    )
    assert results.status_code == 200, results.text
    failed, ok = results.json()
    assert (failed["success"], failed["created"], failed["id"]) == (False, False, None)
    assert failed["errors"][0]["statusCode"] == "REQUIRED_FIELD_MISSING"
    assert failed["errors"][0]["fields"] == ["LastName"]
    assert (ok["success"], ok["created"], ok["errors"]) == (True, True, [])
    assert ok["id"].startswith("003")
    listed = await call(stack, "rep1", "GET", f"job/{job['id']}/batch", headers=JSON_HEADERS)
    assert [b["id"] for b in listed.json()["batchInfo"]] == [b["id"] for b in added]
    request = await call(
        stack,
        "rep1",
        "GET",
        f"job/{job['id']}/batch/{added[1]['id']}/request",
        headers=JSON_HEADERS,
    )
    assert request.json() == [{"LastName": None, "Name": "No last name"}, second[1]]

    closed = await call(stack, "rep1", "POST", f"job/{job['id']}", json={"state": "Closed"})
    assert closed.status_code == 200, closed.text
    info = closed.json()
    assert info["state"] == "Closed"
    assert (info["numberBatchesTotal"], info["numberBatchesCompleted"]) == (2, 2)
    assert (info["numberRecordsProcessed"], info["numberRecordsFailed"]) == (1202, 1)
    # a closed job takes no batch: InvalidJobState, Bulk API 1.0's shape
    late = await call(stack, "rep1", "POST", f"job/{job['id']}/batch", json=second)
    assert late.status_code == 400, late.text
    assert late.json() == {
        "exceptionCode": "InvalidJobState",
        "exceptionMessage": f"Job {job['id']} is not open",
    }


async def test_xml_job_with_csv_batch_as_jsforce_sends_it(stack: UiStack) -> None:
    tag = uuid.uuid4().hex[:6]
    job_xml = (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<jobInfo  xmlns="http://www.force.com/2009/06/asyncapi/dataload">\n'
        "  <operation>insert</operation>\n  <object>Contact</object>\n  \n"
        "  <contentType>CSV</contentType>\n</jobInfo>"
    )
    created = await call(stack, "rep1", "POST", "job", content=job_xml, headers=XML_HEADERS)
    assert created.status_code == 201, created.text
    info = xml(created)
    assert info.tag == NS + "jobInfo"
    job_id = text(info, "id")
    assert (text(info, "state"), text(info, "contentType")) == ("Open", "CSV")
    assert text(
        info,
        "createdDate",
    ).endswith("Z")  # type: ignore[union-attr]
    body = f'LastName,Name,Title\n"{tag}, one",One,"two\nlines"\n{tag} two,Two,#N/A\n,Three,x\n'
    reply = await call(
        stack,
        "rep1",
        "POST",
        f"job/{job_id}/batch",
        content=body,
        headers={"Content-Type": "text/csv"},
    )
    assert reply.status_code == 201, reply.text
    batch_id = text(xml(reply), "id")
    assert batch_id is not None
    assert (await wait_batch(stack, "rep1", str(job_id), batch_id))["state"] == "Completed"
    results = await call(stack, "rep1", "GET", f"job/{job_id}/batch/{batch_id}/result")
    assert results.headers["content-type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(results.text)))
    assert list(rows[0]) == ["Id", "Success", "Created", "Error"]
    assert [(r["Success"], r["Created"]) for r in rows] == [
        ("true", "true"),
        ("true", "true"),
        ("false", "false"),
    ]
    assert rows[2]["Error"].startswith("REQUIRED_FIELD_MISSING:")
    listed = xml(await call(stack, "rep1", "GET", f"job/{job_id}/batch"))
    assert [text(b, "id") for b in listed.findall(NS + "batchInfo")] == [batch_id]
    # the close, in XML as jsforce sends it
    close = (
        '<?xml version="1.0" encoding="UTF-8"?>\n  <jobInfo xmlns='
        '"http://www.force.com/2009/06/asyncapi/dataload">\n  <state>Closed</state>\n</jobInfo>'
    )
    closed = await call(stack, "rep1", "POST", f"job/{job_id}", content=close, headers=XML_HEADERS)
    assert text(xml(closed), "state") == "Closed"
    assert text(xml(closed), "numberRecordsFailed") == "1"


async def test_xml_batches_upsert_and_a_header_that_is_no_field(stack: UiStack) -> None:
    tag = uuid.uuid4().hex[:6]
    job = await json_job(
        stack,
        "rep1",
        operation="upsert",
        object="Contact",
        contentType="XML",
        externalIdFieldName="External_Id__c",
    )
    head = (
        '<?xml version="1.0" encoding="UTF-8"?><sObjects xmlns="http://www.force.com/2009/06/'
        'asyncapi/dataload" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">'
    )
    first = (
        f"{head}<sObject><External_Id__c>X-{tag}-1</External_Id__c>"
        f'<LastName>{tag} &amp; co</LastName><Name>X</Name><Title xsi:nil="true"/></sObject>'
        f"<sObject><External_Id__c>X-{tag}-2</External_Id__c><LastName>{tag} 2</LastName>"
        "<Name>Y</Name></sObject></sObjects>"
    )
    second = (
        f"{head}<sObject><External_Id__c>X-{tag}-1</External_Id__c>"
        f"<LastName>{tag} again</LastName></sObject></sObjects>"
    )
    outcomes = []
    for body in (first, second):
        reply = await call(
            stack, "rep1", "POST", f"job/{job['id']}/batch", content=body, headers=XML_HEADERS
        )
        assert reply.status_code == 201, reply.text
        batch_id = text(xml(reply), "id")
        assert (await wait_batch(stack, "rep1", job["id"], str(batch_id)))["state"] == "Completed"
        path = f"job/{job['id']}/batch/{batch_id}/result"
        results = xml(await call(stack, "rep1", "GET", path))
        assert results.tag == NS + "results"
        outcomes += [
            (text(r, "success"), text(r, "created")) for r in results.findall(NS + "result")
        ]
    assert outcomes == [("true", "true"), ("true", "true"), ("true", "false")]  # then updated
    # a column that is no field: the batch fails with Salesforce's state message
    wrong = f"<sObjects xmlns='{NS[1:-1]}'><sObject><Nope__c>1</Nope__c></sObject></sObjects>"
    reply = await call(
        stack, "rep1", "POST", f"job/{job['id']}/batch", content=wrong, headers=XML_HEADERS
    )
    failed = await wait_batch(stack, "rep1", job["id"], str(text(xml(reply), "id")))
    assert failed["state"] == "Failed"
    assert failed["stateMessage"] == "InvalidBatch : Field name not found : Nope__c"
    # a DTD is refused (no entity expansion), in XML
    dtd = '<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "b">]><sObjects>&a;</sObjects>'
    reply = await call(
        stack, "rep1", "POST", f"job/{job['id']}/batch", content=dtd, headers=XML_HEADERS
    )
    assert reply.status_code == 400
    assert text(xml(reply), "exceptionCode") == "InvalidXML"


async def test_query_batches_in_json_and_csv_and_query_all(stack: UiStack) -> None:
    tag = uuid.uuid4().hex[:6]
    job = await json_job(stack, "rep1", operation="insert", object="Contact")
    records = [{"LastName": f"Q1 {tag} {n:04d}", "Name": "Q"} for n in range(1, 2501)]
    reply = await call(stack, "rep1", "POST", f"job/{job['id']}/batch", json=records)
    await wait_batch(stack, "rep1", job["id"], reply.json()["id"])
    soql = f"SELECT Id, LastName FROM Contact WHERE LastName LIKE 'Q1 {tag}%' ORDER BY LastName"
    query = await json_job(stack, "rep1", operation="query", object="Contact")
    # simple-salesforce sends the SOQL itself as the batch body
    reply = await call(
        stack, "rep1", "POST", f"job/{query['id']}/batch", content=soql, headers=JSON_HEADERS
    )
    assert reply.status_code == 201, reply.text
    batch = await wait_batch(stack, "rep1", query["id"], reply.json()["id"])
    assert (batch["state"], batch["numberRecordsProcessed"]) == ("Completed", 2500)
    base = f"job/{query['id']}/batch/{batch['id']}/result"
    listed = await call(stack, "rep1", "GET", base, headers=JSON_HEADERS)
    ids = listed.json()
    assert len(ids) == 2  # pages of 2,000
    assert all(i.startswith("752") for i in ids)
    seen = []
    for result in ids:
        page = await call(stack, "rep1", "GET", f"{base}/{result}", headers=JSON_HEADERS)
        seen += page.json()
    assert [r["LastName"] for r in seen] == [f"Q1 {tag} {n:04d}" for n in range(1, 2501)]
    assert seen[0]["attributes"]["type"] == "Contact"
    assert seen[0]["attributes"]["url"] == f"/services/data/v59.0/sobjects/Contact/{seen[0]['Id']}"

    # a CSV query job (as jsforce): result-list in XML, CSV result bodies
    created = await call(
        stack,
        "rep1",
        "POST",
        "job",
        content=f"<jobInfo xmlns='{NS[1:-1]}'><operation>queryAll</operation>"
        "<object>Contact</object><contentType>CSV</contentType></jobInfo>",
        headers=XML_HEADERS,
    )
    job_id = text(xml(created), "id")
    deleted = seen[0]["Id"]
    async with httpx.AsyncClient(base_url=stack.sfcrm_url, timeout=30) as client:
        gone = await client.delete(
            f"/services/data/v59.0/sobjects/Contact/{deleted}", headers=stack.headers("rep1")
        )
        assert gone.status_code == 204
    small = f"SELECT Id, LastName, IsDeleted FROM Contact WHERE Id = '{deleted}'"
    reply = await call(
        stack,
        "rep1",
        "POST",
        f"job/{job_id}/batch",
        content=small,
        headers={"Content-Type": "text/csv"},
    )
    batch_id = str(text(xml(reply), "id"))
    assert (await wait_batch(stack, "rep1", str(job_id), batch_id))["state"] == "Completed"
    result_list = xml(await call(stack, "rep1", "GET", f"job/{job_id}/batch/{batch_id}/result"))
    assert result_list.tag == NS + "result-list"
    [result] = [r.text for r in result_list.findall(NS + "result")]
    body = await call(stack, "rep1", "GET", f"job/{job_id}/batch/{batch_id}/result/{result}")
    rows = list(csv.DictReader(io.StringIO(body.text)))
    assert rows == [{"Id": deleted, "LastName": seen[0]["LastName"], "IsDeleted": "true"}]

    # a query on another object than the job's, or one that does not parse: the batch fails
    wrong = await call(
        stack,
        "rep1",
        "POST",
        f"job/{query['id']}/batch",
        content="SELECT Id FROM Account",
        headers=JSON_HEADERS,
    )
    assert wrong.json()["state"] == "Failed"
    assert wrong.json()["stateMessage"].startswith("InvalidBatch : Failed to process query")


async def test_abort_errors_and_who_sees_a_job(stack: UiStack) -> None:
    # no session, a bad session: InvalidSessionId with HTTP 400, as Salesforce answers
    missing = await call(stack, None, "POST", "job", json={}, headers=JSON_HEADERS)
    assert missing.status_code == 400
    assert missing.json()["exceptionCode"] == "InvalidSessionId"
    bad = await call(stack, None, "GET", "job/750000000000000AAA", headers={"X-SFDC-Session": "x"})
    assert bad.status_code == 400
    assert text(xml(bad), "exceptionCode") == "InvalidSessionId"
    unknown = await call(stack, "rep1", "GET", "nope", headers=JSON_HEADERS)
    assert (unknown.status_code, unknown.json()["exceptionCode"]) == (404, "InvalidUrl")
    wrong = await call(
        stack, "rep1", "POST", "job", json={"operation": "merge", "object": "Contact"}
    )
    assert (wrong.status_code, wrong.json()["exceptionCode"]) == (400, "InvalidJob")
    nobody = await call(
        stack, "rep1", "POST", "job", json={"operation": "insert", "object": "Nope"}
    )
    assert nobody.json()["exceptionCode"] == "InvalidJob"
    not_json = await call(stack, "rep1", "POST", "job", content=b"{", headers=JSON_HEADERS)
    assert (not_json.status_code, not_json.json()["exceptionCode"]) == (400, "InvalidJob")

    hard = {"operation": "hardDelete", "object": "Contact", "contentType": "JSON"}
    refused = await call(stack, "rep1", "POST", "job", json=hard)
    assert (refused.status_code, refused.json()["exceptionCode"]) == (400, "InvalidUser")
    async with httpx.AsyncClient(base_url=stack.sfcrm_url, timeout=30) as client:
        made = await client.post(
            "/services/data/v59.0/sobjects/Contact",
            json={"LastName": "Hard", "Name": "H"},
            headers=stack.headers("admin"),
        )
    doomed = made.json()["id"]
    purge = await json_job(stack, "admin", **hard)
    reply = await call(stack, "admin", "POST", f"job/{purge['id']}/batch", json=[{"Id": doomed}])
    assert (await wait_batch(stack, "admin", purge["id"], reply.json()["id"]))["state"] == (
        "Completed"
    )
    query = await json_job(stack, "admin", operation="queryAll", object="Contact")
    soql = f"SELECT Id FROM Contact WHERE Id = '{doomed}'"
    reply = await call(
        stack, "admin", "POST", f"job/{query['id']}/batch", content=soql, headers=JSON_HEADERS
    )
    batch = await wait_batch(stack, "admin", query["id"], reply.json()["id"])
    assert batch["numberRecordsProcessed"] == 0  # not even in the recycle bin

    job = await json_job(stack, "rep1", operation="insert", object="Contact")
    # another user, and an unknown job: the same InvalidJob answer
    other = await call(stack, "rep2", "GET", f"job/{job['id']}", headers=JSON_HEADERS)
    missing_job = await call(stack, "rep1", "GET", "job/750000000000000AAA", headers=JSON_HEADERS)
    assert other.status_code == missing_job.status_code == 400
    assert other.json()["exceptionCode"] == missing_job.json()["exceptionCode"] == "InvalidJob"
    theirs = await call(stack, "rep2", "POST", f"job/{job['id']}/batch", json=[{"LastName": "x"}])
    assert theirs.json()["exceptionCode"] == "InvalidJob"
    # an administrator sees it, and aborts it
    seen = await call(stack, "admin", "GET", f"job/{job['id']}", headers=JSON_HEADERS)
    assert seen.status_code == 200
    aborted = await call(stack, "admin", "POST", f"job/{job['id']}", json={"state": "Aborted"})
    assert aborted.json()["state"] == "Aborted"
    again = await call(stack, "rep1", "POST", f"job/{job['id']}", json={"state": "Closed"})
    assert again.json()["exceptionCode"] == "InvalidJobState"
    # another org: no such job, decided in Runtime
    other_org = TrustedCall(
        org_id="00D000000000000ZZZ",
        user_id=stack.user_ids["rep1"],
        session_id="",
        client_id=None,
        scopes=frozenset({"api"}),
        security_epoch=1,
        via="access_token",
    )
    async with unit_of_work(stack.sessions, readonly=True) as session:
        with pytest.raises(NotFound):
            await batches.info(session, other_org, job["id"])
