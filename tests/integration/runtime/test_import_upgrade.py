"""The upgrade to imports on the work engine (runtime_0011, ADR 0062): an import that an old
release's runner was in the middle of is finished by the new worker, its saved rows not
saved again; the downgrade gives the old runner its lease columns back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import Connection, inspect, select, text

from nexus.contracts.roles import LogicalService
from nexus.platform.db.clock import db_now_ms
from nexus.platform.db.engine import reading
from nexus.platform.migrations import alembic_config, upgrade_to_head
from nexus.runtime.imports.queue import INSTALLATION, family
from nexus.runtime.outbox.models import outbox
from tests.integration.runtime.test_import_crash import _caller, saved, wait_state
from tests.support.commands import RuntimeDb, start_worker, stop_worker
from tests.support.commands import db as db  # noqa: PLC0414  (fixture)

pytestmark = pytest.mark.asyncio(loop_scope="module")
BEFORE = "runtime_0010"


async def downgrade_to(db: RuntimeDb, revision: str) -> None:
    config = alembic_config(LogicalService.RUNTIME)

    def _downgrade(conn: Connection) -> None:
        config.attributes["connection"] = conn
        command.downgrade(config, revision)

    async with db.engine.begin() as conn:
        await conn.run_sync(_downgrade)


async def job_columns(db: RuntimeDb) -> set[str]:
    async with db.engine.connect() as conn:
        return await conn.run_sync(
            lambda c: {col["name"] for col in inspect(c).get_columns("runtime_import_job")}
        )


async def test_an_import_in_flight_at_the_upgrade_is_finished_by_the_new_worker(
    db: RuntimeDb, tmp_path: Path
) -> None:
    caller = await _caller(db)
    await downgrade_to(db, BEFORE)
    assert {"lease_owner", "lease_until"} <= await job_columns(db)
    # the old runner saved rows 1-2 (deleted, progress 2) and died holding the job's lease
    async with db.engine.begin() as conn:
        now = int((await conn.execute(db_now_ms().select())).scalar_one())
        await conn.execute(
            text(
                "INSERT INTO runtime_import_job (org_id, job_id, user_id, object_name, mode,"
                " mapping, state, total, processed, succeeded, failed, lease_owner,"
                " lease_until, created_at_ms, updated_at_ms) VALUES (:org, 'inflight', :user,"
                " 'Contact', 'insert', :mapping, 'running', 5, 2, 2, 0, 'import-old', :until,"
                " :now, :now)"
            ),
            {
                "org": db.org_id,
                "user": caller.user_id,
                "mapping": json.dumps({"LastName": "LastName"}),
                "until": now + 60_000,
                "now": now,
            },
        )
        await conn.execute(
            text(
                "INSERT INTO runtime_import_row (org_id, job_id, row_no, fields)"
                " VALUES (:org, 'inflight', :n, :fields)"
            ),
            [
                {"org": db.org_id, "n": n, "fields": json.dumps({"LastName": f"Upgraded {n}"})}
                for n in (3, 4, 5)
            ],
        )

    await upgrade_to_head(db.engine, LogicalService.RUNTIME)
    assert not {"lease_owner", "lease_until"} & await job_columns(db)
    items = outbox.items
    async with reading(db.engine) as conn:
        query = select(items.c.state).where(items.c.family == family(db.org_id))
        migrated = list(await conn.execute(query))  # the org leads the family (runtime_0013)
    assert [r[0] for r in migrated] == ["pending"]

    worker = start_worker(db, tmp_path / "worker.log")
    try:
        done = await wait_state(db, caller, "inflight", {"done", "failed"})
    finally:
        assert stop_worker(worker) == 0
    assert (done["state"], done["processed"], done["succeeded"]) == ("done", 5, 5)
    assert await saved(db, "Upgraded") == {"Upgraded 3": 1, "Upgraded 4": 1, "Upgraded 5": 1}

    await downgrade_to(db, BEFORE)  # and back: the family's items go, the columns return
    assert {"lease_owner", "lease_until"} <= await job_columns(db)
    async with reading(db.engine) as conn:
        query = select(items.c.id).where(items.c.family == INSTALLATION)
        left = list(await conn.execute(query))
    assert left == []
    await upgrade_to_head(db.engine, LogicalService.RUNTIME)
