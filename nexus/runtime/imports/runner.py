"""runtime-worker's chunked-job loops: one work-engine `Worker` per kind of job, CSV imports
over the `runtime.import` family (ADR 0062) and Bulk API jobs over `runtime.bulk` (ADR 0077).

At start it registers the family's queue with its attempt cap (retrying until the database is
migrated), then claims and runs chunks until the role stops. One item is one chunk of one
job (`ChunkJobs.run_chunk`): its saves, the job's progress, the next chunk's item and its own
completion commit in one transaction, which the item's lease token fences (`complete_in`),
so a holder whose lease was lost commits nothing, and a crash loses at most the chunk in
flight. A chunk that fails is retried by the engine's backoff; on its last attempt its job
fails with the error's class (never a value), in the transaction that marks the item dead.

It answers its kind's doorbell (imports: `jobs.BELL`, docs/adr/0055): runtime-api rings it
after accepting a job, so an idle worker claims at once; the idle poll (`IDLE_POLL_MS`) only
bounds a lost ring's delay. Stop drains (work-engine semantics).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Protocol

from fastapi import FastAPI
from pydantic import ValidationError
from sqlalchemy.ext.asyncio import AsyncSession

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
from nexus.runtime.imports.queue import IMPORTS, ChunkFamily, ImportChunk
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


class ChunkJobs(Protocol):
    """What one kind of chunked job does with its chunks (imports: `jobs`)."""

    async def start(self, session: AsyncSession, org_id: str, job_id: str) -> None: ...

    async def run_chunk(
        self,
        session: AsyncSession,
        *,
        metadata: MetadataCache,
        access_cache: AccessCache,
        org_id: str,
        job_id: str,
    ) -> bool: ...

    async def fail(self, session: AsyncSession, org_id: str, job_id: str, error: str) -> None: ...


@dataclass(frozen=True)
class ChunkKind:
    """One kind of chunked job as the worker runs it."""

    name: str  # log events, the readiness check, the app.state attributes
    family: ChunkFamily
    jobs: ChunkJobs
    bell: bytes
    #: Failpoint (`NEXUS_FAILPOINT`): die right after a chunk that leaves work to do committed.
    failpoint: str
    pause_s: float = 0.0  # slept before a follow-up chunk (its lease held)


class _ImportJobs:
    start = staticmethod(jobs.start)
    run_chunk = staticmethod(jobs.run_chunk)
    fail = staticmethod(jobs.fail)


def import_kind(settings: Settings) -> ChunkKind:
    return ChunkKind(
        name="imports",
        family=IMPORTS,
        jobs=_ImportJobs(),
        bell=jobs.BELL,
        failpoint=FAILPOINT_BETWEEN_CHUNKS,
        pause_s=settings.inbox.import_chunk_pause_ms / 1000,
    )


class ChunkRunner:
    def __init__(self, state: ServiceState, settings: Settings, kind: ChunkKind) -> None:
        self.kind = kind
        self.engine = state.engine
        self.sessions = state.sessions
        self.pause_s = kind.pause_s
        self.failpoint = settings.core.failpoint
        self.metadata, self.access = MetadataCache(), AccessCache()
        self.store = kind.family.store(orgs=settings.core.work_orgs or None)
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
            raise Terminal(f"malformed {self.kind.name} item") from None
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
                f"{self.kind.name}.chunk_failed",
                job=chunk.job_id,
                error=type(exc).__name__,
                attempt=claimed.attempt,
            )
            if claimed.attempt < claimed.max_attempts:
                raise Retryable(error) from None
            await self._give_up(claimed, chunk, error)
            return
        if more:
            crash_at(self.failpoint, self.kind.failpoint)
        else:
            log.info(f"{self.kind.name}.finished", job=chunk.job_id)

    async def _chunk(self, claimed: Claimed, chunk: ImportChunk) -> bool:
        if not chunk.follows:
            async with unit_of_work(self.sessions) as session:
                await self.kind.jobs.start(session, chunk.org_id, chunk.job_id)
        async with unit_of_work(self.sessions) as session:
            more = await self.kind.jobs.run_chunk(
                session,
                metadata=self.metadata,
                access_cache=self.access,
                org_id=chunk.org_id,
                job_id=chunk.job_id,
            )
            if more:
                await self.kind.family.enqueue(session, chunk.org_id, chunk.job_id, follows=True)
            await self.worker.complete_in(await session.connection(), claimed)
        return more  # (the worker looks at once: a lane item finished, its next is the head)

    async def _give_up(self, claimed: Claimed, chunk: ImportChunk, error: str) -> None:
        """The chunk's last attempt failed: its job fails, and its item is dead, together."""
        async with unit_of_work(self.sessions) as session:
            await self.kind.jobs.fail(session, chunk.org_id, chunk.job_id, error)
            await self.worker.complete_in(
                await session.connection(), claimed, Outcome(DEAD, RETRYABLE, error)
            )
        log.warning(f"{self.kind.name}.failed", job=chunk.job_id, error=error)

    async def _register_queue(self) -> None:
        """The queue exists with this release's attempt cap (items copy it on enqueue)."""
        async with self.engine.begin() as conn:
            family = self.kind.family
            await self.store.apply_policy(
                conn, family.installation, family.queue_class, family.policy()
            )

    async def run(self) -> None:
        while not self._stopping.is_set():
            try:
                await self._register_queue()
                break
            except Exception as exc:  # noqa: BLE001 - not migrated yet or unreachable: retry
                unless_cancelled()
                log.warning(f"{self.kind.name}.start_deferred", error=type(exc).__name__)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopping.wait(), START_RETRY_SECONDS)
        if self._stopping.is_set():
            return
        log.info(f"{self.kind.name}.started", installation=self.kind.family.installation)
        with answering(self.kind.bell, self.worker.wake):
            await self.worker.run()

    def stop(self) -> None:
        self._stopping.set()
        self.worker.stop()


class ImportRunner(ChunkRunner):
    """CSV imports' runner (ADR 0062)."""

    def __init__(self, state: ServiceState, settings: Settings) -> None:
        super().__init__(state, settings, import_kind(settings))


def chunk_lifespan(
    settings: Settings, kind: Callable[[Settings], ChunkKind]
) -> Callable[[FastAPI, ServiceState], AbstractAsyncContextManager[None]]:
    """Run one kind's `ChunkRunner` for the role's life (restarted after a failure)."""

    @asynccontextmanager
    async def run(app: FastAPI, state: ServiceState) -> AsyncIterator[None]:
        chosen = kind(settings)
        runner = ChunkRunner(state, settings, chosen)
        setattr(app.state, chosen.name, runner)
        loop = RestartingLoop(chosen.name, runner.run, on_stop=runner.stop)
        setattr(app.state, f"{chosen.name}_loop", loop)
        loop.start()
        try:
            yield
        finally:
            await loop.stop(settings.core.shutdown_grace_seconds)

    return run


def imports_lifespan(
    settings: Settings,
) -> Callable[[FastAPI, ServiceState], AbstractAsyncContextManager[None]]:
    return chunk_lifespan(settings, import_kind)


async def chunk_ready(app: FastAPI, name: str) -> CheckResult:
    """Not ready while the kind's loop restarts after a failure."""
    loop: RestartingLoop | None = getattr(app.state, f"{name}_loop", None)
    if loop is None:
        return CheckResult(name=name, ok=True, detail="starting")
    return await loop.ready()


async def imports_ready(app: FastAPI) -> CheckResult:
    """Not ready while the imports loop restarts after a failure."""
    return await chunk_ready(app, "imports")
