"""Bulk API ingest jobs on the work engine (ADR 0077): a runtime-worker killed between two
chunks of a job leaves a job that the next worker finishes, every record saved exactly once
(each chunk's saves, outcomes and progress commit in one transaction fenced by its item's
lease); a job whose user was deactivated before it ran fails, saving nothing. Its own
module: these workers are processes on the `db` fixture's own database."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from nexus.contracts.identity import TrustedCall
from nexus.identity.api import Directory
from nexus.platform.db.engine import session_factory, unit_of_work
from nexus.platform.failpoints import CRASH_STATUS
from nexus.runtime.access.service import AccessCache
from nexus.runtime.bulk import service
from nexus.runtime.bulk.worker import FAILPOINT_BETWEEN_CHUNKS
from nexus.runtime.inbox.repository import InboxRepository
from nexus.runtime.metadata.view import MetadataCache
from tests.integration.runtime.test_import_crash import exited, saved
from tests.support.commands import RuntimeDb, start_worker, stop_worker
from tests.support.commands import db as db  # noqa: PLC0414  (fixture)

pytestmark = pytest.mark.asyncio(loop_scope="module")


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


async def open_job(db: RuntimeDb, caller: TrustedCall, names: list[str]) -> dict[str, Any]:
    """An Open insert job of Contacts with these last names (the use cases' own calls)."""
    async with unit_of_work(session_factory(db.engine)) as session:
        view = await MetadataCache().view(session, db.org_id)
        access = await AccessCache().for_caller(session, caller)
        job = await service.create_job(
            session,
            view=view,
            access=access,
            caller=caller,
            spec=service.JobSpec(kind="ingest", operation="insert", object="Contact"),
        )
        await service.upload(
            session,
            caller=caller,
            job_id=job["id"],
            header="LastName",
            text="".join(f"{name}\n" for name in names),
        )
    return job


async def ended(db: RuntimeDb, caller: TrustedCall, job_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 120
    while True:
        async with unit_of_work(session_factory(db.engine), readonly=True) as session:
            job = await service.info(session, caller, job_id, kind="ingest")
        if job["state"] not in ("UploadComplete", "InProgress"):
            return job
        assert time.monotonic() < deadline, job
        await asyncio.sleep(0.1)


async def test_a_worker_killed_between_chunks_leaves_a_job_the_next_one_finishes(
    db: RuntimeDb, tmp_path: Path
) -> None:
    caller = await _caller(db)
    total = service.CHUNK * 2 + 100  # three chunks
    names = [f"Bulk crash {n:05d}" for n in range(1, total + 1)]
    sessions = session_factory(db.engine)
    job = await open_job(db, caller, names)
    dying = start_worker(db, tmp_path / "dying.log", NEXUS_FAILPOINT=FAILPOINT_BETWEEN_CHUNKS)
    try:
        async with unit_of_work(sessions) as session:
            await service.set_state(
                session, caller=caller, job_id=job["id"], kind="ingest", state="UploadComplete"
            )
        assert await exited(dying.process) == CRASH_STATUS  # right after its first chunk
    finally:
        stop_worker(dying)
    async with unit_of_work(sessions, readonly=True) as session:
        cut = await service.info(session, caller, job["id"], kind="ingest")
    assert (cut["state"], cut["records_processed"]) == ("InProgress", service.CHUNK)
    assert len(await saved(db, "Bulk crash")) == service.CHUNK

    survivor = start_worker(db, tmp_path / "survivor.log")
    try:
        done = await ended(db, caller, job["id"])
    finally:
        assert stop_worker(survivor) == 0
    assert (done["state"], done["records_processed"], done["records_failed"]) == (
        "JobComplete",
        total,
        0,
    )
    assert await saved(db, "Bulk crash") == dict.fromkeys(names, 1)  # each exactly once


async def test_a_job_whose_user_was_deactivated_fails_and_saves_nothing(
    db: RuntimeDb, tmp_path: Path
) -> None:
    caller = await _caller(db)
    names = [f"Bulk inactive {n:03d}" for n in range(1, 51)]
    job = await open_job(db, caller, names)
    sessions = session_factory(db.engine)
    async with unit_of_work(sessions) as session:
        await service.set_state(
            session, caller=caller, job_id=job["id"], kind="ingest", state="UploadComplete"
        )
        await Directory(session).set_user_active(
            org_id=db.org_id, user_id=caller.user_id, active=False
        )
    worker = start_worker(db, tmp_path / "worker.log")
    try:
        done = await ended(db, caller, job["id"])
    finally:
        assert stop_worker(worker) == 0
        async with unit_of_work(sessions) as session:
            await Directory(session).set_user_active(
                org_id=db.org_id, user_id=caller.user_id, active=True
            )
    assert (done["state"], done["error_message"]) == (
        "Failed",
        "InvalidUser : the user is inactive",
    )
    assert done["records_processed"] == 0
    assert await saved(db, "Bulk inactive") == {}
