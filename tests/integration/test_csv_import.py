"""CSV import as a background job (issue 9 point 5, ADR 0040), over the sfcrm UI API with a
real runtime-api and runtime-worker: 1,000 rows with 10 bad ones, progress that advances,
990 records saved as the uploading user, and an error report naming the 10 rows."""

from __future__ import annotations

import asyncio
import csv
import io
import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import pytest_asyncio
from sqlalchemy import insert

from nexus.platform.db.clock import db_now_ms
from nexus.platform.db.engine import unit_of_work
from nexus.runtime.imports import models as imports_tables
from nexus.runtime.imports.queue import enqueue_chunk
from tests.conftest import Backend
from tests.integration.ui_stack import UiStack, ui_stack

pytestmark = pytest.mark.asyncio(loop_scope="module")
V = "/services/data/v62.0/ui-api"
ROWS = 1000
NEGATIVE = {17, 250, 251, 600, 999}  # the validation rule refuses these
NOT_NUMBERS = {1, 333, 500, 777, 1000}  # AnnualRevenue is not a number


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(
    backend: Backend, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[UiStack]:
    async with ui_stack(backend, tmp_path_factory.mktemp("csv-import"), worker=True) as running:
        yield running


async def request(
    stack: UiStack, user: str, method: str, path: str, body: Any = None, **params: Any
) -> httpx.Response:
    async with httpx.AsyncClient(base_url=stack.sfcrm_url, timeout=60) as client:
        return await client.request(
            method, f"{V}/{path}", headers=stack.headers(user), json=body, params=params
        )


def accounts_csv() -> str:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["Account Name", "Industry", "AnnualRevenue", "External Customer Id", "Notes"])
    for n in range(1, ROWS + 1):
        revenue = "-5" if n in NEGATIVE else "abc" if n in NOT_NUMBERS else str(n * 1000)
        writer.writerow([f"Imported {n:04d}", "Technology", revenue, f"EXT-{n}", "ignored"])
    return out.getvalue()


async def wait_done(stack: UiStack, user: str, job_id: str) -> tuple[dict[str, Any], list[int]]:
    seen: list[int] = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        reply = await request(stack, user, "GET", f"imports/{job_id}")
        assert reply.status_code == 200, reply.text
        job = reply.json()
        seen.append(job["processed"])
        if job["state"] in ("done", "failed"):
            return job, seen
        await asyncio.sleep(0.02)
    raise AssertionError(f"the import did not finish: {seen[-1]} of {ROWS}")


async def test_a_thousand_rows_with_ten_bad_ones(stack: UiStack) -> None:
    started = time.monotonic()
    created = await request(
        stack, "rep1", "POST", "imports", {"objectApiName": "Account", "csv": accounts_csv()}
    )
    assert created.status_code == 201, created.text
    job = created.json()
    assert job["total"] == ROWS
    assert job["mapping"] == {  # matched by label or API name; "Notes" matches nothing
        "Account Name": "Name",
        "Industry": "Industry",
        "AnnualRevenue": "AnnualRevenue",
        "External Customer Id": "External_Customer_Id__c",
    }
    done, seen = await wait_done(stack, "rep1", job["id"])
    elapsed = time.monotonic() - started
    assert done["state"] == "done", done
    assert (done["processed"], done["succeeded"], done["failed"]) == (ROWS, 990, 10)
    assert seen == sorted(seen)  # progress only advances
    assert any(0 < p < ROWS for p in seen), seen  # ... and is seen advancing
    print(f"imported {ROWS} rows in {elapsed:.2f} s")

    report = await request(stack, "rep1", "GET", f"imports/{job['id']}/errors")
    assert report.status_code == 200
    assert report.headers["content-type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(report.text)))
    assert [int(r["Row"]) for r in rows] == sorted(NEGATIVE | NOT_NUMBERS)
    by_row = {int(r["Row"]): r["Error"] for r in rows}
    assert all(by_row[n] == "revenue cannot be negative" for n in NEGATIVE)
    assert all(by_row[n] == "INVALID_TYPE_VALUE: AnnualRevenue" for n in NOT_NUMBERS)
    assert "abc" not in report.text  # no values are kept

    listed = await request(
        stack, "rep1", "GET", "list-ui/Account/All_Accounts", q="Imported", pageSize=10
    )
    assert listed.json()["records"]["count"] == 990
    # the records are the uploader's (sharing: rep1 owns them, so rep1 may edit them)
    assert all(r["access"]["editable"] for r in listed.json()["records"]["records"])
    # another user does not see the job
    assert (await request(stack, "rep2", "GET", f"imports/{job['id']}")).status_code == 404


async def test_upsert_by_external_id_updates_and_creates(stack: UiStack) -> None:
    text = (
        "External_Customer_Id__c,Name,Rating\n"
        "EXT-2,Imported 0002 (updated),Hot\n"
        "NEW-1,Fresh,\n"
        ",No id,Hot\n"
    )
    created = await request(
        stack,
        "rep1",
        "POST",
        "imports",
        {
            "objectApiName": "Account",
            "operation": "upsert",
            "externalIdFieldName": "External_Customer_Id__c",
            "csv": text,
        },
    )
    assert created.status_code == 201, created.text
    done, _ = await wait_done(stack, "rep1", created.json()["id"])
    assert (done["succeeded"], done["failed"]) == (2, 1)
    updated = await request(stack, "rep1", "GET", "list-ui/Account/All_Accounts", q="(updated)")
    assert updated.json()["records"]["count"] == 1
    fresh = await request(stack, "rep1", "GET", "list-ui/Account/All_Accounts", q="Fresh")
    assert fresh.json()["records"]["count"] == 1
    report = await request(stack, "rep1", "GET", f"imports/{done['id']}/errors")
    assert "3,REQUIRED_FIELD_MISSING: External_Customer_Id__c" in report.text


async def test_an_import_the_user_may_not_do_is_refused_up_front(stack: UiStack) -> None:
    small = "Name\nX\n"
    viewer = await request(
        stack, "viewer", "POST", "imports", {"objectApiName": "Account", "csv": small}
    )
    assert viewer.status_code == 403
    bad_map = await request(
        stack,
        "rep1",
        "POST",
        "imports",
        {"objectApiName": "Account", "csv": small, "mapping": {"Name": "NoSuchField__c"}},
    )
    assert bad_map.status_code == 400
    assert bad_map.json()[0]["errorCode"] == "INVALID_IMPORT"
    empty = await request(
        stack, "rep1", "POST", "imports", {"objectApiName": "Account", "csv": "Name\n"}
    )
    assert empty.status_code == 400
    no_ext = await request(
        stack,
        "rep1",
        "POST",
        "imports",
        {
            "objectApiName": "Account",
            "operation": "upsert",
            "externalIdFieldName": "Name",
            "csv": small,
        },
    )
    assert no_ext.status_code == 400


async def test_a_job_whose_runner_died_is_resumed_where_it_stopped(stack: UiStack) -> None:
    """A worker that died after a job's first chunk (rows 1-2 saved and deleted, progress 2)
    left the item of the next chunk behind (committed with that chunk); the worker takes it
    and saves only the rest."""
    job_id = uuid.uuid4().hex
    rep1 = stack.user_ids["rep1"]
    async with unit_of_work(stack.sessions) as session:
        await session.execute(
            insert(imports_tables.import_job).values(
                org_id=stack.org_id,
                job_id=job_id,
                user_id=rep1,
                object_name="Account",
                mode="insert",
                mapping=json.dumps({"Name": "Name"}),
                state="running",
                total=5,
                processed=2,
                succeeded=2,
                failed=0,
                created_at_ms=db_now_ms(),
                updated_at_ms=db_now_ms(),
            )
        )
        await session.execute(
            insert(imports_tables.import_row),
            [
                {
                    "org_id": stack.org_id,
                    "job_id": job_id,
                    "row_no": n,
                    "fields": json.dumps({"Name": f"Resumed {n}"}),
                }
                for n in (3, 4, 5)
            ],
        )
        await enqueue_chunk(session, stack.org_id, job_id, follows=True)
    done, _ = await wait_done(stack, "rep1", job_id)
    assert (done["state"], done["processed"], done["succeeded"]) == ("done", 5, 5)
    resumed = await request(stack, "rep1", "GET", "list-ui/Account/All_Accounts", q="Resumed")
    names = [r["fields"]["Name"]["value"] for r in resumed.json()["records"]["records"]]
    assert names == ["Resumed 3", "Resumed 4", "Resumed 5"]


async def test_a_chunk_that_keeps_failing_fails_its_job_with_the_error_class_only(
    stack: UiStack,
) -> None:
    """Row 2's stored values are unreadable (a corrupt row), so every attempt of the job's
    chunk fails; once the engine's attempts are spent the job is failed, naming the error's
    class and nothing of the row, and none of the chunk's rows is saved."""
    job_id = uuid.uuid4().hex
    async with unit_of_work(stack.sessions) as session:
        await session.execute(
            insert(imports_tables.import_job).values(
                org_id=stack.org_id,
                job_id=job_id,
                user_id=stack.user_ids["rep1"],
                object_name="Account",
                mode="insert",
                mapping=json.dumps({"Name": "Name"}),
                state="queued",
                total=3,
                processed=0,
                succeeded=0,
                failed=0,
                created_at_ms=db_now_ms(),
                updated_at_ms=db_now_ms(),
            )
        )
        fields = [json.dumps({"Name": "Doomed 1"}), '{"Name": "secret-value', "{}"]
        await session.execute(
            insert(imports_tables.import_row),
            [
                {"org_id": stack.org_id, "job_id": job_id, "row_no": n, "fields": f}
                for n, f in enumerate(fields, start=1)
            ],
        )
        await enqueue_chunk(session, stack.org_id, job_id)
    failed, seen = await wait_done(stack, "rep1", job_id)
    assert failed["state"] == "failed", failed
    assert failed["error"] == "JSONDecodeError: chunk failed"
    assert (failed["processed"], failed["succeeded"], failed["failed"]) == (0, 0, 0)
    assert set(seen) == {0}
    doomed = await request(stack, "rep1", "GET", "list-ui/Account/All_Accounts", q="Doomed")
    assert doomed.json()["records"]["count"] == 0
