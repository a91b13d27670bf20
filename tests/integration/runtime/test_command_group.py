"""Group execution (ADR 0028): commands claimed together run in one transaction, each with
its own outcome; a group whose transaction fails applied nothing and all of it is retried."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import pytest
from sqlalchemy import event, func, select
from sqlalchemy.exc import OperationalError
from sqlalchemy.ext.asyncio import AsyncConnection

from nexus.platform.db.engine import reading, session_factory, unit_of_work
from nexus.platform.workqueue.store import SUCCESS, Claimed, Outcome
from nexus.platform.workqueue.worker import Worker, WorkerSettings
from nexus.runtime.inbox import models as inbox_tables
from nexus.runtime.inbox.execute import CommandExecutor
from nexus.runtime.inbox.queue import InboxItem, inbox_store
from nexus.runtime.metadata.view import MetadataCache
from tests.integration.runtime.test_command_crash import accept_all
from tests.support.commands import RuntimeDb, command, contact, history, item, wait_final
from tests.support.commands import db as db  # noqa: PLC0414  (fixture)

pytestmark = pytest.mark.asyncio(loop_scope="module")


@asynccontextmanager
async def running(
    db: RuntimeDb, worker_class: type[Worker] = Worker, concurrency: int = 64
) -> AsyncIterator[CommandExecutor]:
    """An in-process inbox worker; started after the commands are accepted, so its first
    claim takes them all at once and hands them to the executor together."""
    executor = CommandExecutor(session_factory(db.engine))
    worker = worker_class(
        db.engine,
        inbox_store(lease_ms=10_000),
        executor,
        WorkerSettings(
            concurrency=concurrency,
            batch=concurrency,
            idle_poll_ms=10,
            queue_refresh_ms=0,
            backoff_base_ms=1,
        ),
    )
    executor.worker = worker
    task = asyncio.create_task(worker.run())
    try:
        yield executor
    finally:
        worker.stop()
        await task
        await executor.close()


async def test_one_group_gives_every_command_its_own_outcome(db: RuntimeDb) -> None:
    existing = await accept_all(db, [command(f"mix-old-{i}", LastName="Old") for i in range(4)])
    async with running(db):
        await wait_final(db.engine, existing)
    new = [command(f"mix-new-{i}", LastName=f"New {i}") for i in range(20)]
    refused_rule = command("mix-bad", LastName="Bad", Email="bad@invalid.example")
    updates = [command(f"mix-old-{i}", "update", LastName="Changed") for i in range(3)]
    missing_update = command("mix-nobody", "update", LastName="X")
    missing_delete = command("mix-ghost", "delete")
    delete = command("mix-old-3", "delete")
    no_access = command("mix-p", object_name="Payroll__c", external_id_field="Payroll_Ref__c")
    bodies = [
        *new[:10],
        refused_rule,
        *updates,
        missing_update,
        no_access,
        *new[10:],
        missing_delete,
        delete,
    ]
    ids = await accept_all(db, bodies)
    async with running(db) as executor:
        await wait_final(db.engine, ids)
    assert executor.stats.groups == 1  # all of them in one transaction
    assert executor.stats.largest == len(bodies)
    outcome = {
        body["external_id"] + body["op"]: await item(db.engine, w)
        for body, w in zip(bodies, ids, strict=True)
    }

    def state(external_id: str, op: str = "upsert") -> tuple[Any, ...]:
        row = outcome[external_id + op]
        return (row["state"], row["attempt"], row["last_error"])

    for i in range(20):
        assert state(f"mix-new-{i}") == ("succeeded", 1, None)
        row = await contact(db, f"mix-new-{i}")
        assert row is not None
        assert (row["lastname"], row["name"], row["row_version"]) == (
            f"New {i}",
            f"Contact New {i}",  # the before-save flow ran for each
            1,
        )
    for i in range(3):
        assert state(f"mix-old-{i}", "update") == ("succeeded", 1, None)
        row = await contact(db, f"mix-old-{i}")
        assert row is not None
        assert (row["lastname"], row["row_version"]) == ("Changed", 2)
        assert await history(db, row["id"]) == [("LastName", "Old", "Changed")]
    assert state("mix-old-3", "delete") == ("succeeded", 1, None)
    gone = await contact(db, "mix-old-3")
    assert gone is not None
    assert gone["is_deleted"]
    assert state("mix-ghost", "delete") == ("succeeded", 1, None)  # nothing to delete
    assert state("mix-bad") == ("dead", 1, "VALIDATION_RULE (Email)")
    assert await contact(db, "mix-bad") is None
    assert state("mix-nobody", "update") == (
        "dead",
        1,
        "NOT_FOUND: no Contact record with that external id",
    )
    assert state("mix-p") == ("dead", 1, "NOT_FOUND")


async def test_external_ids_that_name_one_record_are_not_batched_together(
    db: RuntimeDb,
) -> None:
    """Badges "7" and "007" are two source lanes but one record: the second upsert must
    update what the first created, as if each ran alone."""
    bodies = [
        command("7", external_id_field="Badge__c", LastName="One"),
        *(command(f"{100 + i}", external_id_field="Badge__c", LastName="Other") for i in range(4)),
        command("007", external_id_field="Badge__c", LastName="Two"),
    ]
    ids = await accept_all(db, bodies)
    async with running(db) as executor:
        await wait_final(db.engine, ids)
    assert executor.stats.groups == 1
    assert executor.stats.batches == 2  # "007" went into a batch after the one of "7"
    for work_id in ids:
        assert (await item(db.engine, work_id))["state"] == "succeeded"
    async with unit_of_work(session_factory(db.engine), readonly=True) as session:
        view = await MetadataCache().view(session, db.org_id)
        obj = view.object("Contact")
        assert obj is not None
        table = view.table(obj)
        rows = (
            await session.execute(
                select(table.c.lastname, table.c.row_version).where(table.c.badge__c == 7)
            )
        ).all()
    assert [tuple(r) for r in rows] == [("Two", 2)]  # created by "7", updated by "007"


class FailsTheGroupOnce(Worker):
    """The first attempt of `doomed` fails with a database error just before its completion,
    after every command of its group made its change."""

    doomed = "fail-7"

    async def complete_many_in(
        self, conn: AsyncConnection, claimed: Sequence[Claimed], outcome: Outcome = SUCCESS
    ) -> set[str]:
        for one in claimed:
            cmd = InboxItem.model_validate_json(one.payload).command
            if one.attempt == 1 and cmd.external_id == self.doomed:
                raise OperationalError("injected", {}, Exception("injected"))
        return await super().complete_many_in(conn, claimed, outcome)


async def test_a_database_error_in_a_group_applies_none_of_it_and_retries_all_of_it_once(
    db: RuntimeDb,
) -> None:
    ids = await accept_all(db, [command(f"fail-{i}", LastName=f"F{i}") for i in range(12)])
    async with running(db, FailsTheGroupOnce) as executor:
        await wait_final(db.engine, ids)
    assert executor.stats.failed_groups == 1
    for work_id in ids:
        stored = await item(db.engine, work_id)
        assert (stored["state"], stored["attempt"]) == ("succeeded", 2)
        assert stored["last_error"] == "unexpected OperationalError"
    for i in range(12):
        row = await contact(db, f"fail-{i}")
        assert row is not None
        assert (row["lastname"], row["row_version"]) == (f"F{i}", 1)  # created once


async def test_a_group_costs_a_few_statements_per_command(db: RuntimeDb) -> None:
    """Claim, execution and completion of 48 upserts (24 creates, 24 updates): one-at-a-time
    execution took ~19 statements per command besides the claim."""
    await accept_all(db, [command(f"cost-{i}", LastName="A") for i in range(24)])
    warm = await accept_all(db, [command("cost-warm", LastName="A")])
    async with running(db):
        await wait_final(db.engine, warm)
    items = inbox_tables.inbox.items
    async with reading(db.engine) as conn:
        pending = (
            await conn.execute(select(func.count()).where(items.c.state == "pending"))
        ).scalar_one()
    assert pending == 0
    bodies = [command(f"cost-{i}", LastName="B") for i in range(24)]
    bodies += [command(f"cost-new-{i}", LastName="C") for i in range(24)]
    ids = await accept_all(db, bodies)
    statements: list[str] = []

    def count(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        statements.append(statement)

    event.listen(db.engine.sync_engine, "before_cursor_execute", count)
    try:
        async with running(db) as executor:
            await wait_final(db.engine, ids)
    finally:
        event.remove(db.engine.sync_engine, "before_cursor_execute", count)
    assert executor.stats.largest == len(bodies)
    for work_id in ids:
        assert (await item(db.engine, work_id))["state"] == "succeeded"
    writes = [s for s in statements if s.lstrip().upper().startswith(("INSERT", "UPDATE"))]
    per_command = len(writes) / len(bodies)
    assert per_command < 1, f"{len(writes)} writes for {len(bodies)} commands"
    # reads included: the completions are a few statements per claim token, not per command
    # (one completion per command took three: ~4.4 statements per command in all)
    assert len(statements) / len(bodies) < 2, f"{len(statements)} for {len(bodies)} commands"
