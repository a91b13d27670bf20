"""AcceptCommand on a real runtime-api, executed by a real runtime-worker process, both
backends: who may send, what is accepted once, and what the worker makes of it."""

from __future__ import annotations

import asyncio
import json
import re
import time
import uuid
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
import pytest_asyncio
from sqlalchemy import func, select

from nexus.contracts.commands import command_error_is_retryable
from nexus.identity import service as identity
from nexus.identity.repository import IdentityRepository
from nexus.platform.db.clock import read_now_ms
from nexus.platform.db.engine import reading, session_factory, unit_of_work
from nexus.platform.secrets import workload_signer
from nexus.platform.workload import DEADLINE_HEADER
from nexus.runtime.inbox import models as inbox_tables
from nexus.runtime.inbox.repository import InboxRepository
from tests.support.commands import (
    COMMANDS,
    RuntimeDb,
    WorkerProcess,
    accepted,
    command,
    contact,
    deadline_ms,
    headers,
    history,
    item,
    runtime_api,
    send,
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


@pytest.fixture(scope="module")
def worker(db: RuntimeDb, tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerProcess]:
    process = start_worker(
        db,
        tmp_path_factory.mktemp("worker-logs") / "runtime-worker.log",
        NEXUS_WORK_STATS_INTERVAL_SECONDS="1",
    )
    try:
        yield process
    finally:
        assert stop_worker(process) == 0  # SIGTERM drains and exits cleanly


async def stored_messages(db: RuntimeDb) -> int:
    async with reading(db.engine) as conn:
        return int(
            (
                await conn.execute(select(func.count()).select_from(inbox_tables.inbox_message))
            ).scalar_one()
        )


# ---------------------------------------------------------------------------- accepting


async def test_a_command_is_accepted_once_and_a_repeat_is_a_duplicate(
    api: httpx.AsyncClient, db: RuntimeDb
) -> None:
    message_id = f"work-{uuid.uuid4().hex}"
    first = await send(api, db, command("acc-1", LastName="Hopper"), message_id=message_id)
    assert first.status_code == 202, first.text
    assert first.json()["status"] == "accepted"
    work_id = first.json()["work_id"]
    stored = await item(db.engine, work_id)
    payload = json.loads(stored["payload"])
    assert payload["run_as"] == db.integration_user_id  # the binding, not the caller, decides
    assert payload["correlation"] == {"event_id": "evt-1"}
    assert stored["lane_key"] == f"{db.org_id}:contact:acc-1"

    again = await send(api, db, command("acc-1", LastName="Hopper"), message_id=message_id)
    assert again.status_code == 202, again.text
    assert again.json() == {"message_id": message_id, "work_id": work_id, "status": "duplicate"}

    other = await send(api, db, command("acc-1", LastName="Lamarr"), message_id=message_id)
    assert other.status_code == 409
    assert other.json()["code"] == "IDEMPOTENCY_CONFLICT"
    assert not command_error_is_retryable(409, other.json())
    items = inbox_tables.inbox.items
    async with reading(db.engine) as conn:
        same_record = (
            await conn.execute(
                select(func.count()).where(items.c.lane_key == f"{db.org_id}:contact:acc-1")
            )
        ).scalar_one()
    assert same_record == 1


async def test_concurrent_repeats_are_accepted_once(api: httpx.AsyncClient, db: RuntimeDb) -> None:
    message_id = f"race-{uuid.uuid4().hex}"
    replies = await asyncio.gather(
        *(
            send(api, db, command("race-1", LastName="Race"), message_id=message_id)
            for _ in range(8)
        )
    )
    assert {r.status_code for r in replies} == {202}, [r.text for r in replies]
    statuses = sorted(r.json()["status"] for r in replies)
    assert statuses == ["accepted"] + ["duplicate"] * 7
    assert len({r.json()["work_id"] for r in replies}) == 1


async def test_a_workload_must_prove_itself_and_hold_the_capability(
    api: httpx.AsyncClient, db: RuntimeDb
) -> None:
    before = await stored_messages(db)
    body = {"org_id": db.org_id, "message_id": "m-auth", "command": command("auth-1")}
    anonymous = await api.post(COMMANDS, json=body, headers={DEADLINE_HEADER: "9" * 13})
    assert anonymous.status_code == 401
    assert anonymous.json()["code"] == "INVALID_WORKLOAD"
    assert command_error_is_retryable(401, anonymous.json())  # an expired token: retry
    forged = await api.post(
        COMMANDS, json=body, headers={**headers(db), "x-nexus-workload": "e30.e30.sig"}
    )
    assert forged.status_code == 401
    sfcrm = await api.post(COMMANDS, json=body, headers=headers(db, "app-sfcrm"))
    assert sfcrm.status_code == 403
    assert sfcrm.json()["code"] == "WORKLOAD_NOT_ALLOWED"
    no_deadline = {k: v for k, v in headers(db).items() if k != DEADLINE_HEADER}
    assert (await api.post(COMMANDS, json=body, headers=no_deadline)).status_code == 400
    assert await stored_messages(db) == before


async def test_the_org_is_the_one_the_workload_token_was_signed_for(
    api: httpx.AsyncClient, db: RuntimeDb
) -> None:
    """Never the body's: a command for another org than its token's is refused for good, and
    a token without an org (a sender older than this rule) is refused as retryable."""
    before = await stored_messages(db)
    body = {"org_id": db.org_id, "message_id": "m-org", "command": command("org-1")}
    other = await api.post(COMMANDS, json=body, headers=headers(db, org="00D000000000009ZZZ"))
    assert (other.status_code, other.json()["code"]) == (403, "ORG_MISMATCH")
    assert not command_error_is_retryable(403, other.json())
    unsigned = workload_signer(db.settings, "integration").headers(
        "runtime-api", deadline_ms=deadline_ms()
    )
    missing = await api.post(COMMANDS, json=body, headers=unsigned)
    assert (missing.status_code, missing.json()["code"]) == (401, "WORKLOAD_ORG_MISSING")
    assert command_error_is_retryable(401, missing.json())
    assert await stored_messages(db) == before  # nothing of either was accepted
    signed = await api.post(COMMANDS, json=body, headers=headers(db))
    assert signed.status_code == 202, signed.text


async def test_no_binding_an_inactive_user_or_an_unknown_org_is_refused(
    api: httpx.AsyncClient, db: RuntimeDb
) -> None:
    sessions = session_factory(db.engine)
    async with unit_of_work(sessions) as session:
        repo = IdentityRepository(session)
        unbound_org = await identity.create_org(repo, name="Unbound")
        inactive_org = await identity.create_org(repo, name="Inactive")
        inactive = await identity.create_user(
            repo, org_id=inactive_org, username="sleeper@example.com", password=None
        )
        await InboxRepository(session).set_binding(
            org_id=inactive_org,
            workload="integration",
            user_id=inactive,
            now_ms=await read_now_ms(session),
        )
        await identity.set_user_active(repo, org_id=inactive_org, user_id=inactive, active=False)
    before = await stored_messages(db)
    for org_id in (unbound_org, inactive_org, "00D000000000000AAA"):
        reply = await send(api, db, command("who-1", LastName="X"), org_id=org_id)
        assert reply.status_code == 403, (org_id, reply.text)
        assert reply.json()["code"] == "WORKLOAD_NOT_BOUND"
        assert not command_error_is_retryable(403, reply.json())
    assert await stored_messages(db) == before


async def test_cheap_checks_refuse_what_could_never_run(
    api: httpx.AsyncClient, db: RuntimeDb
) -> None:
    before = await stored_messages(db)
    unknown_object = await send(api, db, command("x", object_name="Spaceship__c"))
    assert unknown_object.status_code == 404
    not_external = await send(api, db, command("x", external_id_field="LastName"))
    assert not_external.status_code == 400
    assert not_external.json()["code"] == "INVALID_FIELD"
    assert "LastName" in not_external.json()["fields"]
    unknown_field = await send(api, db, command("x", LastName="A", Shoe_Size__c=44))
    assert unknown_field.status_code == 400
    assert unknown_field.json()["fields"] == {"Shoe_Size__c": "no such field"}
    bad_op = await send(api, db, {**command("x"), "op": "merge"})
    assert bad_op.status_code == 400
    too_large = await send(api, db, command("x", LastName="A" * 5000))
    assert too_large.status_code == 413
    assert not command_error_is_retryable(413, too_large.json())
    assert await stored_messages(db) == before


# ---------------------------------------------------------------------------- executing


async def test_an_upsert_creates_then_updates_the_same_record(
    api: httpx.AsyncClient, db: RuntimeDb, worker: WorkerProcess
) -> None:
    first = await accepted(api, db, command("ada", LastName="Lovelace", Email="ada@example.com"))
    second = await accepted(api, db, command("ada", LastName="Byron"))
    await wait_final(db.engine, [first, second])
    assert (await item(db.engine, first))["state"] == "succeeded"
    assert (await item(db.engine, second))["state"] == "succeeded"
    row = await contact(db, "ada")
    assert row is not None
    assert row["lastname"] == "Byron"
    assert row["email"] == "ada@example.com"  # an upsert changes only the fields it carries
    assert row["name"] == "Contact Byron"  # the before-save flow ran on both
    assert row["row_version"] == 2  # created once, updated once
    assert row["created_by_id"] == row["owner_id"] == db.integration_user_id
    assert await history(db, row["id"]) == [("LastName", "Lovelace", "Byron")]


async def test_update_and_delete_find_the_record_by_external_id(
    api: httpx.AsyncClient, db: RuntimeDb, worker: WorkerProcess
) -> None:
    created = await accepted(api, db, command("grace", LastName="Hopper"))
    updated = await accepted(api, db, command("grace", "update", Email="grace@example.com"))
    await wait_final(db.engine, [created, updated])
    row = await contact(db, "grace")
    assert row is not None
    assert (row["email"], row["row_version"], row["is_deleted"]) == ("grace@example.com", 2, False)

    deleted = await accepted(api, db, command("grace", "delete"))
    missing_update = await accepted(api, db, command("nobody", "update", LastName="X"))
    missing_delete = await accepted(api, db, command("nobody", "delete"))
    await wait_final(db.engine, [deleted, missing_update, missing_delete])
    gone = await contact(db, "grace")
    assert gone is not None
    assert gone["is_deleted"]
    assert (await item(db.engine, deleted))["state"] == "succeeded"
    refused = await item(db.engine, missing_update)
    assert (refused["state"], refused["failure_class"]) == ("dead", "terminal")
    assert refused["last_error"] == "NOT_FOUND: no Contact record with that external id"
    assert (await item(db.engine, missing_delete))["state"] == "succeeded"  # nothing to delete
    assert await contact(db, "nobody") is None


async def test_a_validation_rule_refusal_is_dead_at_once_with_a_sanitized_error(
    api: httpx.AsyncClient, db: RuntimeDb, worker: WorkerProcess
) -> None:
    work_id = await accepted(
        api, db, command("mallory", LastName="Mallory", Email="mallory@invalid.example")
    )
    await wait_final(db.engine, [work_id])
    row = await item(db.engine, work_id)
    assert (row["state"], row["failure_class"], row["attempt"]) == ("dead", "terminal", 1)
    assert row["last_error"] == "VALIDATION_RULE (Email)"  # the code and the field, no value
    assert await contact(db, "mallory") is None


async def test_the_run_as_users_permissions_decide(
    api: httpx.AsyncClient, db: RuntimeDb, worker: WorkerProcess
) -> None:
    """`integration` holds no permission on Payroll__c: the command is accepted (the object
    exists) and refused when it runs, as that user."""
    work_id = await accepted(
        api, db, command("p-1", object_name="Payroll__c", external_id_field="Payroll_Ref__c")
    )
    await wait_final(db.engine, [work_id])
    row = await item(db.engine, work_id)
    assert (row["state"], row["last_error"]) == ("dead", "NOT_FOUND")


async def test_commands_on_one_record_apply_in_acceptance_order(
    api: httpx.AsyncClient, db: RuntimeDb, worker: WorkerProcess
) -> None:
    ids = [await accepted(api, db, command("order", LastName=f"v{i:02}")) for i in range(12)]
    await wait_final(db.engine, ids)
    row = await contact(db, "order")
    assert row is not None
    assert (row["lastname"], row["row_version"]) == ("v11", 12)
    changes = await history(db, row["id"])
    assert changes == [("LastName", f"v{i:02}", f"v{i + 1:02}") for i in range(11)]


async def test_the_worker_reports_its_inbox_on_readyz_and_metrics(
    api: httpx.AsyncClient, db: RuntimeDb, worker: WorkerProcess
) -> None:
    refused = await accepted(api, db, command("metric", "update", LastName="X"))
    await wait_final(db.engine, [refused])
    async with httpx.AsyncClient(base_url=worker.url) as client:
        ready = (await client.get("/readyz")).json()
        assert {c["name"]: c["ok"] for c in ready["checks"]} == {
            "database:runtime": True,
            "inbox": True,
            "outbox": True,
            "imports": True,
            "bulk": True,
        }
        deadline = time.monotonic() + 15
        dead = re.compile(
            r'^nexus_work_items\{family="[^"/]+/runtime.inbox",queue_class="commands",'
            r'state="dead"\} (\S+)',
            re.M,
        )
        while True:
            text = (await client.get("/metrics")).text
            found = dead.search(text)
            if (found and float(found.group(1)) >= 1) or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.2)
    assert found is not None
    assert float(found.group(1)) >= 1
    succeeded = re.search(r"^nexus_work_succeeded_total (\S+)", text, re.M)
    assert succeeded is not None
    assert float(succeeded.group(1)) >= 1
    assert f'nexus_work_oldest_pending_age_seconds{{family="{db.org_id}/runtime.inbox"' in text
