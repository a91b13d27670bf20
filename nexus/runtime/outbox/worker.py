"""runtime-worker's outbox loop: one work-engine `Worker` over the outbox tables.

At start it registers the `runtime.flows` queues with the configured attempt cap (retrying
until the database is migrated), then claims and runs items until the role stops: record
actions through `RecordActions`, webhooks through `Delivery`. Stop drains (work-engine
semantics: running items get the drain timeout, the rest are released).

It answers the outbox's doorbell (`BELL`, docs/adr/0055): a commit that wrote outbox items
in this process (an inbox command's save) wakes it directly, one in runtime-api through the
UDP doorbell when that process forwards it. The idle poll (`IDLE_POLL_MS`) only bounds a lost
ring's delay and finds retries that became due.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

import httpx
from fastapi import FastAPI
from pydantic import ValidationError

from nexus.contracts.ops import CheckResult
from nexus.contracts.roles import LogicalService
from nexus.platform.db.backend import backend_of
from nexus.platform.doorbell import answering
from nexus.platform.loops import RestartingLoop
from nexus.platform.observability import get_logger
from nexus.platform.periodic import unless_cancelled
from nexus.platform.service_app import ServiceState, role_engine
from nexus.platform.settings import Settings
from nexus.platform.workqueue.store import Claimed
from nexus.platform.workqueue.worker import Terminal, Worker, WorkerSettings
from nexus.runtime.metadata.view import MetadataCache
from nexus.runtime.outbox.delivery import Delivery
from nexus.runtime.outbox.queue import (
    BELL,
    INSTALLATION,
    QUEUE_CLASSES,
    OutboxMessage,
    outbox_store,
    queue_policy,
)
from nexus.runtime.outbox.records import RecordActions

log = get_logger(__name__)
START_RETRY_SECONDS = 2.0
#: Connections: the poller's, the completer's, the heartbeat's, record actions, webhook reads.
POOL_SIZE = 8
#: How often an idle runner looks without a ring (it was 100 ms before the doorbell: ten
#: empty reads of both queues a second, ADR 0055). Also the latest a due retry is noticed.
IDLE_POLL_MS = 1_000


class OutboxRunner:
    def __init__(self, state: ServiceState, settings: Settings) -> None:
        cfg = settings.outbox
        self.engine = state.engine
        self.max_attempts = cfg.outbox_max_attempts
        self.store = outbox_store(
            orgs=settings.core.work_orgs or None, max_attempts=self.max_attempts
        )
        self.http = httpx.AsyncClient(
            timeout=httpx.Timeout(cfg.outbox_webhook_timeout_seconds),
            follow_redirects=False,
            trust_env=False,
        )
        self.worker = Worker(
            state.engine,
            self.store,
            self._handle,
            WorkerSettings(
                concurrency=cfg.outbox_concurrency,
                batch=cfg.outbox_concurrency,
                idle_poll_ms=IDLE_POLL_MS,
                backoff_base_ms=cfg.outbox_backoff_base_ms,
                backoff_cap_ms=cfg.outbox_backoff_cap_ms,
                drain_timeout_s=settings.core.shutdown_grace_seconds / 2,
            ),
        )
        writers = 1 if backend_of(state.engine).one_writer else cfg.outbox_concurrency
        self.records = RecordActions(
            state.sessions, MetadataCache(), self.worker.complete_in, asyncio.Semaphore(writers)
        )
        self.webhooks = Delivery(
            state.engine, self.http, settings.var_dir, cfg.outbox_backoff_cap_ms
        )
        self._stopping = asyncio.Event()

    async def _handle(self, claimed: Claimed) -> None:
        try:
            message = OutboxMessage.model_validate_json(claimed.payload)
        except ValidationError:
            raise Terminal("malformed outbox item") from None
        if message.kind == "webhook":
            await self.webhooks(message, claimed)
        else:
            await self.records(message, claimed)

    async def _register_queues(self) -> None:
        """Every org's queues follow this deployment's attempt cap (items copy it on
        enqueue; an org's queue created later copies it from another org's)."""
        async with self.engine.begin() as conn:
            for queue_class in QUEUE_CLASSES:
                policy = queue_policy(self.max_attempts)
                await self.store.apply_policy(conn, INSTALLATION, queue_class, policy)

    async def run(self) -> None:
        while not self._stopping.is_set():
            try:
                await self._register_queues()
                break
            except Exception as exc:  # noqa: BLE001 - not migrated yet or unreachable: retry
                unless_cancelled()
                log.warning("outbox.start_deferred", error=type(exc).__name__)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopping.wait(), START_RETRY_SECONDS)
        if self._stopping.is_set():
            return
        log.info("outbox.started", installation=INSTALLATION, max_attempts=self.max_attempts)
        with answering(BELL, self.worker.wake):
            await self.worker.run()

    def stop(self) -> None:
        self._stopping.set()
        self.worker.stop()

    async def close(self) -> None:
        await self.http.aclose()


def outbox_lifespan(
    settings: Settings,
) -> Callable[[FastAPI, ServiceState], AbstractAsyncContextManager[None]]:
    @asynccontextmanager
    async def run(app: FastAPI, _state: ServiceState) -> AsyncIterator[None]:
        # its claims, completions and record actions are short statements: an engine of its
        # own, on the loop on SQLite (ADR 0049), like the inbox's
        engine = role_engine(
            settings,
            LogicalService.RUNTIME,
            name="nexus-runtime-worker-outbox",
            pool_size=POOL_SIZE,
            sqlite_on_loop=True,
        )
        runner = app.state.outbox = OutboxRunner(ServiceState(engine), settings)
        loop = app.state.outbox_loop = RestartingLoop("outbox", runner.run, on_stop=runner.stop)
        loop.start()
        try:
            yield
        finally:
            await loop.stop(settings.core.shutdown_grace_seconds)
            await runner.close()
            await engine.dispose()

    return run


async def outbox_ready(app: FastAPI) -> CheckResult:
    """Not ready while the outbox loop restarts after a failure."""
    loop: RestartingLoop | None = getattr(app.state, "outbox_loop", None)
    if loop is None:
        return CheckResult(name="outbox", ok=True, detail="starting")
    return await loop.ready()
