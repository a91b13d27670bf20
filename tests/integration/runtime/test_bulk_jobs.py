"""Bulk API 2.0 ingest and query jobs (issue 26, ADR 0077) over the sfcrm dialect with a real
runtime-api, runtime-worker and sfcrm AppService on sockets, on SQLite and MariaDB: the job
state machine, results CSVs, partial failures, update/upsert/delete/hardDelete, abort,
another user's job, another org's job (a worker killed mid-job: test_bulk_crash)."""

from __future__ import annotations

import asyncio
import csv
import io
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import pytest_asyncio

from nexus.apps.sfcrm import bulk2
from nexus.contracts.errors import NotFound
from nexus.contracts.identity import TrustedCall
from nexus.platform.db.engine import unit_of_work
from nexus.runtime.bulk import service
from tests.conftest import Backend
from tests.integration.ui_stack import UiStack, ui_stack

pytestmark = pytest.mark.asyncio(loop_scope="module")
JOBS = "/services/data/v59.0/jobs"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(
    backend: Backend, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[UiStack]:
    async with ui_stack(backend, tmp_path_factory.mktemp("bulk"), worker=True) as running:
        yield running


async def call(stack: UiStack, user: str, method: str, path: str, **kwargs: Any) -> httpx.Response:
    headers = {**stack.headers(user), **kwargs.pop("headers", {})}
    async with httpx.AsyncClient(base_url=stack.sfcrm_url, timeout=60) as client:
        return await client.request(method, f"{JOBS}/{path}", headers=headers, **kwargs)


async def create(stack: UiStack, user: str, **job: Any) -> dict[str, Any]:
    reply = await call(stack, user, "POST", "ingest", json={"contentType": "CSV", **job})
    assert reply.status_code == 200, reply.text
    return dict(reply.json())


async def put(stack: UiStack, user: str, job_id: str, text: str) -> httpx.Response:
    return await call(
        stack,
        user,
        "PUT",
        f"ingest/{job_id}/batches",
        content=text.encode(),
        headers={"Content-Type": "text/csv"},
    )


async def close(stack: UiStack, user: str, job_id: str, state: str = "UploadComplete") -> Any:
    return await call(stack, user, "PATCH", f"ingest/{job_id}", json={"state": state})


async def wait(
    stack: UiStack, user: str, job_id: str, kind: str = "ingest", within: float = 120
) -> dict[str, Any]:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        reply = await call(stack, user, "GET", f"{kind}/{job_id}")
        assert reply.status_code == 200, reply.text
        job = dict(reply.json())
        if job["state"] in ("JobComplete", "Failed", "Aborted"):
            return job
        await asyncio.sleep(0.05)
    raise AssertionError(f"the job did not end: {job}")


async def results(stack: UiStack, user: str, job_id: str, which: str) -> list[dict[str, str]]:
    reply = await call(stack, user, "GET", f"ingest/{job_id}/{which}")
    assert reply.status_code == 200, reply.text
    assert reply.headers["content-type"].startswith("text/csv")
    return list(csv.DictReader(io.StringIO(reply.text)))


async def run(stack: UiStack, user: str, text: str, **job: Any) -> dict[str, Any]:
    created = await create(stack, user, **job)
    assert (await put(stack, user, created["id"], text)).status_code == 201
    assert (await close(stack, user, created["id"])).status_code == 200
    return await wait(stack, user, created["id"])


async def test_insert_two_uploads_partial_failure_and_the_results(stack: UiStack) -> None:
    tag = uuid.uuid4().hex[:6]
    created = await create(stack, "rep1", object="Contact", operation="insert")
    assert created["state"] == "Open"
    assert created["contentUrl"] == f"services/data/v59.0/jobs/ingest/{created['id']}/batches"
    assert (created["object"], created["operation"], created["columnDelimiter"]) == (
        "Contact",
        "insert",
        "COMMA",
    )
    job_id = created["id"]
    # Nexus's Contact.Name is a field of its own (Salesforce derives it): the files set it
    first = "FirstName,LastName,Name,Title\n" + "".join(
        f'Ann {n},"{tag} {n:03d}",Ann,"line one\nline two, quoted"\n' for n in range(1, 101)
    )
    second = f"FirstName,LastName,Name,Title\nNo,,No,Last name missing\nBob,B {tag},Bob,x\n"
    assert (await put(stack, "rep1", job_id, first)).status_code == 201
    assert (await put(stack, "rep1", job_id, second)).status_code == 201
    closed = await close(stack, "rep1", job_id)
    assert closed.status_code == 200, closed.text
    assert closed.json()["state"] == "UploadComplete"
    late = await put(stack, "rep1", job_id, "FirstName,LastName,Name,Title\nToo,Late,T,x\n")
    assert late.status_code == 409, late.text
    assert late.json()[0]["errorCode"] == "INVALIDJOBSTATE"

    job = await wait(stack, "rep1", job_id)
    assert job["state"] == "JobComplete", job
    assert (job["numberRecordsProcessed"], job["numberRecordsFailed"]) == (102, 1)
    assert job["jobType"] == "V2Ingest"
    ok = await results(stack, "rep1", job_id, "successfulResults")
    assert list(ok[0]) == ["sf__Id", "sf__Created", "FirstName", "LastName", "Name", "Title"]
    assert len(ok) == 101
    assert all(r["sf__Created"] == "true" and r["sf__Id"].startswith("003") for r in ok)
    assert ok[0]["Title"] == "line one\nline two, quoted"  # the quoted line break survived
    failed = await results(stack, "rep1", job_id, "failedResults")
    assert [(r["FirstName"], r["Title"]) for r in failed] == [("No", "Last name missing")]
    assert failed[0]["sf__Error"].startswith("REQUIRED_FIELD_MISSING:")
    assert failed[0]["sf__Id"] == ""
    assert await results(stack, "rep1", job_id, "unprocessedrecords") == []
    record = await stack_record(stack, ok[0]["sf__Id"])
    assert record["Title"] == "line one\nline two, quoted"


async def stack_record(stack: UiStack, record_id: str) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=stack.sfcrm_url, timeout=30) as client:
        reply = await client.get(
            f"/services/data/v59.0/sobjects/Contact/{record_id}", headers=stack.headers("rep1")
        )
    assert reply.status_code == 200, reply.text
    return dict(reply.json())


async def test_update_upsert_delete_and_hard_delete(stack: UiStack) -> None:
    tag = uuid.uuid4().hex[:6]
    rows = "".join(f"{tag}-{n},Up {tag} {n},Up\n" for n in range(1, 6))
    upserted = await run(
        stack,
        "rep1",
        "External_Id__c,LastName,Name\n" + rows,
        object="Contact",
        operation="upsert",
        externalIdFieldName="External_Id__c",
    )
    assert (upserted["state"], upserted["numberRecordsProcessed"]) == ("JobComplete", 5)
    ok = await results(stack, "rep1", upserted["id"], "successfulResults")
    ids = [r["sf__Id"] for r in ok]
    assert all(r["sf__Created"] == "true" for r in ok)

    again = await run(
        stack,
        "rep1",
        f"External_Id__c,LastName,Name,Title\n{tag}-1,Up {tag} 1,Up,Again\n"
        f"{tag}-9,New {tag},New,Fresh\n",
        object="Contact",
        operation="upsert",
        externalIdFieldName="External_Id__c",
    )
    again_ok = await results(stack, "rep1", again["id"], "successfulResults")
    created = {r["External_Id__c"]: r["sf__Created"] for r in again_ok}
    assert created == {f"{tag}-1": "false", f"{tag}-9": "true"}
    assert (await stack_record(stack, ids[0]))["Title"] == "Again"

    updated = await run(
        stack,
        "rep1",
        f"Id,Title\n{ids[1]},Updated\n{ids[2]},#N/A\n001000000000000AAA,Nope\n",
        object="Contact",
        operation="update",
    )
    assert (updated["numberRecordsProcessed"], updated["numberRecordsFailed"]) == (3, 1)
    assert (await stack_record(stack, ids[1]))["Title"] == "Updated"

    deleted = await run(stack, "rep1", f"Id\n{ids[3]}\n", object="Contact", operation="delete")
    assert (deleted["state"], deleted["numberRecordsFailed"]) == ("JobComplete", 0)
    refused = await call(
        stack, "rep1", "POST", "ingest", json={"object": "Contact", "operation": "hardDelete"}
    )
    assert refused.status_code == 403, refused.text  # hard delete needs an administrator
    hard = await run(stack, "admin", f"Id\n{ids[4]}\n", object="Contact", operation="hardDelete")
    assert (hard["state"], hard["numberRecordsFailed"]) == ("JobComplete", 0), hard
    async with httpx.AsyncClient(base_url=stack.sfcrm_url, timeout=30) as client:
        gone = await client.get(
            f"/services/data/v59.0/sobjects/Contact/{ids[4]}", headers=stack.headers("admin")
        )
    assert gone.status_code == 404


async def test_a_column_that_is_no_field_fails_the_job(stack: UiStack) -> None:
    text = "LastName,Name,Shoe_Size__c\nSmith,S,42\n"
    job = await run(stack, "rep1", text, object="Contact", operation="insert")
    assert job["state"] == "Failed"
    assert job["errorMessage"] == "InvalidBatch : Field name not found : Shoe_Size__c"
    unprocessed = await results(stack, "rep1", job["id"], "unprocessedrecords")
    assert unprocessed == [{"LastName": "Smith", "Name": "S", "Shoe_Size__c": "42"}]


async def test_bad_input_gets_salesforce_errors(
    stack: UiStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = await create(stack, "rep1", object="Contact", operation="insert")
    empty = await put(stack, "rep1", job["id"], "")
    assert empty.status_code == 400
    assert empty.json()[0]["errorCode"] == "INVALIDBATCH"
    monkeypatch.setattr(bulk2, "MAX_UPLOAD_BYTES", 1000)
    big = await put(stack, "rep1", job["id"], "LastName\n" + "x" * 2000 + "\n")
    assert big.status_code == 413
    assert big.json()[0]["errorCode"] == "REQUEST_ENTITY_TOO_LARGE"
    for body in (
        {"object": "Nope__c", "operation": "insert"},
        {"object": "Contact", "operation": "merge"},
    ):
        refused = await call(stack, "rep1", "POST", "ingest", json=body)
        assert refused.status_code == 400, body
        assert refused.json()[0]["errorCode"] == "INVALIDJOB"
    not_json = await call(stack, "rep1", "POST", "ingest", content=b"{nope")
    assert not_json.status_code == 400
    assert not_json.json()[0]["errorCode"] == "JSON_PARSER_ERROR"
    closed_empty = await close(stack, "rep1", job["id"])
    assert closed_empty.json()["state"] == "Failed"  # nothing was uploaded
    insert = {"object": "Contact", "operation": "insert"}
    viewer = await call(stack, "viewer", "POST", "ingest", json=insert)
    assert viewer.status_code == 403


async def test_abort_and_delete(stack: UiStack) -> None:
    job = await create(stack, "rep1", object="Contact", operation="insert")
    assert (await put(stack, "rep1", job["id"], "LastName\nAborted one\n")).status_code == 201
    aborted = await close(stack, "rep1", job["id"], "Aborted")
    assert aborted.json()["state"] == "Aborted"
    assert (await put(stack, "rep1", job["id"], "LastName\nx\n")).status_code == 409
    again = await close(stack, "rep1", job["id"], "Aborted")
    assert again.status_code == 409
    assert await results(stack, "rep1", job["id"], "unprocessedrecords") == [
        {"LastName": "Aborted one"}
    ]
    assert (await call(stack, "rep1", "DELETE", f"ingest/{job['id']}")).status_code == 204
    assert (await call(stack, "rep1", "GET", f"ingest/{job['id']}")).status_code == 404


async def test_another_user_neither_sees_nor_controls_a_job(stack: UiStack) -> None:
    job = await create(stack, "rep1", object="Contact", operation="insert")
    for method, path, body in (
        ("GET", f"ingest/{job['id']}", None),
        ("PATCH", f"ingest/{job['id']}", {"state": "Aborted"}),
        ("DELETE", f"ingest/{job['id']}", None),
        ("GET", f"ingest/{job['id']}/successfulResults", None),
    ):
        reply = await call(stack, "rep2", method, path, json=body)
        assert reply.status_code == 404, (method, path, reply.text)
    assert (await put(stack, "rep2", job["id"], "LastName\nx\n")).status_code == 404
    listed = await call(stack, "rep2", "GET", "ingest")
    assert job["id"] not in {j["id"] for j in listed.json()["records"]}
    mine = await call(stack, "rep1", "GET", "ingest")
    assert job["id"] in {j["id"] for j in mine.json()["records"]}
    assert mine.json()["done"] is True
    # an administrator ("Manage Data Integrations") sees and aborts it
    assert (await call(stack, "admin", "GET", f"ingest/{job['id']}")).status_code == 200
    aborted = await call(stack, "admin", "PATCH", f"ingest/{job['id']}", json={"state": "Aborted"})
    assert aborted.json()["state"] == "Aborted"

    other_org = TrustedCall(
        org_id="00D000000000001AAA",
        user_id=stack.user_ids["rep1"],
        session_id="",
        client_id=None,
        scopes=frozenset({"api"}),
        security_epoch=1,
        via="access_token",
    )
    async with unit_of_work(stack.sessions, readonly=True) as session:
        with pytest.raises(NotFound):
            await service.info(session, other_org, job["id"], kind="ingest")


async def test_a_query_job_pages_its_results(stack: UiStack) -> None:
    tag = uuid.uuid4().hex[:6]
    rows = "".join(f"Q{n:03d},Query {tag} {n:03d},Q\n" for n in range(1, 251))
    text = "FirstName,LastName,Name\n" + rows
    loaded = await run(stack, "rep1", text, object="Contact", operation="insert")
    assert loaded["state"] == "JobComplete"
    soql = f"SELECT Id, FirstName, LastName FROM Contact WHERE LastName LIKE 'Query {tag}%'"
    reply = await call(stack, "rep1", "POST", "query", json={"operation": "query", "query": soql})
    assert reply.status_code == 200, reply.text
    job = reply.json()
    assert job["state"] == "UploadComplete"
    done = await wait(stack, "rep1", job["id"], kind="query")
    assert (done["state"], done["numberRecordsProcessed"]) == ("JobComplete", 250)
    seen: list[dict[str, str]] = []
    locator = ""
    pages = 0
    while True:
        params = {"maxRecords": 100, **({"locator": locator} if locator else {})}
        page = await call(stack, "rep1", "GET", f"query/{job['id']}/results", params=params)
        assert page.status_code == 200, page.text
        pages += 1
        rows_seen = list(csv.DictReader(io.StringIO(page.text)))
        assert int(page.headers["Sforce-NumberOfRecords"]) == len(rows_seen)
        seen += rows_seen
        locator = page.headers["Sforce-Locator"]
        if locator == "null":
            break
    for bad in ("0", "\u00b2", "9" * 5000):  # `²` passes str.isdigit; int() refuses both others
        refused = await call(
            stack, "rep1", "GET", f"query/{job['id']}/results", params={"maxRecords": bad}
        )
        assert refused.status_code == 400, (bad[:5], refused.text)
    assert pages == 3
    assert sorted(r["LastName"] for r in seen) == [f"Query {tag} {n:03d}" for n in range(1, 251)]
    assert list(seen[0]) == ["Id", "FirstName", "LastName"]
    wrong = {"operation": "query", "query": "SELECT Nope FROM Contact"}
    bad = await call(stack, "rep1", "POST", "query", json=wrong)
    assert bad.status_code == 400
    assert (await call(stack, "rep2", "GET", f"query/{job['id']}/results")).status_code == 404


async def test_a_large_upload_is_split_on_record_boundaries(
    stack: UiStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pieces of ~300 bytes: many Runtime calls, cut only where a record ends (a quoted
    value with line breaks and doubled quotes is never split), CRLF and semicolons."""
    monkeypatch.setattr(bulk2, "PIECE_BYTES", 300)
    tag = uuid.uuid4().hex[:6]
    lines = [f'"{tag} {n:03d}";Split;"say ""hi""\r\n;then\r\nbye {n}"' for n in range(1, 121)]
    text = "LastName;Name;Title\r\n" + "".join(line + "\r\n" for line in lines)
    options = {"columnDelimiter": "SEMICOLON", "lineEnding": "CRLF"}
    created = await create(stack, "rep1", object="Contact", operation="insert", **options)
    assert (await put(stack, "rep1", created["id"], text)).status_code == 201
    assert (await close(stack, "rep1", created["id"])).status_code == 200
    job = await wait(stack, "rep1", created["id"])
    assert (job["state"], job["numberRecordsProcessed"], job["numberRecordsFailed"]) == (
        "JobComplete",
        120,
        0,
    )
    rep1 = TrustedCall(
        org_id=stack.org_id,
        user_id=stack.user_ids["rep1"],
        session_id="",
        client_id=None,
        scopes=frozenset({"api"}),
        security_epoch=1,
        via="access_token",
    )
    async with unit_of_work(stack.sessions, readonly=True) as session:
        pieces = await service.chunk_sizes(session, rep1, created["id"])
    assert len(pieces) > 10  # each Runtime call stored its piece as a chunk of its own
    reply = await call(stack, "rep1", "GET", f"ingest/{created['id']}/successfulResults")
    assert reply.text.startswith('"sf__Id";"sf__Created";"LastName";"Name";"Title"\r\n')
    ok = list(csv.DictReader(io.StringIO(reply.text, newline=""), delimiter=";"))
    assert sorted(r["LastName"] for r in ok) == [f"{tag} {n:03d}" for n in range(1, 121)]
    titles = {r["LastName"]: r["Title"] for r in ok}
    assert titles[f"{tag} 007"] == 'say "hi"\r\n;then\r\nbye 7'
    record = await stack_record(stack, ok[0]["sf__Id"])
    assert record["Title"].startswith('say "hi"')
