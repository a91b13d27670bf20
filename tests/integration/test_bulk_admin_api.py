"""The admin console's Bulk jobs API (`/admin/v1/runtime/bulk-jobs`) over real HTTP against a
real runtime-api, runtime-worker and sfcrm AppService, on SQLite and MariaDB: jobs made through
the Bulk API 2.0 dialect are listed newest first with their progress (records and chunks),
filtered and paged; one job's detail; an administrator aborts another user's job; System
Administrator only; another org's job is a 404; never a record value or a query's text."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import pytest_asyncio
from sqlalchemy import select

from nexus.gateway.route_table import load_route_table
from nexus.platform.db.engine import unit_of_work
from nexus.runtime.admin import models as admin_tables
from nexus.runtime.bulk.repository import BulkRepository
from tests.conftest import Backend
from tests.integration.ui_stack import UiStack, ui_stack

pytestmark = pytest.mark.asyncio(loop_scope="module")
API = "/admin/v1/runtime/bulk-jobs"
JOBS = "/services/data/v59.0/jobs"
OTHER_ORG = "00D0000000000OTHER"
ROWS = 2500  # three chunks of the bulk service's 1,000 rows


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(
    backend: Backend, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[UiStack]:
    async with ui_stack(backend, tmp_path_factory.mktemp("bulk-admin"), worker=True) as running:
        yield running


async def admin_api(
    stack: UiStack, method: str, path: str = "", user: str = "admin", **params: Any
) -> httpx.Response:
    async with httpx.AsyncClient(base_url=stack.runtime_url, timeout=30) as client:
        return await client.request(
            method, f"{API}{path}", headers=stack.headers(user), params=params
        )


async def listed(stack: UiStack, **params: Any) -> dict[str, Any]:
    reply = await admin_api(stack, "GET", **params)
    assert reply.status_code == 200, reply.text
    return dict(reply.json())


async def dialect(stack: UiStack, user: str, method: str, path: str, **kw: Any) -> httpx.Response:
    headers = {**stack.headers(user), **kw.pop("headers", {})}
    async with httpx.AsyncClient(base_url=stack.sfcrm_url, timeout=60) as client:
        return await client.request(method, f"{JOBS}/{path}", headers=headers, **kw)


async def open_job(stack: UiStack, user: str, obj: str = "Contact", **job: Any) -> str:
    job = {"object": obj, "operation": "insert", "contentType": "CSV", **job}
    reply = await dialect(stack, user, "POST", "ingest", json=job)
    assert reply.status_code == 200, reply.text
    return str(reply.json()["id"])


async def upload_and_close(stack: UiStack, user: str, job_id: str, text: str) -> None:
    put = await dialect(
        stack,
        user,
        "PUT",
        f"ingest/{job_id}/batches",
        content=text.encode(),
        headers={"Content-Type": "text/csv"},
    )
    assert put.status_code == 201, put.text
    closed = await dialect(
        stack, user, "PATCH", f"ingest/{job_id}", json={"state": "UploadComplete"}
    )
    assert closed.status_code == 200, closed.text


async def ended(stack: UiStack, job_id: str, within: float = 120) -> dict[str, Any]:
    """The job's detail in the admin API once it ended (as the console's refresh sees it)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        reply = await admin_api(stack, "GET", f"/{job_id}")
        assert reply.status_code == 200, reply.text
        job = dict(reply.json())
        if job["state"] in ("JobComplete", "Failed", "Aborted"):
            return job
        await asyncio.sleep(0.1)
    raise AssertionError(f"the job did not end: {job}")


async def insert_row(stack: UiStack, org_id: str, job_id: str, kind: str) -> None:
    """An Open job stored as the bulk service stores one, made a minute from now."""
    now = int(time.time() * 1000)
    async with unit_of_work(stack.sessions) as session:
        await BulkRepository(session).insert_job(
            org_id=org_id,
            job_id=job_id,
            kind=kind,
            user_id=stack.user_ids["rep1"],
            object_name="Contact",
            operation="insert",
            external_id_field=None,
            column_delimiter="COMMA",
            line_ending="LF",
            api_version="59.0",
            soql=None,
            columns=None,
            state="Open",
            error_message=None,
            uploaded_bytes=0,
            chunks=0,
            next_chunk=0,
            records_processed=0,
            records_failed=0,
            started_at_ms=None,
            processing_ms=0,
            created_at_ms=now + 60_000,
            updated_at_ms=now,
        )


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def jobs(stack: UiStack) -> dict[str, str]:
    """Jobs of three users' making, oldest first: a 2,500-row insert by rep1 with one bad row
    (done), an Open Account job by rep2, a query job by rep1 (done), another org's job, and
    a Bulk API 1.0 job (whose progress is its batches': not this console's yet)."""
    tag = uuid.uuid4().hex[:8]
    made = {"tag": tag}
    made["insert"] = await open_job(stack, "rep1")
    rows = "".join(
        f"C{n},{'' if n == 7 else f'Secret{tag} {n:04d}'},C\n" for n in range(1, ROWS + 1)
    )
    await upload_and_close(stack, "rep1", made["insert"], "FirstName,LastName,Name\n" + rows)
    assert (await ended(stack, made["insert"]))["state"] == "JobComplete"
    made["open"] = await open_job(stack, "rep2", "Account")
    soql = f"SELECT Id, LastName FROM Contact WHERE LastName LIKE 'Secret{tag}%'"
    query = await dialect(
        stack, "rep1", "POST", "query", json={"operation": "query", "query": soql}
    )
    assert query.status_code == 200, query.text
    made["query"] = query.json()["id"]
    assert (await ended(stack, made["query"]))["state"] == "JobComplete"
    made["other_org"] = "750OTHERORG0000AAA"
    await insert_row(stack, OTHER_ORG, made["other_org"], "ingest")  # the newest of any org
    made["v1"] = "750BULKV1JOB000AAA"
    await insert_row(stack, stack.org_id, made["v1"], "v1ingest")  # Bulk API 1.0: not shown
    return made


async def test_the_gateway_routes_it_to_runtime() -> None:
    route = load_route_table().match(f"{API}/750000000000000AAA/abort")
    assert route is not None
    assert route.upstream == "runtime-api"


async def test_only_a_system_administrator_may_list_or_abort(
    stack: UiStack, jobs: dict[str, str]
) -> None:
    for user in ("rep1", "viewer"):
        refused = await admin_api(stack, "GET", user=user)
        assert refused.status_code == 403, refused.text
        assert refused.json()["code"] == "INSUFFICIENT_ACCESS"
    # the creator may abort through the dialect, but not through the admin console
    refused = await admin_api(stack, "POST", f"/{jobs['open']}/abort", user="rep2")
    assert refused.status_code == 403
    async with httpx.AsyncClient(base_url=stack.runtime_url) as client:
        assert (await client.get(API)).status_code == 401
    assert (await state_of(stack, jobs["open"])) == "Open"


async def state_of(stack: UiStack, job_id: str) -> str:
    return str((await admin_api(stack, "GET", f"/{job_id}")).json()["state"])


async def test_the_list_shows_each_jobs_progress_newest_first(
    stack: UiStack, jobs: dict[str, str]
) -> None:
    page = await listed(stack)
    ids = [j["id"] for j in page["jobs"]]
    assert ids == [jobs["query"], jobs["open"], jobs["insert"]]  # never the other org's
    assert page["nextCursor"] is None
    by_id = {j["id"]: j for j in page["jobs"]}

    insert = by_id[jobs["insert"]]
    assert (insert["object"], insert["operation"], insert["state"]) == (
        "Contact",
        "insert",
        "JobComplete",
    )
    assert insert["createdBy"] == "rep1"
    assert insert["createdById"] == stack.user_ids["rep1"]
    assert (insert["recordsProcessed"], insert["recordsFailed"], insert["recordsTotal"]) == (
        ROWS,
        1,
        ROWS,
    )
    assert (insert["chunksDone"], insert["chunksTotal"]) == (3, 3)
    assert insert["createdAtMs"] <= insert["startedAtMs"] <= insert["finishedAtMs"]
    assert insert["abortable"] is False
    assert insert["errorMessage"] is None

    still_open = by_id[jobs["open"]]
    assert (still_open["state"], still_open["createdBy"], still_open["object"]) == (
        "Open",
        "rep2",
        "Account",
    )
    assert (still_open["recordsTotal"], still_open["chunksTotal"]) == (0, 0)
    assert still_open["startedAtMs"] is None
    assert still_open["finishedAtMs"] is None
    assert still_open["abortable"] is True

    query = by_id[jobs["query"]]
    assert (query["kind"], query["operation"]) == ("query", "query")
    assert query["recordsProcessed"] == query["recordsTotal"] == ROWS - 1
    assert "query" not in query  # a query's text can quote values
    assert jobs["tag"] not in str(page)  # never a record value


async def test_filters_and_cursor_paging(stack: UiStack, jobs: dict[str, str]) -> None:
    only = [j["id"] for j in (await listed(stack, state="Open"))["jobs"]]
    assert only == [jobs["open"]]
    assert [j["id"] for j in (await listed(stack, object="account"))["jobs"]] == [jobs["open"]]
    assert [j["id"] for j in (await listed(stack, operation="query"))["jobs"]] == [jobs["query"]]
    mine = await listed(stack, createdBy="REP1")
    assert [j["id"] for j in mine["jobs"]] == [jobs["query"], jobs["insert"]]
    assert (await listed(stack, createdBy="nobody-here"))["jobs"] == []
    combined = await listed(stack, createdBy="rep1", state="JobComplete", object="Contact")
    assert [j["id"] for j in combined["jobs"]] == [jobs["query"], jobs["insert"]]

    seen, cursor = [], None
    while True:
        page = await listed(stack, limit=1, **({"cursor": cursor} if cursor else {}))
        assert len(page["jobs"]) == 1
        seen.append(page["jobs"][0]["id"])
        cursor = page["nextCursor"]
        if cursor is None:
            break
    assert seen == [jobs["query"], jobs["open"], jobs["insert"]]


async def test_bad_filters_get_a_clear_400(stack: UiStack, jobs: dict[str, str]) -> None:
    del jobs
    for params, code in (
        ({"state": "Running"}, "BAD_REQUEST"),
        ({"operation": "merge"}, "BAD_REQUEST"),
        ({"limit": "0"}, "BAD_REQUEST"),
        ({"limit": "many"}, "BAD_REQUEST"),
        ({"cursor": "not-a-cursor"}, "INVALID_CURSOR"),
        ({"cursor": "99999999999999999999.750x"}, "INVALID_CURSOR"),
    ):
        reply = await admin_api(stack, "GET", **params)
        assert reply.status_code == 400, (params, reply.text)
        assert reply.json()["code"] == code, (params, reply.text)
        assert reply.json()["message"]


async def test_one_jobs_detail(stack: UiStack, jobs: dict[str, str]) -> None:
    reply = await admin_api(stack, "GET", f"/{jobs['insert']}")
    assert reply.status_code == 200, reply.text
    job = reply.json()
    assert job["columns"] == ["FirstName", "LastName", "Name"]
    assert job["uploadedBytes"] > ROWS * 10
    assert (job["columnDelimiter"], job["lineEnding"], job["apiVersion"]) == ("COMMA", "LF", "59.0")
    assert job["processingMs"] >= 0
    assert jobs["tag"] not in reply.text
    query = await admin_api(stack, "GET", f"/{jobs['query']}")
    assert query.status_code == 200
    assert jobs["tag"] not in query.text  # not even the query's LIKE pattern
    for missing in ("750000000000000AAA", "not-an-id!", "x" * 40):
        assert (await admin_api(stack, "GET", f"/{missing}")).status_code == 404


async def test_another_orgs_job_is_not_found(stack: UiStack, jobs: dict[str, str]) -> None:
    other = jobs["other_org"]
    assert (await admin_api(stack, "GET", f"/{other}")).status_code == 404
    assert (await admin_api(stack, "POST", f"/{other}/abort")).status_code == 404
    assert other not in str(await listed(stack))
    v1 = jobs["v1"]  # a Bulk API 1.0 job: not this console's (yet)
    assert (await admin_api(stack, "GET", f"/{v1}")).status_code == 404
    assert (await admin_api(stack, "POST", f"/{v1}/abort")).status_code == 404
    assert v1 not in str(await listed(stack))
    async with unit_of_work(stack.sessions, readonly=True) as session:
        row = await BulkRepository(session).job(OTHER_ORG, other)
    assert row is not None
    assert row.state == "Open"  # untouched


async def test_an_administrator_aborts_another_users_job(
    stack: UiStack, jobs: dict[str, str]
) -> None:
    reply = await admin_api(stack, "POST", f"/{jobs['open']}/abort")
    assert reply.status_code == 200, reply.text
    assert reply.json()["state"] == "Aborted"
    assert reply.json()["abortable"] is False
    assert reply.json()["finishedAtMs"] is not None
    # its creator sees it aborted through the dialect, and cannot upload to it any more
    seen = await dialect(stack, "rep2", "GET", f"ingest/{jobs['open']}")
    assert seen.json()["state"] == "Aborted"
    again = await admin_api(stack, "POST", f"/{jobs['open']}/abort")
    assert again.status_code == 409, again.text
    assert again.json()["code"] == "INVALIDJOBSTATE"
    done = await admin_api(stack, "POST", f"/{jobs['insert']}/abort")
    assert done.status_code == 409
    async with stack.engine.connect() as conn:
        audit = admin_tables.operator_audit.c
        rows = await conn.execute(
            select(audit.action, audit.target, audit.actor).where(audit.action == "bulk_job.abort")
        )
        aborts = [tuple(r) for r in rows]
    assert [(action, target) for action, target, _ in aborts] == [
        ("bulk_job.abort", f"bulk_job:{jobs['open']}")
    ]  # once: the refused abort is not an action
    assert aborts[0][2] not in (stack.user_ids["rep2"], "")  # the administrator did it
