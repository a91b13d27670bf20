"""runtime-worker's imports loop: one work-engine `Worker` over the `runtime.import` family
(ADR 0062).

At start it registers the family's queue with its attempt cap (retrying until the database is
migrated), then claims and runs chunks until the role stops. One item is one chunk of one
job (`jobs.run_chunk`): its saves, the job's progress, the next chunk's item and its own
completion commit in one transaction, which the item's lease token fences (`complete_in`),
so a holder whose lease was lost commits nothing, and a crash loses at most the chunk in
flight. A chunk that fails is retried by the engine's backoff; on its last attempt its job
fails with the error's class (never a value), in the transaction that marks the item dead.

It answers the imports doorbell (`jobs.BELL`, docs/adr/0055): runtime-api rings it after
accepting a job, so an idle worker claims at once; the idle poll (`IDLE_POLL_MS`) only bounds
a lost ring's delay. Stop drains (work-engine semantics).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

from fastapi import FastAPI
from pydantic import ValidationError

from nexus.contracts.ops import CheckResult
from nexus.platform.db.engine import unit_of_work
from nexus.platform.doorbell import answering
from nexus.platform.failpoints import crash_at
from nexus.platform.loops import RestartingLoop
from nexus.platform.observability import get_logger
from nexus.platform.periodic import unless_cancelled
from nexus.platform.service_app import ServiceState
from nexus.platform.settings import Settings
from nexus.platform.workqueue.store import DEAD, RETRYABLE, Claimed, Outcome
from nexus.platform.workqueue.worker import LeaseLost, Retryable, Terminal, Worker, WorkerSettings
from nexus.runtime.access.service import AccessCache
from nexus.runtime.imports import jobs
from nexus.runtime.imports.queue import (
    INSTALLATION,
    QUEUE_CLASS,
    ImportChunk,
    enqueue_chunk,
    import_store,
    queue_policy,
)
from nexus.runtime.metadata.view import MetadataCache

log = get_logger(__name__)
START_RETRY_SECONDS = 2.0
#: Chunks one process runs at once (the runner ran one job at a time; one chunk's saves are
#: a write transaction of up to `jobs.CHUNK` records).
CONCURRENCY = 1
#: How often an idle worker looks without a ring (the runner's was 5 s): with the doorbell
#: only a lost ring's bound, and the latest a due retry of a chunk is noticed (as the outbox's).
IDLE_POLL_MS = 1_000
#: Retry backoff of a failed chunk: full jitter under base * 2^(attempt-1), capped.
BACKOFF_BASE_MS = 250
BACKOFF_CAP_MS = 10_000
#: Failpoint (`NEXUS_FAILPOINT`): die right after a chunk that leaves rows to do committed.
FAILPOINT_BETWEEN_CHUNKS = "imports.between_chunks"


class ImportRunner:
    def __init__(self, state: ServiceState, settings: Settings) -> None:
        self.engine = state.engine
        self.sessions = state.sessions
        self.pause_s = settings.inbox.import_chunk_pause_ms / 1000
        self.failpoint = settings.core.failpoint
        self.metadata, self.access = MetadataCache(), AccessCache()
        self.store = import_store(orgs=settings.core.work_orgs or None)
        self.worker = Worker(
            state.engine,
            self.store,
            self._handle,
            WorkerSettings(
                concurrency=CONCURRENCY,
                batch=CONCURRENCY,
                idle_poll_ms=IDLE_POLL_MS,
                backoff_base_ms=BACKOFF_BASE_MS,
                backoff_cap_ms=BACKOFF_CAP_MS,
                drain_timeout_s=settings.core.shutdown_grace_seconds / 2,
            ),
        )
        self._stopping = asyncio.Event()

    async def _handle(self, claimed: Claimed) -> None:
        try:
            chunk = ImportChunk.model_validate_json(claimed.payload)
        except ValidationError:
            raise Terminal("malformed import item") from None
        if chunk.follows and self.pause_s:
            await asyncio.sleep(self.pause_s)  # between two chunks of a job (the lease holds)
        try:
            more = await self._chunk(claimed, chunk)
        except LeaseLost:
            raise  # its transaction rolled back: the chunk is the new holder's
        except Exception as exc:  # noqa: BLE001 - its class only, never its text
            unless_cancelled()
            error = f"{type(exc).__name__}: chunk failed"
            log.warning(
                "imports.chunk_failed",
                job=chunk.job_id,
                error=type(exc).__name__,
                attempt=claimed.attempt,
            )
            if claimed.attempt < claimed.max_attempts:
                raise Retryable(error) from None
            await self._give_up(claimed, chunk, error)
            return
        if more:
            crash_at(self.failpoint, FAILPOINT_BETWEEN_CHUNKS)
        else:
            log.info("imports.finished", job=chunk.job_id)

    async def _chunk(self, claimed: Claimed, chunk: ImportChunk) -> bool:
        if not chunk.follows:
            async with unit_of_work(self.sessions) as session:
                await jobs.start(session, chunk.org_id, chunk.job_id)
        async with unit_of_work(self.sessions) as session:
            more = await jobs.run_chunk(
                session,
                metadata=self.metadata,
                access_cache=self.access,
                org_id=chunk.org_id,
                job_id=chunk.job_id,
            )
            if more:
                await enqueue_chunk(session, chunk.org_id, chunk.job_id, follows=True)
            await self.worker.complete_in(await session.connection(), claimed)
        return more  # (the worker looks at once: a lane item finished, its next is the head)

    async def _give_up(self, claimed: Claimed, chunk: ImportChunk, error: str) -> None:
        """The chunk's last attempt failed: its job fails, and its item is dead, together."""
        async with unit_of_work(self.sessions) as session:
            await jobs.fail(session, chunk.org_id, chunk.job_id, error)
            await self.worker.complete_in(
                await session.connection(), claimed, Outcome(DEAD, RETRYABLE, error)
            )
        log.warning("imports.failed", job=chunk.job_id, error=error)

    async def _register_queue(self) -> None:
        """The queue exists with this release's attempt cap (items copy it on enqueue)."""
        async with self.engine.begin() as conn:
            await self.store.apply_policy(conn, INSTALLATION, QUEUE_CLASS, queue_policy())

    async def run(self) -> None:
        while not self._stopping.is_set():
            try:
                await self._register_queue()
                break
            except Exception as exc:  # noqa: BLE001 - not migrated yet or unreachable: retry
                unless_cancelled()
                log.warning("imports.start_deferred", error=type(exc).__name__)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopping.wait(), START_RETRY_SECONDS)
        if self._stopping.is_set():
            return
        log.info("imports.started", installation=INSTALLATION)
        with answering(jobs.BELL, self.worker.wake):
            await self.worker.run()

    def stop(self) -> None:
        self._stopping.set()
        self.worker.stop()


def imports_lifespan(
    settings: Settings,
) -> Callable[[FastAPI, ServiceState], AbstractAsyncContextManager[None]]:
    @asynccontextmanager
    async def run(app: FastAPI, state: ServiceState) -> AsyncIterator[None]:
        runner = app.state.imports = ImportRunner(state, settings)
        loop = app.state.imports_loop = RestartingLoop("imports", runner.run, on_stop=runner.stop)
        loop.start()
        try:
            yield
        finally:
            await loop.stop(settings.core.shutdown_grace_seconds)

    return run


async def imports_ready(app: FastAPI) -> CheckResult:
    """Not ready while the imports loop restarts after a failure."""
    loop: RestartingLoop | None = getattr(app.state, "imports_loop", None)
    if loop is None:
        return CheckResult(name="imports", ok=True, detail="starting")
    return await loop.ready()
