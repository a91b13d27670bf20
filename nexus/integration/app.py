"""The `integration` role: webhook ingress, and with `--loops=all` the receipt router and the
executor (`loops.py`).

Pools: the ingress writer has its own engine (`nexus-integration-ingress`), separate from
the engine background loops use (`nexus-integration-loops`) and from the readiness engine,
so a loop flood cannot starve acknowledgements of connections (seed: ingress pool isolation).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Literal

import httpx
from fastapi import FastAPI
from sqlalchemy.ext.asyncio import AsyncEngine

from nexus.contracts.ops import CheckResult
from nexus.contracts.roles import LogicalService, Role
from nexus.integration.delivery.models import work
from nexus.integration.ingress.endpoints import HOOKS_PREFIX, HooksEndpoint
from nexus.integration.ingress.service import IngressService, RouteCache
from nexus.integration.ingress.writer import (
    EngineStore,
    ReceiptStore,
    ReceiptWriter,
    SqliteReceipts,
)
from nexus.integration.loops import IntegrationLoops
from nexus.integration.operations.endpoints import router as admin_router
from nexus.integration.operations.retention import retention_loop
from nexus.integration.routing.catalog_sync import following_catalog
from nexus.platform.db.engine import create_sqlite_sync_engine, is_sqlite_file, sqlite_write_gate
from nexus.platform.db.sqlite.batch import SqliteWriter
from nexus.platform.operator_gate import operator_gate
from nexus.platform.secrets import workload_signer
from nexus.platform.service_app import ServiceState, create_service_app, role_engine
from nexus.platform.settings import Settings
from nexus.platform.workqueue.metrics import watching_queues

CAPABILITIES = ("ops.v1", "webhooks.ingress.v1", "integration.admin.v1")
Loops = Literal["none", "all"]


def create_app(settings: Settings, *, loops: Loops = "all") -> FastAPI:
    cfg = settings.integration
    url = settings.database_url(LogicalService.INTEGRATION)

    def engine(purpose: str, pool_size: int, *, on_loop: bool = False) -> AsyncEngine:
        return role_engine(
            settings,
            LogicalService.INTEGRATION,
            name=f"nexus-integration-{purpose}",
            pool_size=pool_size,
            sqlite_on_loop=on_loop,
        )

    def receipt_store(ingress_engine: AsyncEngine) -> ReceiptStore:
        if is_sqlite_file(url):  # whole transactions straight on sqlite3 (ingest.py)
            sync_engine = create_sqlite_sync_engine(
                url, sqlite_busy_timeout_ms=settings.db.sqlite_busy_timeout_ms
            )
            return SqliteReceipts(
                SqliteWriter(
                    sync_engine,
                    write_gate=sqlite_write_gate(url),
                    turn_timeout_s=settings.db.sqlite_busy_timeout_ms / 1000,
                )
            )
        return EngineStore(ingress_engine)

    @asynccontextmanager
    async def on_start(app: FastAPI, _state: ServiceState) -> AsyncIterator[None]:
        ingress_engine = engine("ingress", cfg.ingress_pool_size)
        # router and executor statements are short and indexed: on the loop (ADR 0049)
        loops_engine = engine("loops", cfg.loops_pool_size, on_loop=True)
        writer = ReceiptWriter(
            receipt_store(ingress_engine),
            max_rows=cfg.ingress_batch_max_rows,
            window_seconds=cfg.ingress_batch_window_ms / 1000,
            writers=cfg.ingress_writers,
        )
        app.state.ingress = IngressService(
            routes=RouteCache(
                ingress_engine,
                org_id=cfg.integration_org_id,
                var_dir=settings.var_dir,
                ttl=cfg.ingress_route_cache_seconds,
            ),
            writer=writer,
            var_dir=settings.var_dir,
            default_max_body_bytes=cfg.ingress_max_body_bytes,
            snapshot_bytes=cfg.ingress_body_snapshot_bytes,
        )
        app.state.ingress_engine = ingress_engine
        app.state.loops_engine = loops_engine  # the receipt router and executor use this
        writer.start()
        app.state.background = None
        if loops == "all":
            background = IntegrationLoops(
                loops_engine, settings, workload_signer(settings, Role.INTEGRATION.value)
            )
            writer.on_commit = background.wake_router
            background.start()
            app.state.background = background
        try:
            async with _operating(app, settings, loops_engine, loops=loops):
                yield
        finally:
            if app.state.background is not None:
                await app.state.background.stop()
            await writer.close()
            await ingress_engine.dispose()
            await loops_engine.dispose()

    app = create_service_app(
        settings=settings,
        role=Role.INTEGRATION,
        service=LogicalService.INTEGRATION,
        capabilities=CAPABILITIES,
        on_start=on_start,
        readiness_checks=[lambda: _loops_ready(app)],
    )
    app.state.loops = loops
    app.state.public_base_url = settings.public_base_url.rstrip("/")
    app.state.var_dir = settings.var_dir  # where large webhook bodies are kept (replay checks)
    app.include_router(admin_router)
    app.serve_ahead(HOOKS_PREFIX, HooksEndpoint(role=Role.INTEGRATION.value))
    return app


async def _loops_ready(app: FastAPI) -> CheckResult:
    """Not ready while a background loop restarts after a failure (`--loops=all`)."""
    background: IntegrationLoops | None = getattr(app.state, "background", None)
    if background is None:
        return CheckResult(name="integration-loops", ok=True, detail=app.state.loops)
    return await background.ready()


@asynccontextmanager
async def _operating(
    app: FastAPI, settings: Settings, loops_engine: AsyncEngine, *, loops: Loops
) -> AsyncIterator[None]:
    """The admin API's Runtime client (operator checks); with the loops, retention and the
    queue gauges on /metrics (docs/adr/0020)."""
    cfg = settings.integration
    async with AsyncExitStack() as stack:
        client = await stack.enter_async_context(httpx.AsyncClient(trust_env=False))
        app.state.operators = operator_gate(settings, "integration", client)
        app.state.catalog_follower = await stack.enter_async_context(
            following_catalog(
                settings, loops_engine, client, on_change=app.state.ingress.routes.invalidate
            )
        )
        if loops == "all":
            await stack.enter_async_context(
                retention_loop(
                    loops_engine,
                    var_dir=settings.var_dir,
                    retention_days=cfg.integration_retention_days,
                    interval_s=cfg.integration_retention_interval_seconds,
                    batch=cfg.integration_retention_batch,
                )
            )
            await stack.enter_async_context(
                watching_queues(
                    loops_engine, [work], interval_s=settings.log.work_stats_interval_seconds
                )
            )
        yield
