"""AcceptCommand's batch form on a real runtime-api, both backends: per-command results in
one transaction (duplicates inside a batch and across batches, a conflict or a bad command
beside accepted ones), statements that do not grow with the batch, a crash between the commit
and the answer (the retry is a duplicate, the effect happens once), and the integration
executor coalescing concurrent commands into few requests."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio
from sqlalchemy import func, select

from nexus.contracts.commands import (
    COMMANDS_BATCH_PATH,
    MAX_BATCH_COMMANDS,
    AcceptCommandRequest,
    RecordCommand,
)
from nexus.integration.delivery.executor import CommandExecutor
from nexus.platform.db.engine import reading, session_factory
from nexus.platform.http_client import internal_client
from nexus.platform.secrets import workload_signer
from nexus.platform.workqueue.store import Claimed
from nexus.platform.workqueue.worker import Retryable, Terminal
from nexus.runtime.inbox import models as inbox_tables
from nexus.runtime.inbox.accept import FAILPOINT_AFTER_COMMIT, CommandInbox
from nexus.runtime.inbox.queue import inbox_store
from nexus.runtime.metadata.view import MetadataCache
from tests.integration.runtime.test_statement_budget import counting
from tests.support.commands import (
    ROOT,
    RuntimeDb,
    command,
    contact,
    free_port,
    headers,
    runtime_api,
    start_worker,
    stop_worker,
    wait_final,
)
from tests.support.commands import db as db  # noqa: PLC0414  (fixture)

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def api(db: RuntimeDb) -> AsyncIterator[httpx.AsyncClient]:
    async with (
        runtime_api(db, command_max_body_bytes=4096) as url,
        httpx.AsyncClient(base_url=url, timeout=30) as client,
    ):
        yield client


def entry(
    db: RuntimeDb, body: dict[str, Any], message_id: str | None = None, **extra: Any
) -> dict[str, Any]:
    return {
        "org_id": db.org_id,
        "message_id": message_id or uuid.uuid4().hex,
        "command": body,
        "correlation": {"event_id": "evt-b"},
        **extra,
    }


async def send_batch(
    api: httpx.AsyncClient, db: RuntimeDb, commands: list[Any]
) -> list[dict[str, Any]]:
    reply = await api.post(COMMANDS_BATCH_PATH, json={"commands": commands}, headers=headers(db))
    assert reply.status_code == 200, reply.text
    results: list[dict[str, Any]] = reply.json()["results"]
    assert len(results) == len(commands)
    return results


async def stored(db: RuntimeDb, message_ids: list[str]) -> dict[str, str]:
    """message id -> work id of the dedupe rows of these messages."""
    t = inbox_tables.inbox_message
    keys = [f"integration:{mid}" for mid in message_ids]
    async with reading(db.engine) as conn:
        rows = await conn.execute(
            select(t.c.message_key, t.c.work_id).where(t.c.message_key.in_(keys))
        )
        found = {str(r[0]).split(":", 1)[1]: str(r[1]) for r in rows}
        items = inbox_tables.inbox.items
        enqueued = (
            await conn.execute(select(func.count()).where(items.c.id.in_(list(found.values()))))
        ).scalar_one()
    assert enqueued == len(found)  # a dedupe row and its work item, always together
    return found


async def test_duplicates_inside_a_batch_and_across_batches_are_accepted_once(
    api: httpx.AsyncClient, db: RuntimeDb
) -> None:
    first = [entry(db, command(f"dup-{n}", LastName=f"L{n}")) for n in range(5)]
    repeat = dict(first[1])
    results = await send_batch(api, db, [*first, repeat])
    assert [r["status"] for r in results] == ["accepted"] * 5 + ["duplicate"]
    assert results[5]["work_id"] == results[1]["work_id"]
    assert [r["message_id"] for r in results] == [e["message_id"] for e in [*first, repeat]]
    ids = [e["message_id"] for e in first]
    assert await stored(db, ids) == {r["message_id"]: r["work_id"] for r in results[:5]}

    fresh = entry(db, command("dup-new", LastName="N"))
    again = await send_batch(api, db, [first[3], fresh, first[0]])
    assert [r["status"] for r in again] == ["duplicate", "accepted", "duplicate"]
    assert again[0]["work_id"] == results[3]["work_id"]
    assert again[2]["work_id"] == results[0]["work_id"]


async def test_a_conflict_and_bad_commands_are_refused_alone(
    api: httpx.AsyncClient, db: RuntimeDb
) -> None:
    taken = entry(db, command("cf-1", LastName="First"))
    assert (await send_batch(api, db, [taken]))[0]["status"] == "accepted"
    good = [entry(db, command(f"cf-good-{n}", LastName="G")) for n in range(3)]
    batch: list[Any] = [
        good[0],
        {**taken, "command": command("cf-1", LastName="Other")},  # same key, other command
        entry(db, command("cf-x", object_name="Spaceship__c")),  # unknown object
        good[1],
        entry(db, {**command("cf-y"), "op": "merge"}),  # malformed
        42,  # not even an object
        entry(db, command("cf-z", LastName="A" * 5000)),  # above the per-command limit
        entry(db, command("cf-w", LastName="A", Shoe_Size__c=44)),  # unknown field
        entry(db, command("cf-v"), org_id="00D000000000000AAA"),  # not the token's org
        good[2],
    ]
    results = await send_batch(api, db, batch)
    summary = [
        (r["status"], (r.get("error") or {}).get("status"), (r.get("error") or {}).get("code"))
        for r in results
    ]
    assert summary == [
        ("accepted", None, None),
        ("conflict", 409, "IDEMPOTENCY_CONFLICT"),
        ("refused", 404, "NOT_FOUND"),
        ("accepted", None, None),
        ("refused", 400, "BAD_REQUEST"),
        ("refused", 400, "BAD_REQUEST"),
        ("refused", 413, "PAYLOAD_TOO_LARGE"),
        ("refused", 400, "INVALID_FIELD"),
        ("refused", 403, "ORG_MISMATCH"),
        ("accepted", None, None),
    ]
    assert all(not r["error"]["retryable"] for r in results if r["status"] != "accepted")
    assert results[5]["message_id"] is None  # nothing readable to answer with
    assert results[7]["error"]["fields"] == {"Shoe_Size__c": "no such field"}
    assert "command.op" in results[4]["error"]["fields"]
    accepted = await stored(db, [e["message_id"] for e in good])
    assert accepted == {r["message_id"]: r["work_id"] for r in results if r["work_id"]}


async def test_the_batch_envelope_is_bounded(api: httpx.AsyncClient, db: RuntimeDb) -> None:
    too_many = [entry(db, command(f"many-{n}")) for n in range(MAX_BATCH_COMMANDS + 1)]
    reply = await api.post(COMMANDS_BATCH_PATH, json={"commands": too_many}, headers=headers(db))
    assert reply.status_code == 400
    empty = await api.post(COMMANDS_BATCH_PATH, json={"commands": []}, headers=headers(db))
    assert empty.status_code == 400
    anonymous = await api.post(COMMANDS_BATCH_PATH, json={"commands": [entry(db, command("a"))]})
    assert anonymous.status_code in (400, 401)
    assert await stored(db, [c["message_id"] for c in too_many]) == {}


async def test_concurrent_batches_of_the_same_messages_accept_each_once(
    api: httpx.AsyncClient, db: RuntimeDb
) -> None:
    batch = [entry(db, command(f"race-b-{n}", LastName="R")) for n in range(20)]
    replies = await asyncio.gather(*(send_batch(api, db, batch[n:] + batch[:n]) for n in range(4)))
    by_message: dict[str, set[str]] = {}
    statuses: dict[str, list[str]] = {}
    for results in replies:
        for r in results:
            by_message.setdefault(r["message_id"], set()).add(r["work_id"])
            statuses.setdefault(r["message_id"], []).append(r["status"])
    assert all(len(work_ids) == 1 for work_ids in by_message.values())
    assert all(sorted(s) == ["accepted"] + ["duplicate"] * 3 for s in statuses.values())
    assert await stored(db, list(by_message)) == {k: v.pop() for k, v in by_message.items()}


async def test_statements_do_not_grow_with_the_batch(db: RuntimeDb) -> None:
    inbox = CommandInbox(inbox_store(), session_factory(db.engine), max_body_bytes=65536)
    metadata = MetadataCache()

    def requests(n: int, tag: str) -> list[AcceptCommandRequest]:
        return [
            AcceptCommandRequest(
                org_id=db.org_id,
                message_id=f"{tag}-{uuid.uuid4().hex}",
                command=RecordCommand.model_validate(command(f"{tag}-{i}", LastName="S")),
            )
            for i in range(n)
        ]

    await inbox.accept_batch(metadata, workload="integration", requests=requests(1, "warm"))
    counts = {}
    for size in (1, 50):
        with counting(db.engine) as statements:
            outcomes = await inbox.accept_batch(
                metadata, workload="integration", requests=requests(size, f"size{size}")
            )
        assert all(o.status == "accepted" for o in outcomes)  # type: ignore[union-attr]
        counts[size] = len(statements)
    # binding, dedupe read, revision, dedupe insert, enqueue (queue, lanes, clock, items, ...)
    assert counts[50] == counts[1] <= 10, counts


# ---------------------------------------------------------------------------- executor


def claimed(db: RuntimeDb, external_id: str) -> Claimed:
    work_id = f"w{uuid.uuid4().hex}"
    request = AcceptCommandRequest(
        org_id=db.org_id,
        message_id=work_id,
        command=RecordCommand.model_validate(command(external_id, LastName="Exec")),
    )
    return Claimed(
        id=work_id,
        family="routes:demo",
        queue_class="contacts",
        token="t" * 32,
        epoch=1,
        attempt=1,
        max_attempts=5,
        payload=request.model_dump_json(),
        lane_key=None,
        lane_seq=None,
        target_key=None,
    )


async def deliver(url: str, db: RuntimeDb, items: list[Claimed]) -> tuple[list[Any], int]:
    """Hand `items` to one executor at once; their outcomes and the requests it sent."""
    async with internal_client(base_url=url, timeout_seconds=30, connections=4) as client:
        executor = CommandExecutor(
            client, workload_signer(db.settings, "integration"), timeout_seconds=30
        )

        async def one(item: Claimed) -> Exception | None:
            try:
                await executor(item)
            except (Retryable, Terminal) as exc:
                return exc
            return None

        try:
            outcomes = await asyncio.gather(*(one(i) for i in items))
        finally:
            await executor.aclose()
    return list(outcomes), executor.stats.requests


async def test_the_executor_coalesces_concurrent_commands_into_few_requests(
    api: httpx.AsyncClient, db: RuntimeDb
) -> None:
    items = [claimed(db, f"co-{n}") for n in range(120)]
    bad = claimed(db, "co-bad")
    items.append(dataclasses.replace(bad, payload=bad.payload.replace("Contact", "Spaceship__c")))
    outcomes, requests = await deliver(str(api.base_url), db, items)
    assert requests <= 4, requests  # 121 concurrent commands
    assert outcomes[:120] == [None] * 120
    assert isinstance(outcomes[120], Terminal)
    assert str(outcomes[120]) == "Runtime answered 404 NOT_FOUND"
    assert len(await stored(db, [i.id for i in items])) == 120
    again, _ = await deliver(str(api.base_url), db, items[:10])  # Runtime dedupes: success
    assert again == [None] * 10


# ---------------------------------------------------------------------------- crash


def start_api(db: RuntimeDb, log: Path, **env: str) -> tuple[subprocess.Popen[bytes], str]:
    """`nexus serve --role=runtime-api` as a process; returns once it is ready."""
    port = free_port()
    environment = {k: v for k, v in os.environ.items() if not k.startswith("NEXUS_")}
    environment.update(
        NEXUS_VAR_DIR=str(db.var_dir),
        NEXUS_RUNTIME_DATABASE_URL=db.url,
        NEXUS_LOG_FORMAT="json",
        PYTHONPATH=str(ROOT),
        **env,
    )
    with log.open("a") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "nexus", "serve", "--role=runtime-api", f"--port={port}"],
            cwd=ROOT,
            env=environment,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert process.poll() is None, f"runtime-api exited: {log.read_text()[-2000:]}"
        try:
            if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                return process, url
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    process.kill()
    raise AssertionError("runtime-api did not become ready")


async def test_a_crash_between_commit_and_answer_is_retried_as_duplicates_applied_once(
    db: RuntimeDb, tmp_path: Path
) -> None:
    items = [claimed(db, f"crash-{n}") for n in range(8)]
    crashing, url = start_api(db, tmp_path / "api.log", NEXUS_FAILPOINT=FAILPOINT_AFTER_COMMIT)
    try:
        outcomes, requests = await deliver(url, db, items)
        assert crashing.wait(timeout=30) == 137  # it died after the commit, before answering
    finally:
        if crashing.poll() is None:
            crashing.kill()
    assert requests == 1
    assert all(isinstance(o, Retryable) for o in outcomes), outcomes  # the caller sends again
    committed = await stored(db, [i.id for i in items])
    assert len(committed) == 8  # ... but the batch was accepted

    api, url = start_api(db, tmp_path / "api.log")
    try:
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            retry = await send_batch(client, db, [json_of(i) for i in items])
        outcomes, _ = await deliver(url, db, items)  # as the executor retries
    finally:
        api.send_signal(signal.SIGTERM)
        api.wait(timeout=30)
    assert [r["status"] for r in retry] == ["duplicate"] * 8
    assert {r["message_id"]: r["work_id"] for r in retry} == committed
    assert outcomes == [None] * 8

    worker = start_worker(db, tmp_path / "worker.log")
    try:
        await wait_final(db.engine, list(committed.values()))
    finally:
        assert stop_worker(worker) == 0
    for n in range(8):
        row = await contact(db, f"crash-{n}")
        assert row is not None
        assert (row["lastname"], row["row_version"]) == ("Exec", 1)  # applied once


def json_of(item: Claimed) -> Any:
    return AcceptCommandRequest.model_validate_json(item.payload).model_dump(mode="json")
