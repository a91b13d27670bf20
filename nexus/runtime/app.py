"""Runtime roles: `runtime-api` (the L0 engine's HTTP API) and `runtime-worker`."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

from fastapi import FastAPI

from nexus.contracts.roles import LogicalService, Role
from nexus.identity.endpoints import router as identity_router
from nexus.identity.setup import identity_lifespan
from nexus.platform.observability import get_logger
from nexus.platform.service_app import ServiceState, create_service_app
from nexus.platform.settings import Settings
from nexus.runtime.endpoints import router as runtime_router
from nexus.runtime.metadata.service import resume_staged

log = get_logger(__name__)
API_CAPABILITIES = ("ops.v1", "identity.oauth2.v1", "runtime.metadata.v1")
WORKER_CAPABILITIES = ("ops.v1",)


def _api_lifespan(
    settings: Settings,
) -> Callable[[FastAPI, ServiceState], AbstractAsyncContextManager[None]]:
    identity = identity_lifespan(settings)

    @asynccontextmanager
    async def start(app: FastAPI, state: ServiceState) -> AsyncIterator[None]:
        async with identity(app, state):
            completed = await resume_staged(state.engine)
            if completed:
                log.info("metadata.resumed", applies=len(completed))
            yield

    return start


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
    return app


def create_worker_app(settings: Settings) -> FastAPI:
    """The worker serves health and metrics on its own port; its work loops join here."""
    return create_service_app(
        settings=settings,
        role=Role.RUNTIME_WORKER,
        service=LogicalService.RUNTIME,
        capabilities=WORKER_CAPABILITIES,
    )
