"""Effect once: a handler failing after its DML changes nothing; a runtime-worker drained by
SIGTERM or killed with SIGKILL mid-run leaves every accepted command applied exactly once."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
from sqlalchemy import func, select, text
from sqlalchemy.ext.asyncio import AsyncConnection

from nexus.contracts.commands import AcceptCommandRequest, RecordCommand
from nexus.identity import service as identity
from nexus.identity.repository import IdentityRepository
from nexus.platform.db.engine import reading, session_factory, unit_of_work
from nexus.platform.workqueue.store import SUCCESS, Claimed, Outcome
from nexus.platform.workqueue.worker import Retryable, Worker, WorkerSettings
from nexus.runtime.access.service import assign_permission_set
from nexus.runtime.inbox import models as inbox_tables
from nexus.runtime.inbox.accept import CommandInbox
from nexus.runtime.inbox.execute import FAILPOINT_SLOW_GROUPS, CommandExecutor
from nexus.runtime.inbox.queue import InboxItem, inbox_store
from nexus.runtime.inbox.repository import InboxRepository
from nexus.runtime.metadata.view import MetadataCache
from tests.support.commands import (
    RuntimeDb,
    WorkerProcess,
    command,
    contact,
    history,
    item,
    start_worker,
    stop_worker,
    wait_final,
)
from tests.support.commands import db as db  # noqa: PLC0414  (fixture)

pytestmark = pytest.mark.asyncio(loop_scope="module")
LEASE_MS = 2000


async def accept_all(db: RuntimeDb, commands: list[dict[str, object]]) -> list[str]:
    """Accept commands in this order through the AcceptCommand use case."""
    inbox = CommandInbox(inbox_store(), session_factory(db.engine), max_body_bytes=65536)
    metadata = MetadataCache()
    ids = []
    for index, body in enumerate(commands):
        accepted = await inbox.accept(
            metadata,
            workload="integration",
            request=AcceptCommandRequest(
                org_id=db.org_id,
                message_id=f"{time.monotonic_ns()}-{index}",
                command=RecordCommand.model_validate(body),
            ),
        )
        ids.append(accepted.work_id)
    return ids


async def count_in(db: RuntimeDb, ids: list[str], state: str) -> int:
    items = inbox_tables.inbox.items
    async with reading(db.engine) as conn:
        return int(
            (
                await conn.execute(
                    select(func.count()).where(items.c.id.in_(ids), items.c.state == state)
                )
            ).scalar_one()
        )


class FailsAfterTheDml(Worker):
    """The first attempt of each item fails after the handler's DML, just before its
    completion: the transaction must roll the record change back."""

    seen: list[bool]  # per failed attempt: its change was visible inside its transaction

    async def complete_many_in(
        self, conn: AsyncConnection, claimed: Sequence[Claimed], outcome: Outcome = SUCCESS
    ) -> set[str]:
        first = [one for one in claimed if one.attempt == 1]
        for one in first:
            cmd = InboxItem.model_validate_json(one.payload).command
            stored = await conn.execute(
                text("SELECT lastname FROM rt_contact WHERE external_id__c = :e"),
                {"e": cmd.external_id},
            )
            self.seen.append(stored.scalar_one_or_none() == cmd.fields["LastName"])
        if first:
            raise Retryable("injected after the DML", delay_ms=0)
        return await super().complete_many_in(conn, claimed, outcome)


async def test_a_failure_after_the_dml_leaves_no_change_and_the_retry_applies_once(
    db: RuntimeDb,
) -> None:
    created = await accept_all(db, [command(f"once-{i}", LastName="First") for i in range(4)])
    executor = CommandExecutor(session_factory(db.engine))
    worker = FailsAfterTheDml(
        db.engine,
        inbox_store(lease_ms=5000),
        executor,
        WorkerSettings(concurrency=4, idle_poll_ms=10, queue_refresh_ms=0, backoff_base_ms=1),
    )
    worker.seen = []
    executor.worker = worker
    running = asyncio.create_task(worker.run())
    try:
        await wait_final(db.engine, created)
        updated = await accept_all(db, [command(f"once-{i}", LastName="Second") for i in range(4)])
        await wait_final(db.engine, updated)
    finally:
        worker.stop()
        await running
    for work_id in created + updated:
        stored = await item(db.engine, work_id)
        assert (stored["state"], stored["attempt"]) == ("succeeded", 2)
        assert stored["last_error"] == "injected after the DML"  # the first attempt's failure
    # each first attempt had made its change, then failed (in its group, then alone)
    assert len(worker.seen) >= 8
    assert all(worker.seen)
    for i in range(4):
        row = await contact(db, f"once-{i}")
        assert row is not None
        assert (row["lastname"], row["row_version"]) == ("Second", 2)  # one create, one update
        assert await history(db, row["id"]) == [("LastName", "First", "Second")]  # not twice


async def test_a_run_as_user_deactivated_after_acceptance_refuses_the_command(
    db: RuntimeDb,
) -> None:
    sessions = session_factory(db.engine)
    async with unit_of_work(sessions) as session:
        repo = IdentityRepository(session)
        temp = await identity.create_user(
            repo, org_id=db.org_id, username="temp.integration", password=None
        )
        await assign_permission_set(
            session, org_id=db.org_id, user_id=temp, permission_set="Integration_Contacts"
        )
        await InboxRepository(session).set_binding(
            org_id=db.org_id, workload="integration", user_id=temp, now_ms=0
        )
    (work_id,) = await accept_all(db, [command("leaver", LastName="Gone")])
    async with unit_of_work(sessions) as session:
        await InboxRepository(session).set_binding(
            org_id=db.org_id, workload="integration", user_id=db.integration_user_id, now_ms=0
        )
        await identity.set_user_active(
            IdentityRepository(session), org_id=db.org_id, user_id=temp, active=False
        )
    executor = CommandExecutor(sessions)
    worker = Worker(db.engine, inbox_store(), executor, WorkerSettings(idle_poll_ms=10))
    executor.worker = worker
    running = asyncio.create_task(worker.run())
    try:
        await wait_final(db.engine, [work_id])
    finally:
        worker.stop()
        await running
    stored = await item(db.engine, work_id)
    assert (stored["state"], stored["attempt"]) == ("dead", 1)
    assert stored["last_error"] == "RUN_AS_INACTIVE: the run-as user is inactive or gone"
    assert await contact(db, "leaver") is None


async def test_sigterm_drains_and_sigkill_mid_run_still_applies_every_command_once(
    db: RuntimeDb, tmp_path: Path
) -> None:
    records, per_record = 16, 16  # enough rounds that a kill lands mid-run with groups
    bodies = [
        command(f"crash-{r}", LastName=f"crash-{r}-{k}")
        for k in range(per_record)
        for r in range(records)
    ]
    ids = await accept_all(db, bodies)
    total = len(ids)
    env = {"NEXUS_INBOX_LEASE_MS": str(LEASE_MS), "NEXUS_SHUTDOWN_GRACE_SECONDS": "5"}
    slow = {**env, "NEXUS_FAILPOINT": FAILPOINT_SLOW_GROUPS}  # the signals land mid-run

    drained = start_worker(db, tmp_path / "drained.log", **slow)
    try:
        await wait_until(db, ids, at_least=total // 6)
    finally:
        code = stop_worker(drained, signal.SIGTERM)
    assert code == 0
    assert await count_in(db, ids, "processing") == 0  # finished or released, none left held

    done = await count_in(db, ids, "succeeded")
    assert done < total, "the drained worker ran every command: nothing left to kill mid-run"
    killed = start_worker(db, tmp_path / "killed.log", **slow)
    try:
        await wait_until(db, ids, at_least=done + 1)
        await freeze_while_holding(db, killed, ids)
    finally:
        stop_worker(killed, signal.SIGKILL)
    held_by_the_dead = await count_in(db, ids, "processing")
    assert held_by_the_dead > 0, "the killed worker held no command: nothing was mid-run"

    survivor = start_worker(db, tmp_path / "survivor.log", **env)
    try:
        await wait_final(db.engine, ids, within=120)
    finally:
        assert stop_worker(survivor, signal.SIGTERM) == 0
    assert await count_in(db, ids, "succeeded") == total
    items = inbox_tables.inbox.items
    async with reading(db.engine) as conn:
        reclaimed = (
            await conn.execute(
                select(func.count()).where(items.c.id.in_(ids), items.c.reclaims > 0)
            )
        ).scalar_one()
    assert reclaimed >= held_by_the_dead
    for r in range(records):
        row = await contact(db, f"crash-{r}")
        assert row is not None
        # created once and updated once per later command: a repeat would add a version
        assert (row["lastname"], row["row_version"]) == (f"crash-{r}-{per_record - 1}", per_record)
        assert [new for _, _, new in await history(db, row["id"])] == [
            f"crash-{r}-{k}" for k in range(1, per_record)
        ]


async def test_sigkill_mid_group_applies_none_of_it_and_it_is_retried_once(
    db: RuntimeDb, tmp_path: Path
) -> None:
    """A worker executing commands in groups (up to 64 in one transaction) is killed while it
    holds a group: none of the held commands is applied, each applied one is completed, and
    the survivor runs each held command exactly once more."""
    records, per_record = 48, 3
    bodies = [
        command(f"group-{r}", LastName=f"group-{r}-{k}")
        for k in range(per_record)
        for r in range(records)
    ]
    ids = await accept_all(db, bodies)
    env = {
        "NEXUS_INBOX_LEASE_MS": str(LEASE_MS),
        "NEXUS_SHUTDOWN_GRACE_SECONDS": "5",
        "NEXUS_INBOX_CONCURRENCY": "64",
    }
    # its groups wait, held, before they run: long enough to be frozen holding one
    killed = start_worker(db, tmp_path / "killed.log", NEXUS_FAILPOINT=FAILPOINT_SLOW_GROUPS, **env)
    try:
        await wait_until(db, ids, at_least=1)
        await freeze_while_holding(db, killed, ids, at_least=2)
    finally:
        stop_worker(killed, signal.SIGKILL)
    items = inbox_tables.inbox.items
    async with reading(db.engine) as conn:
        states = {
            str(r[0]): str(r[1])
            for r in await conn.execute(
                select(items.c.id, items.c.state).where(items.c.id.in_(ids))
            )
        }
    held = [work_id for work_id in ids if states[work_id] == "processing"]
    assert len(held) >= 2, "the killed worker held no group"
    for r in range(records):  # all or none: a record has a version per completed command
        mine = ids[r::records]
        done = sum(states[work_id] == "succeeded" for work_id in mine)
        row = await contact(db, f"group-{r}")
        assert (row["row_version"] if row else 0) == done
        assert all(states[w] == "succeeded" for w in mine[:done])  # in order, none skipped

    survivor = start_worker(db, tmp_path / "survivor.log", **env)
    try:
        await wait_final(db.engine, ids, within=120)
    finally:
        assert stop_worker(survivor, signal.SIGTERM) == 0
    for work_id in held:
        stored = await item(db.engine, work_id)
        assert (stored["state"], stored["attempt"]) == ("succeeded", 2)  # retried once
    for r in range(records):
        row = await contact(db, f"group-{r}")
        assert row is not None
        assert (row["lastname"], row["row_version"]) == (f"group-{r}-{per_record - 1}", per_record)
        assert [new for _, _, new in await history(db, row["id"])] == [
            f"group-{r}-{k}" for k in range(1, per_record)
        ]


async def wait_until(db: RuntimeDb, ids: list[str], *, at_least: int) -> None:
    deadline = time.monotonic() + 60
    while await count_in(db, ids, "succeeded") < at_least:
        assert time.monotonic() < deadline, f"fewer than {at_least} commands ran"
        await asyncio.sleep(0.02)


async def freeze_while_holding(
    db: RuntimeDb, worker: WorkerProcess, ids: list[str], at_least: int = 1
) -> None:
    """Freeze the worker (SIGSTOP) at a moment it holds `at_least` commands: groups finish
    in milliseconds, so watching for `processing` rows from outside misses them; stopping
    the process and looking is certain. The caller kills it frozen."""
    deadline = time.monotonic() + 30
    while True:
        worker.process.send_signal(signal.SIGSTOP)
        if await count_in(db, ids, "processing") >= at_least:
            return
        worker.process.send_signal(signal.SIGCONT)
        assert time.monotonic() < deadline, "the worker never held a command"
        await asyncio.sleep(0.005)
