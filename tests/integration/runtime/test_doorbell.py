"""runtime-api rings runtime-worker's doorbell after an accept: a real worker process whose
idle poll is a minute still applies commands at once, one after another (both backends)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
import pytest_asyncio

from tests.support.commands import (
    RuntimeDb,
    WorkerProcess,
    accepted,
    command,
    contact,
    runtime_api,
    start_worker,
    stop_worker,
    wait_final,
)
from tests.support.commands import db as db  # noqa: PLC0414  (fixture)

pytestmark = pytest.mark.asyncio(loop_scope="module")
IDLE_POLL_MS = 60_000  # without the bell, a command would wait for this


@pytest.fixture(scope="module")
def worker(db: RuntimeDb, tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerProcess]:
    process = start_worker(
        db,
        tmp_path_factory.mktemp("worker-logs") / "runtime-worker.log",
        NEXUS_INBOX_IDLE_POLL_MS=str(IDLE_POLL_MS),
    )
    try:
        yield process
    finally:
        assert stop_worker(process) == 0


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def api(db: RuntimeDb, worker: WorkerProcess) -> AsyncIterator[httpx.AsyncClient]:
    async with (
        runtime_api(db, runtime_worker_url=worker.url) as url,
        httpx.AsyncClient(base_url=url, timeout=30) as client,
    ):
        yield client


async def test_each_accepted_command_wakes_the_idle_worker(
    api: httpx.AsyncClient, db: RuntimeDb
) -> None:
    for n in range(3):  # the worker is idle again before each: every one needs its own ring
        work_id = await accepted(api, db, command(f"bell-{n}", LastName=f"Bell {n}"))
        await wait_final(db.engine, [work_id], within=IDLE_POLL_MS / 1000 / 4)
        row = await contact(db, f"bell-{n}")
        assert row is not None
        assert row["lastname"] == f"Bell {n}"
