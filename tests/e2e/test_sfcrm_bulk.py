"""Bulk API 2.0 and 1.0 through the gateway over HTTPS with unmodified Salesforce clients
against `nexus up` (issue 26, ADR 0077): simple-salesforce's `sf.bulk2` (insert of 10,000
Contacts from a file, failed records, query pages, upsert, delete) and `sf.bulk` (JSON jobs
and batches: insert, upsert, delete, query, query_all), jsforce's `conn.bulk2` and
`conn.bulk` (XML jobs, CSV batches)."""

from __future__ import annotations

import csv
import io
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from simple_salesforce import Salesforce

from tests.conftest import Backend
from tests.e2e.sfcrm_stack import PASSWORD, VERSION, Stack, run_jsforce, sfcrm_stack

pytestmark = pytest.mark.e2e
ROWS = 10_000
WAIT = 0.2  # seconds simple-salesforce sleeps before it polls a job (its default is 5)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, backend: Backend) -> Iterator[Stack]:
    with sfcrm_stack(tmp_path_factory.mktemp("sfcrm-bulk"), backend) as running:
        yield running


def client(stack: Stack, user: str = "rep1") -> Salesforce:
    session = requests.Session()
    session.verify = str(stack.ca)
    session.trust_env = False
    return Salesforce(
        instance_url=stack.https, session_id=stack.tokens[user], version=VERSION, session=session
    )


def write_csv(path: Path, header: list[str], rows: list[list[str]]) -> Path:
    with path.open("w", newline="", encoding="utf-8") as out:
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(header)
        writer.writerows(rows)
    return path


def test_simple_salesforce_bulk2(stack: Stack, tmp_path: Path) -> None:
    sf = client(stack)
    tag = uuid.uuid4().hex[:8]
    bad = {17, 4242, 9999}  # no LastName: REQUIRED_FIELD_MISSING
    rows = [
        [f"E-{tag}-{n}", "" if n in bad else f"Bulk {tag} {n:05d}", f"C {n}", f"Title, {n}"]
        for n in range(1, ROWS + 1)
    ]
    header = ["External_Id__c", "LastName", "Name", "Title"]
    source = write_csv(tmp_path / "contacts.csv", header, rows)

    [inserted] = sf.bulk2.Contact.insert(csv_file=str(source), wait=WAIT)
    assert inserted["numberRecordsTotal"] == ROWS
    assert inserted["numberRecordsProcessed"] == ROWS
    assert inserted["numberRecordsFailed"] == len(bad)
    job_id = inserted["job_id"]
    failed = list(csv.DictReader(io.StringIO(sf.bulk2.Contact.get_failed_records(job_id))))
    assert sorted(int(r["External_Id__c"].rsplit("-", 1)[1]) for r in failed) == sorted(bad)
    assert all(r["sf__Error"].startswith("REQUIRED_FIELD_MISSING:") for r in failed)
    ok = list(csv.DictReader(io.StringIO(sf.bulk2.Contact.get_successful_records(job_id))))
    assert len(ok) == ROWS - len(bad)
    assert ok[0]["Title"].startswith("Title, ")  # a quoted comma came through
    unprocessed = list(csv.reader(io.StringIO(sf.bulk2.Contact.get_unprocessed_records(job_id))))
    assert unprocessed == [header]  # the header only: every row was processed

    pages = list(
        sf.bulk2.Contact.query(
            f"SELECT Id, LastName, Title FROM Contact WHERE LastName LIKE 'Bulk {tag}%'",
            max_records=4000,
            wait=WAIT,
        )
    )
    assert len(pages) == 3  # 9,997 records, 4,000 a page
    queried = [r for page in pages for r in csv.DictReader(io.StringIO(page))]
    assert len(queried) == ROWS - len(bad)
    assert {r["Id"] for r in queried} == {r["sf__Id"] for r in ok}

    changed = write_csv(
        tmp_path / "upsert.csv",
        ["External_Id__c", "LastName", "Name"],
        [[f"E-{tag}-1", f"Bulk {tag} renamed", "C 1"], [f"E-{tag}-new", f"Bulk {tag} new", "N"]],
    )
    [upserted] = sf.bulk2.Contact.upsert(
        csv_file=str(changed), external_id_field="External_Id__c", wait=WAIT
    )
    assert (upserted["numberRecordsProcessed"], upserted["numberRecordsFailed"]) == (2, 0)
    created = {
        r["External_Id__c"]: r["sf__Created"]
        for r in csv.DictReader(
            io.StringIO(sf.bulk2.Contact.get_successful_records(upserted["job_id"]))
        )
    }
    assert created == {f"E-{tag}-1": "false", f"E-{tag}-new": "true"}

    doomed = [r["sf__Id"] for r in ok[:50]]
    ids = write_csv(tmp_path / "delete.csv", ["Id"], [[i] for i in doomed])
    [deleted] = sf.bulk2.Contact.delete(csv_file=str(ids), wait=WAIT)
    assert (deleted["numberRecordsProcessed"], deleted["numberRecordsFailed"]) == (50, 0)
    left = sf.query(f"SELECT COUNT() FROM Contact WHERE LastName LIKE 'Bulk {tag}%'")
    assert left["totalSize"] == ROWS - len(bad) - 50 + 1  # and the upserted new one

    # another user neither sees the job nor its results
    other = client(stack, "rep2")
    reply = other.session.get(
        f"{stack.https}/services/data/v{VERSION}/jobs/ingest/{job_id}",
        headers={"Authorization": f"Bearer {stack.tokens['rep2']}"},
    )
    assert reply.status_code == 404
    assert reply.json()[0]["errorCode"] == "NOT_FOUND"


def test_simple_salesforce_bulk_v1(stack: Stack) -> None:
    sf = client(stack)
    tag = uuid.uuid4().hex[:8]
    records = [
        {"External_Id__c": f"V1-{tag}-{n}", "LastName": f"V1 {tag} {n:04d}", "Name": "V"}
        for n in range(1, 2501)
    ]
    records.append({"External_Id__c": f"V1-{tag}-bad", "LastName": None, "Name": "No name"})
    # two batches of one job, saved as soon as each is queued
    inserted = sf.bulk.Contact.insert(records, batch_size=1500)
    assert len(inserted) == 2501
    assert sum(1 for r in inserted if r["success"] and r["created"]) == 2500
    [bad] = [r for r in inserted if not r["success"]]
    assert bad["errors"][0]["statusCode"] == "REQUIRED_FIELD_MISSING"
    ids = [r["id"] for r in inserted if r["success"]]
    assert all(i.startswith("003") for i in ids)

    upserted = sf.bulk.Contact.upsert(
        [
            {"External_Id__c": f"V1-{tag}-1", "LastName": f"V1 {tag} renamed"},
            {"External_Id__c": f"V1-{tag}-new", "LastName": f"V1 {tag} new", "Name": "N"},
        ],
        "External_Id__c",
    )
    assert [(r["success"], r["created"]) for r in upserted] == [(True, False), (True, True)]
    assert upserted[0]["id"] == ids[0]

    soql = f"SELECT Id, LastName FROM Contact WHERE LastName LIKE 'V1 {tag}%'"
    queried = sf.bulk.Contact.query(soql, wait=WAIT)
    assert len(queried) == 2501  # over two result pages
    assert {r["Id"] for r in queried} == {*ids, upserted[1]["id"]}
    assert queried[0]["attributes"]["type"] == "Contact"

    deleted = sf.bulk.Contact.delete([{"Id": i} for i in ids[:20]])
    assert all(r["success"] for r in deleted)
    assert len(sf.bulk.Contact.query(soql, wait=WAIT)) == 2481
    assert len(sf.bulk.Contact.query_all(soql, wait=WAIT)) == 2501  # with the deleted ones

    # another user's job is no job of theirs; a closed job takes no batch
    headers = {"X-SFDC-Session": stack.tokens["rep1"], "Content-Type": "application/json"}
    base = f"{stack.https}/services/async/{VERSION}"
    job = sf.session.post(
        f"{base}/job",
        headers=headers,
        json={"operation": "insert", "object": "Contact", "contentType": "JSON"},
    ).json()
    theirs = sf.session.get(
        f"{base}/job/{job['id']}", headers={**headers, "X-SFDC-Session": stack.tokens["rep2"]}
    )
    assert theirs.status_code == 400
    assert theirs.json()["exceptionCode"] == "InvalidJob"
    sf.session.post(f"{base}/job/{job['id']}", headers=headers, json={"state": "Closed"})
    late = sf.session.post(
        f"{base}/job/{job['id']}/batch", headers=headers, json=[{"LastName": "Late"}]
    )
    assert late.status_code == 400
    assert late.json()["exceptionCode"] == "InvalidJobState"


def _jsforce(stack: Stack, script: str) -> dict[str, object]:
    config = {
        "loginUrl": stack.https,
        "clientId": stack.client_id,
        "clientSecret": stack.client_secret,
        "username": "rep1",
        "password": PASSWORD,
        "version": VERSION,
        "tag": f"JS{uuid.uuid4().hex[:8]}",
    }
    return run_jsforce(stack, script, config)


def test_jsforce_bulk2(stack: Stack) -> None:
    assert _jsforce(stack, "bulk2.mjs") == {"ok": True, "inserted": 300, "queried": 300}


def test_jsforce_bulk_v1(stack: Stack) -> None:
    assert _jsforce(stack, "bulk1.mjs") == {"ok": True, "inserted": 200, "queried": 200}
