"""CSV imports on the work engine (ADR 0062): a runtime-worker killed between two chunks of an
import leaves a job that the next worker finishes, every row saved exactly once."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from nexus.contracts.identity import TrustedCall
from nexus.platform.db.engine import session_factory, unit_of_work
from nexus.platform.failpoints import CRASH_STATUS
from nexus.runtime.access.service import AccessCache
from nexus.runtime.imports import jobs
from nexus.runtime.imports.runner import FAILPOINT_BETWEEN_CHUNKS
from nexus.runtime.inbox.repository import InboxRepository
from nexus.runtime.metadata.view import MetadataCache
from tests.support.commands import RuntimeDb, start_worker, stop_worker
from tests.support.commands import db as db  # noqa: PLC0414  (fixture)

pytestmark = pytest.mark.asyncio(loop_scope="module")
ROWS = 250  # three chunks of `jobs.CHUNK`


async def _caller(db: RuntimeDb) -> TrustedCall:
    async with unit_of_work(session_factory(db.engine), readonly=True) as session:
        user = await InboxRepository(session).active_user(db.org_id, db.integration_user_id)
    assert user is not None
    return TrustedCall(
        org_id=db.org_id,
        user_id=user.user_id,
        session_id="",
        client_id=None,
        scopes=frozenset({"api"}),
        security_epoch=user.security_epoch,
        via="access_token",
    )


async def upload(db: RuntimeDb, caller: TrustedCall, csv_text: str) -> str:
    """Accept an import as `caller` (the use case runtime-api's endpoint calls)."""
    async with unit_of_work(session_factory(db.engine)) as session:
        view = await MetadataCache().view(session, db.org_id)
        access = await AccessCache().for_caller(session, caller)
        accepted = await jobs.accept(
            session,
            view=view,
            access=access,
            caller=caller,
            upload=jobs.Upload(
                object="Contact",
                mode="insert",
                external_id_field=None,
                mapping=None,
                csv_text=csv_text,
            ),
        )
    return str(accepted["id"])


async def status(db: RuntimeDb, caller: TrustedCall, job_id: str) -> dict[str, Any]:
    async with unit_of_work(session_factory(db.engine), readonly=True) as session:
        return await jobs.status(session, caller, job_id)


async def wait_state(
    db: RuntimeDb, caller: TrustedCall, job_id: str, states: set[str], within: float = 60
) -> dict[str, Any]:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        job = await status(db, caller, job_id)
        if job["state"] in states:
            return job
        await asyncio.sleep(0.1)
    raise AssertionError(f"the import is still {job}")


async def saved(db: RuntimeDb, prefix: str) -> dict[str, int]:
    """Contacts whose last name starts with `prefix`: how many records carry each name."""
    async with unit_of_work(session_factory(db.engine), readonly=True) as session:
        view = await MetadataCache().view(session, db.org_id)
        obj = view.object("Contact")
        assert obj is not None
        table = view.table(obj)
        rows = await session.execute(
            select(table.c.lastname, func.count())
            .where(table.c.lastname.like(f"{prefix}%"))
            .group_by(table.c.lastname)
        )
        return {str(name): int(count) for name, count in rows}


async def exited(process: Any, within: float = 60) -> int:
    deadline = time.monotonic() + within
    while process.poll() is None:
        assert time.monotonic() < deadline, "the worker did not reach its failpoint"
        await asyncio.sleep(0.1)
    return int(process.returncode)


async def test_a_worker_killed_between_chunks_leaves_an_import_the_next_one_finishes(
    db: RuntimeDb, tmp_path: Path
) -> None:
    caller = await _caller(db)
    names = [f"Crashed import {n:03d}" for n in range(1, ROWS + 1)]
    csv_text = "LastName\n" + "".join(f"{name}\n" for name in names)

    dying = start_worker(db, tmp_path / "dying.log", NEXUS_FAILPOINT=FAILPOINT_BETWEEN_CHUNKS)
    try:
        job_id = await upload(db, caller, csv_text)
        assert await exited(dying.process) == CRASH_STATUS  # right after its first chunk
    finally:
        stop_worker(dying)
    cut = await status(db, caller, job_id)
    assert (cut["state"], cut["processed"], cut["succeeded"]) == ("running", jobs.CHUNK, jobs.CHUNK)
    assert len(await saved(db, "Crashed import")) == jobs.CHUNK

    survivor = start_worker(db, tmp_path / "survivor.log")
    try:
        done = await wait_state(db, caller, job_id, {"done", "failed"})
    finally:
        assert stop_worker(survivor) == 0
    assert done["state"] == "done", done
    assert (done["processed"], done["succeeded"], done["failed"]) == (ROWS, ROWS, 0)
    assert done["error"] is None
    assert await saved(db, "Crashed import") == dict.fromkeys(names, 1)  # each exactly once
