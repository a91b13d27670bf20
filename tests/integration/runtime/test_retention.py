"""Runtime retention: old finished inbox items, their message-key dedupe rows and old
idempotency keys are pruned; dead commands keep theirs; young ones stay."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import func, insert, select, update

from nexus.platform.db.clock import db_now_ms
from nexus.platform.db.engine import reading
from nexus.runtime.imports import models as imports_tables
from nexus.runtime.inbox import models as inbox_tables
from nexus.runtime.records import models as records_tables
from nexus.runtime.releases import models as releases_tables
from nexus.runtime.retention.service import DAY_MS, prune_once
from tests.integration.runtime.test_command_crash import accept_all
from tests.integration.runtime.test_command_group import running
from tests.support.commands import RuntimeDb, command, item, wait_final
from tests.support.commands import db as db  # noqa: PLC0414  (fixture)

pytestmark = pytest.mark.asyncio(loop_scope="module")


async def count(db: RuntimeDb, table: Any, *where: Any) -> int:
    async with reading(db.engine) as conn:
        return int(
            (await conn.execute(select(func.count()).select_from(table).where(*where))).scalar_one()
        )


async def age(db: RuntimeDb, work_ids: list[str], *, days: float) -> None:
    """Move items' finish and their acceptance into the past, by the database clock."""
    items, msg = inbox_tables.inbox.items, inbox_tables.inbox_message
    then = db_now_ms() - int(days * DAY_MS)
    async with db.engine.begin() as conn:
        await conn.execute(
            update(items).where(items.c.id.in_(work_ids)).values(finished_at=then, run_after=then)
        )
        await conn.execute(
            update(msg).where(msg.c.work_id.in_(work_ids)).values(accepted_at_ms=then)
        )


async def test_old_finished_commands_and_their_keys_go_dead_and_young_ones_stay(
    db: RuntimeDb,
) -> None:
    old = await accept_all(db, [command(f"ret-old-{i}", LastName="Old") for i in range(5)])
    young = await accept_all(db, [command(f"ret-young-{i}", LastName="Young") for i in range(2)])
    async with running(db):
        await wait_final(db.engine, old + young)
    dead = old[4]  # parked by an operator's point of view: kept with its dedupe row
    items, msg, idem = (
        inbox_tables.inbox.items,
        inbox_tables.inbox_message,
        records_tables.idempotency,
    )
    async with db.engine.begin() as conn:
        await conn.execute(update(items).where(items.c.id == dead).values(state="dead"))
        now = int((await conn.execute(db_now_ms().select())).scalar_one())
        await conn.execute(
            insert(idem),
            [
                {
                    "org_id": db.org_id,
                    "idem_key": f"k-{n}",
                    "request_digest": "d",
                    "result": "{}",
                    "created_at_ms": now - (10 * DAY_MS if n < 3 else 0),
                }
                for n in range(5)
            ],
        )
    await age(db, old, days=10)

    pruned = await prune_once(db.engine, retention_ms=7 * DAY_MS, batch=2)
    assert (pruned.inbox, pruned.message_keys, pruned.idempotency_keys) == (4, 4, 3)
    assert await count(db, items, items.c.id.in_(old[:4])) == 0
    assert await count(db, msg, msg.c.work_id.in_(old[:4])) == 0
    assert (await item(db.engine, dead))["state"] == "dead"
    assert await count(db, msg, msg.c.work_id == dead) == 1
    assert await count(db, items, items.c.id.in_(young)) == 2
    assert await count(db, msg, msg.c.work_id.in_(young)) == 2
    assert await count(db, idem, idem.c.idem_key.like("k-%")) == 2
    again = await prune_once(db.engine, retention_ms=7 * DAY_MS)
    assert (again.inbox, again.message_keys, again.idempotency_keys) == (0, 0, 0)


async def test_old_finished_imports_and_vanished_replicas_are_pruned(db: RuntimeDb) -> None:
    jobs, rows, replica = (
        imports_tables.import_job,
        imports_tables.import_row,
        releases_tables.replica,
    )
    async with db.engine.begin() as conn:
        now = int((await conn.execute(db_now_ms().select())).scalar_one())
        old, young = now - 10 * DAY_MS, now - DAY_MS
        ages = {"imp-done-old": ("done", old), "imp-failed-old": ("failed", old)}
        ages |= {"imp-running-old": ("running", old), "imp-done-young": ("done", young)}
        for job_id, (state, updated) in ages.items():
            await conn.execute(
                insert(jobs).values(
                    org_id=db.org_id,
                    job_id=job_id,
                    user_id="005000000000001",
                    object_name="Contact",
                    mode="insert",
                    mapping="{}",
                    state=state,
                    total=2,
                    processed=2,
                    succeeded=1,
                    failed=1,
                    created_at_ms=updated,
                    updated_at_ms=updated,
                )
            )
            await conn.execute(
                insert(rows),
                [
                    {"org_id": db.org_id, "job_id": job_id, "row_no": n, "error": "bad value"}
                    for n in (1, 2)
                ],
            )
        await conn.execute(
            insert(replica),
            [
                {"replica_id": "gone", "prepared_revision": 1, "seen_at_ms": old},
                {"replica_id": "alive", "prepared_revision": 1, "seen_at_ms": now},
            ],
        )

    pruned = await prune_once(db.engine, retention_ms=7 * DAY_MS, batch=1)
    assert (pruned.import_jobs, pruned.replicas) == (2, 1)
    async with reading(db.engine) as conn:
        kept = {r[0] for r in await conn.execute(select(jobs.c.job_id))}
        with_rows = {r[0] for r in await conn.execute(select(rows.c.job_id).distinct())}
        replicas = {r[0] for r in await conn.execute(select(replica.c.replica_id))}
    # a running import is never removed under its worker, a young one keeps its error report
    assert {"imp-running-old", "imp-done-young"} <= kept
    assert not kept & {"imp-done-old", "imp-failed-old"}
    assert not with_rows & {"imp-done-old", "imp-failed-old"}
    assert replicas >= {"alive"}
    assert "gone" not in replicas
