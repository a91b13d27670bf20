"""Runtime roles: `runtime-api` (the L0 engine's HTTP API) and `runtime-worker`."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager, suppress

from fastapi import FastAPI

from nexus.contracts.roles import LogicalService, Role
from nexus.identity.api import identity_lifespan
from nexus.identity.api import router as identity_router
from nexus.platform.db.engine import session_factory
from nexus.platform.doorbell import Doorbell, forwarding, listening
from nexus.platform.migrations import migration_state
from nexus.platform.observability import get_logger
from nexus.platform.periodic import every, unless_cancelled
from nexus.platform.service_app import ServiceState, create_service_app, role_engine
from nexus.platform.settings import Settings
from nexus.platform.workqueue.metrics import watching_queues
from nexus.runtime.admin.bulk_jobs import router as bulk_jobs_router
from nexus.runtime.admin.endpoints import router as admin_router
from nexus.runtime.bulk.endpoints import router as bulk_router
from nexus.runtime.bulk.queue import BELL as BULK_BELL
from nexus.runtime.bulk.worker import bulk_kind
from nexus.runtime.changes.endpoints import router as changes_router
from nexus.runtime.dependencies import RuntimeState
from nexus.runtime.endpoints import router as runtime_router
from nexus.runtime.imports.endpoints import router as imports_router
from nexus.runtime.imports.jobs import BELL as IMPORTS_BELL
from nexus.runtime.imports.runner import (
    chunk_lifespan,
    chunk_ready,
    imports_lifespan,
    imports_ready,
)
from nexus.runtime.inbox.accept import CommandInbox
from nexus.runtime.inbox.endpoints import router as inbox_router
from nexus.runtime.inbox.loop import InboxLoop
from nexus.runtime.inbox.models import inbox
from nexus.runtime.inbox.queue import inbox_store
from nexus.runtime.metadata.service import resume_staged
from nexus.runtime.outbox.models import outbox
from nexus.runtime.outbox.queue import BELL as OUTBOX_BELL
from nexus.runtime.outbox.worker import outbox_lifespan, outbox_ready
from nexus.runtime.releases.endpoints import router as release_router
from nexus.runtime.releases.replicas import ReplicaHeartbeat
from nexus.runtime.retention.service import retention_loop
from nexus.runtime.trees.endpoints import router as trees_router
from nexus.runtime.ui import router as ui_router
from nexus.runtime.usage.endpoints import router as usage_router

log = get_logger(__name__)
RESUME_RETRY_SECONDS = 2.0
#: Connections of AcceptCommand's own engine (batches from Integration's executors).
ACCEPT_POOL_SIZE = 4
API_CAPABILITIES = (
    "ops.v1",
    "identity.oauth2.v1",
    "runtime.metadata.v1",
    "runtime.records.v1",
    "runtime.commands.v1",
    "runtime.releases.v1",
)
WORKER_CAPABILITIES = ("ops.v1", "runtime.inbox.v1", "runtime.outbox.v1")
INBOX_BELL = b"inbox"  # runtime-api -> runtime-worker: commands were accepted


def _api_lifespan(
    settings: Settings,
) -> Callable[[FastAPI, ServiceState], AbstractAsyncContextManager[None]]:
    identity = identity_lifespan(settings)

    @asynccontextmanager
    async def start(app: FastAPI, state: ServiceState) -> AsyncIterator[None]:
        async with identity(app, state):
            app.state.runtime = RuntimeState()
            bell = Doorbell(settings.upstream_url("runtime-worker"))  # accepted: look now
            # AcceptCommand's statements are short and indexed: its own engine, on the loop
            # on SQLite (ADR 0049); SOQL and the UI keep the role's engine
            accept_engine = role_engine(
                settings,
                LogicalService.RUNTIME,
                name="nexus-runtime-api-accept",
                pool_size=ACCEPT_POOL_SIZE,
                sqlite_on_loop=True,
            )
            app.state.inbox = CommandInbox(
                inbox_store(),
                session_factory(accept_engine),
                max_body_bytes=settings.inbox.command_max_body_bytes,
                failpoint=settings.core.failpoint,
                on_accepted=lambda: bell.ring(INBOX_BELL),
            )
            resumer = asyncio.create_task(_resume_when_migrated(state))
            releases = settings.releases
            app.state.replica_live_ms = int(releases.runtime_replica_live_seconds * 1000)
            app.state.replica = ReplicaHeartbeat(
                state.engine,
                replica_id=releases.runtime_replica_id
                or f"{socket.gethostname()}:{settings.port_for(Role.RUNTIME_API)}",
                metadata=app.state.runtime.metadata,
            )
            heartbeat = every(
                releases.runtime_replica_heartbeat_seconds,
                app.state.replica.step,
                name="replica-heartbeat",
            )
            # after-save flows and CSV imports written here run in runtime-worker: wake it
            try:
                with forwarding([OUTBOX_BELL, IMPORTS_BELL, BULK_BELL], bell):
                    async with heartbeat:
                        yield
            finally:
                resumer.cancel()
                with suppress(asyncio.CancelledError):
                    await resumer
                bell.close()  # after forwarding ended: no late ring reopens its socket
                await accept_engine.dispose()

    return start


async def _resume_when_migrated(state: ServiceState) -> None:
    """Complete metadata applies a crash interrupted, once this database is at head.

    A role whose schema is behind still starts (and reports not ready); it resumes when
    `nexus migrate` has run.
    """
    while True:
        try:
            if (await migration_state(state.engine, LogicalService.RUNTIME)).at_head:
                completed = await resume_staged(state.engine)
                if completed:
                    log.info("metadata.resumed", applies=len(completed))
                return
        except Exception as exc:  # noqa: BLE001  (keep trying; readiness reports the cause)
            unless_cancelled()
            log.warning("metadata.resume_deferred", error=type(exc).__name__)
        await asyncio.sleep(RESUME_RETRY_SECONDS)


def create_api_app(settings: Settings) -> FastAPI:
    app = create_service_app(
        settings=settings,
        role=Role.RUNTIME_API,
        service=LogicalService.RUNTIME,
        capabilities=API_CAPABILITIES,
        on_start=_api_lifespan(settings),
    )
    app.include_router(identity_router)
    app.include_router(runtime_router)
    app.include_router(inbox_router)
    app.include_router(release_router)
    app.include_router(usage_router)
    app.include_router(ui_router)
    app.include_router(admin_router)
    app.include_router(bulk_jobs_router)
    app.include_router(imports_router)
    app.include_router(bulk_router)
    app.include_router(changes_router)
    app.include_router(trees_router)
    return app


def _worker_lifespan(
    settings: Settings, inbox_loop: InboxLoop, doorbell_at: tuple[str, int] | None
) -> Callable[[FastAPI, ServiceState], AbstractAsyncContextManager[None]]:
    """Every work loop of runtime-worker, started in order and stopped in reverse; with
    `doorbell_at` (the address it serves HTTP on), runtime-api's bell wakes the inbox loop."""
    loops = (
        inbox_loop.lifespan,
        outbox_lifespan(settings),
        _queue_gauges(settings),
        _retention(settings),
        imports_lifespan(settings),
        chunk_lifespan(settings, bulk_kind),
    )

    def inbox_rang() -> None:
        if inbox_loop.worker is not None:
            inbox_loop.worker.wake()

    @asynccontextmanager
    async def start(app: FastAPI, state: ServiceState) -> AsyncIterator[None]:
        async with AsyncExitStack() as stack:
            for loop in loops:
                await stack.enter_async_context(loop(app, state))
            if doorbell_at is not None:
                host, port = doorbell_at
                await stack.enter_async_context(listening(host, port, {INBOX_BELL: inbox_rang}))
            yield

    return start


def create_worker_app(settings: Settings, *, doorbell_at: tuple[str, int] | None = None) -> FastAPI:
    """The worker serves health and metrics on its own port; its work loops join here."""
    inbox_loop = InboxLoop(settings)
    app = create_service_app(
        settings=settings,
        role=Role.RUNTIME_WORKER,
        service=LogicalService.RUNTIME,
        capabilities=WORKER_CAPABILITIES,
        on_start=_worker_lifespan(settings, inbox_loop, doorbell_at),
        readiness_checks=[
            inbox_loop.ready,
            lambda: outbox_ready(app),
            lambda: imports_ready(app),
            lambda: chunk_ready(app, "bulk"),
        ],
    )
    return app


def _queue_gauges(
    settings: Settings,
) -> Callable[[FastAPI, ServiceState], AbstractAsyncContextManager[None]]:
    """The nexus_work_* gauges of the inbox and outbox on /metrics (docs/adr/0020)."""

    @asynccontextmanager
    async def start(app: FastAPI, state: ServiceState) -> AsyncIterator[None]:
        interval = settings.log.work_stats_interval_seconds
        async with watching_queues(state.engine, [inbox, outbox], interval_s=interval):
            yield

    return start


def _retention(
    settings: Settings,
) -> Callable[[FastAPI, ServiceState], AbstractAsyncContextManager[None]]:
    """Runtime's retention loop (`runtime/retention/`)."""

    @asynccontextmanager
    async def start(app: FastAPI, state: ServiceState) -> AsyncIterator[None]:
        async with retention_loop(
            state.engine,
            retention_days=settings.inbox.runtime_retention_days,
            interval_s=settings.inbox.runtime_retention_interval_seconds,
        ):
            yield

    return start
