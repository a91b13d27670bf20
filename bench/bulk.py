#!/usr/bin/env python
"""Bulk API 2.0 ingest throughput end to end vs `Mutate` called directly, same DB, same run.

    .venv/bin/python bench/bulk.py [--records 100000] [--backend sqlite|mariadb|both]

For each backend: `nexus up` (every role a process of its own; MariaDB: a throwaway mariadbd
started like the tests do) with the sfcrm package's Contact. Measures
  * mutate: N Contacts through `mutate` in batches of 200, called directly in this process
    as the first admin (one transaction per batch; what bench/records.py measures), half of
    them before the bulk job and half after it, so a machine whose load changes during the
    run weighs on both alike;
  * bulk: N Contacts as one Bulk API 2.0 ingest job over HTTP through the gateway, the sfcrm
    App, runtime-api and runtime-worker: from the job's creation through the CSV upload and
    UploadComplete to the job read back as JobComplete.
  * query: a Bulk API 2.0 query job over those N Contacts, its result read back in pages of
    50,000 (streamed), and each role's peak memory (VmHWM) before and after it: a result of
    any size passes through every process a chunk at a time.
Prints one JSON document with records/s and the ratio (bulk rate / mutate rate).
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import io
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx

from nexus.contracts.identity import TrustedCall
from nexus.contracts.records import MAX_BATCH, MutateItem, MutateRequest
from nexus.contracts.roles import LogicalService
from nexus.identity.repository import IdentityRepository
from nexus.platform.db.engine import create_engine, session_factory, unit_of_work
from nexus.runtime.access.service import AccessCache
from nexus.runtime.metadata.view import MetadataCache
from nexus.runtime.records.mutate import mutate
from tests.conftest import Backend
from tests.e2e.test_stack import running_stack

PASSWORD = "bench-admin-password-1"
HEADER = ["FirstName", "LastName", "Name", "Email", "Title", "Phone"]


def row(prefix: str, i: int) -> list[str]:
    return [
        f"First{i}",
        f"{prefix} {i:06d}",
        f"First{i} {prefix}",
        f"c{i}@bench.test",
        "Buyer",
        f"+1 555 {i % 10000:04d}",
    ]


async def direct_mutate(url: str, n: int, first: int = 0) -> float:
    """Seconds to create n Contacts with `mutate`, batches of 200, as the first admin."""
    engine = create_engine(url, application_name="bench")
    sessions = session_factory(engine)
    async with unit_of_work(sessions, readonly=True) as session:
        repo = IdentityRepository(session)
        admin = await repo.user_by_username("admin")
        assert admin is not None
        org = await repo.org(admin["org_id"])
    caller = TrustedCall(
        org_id=admin["org_id"],
        user_id=admin["user_id"],
        session_id="0Ak000000000000AAA",
        client_id=None,
        scopes=frozenset({"api"}),
        security_epoch=int(org["security_epoch"]),
        via="delegation",
    )
    metadata, access_cache = MetadataCache(), AccessCache()
    started = time.perf_counter()
    for start in range(first, first + n, MAX_BATCH):
        items = [
            MutateItem(
                op="create",
                object="Contact",
                fields=dict(zip(HEADER, row("Direct", i), strict=True)),
            )
            for i in range(start, min(first + n, start + MAX_BATCH))
        ]
        async with unit_of_work(sessions) as session:
            view = await metadata.view(session, caller.org_id)
            access = await access_cache.for_caller(session, caller)
            answer = await mutate(
                session, view=view, access=access, caller=caller, request=MutateRequest(items=items)
            )
        assert all(r.success for r in answer.results), answer.results[0]
    elapsed = time.perf_counter() - started
    await engine.dispose()
    return elapsed


def bulk_ingest(base_url: str, token: str, n: int) -> tuple[float, dict[str, Any]]:
    """Seconds from creating the job to reading it back JobComplete; the job's info."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(HEADER)
    writer.writerows(row("Bulk", i) for i in range(n))
    body = out.getvalue().encode()
    jobs = f"{base_url}/services/data/v59.0/jobs/ingest"
    auth = {"Authorization": f"Bearer {token}"}
    with httpx.Client(timeout=300, headers=auth) as http:
        started = time.perf_counter()
        job = http.post(jobs, json={"object": "Contact", "operation": "insert"}).json()
        put = http.put(
            f"{jobs}/{job['id']}/batches", content=body, headers={"Content-Type": "text/csv"}
        )
        assert put.status_code == 201, put.text
        closed = http.patch(f"{jobs}/{job['id']}", json={"state": "UploadComplete"})
        assert closed.status_code == 200, closed.text
        uploaded = time.perf_counter() - started
        while True:
            info = http.get(f"{jobs}/{job['id']}").json()
            if info["state"] in ("JobComplete", "Failed", "Aborted"):
                break
            time.sleep(0.2)
        elapsed = time.perf_counter() - started
    assert info["state"] == "JobComplete", info
    assert info["numberRecordsProcessed"] == n, info
    assert info["numberRecordsFailed"] == 0, info
    return elapsed, {**info, "upload_seconds": round(uploaded, 2)}


def role_memory(supervisor: int) -> dict[str, int]:
    """Peak resident memory (kB) of each role process `nexus up` started."""
    out: dict[str, int] = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            status = (proc / "status").read_text()
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        if int(fields.get("PPid", "0")) != supervisor:
            continue
        role = next((a.decode() for a in cmdline if a.startswith(b"--role=")), "")
        app = next((a.decode() for a in cmdline if a.startswith(b"--app=")), "")
        name = (role.removeprefix("--role=") + app.replace("--app=", ":")) or proc.name
        out[name] = int(fields.get("VmHWM", "0 kB").split()[0])
    return out


def bulk_query(base_url: str, token: str, n: int) -> tuple[float, int]:
    """Seconds from creating a query job over the bulk-loaded Contacts to its last page
    read (streamed, 50,000 records a page); how many records came back."""
    jobs = f"{base_url}/services/data/v59.0/jobs/query"
    soql = "SELECT Id, FirstName, LastName, Email, Title FROM Contact WHERE LastName LIKE 'Bulk %'"
    seen = 0
    with httpx.Client(timeout=300, headers={"Authorization": f"Bearer {token}"}) as http:
        started = time.perf_counter()
        job = http.post(jobs, json={"operation": "query", "query": soql}).json()
        while http.get(f"{jobs}/{job['id']}").json()["state"] != "JobComplete":
            time.sleep(0.2)
        locator = ""
        while locator != "null":
            params: dict[str, Any] = {"maxRecords": 50_000}
            if locator:
                params["locator"] = locator
            with http.stream("GET", f"{jobs}/{job['id']}/results", params=params) as page:
                assert page.status_code == 200, page.read()
                locator = page.headers["Sforce-Locator"]
                seen += int(page.headers["Sforce-NumberOfRecords"])
                for _ in page.iter_bytes():
                    pass
        elapsed = time.perf_counter() - started
    assert seen == n, seen
    return elapsed, seen


def run(backend: Backend, folder: Path, n: int) -> dict[str, Any]:
    with running_stack(folder, backend, NEXUS_BOOTSTRAP_ADMIN_PASSWORD=PASSWORD) as (up, base, _):
        url = f"http://127.0.0.1:{base}"
        token = httpx.post(
            f"{url}/services/oauth2/token",
            data={"grant_type": "password", "username": "admin", "password": PASSWORD},
            timeout=30,
        ).json()["access_token"]
        database = backend.url(LogicalService.RUNTIME)
        before = asyncio.run(direct_mutate(database, n // 2))
        bulk, info = bulk_ingest(url, token, n)
        after = asyncio.run(direct_mutate(database, n - n // 2, first=n // 2))
        direct = before + after
        memory_before = role_memory(up.pid)
        query_s, _ = bulk_query(url, token, n)
        memory_after = role_memory(up.pid)
    return {
        "mutate_records_per_s": round(n / direct),
        "mutate_before_after_records_per_s": [
            round((n // 2) / before),
            round((n - n // 2) / after),
        ],
        "bulk_records_per_s": round(n / bulk),
        "bulk_seconds": round(bulk, 2),
        "bulk_upload_seconds": info["upload_seconds"],
        "bulk_processing_ms": info["totalProcessingTime"],
        "ratio": round(direct / bulk, 2),
        "query_records_per_s": round(n / query_s),
        "peak_rss_kb_before_query": memory_before,
        "peak_rss_kb_after_query": memory_after,
    }


def main(n: int, backends: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "machine": f"{os.uname().nodename} {os.cpu_count()} cpu, Python {sys.version.split()[0]}",
        "records": n,
    }
    for name in backends:
        folder = Path(tempfile.mkdtemp(prefix=f"nexus-bench-bulk-{name}-"))
        backend = Backend(name=name)
        if name == "sqlite":
            for service in LogicalService:  # where `nexus up` keeps them (under its var dir)
                path = folder / "var" / f"{service.value}.sqlite3"
                backend.urls[service] = f"sqlite+aiosqlite:///{path}"
            out[name] = run(backend, folder, n)
            continue
        from tests.support.mariadb import find_server_binary, start_mariadb

        binary = find_server_binary()
        if binary is None:
            out[name] = "skipped: mariadbd not found"
            continue
        server = start_mariadb(binary)
        try:
            for service in LogicalService:
                backend.urls[service] = server.create_database(f"bench_bulk_{service.value}")
            out[name] = run(backend, folder, n)
        finally:
            server.stop()
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--backend", choices=["sqlite", "mariadb", "both"], default="both")
    args = parser.parse_args()
    chosen = ["sqlite", "mariadb"] if args.backend == "both" else [args.backend]
    print(json.dumps(main(args.records, chosen), indent=2))
