"""The `catalog` role: App releases, the release job journal, snapshots (docs/adr/0023)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress

import httpx
from fastapi import FastAPI
from sqlalchemy.ext.asyncio import AsyncEngine

from nexus.catalog.endpoints import router
from nexus.catalog.runtime_client import RuntimeReleases
from nexus.catalog.service import CatalogContext, resume
from nexus.contracts.roles import LogicalService, Role
from nexus.platform.migrations import migration_state
from nexus.platform.observability import get_logger
from nexus.platform.operator_gate import operator_gate
from nexus.platform.secrets import secrets_dir, workload_signer
from nexus.platform.service_app import ServiceState, create_service_app
from nexus.platform.settings import Settings
from nexus.platform.workload import load_public_keys, workload_key_dir

CAPABILITIES = ("ops.v1", "catalog.releases.v1", "catalog.snapshots.v1")
RESUME_RETRY_SECONDS = 2.0
log = get_logger(__name__)


def catalog_context(
    settings: Settings, engine: AsyncEngine, client: httpx.AsyncClient
) -> CatalogContext:
    """The release-job context of this deployment (also used by `nexus catalog ...`)."""
    runtime = RuntimeReleases(
        base_url=settings.upstream_url(Role.RUNTIME_API.value),
        signer=workload_signer(settings, Role.CATALOG.value),
        client=client,
    )
    integration_url = settings.upstream_url(Role.INTEGRATION.value)

    async def integration_capabilities() -> list[str]:
        try:
            reply = await client.get(f"{integration_url}/version", timeout=5)
            return list(reply.json().get("capabilities", [])) if reply.status_code == 200 else []
        except (httpx.HTTPError, ValueError):
            return []

    return CatalogContext(
        engine=engine,
        runtime=runtime,
        failpoint=settings.core.failpoint,
        extra_capabilities=integration_capabilities,
        lease_ms=int(settings.releases.catalog_writer_lease_seconds * 1000),
        replica_ack_timeout_s=settings.releases.catalog_replica_ack_timeout_seconds,
    )


async def _resume_when_migrated(state: ServiceState, ctx: CatalogContext) -> None:
    """Continue the release jobs a crash interrupted, once the catalog schema is at head and
    Runtime answers (a job whose Runtime step cannot run yet is retried)."""
    while True:
        try:
            if (await migration_state(state.engine, LogicalService.CATALOG)).at_head:
                done = await resume(ctx)
                if done:
                    log.info("catalog.resumed", jobs=len(done))
                return
        except Exception as exc:  # noqa: BLE001 - keep trying; the job stays journaled
            log.warning("catalog.resume_deferred", error=type(exc).__name__)
        await asyncio.sleep(RESUME_RETRY_SECONDS)


def create_app(settings: Settings) -> FastAPI:
    @asynccontextmanager
    async def on_start(app: FastAPI, state: ServiceState) -> AsyncIterator[None]:
        async with httpx.AsyncClient(trust_env=False, follow_redirects=False) as client:
            ctx = catalog_context(settings, state.engine, client)
            app.state.catalog = ctx
            app.state.workload_keys = load_public_keys(
                workload_key_dir(secrets_dir(settings.var_dir))
            )
            app.state.operator_gate = operator_gate(settings, "catalog", client)
            resumer = asyncio.create_task(_resume_when_migrated(state, ctx))
            try:
                yield
            finally:
                resumer.cancel()
                with suppress(asyncio.CancelledError):
                    await resumer

    app = create_service_app(
        settings=settings,
        role=Role.CATALOG,
        service=LogicalService.CATALOG,
        capabilities=CAPABILITIES,
        on_start=on_start,
    )
    app.include_router(router)
    return app
