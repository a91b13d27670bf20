"""runtime-worker's inbox loop: its own engine and pool, one `Worker` over the inbox queue.

It starts once Runtime's migrations are at head (a worker started before `nexus migrate`
waits, and says so on /readyz), restarts its Worker if that ever stops by itself, and drains
on `stop()` (SIGTERM): no new claims, running commands get the drain time, the rest are
released for another process. Its queue and this process's counts are on /metrics as
`nexus_work_*{family="runtime.inbox"}` (`platform.workqueue.metrics`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from sqlalchemy.ext.asyncio import AsyncEngine

from nexus.contracts.ops import CheckResult
from nexus.contracts.roles import LogicalService
from nexus.platform.db.engine import session_factory
from nexus.platform.loops import RestartingLoop
from nexus.platform.migrations import migration_state
from nexus.platform.observability import get_logger
from nexus.platform.periodic import unless_cancelled
from nexus.platform.service_app import ServiceState, role_engine
from nexus.platform.settings import Settings
from nexus.platform.workqueue.worker import Worker, WorkerSettings
from nexus.runtime.inbox.execute import CommandExecutor
from nexus.runtime.inbox.queue import INSTALLATION, QUEUE_CLASS, inbox_policy, inbox_store

log = get_logger(__name__)
SCHEMA_POLL_SECONDS = 2.0
RESTART_SECONDS = 5.0
#: Connections: the group runner's, the poller's, the completer's, the heartbeat's, a spare.
POOL_SIZE = 5


class InboxLoop:
    def __init__(self, settings: Settings) -> None:
        cfg = settings.inbox
        self.settings = settings
        self.store = inbox_store(
            lease_ms=cfg.inbox_lease_ms,
            orgs=settings.core.work_orgs or None,
            max_attempts=cfg.inbox_max_attempts,
        )
        self.policy = inbox_policy(cfg.inbox_max_attempts)
        self.worker_settings = WorkerSettings(
            concurrency=cfg.inbox_concurrency,
            batch=cfg.inbox_concurrency,
            idle_poll_ms=cfg.inbox_idle_poll_ms,
            drain_timeout_s=settings.core.shutdown_grace_seconds * 0.8,
        )
        self.worker: Worker | None = None
        self.engine: AsyncEngine | None = None
        self.loop = RestartingLoop(
            "inbox", self._run_once, on_stop=self._stop_worker, restart_s=RESTART_SECONDS
        )

    @property
    def state(self) -> str:
        return self.loop.state

    @asynccontextmanager
    async def lifespan(self, _app: FastAPI, _state: ServiceState) -> AsyncIterator[None]:
        """runtime-worker's lifetime: start, then drain on shutdown (SIGTERM)."""
        await self.start()
        try:
            yield
        finally:
            await self.stop()

    async def start(self) -> None:
        self.engine = role_engine(
            self.settings,
            LogicalService.RUNTIME,
            name="nexus-runtime-worker-inbox",
            pool_size=POOL_SIZE,
            sqlite_on_loop=True,  # claims, completions and record writes: short statements
        )
        self.loop.start()

    async def stop(self) -> None:
        """Drain: stop claiming, let running commands finish (or release them), then close."""
        await self.loop.stop(self.worker_settings.drain_timeout_s + 5)
        if self.engine is not None:
            await self.engine.dispose()

    def _stop_worker(self) -> None:
        if self.worker is not None:
            self.worker.stop()

    async def ready(self) -> CheckResult:
        """Not ready when the loop failed (and is restarting) or stopped; waiting for the
        schema or the database is the database check's to report."""
        return await self.loop.ready()

    async def _run_once(self) -> None:
        """One life of the inbox worker (`RestartingLoop` runs it again after a failure)."""
        assert self.engine is not None  # noqa: S101 - started by start()
        engine = self.engine
        await self._wait_for_schema(engine)
        if self.loop.stopping:
            return
        async with engine.begin() as conn:
            await self.store.apply_policy(conn, INSTALLATION, QUEUE_CLASS, self.policy)
        executor = CommandExecutor(session_factory(engine), failpoint=self.settings.core.failpoint)
        worker = Worker(engine, self.store, executor, self.worker_settings)
        executor.worker = self.worker = worker
        if self.loop.stopping:
            return
        self.loop.state = "running"
        log.info("inbox.started", concurrency=self.worker_settings.concurrency)
        try:
            await worker.run()
        finally:
            await executor.close()

    async def _wait_for_schema(self, engine: AsyncEngine) -> None:
        while not self.loop.stopping:
            try:
                if (await migration_state(engine, LogicalService.RUNTIME)).at_head:
                    return
                self.loop.state = "waiting for migrations"
            except Exception as exc:  # noqa: BLE001 - the database is not reachable yet
                unless_cancelled()
                self.loop.state = f"waiting for the database ({type(exc).__name__})"
            await self.loop.pause(SCHEMA_POLL_SECONDS)
