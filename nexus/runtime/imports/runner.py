"""The import runner in runtime-worker: claim a job, run its chunks, look again (ADR 0040).

It answers the imports doorbell (`jobs.BELL`, docs/adr/0055): runtime-api rings it after
accepting a job, so an idle runner looks at once; its idle poll (`IDLE_SECONDS`) only bounds
a lost ring's delay and finds a job whose runner's lease ran out."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager, suppress

from fastapi import FastAPI

from nexus.platform.db.engine import unit_of_work
from nexus.platform.doorbell import answering
from nexus.platform.loops import RestartingLoop
from nexus.platform.observability import get_logger
from nexus.platform.periodic import unless_cancelled
from nexus.platform.service_app import ServiceState
from nexus.runtime.access.service import AccessCache
from nexus.runtime.imports.jobs import BELL, claim, give_up, run_chunk, waiting
from nexus.runtime.metadata.view import MetadataCache

log = get_logger(__name__)
#: Was 0.5 s before the doorbell: two read transactions a second on an idle worker.
IDLE_SECONDS = 5.0
RETRY_SECONDS = 0.5  # after a failed look or chunk
MAX_FAILURES = 3


async def _take(state: ServiceState, owner: str) -> tuple[str, str] | None:
    async with unit_of_work(state.sessions, readonly=True) as session:
        job = await waiting(session)
    if job is None:
        return None
    async with unit_of_work(state.sessions) as session:
        return job if await claim(session, owner, job) else None  # or another was first


async def run_imports(
    state: ServiceState, *, idle_s: float = IDLE_SECONDS, pause_s: float = 0.0
) -> None:
    """Until cancelled: run every waiting import to its end (`pause_s` between its chunks),
    then wait `idle_s` and look again. A chunk that fails `MAX_FAILURES` times in a row fails
    its job (with the error's class). A ring of `BELL` ends the idle wait."""
    rang = asyncio.Event()
    with answering(BELL, rang.set):
        await _run(state, rang, idle_s=idle_s, pause_s=pause_s)


async def _run(state: ServiceState, rang: asyncio.Event, *, idle_s: float, pause_s: float) -> None:
    owner = f"import-{uuid.uuid4().hex[:12]}"
    metadata, access = MetadataCache(), AccessCache()
    job: tuple[str, str] | None = None
    failures = 0
    while True:
        try:
            if job is None:
                rang.clear()  # a ring from here on may be a job this look does not see
                job = await _take(state, owner)
            if job is not None:
                async with unit_of_work(state.sessions) as session:
                    more = await run_chunk(
                        session,
                        metadata=metadata,
                        access_cache=access,
                        owner=owner,
                        org_id=job[0],
                        job_id=job[1],
                    )
                failures = 0
                if not more:
                    log.info("imports.finished", job=job[1])
                    job = None
                elif pause_s:
                    await asyncio.sleep(pause_s)
                continue
        except Exception as exc:  # noqa: BLE001 - keep running; the lease hands the job on
            unless_cancelled()
            log.warning("imports.chunk_failed", error=type(exc).__name__)
            failures += 1
            if job is not None and failures >= MAX_FAILURES:
                with suppress(Exception):
                    async with unit_of_work(state.sessions) as session:
                        await give_up(session, owner, job, f"{type(exc).__name__}: chunk failed")
                job, failures = None, 0
            await asyncio.sleep(RETRY_SECONDS)
            continue
        with suppress(TimeoutError):  # nothing waiting: until a ring or the next poll
            await asyncio.wait_for(rang.wait(), idle_s)


def imports_lifespan(
    pause_s: float = 0.0,
) -> Callable[[FastAPI, ServiceState], AbstractAsyncContextManager[None]]:
    @asynccontextmanager
    async def run(app: FastAPI, state: ServiceState) -> AsyncIterator[None]:
        loop = app.state.imports_loop = RestartingLoop(
            "imports", lambda: run_imports(state, pause_s=pause_s)
        )
        loop.start()
        try:
            yield
        finally:
            await loop.stop(0)  # at once: a chunk cut short is redone by the next runner

    return run
