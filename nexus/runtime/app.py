"""Runtime roles: `runtime-api` (the L0 engine's HTTP API) and `runtime-worker`."""

from __future__ import annotations

from fastapi import FastAPI

from nexus.contracts.roles import LogicalService, Role
from nexus.identity.endpoints import router as identity_router
from nexus.identity.setup import identity_lifespan
from nexus.platform.service_app import create_service_app
from nexus.platform.settings import Settings

API_CAPABILITIES = ("ops.v1", "identity.oauth2.v1")
WORKER_CAPABILITIES = ("ops.v1",)


def create_api_app(settings: Settings) -> FastAPI:
    app = create_service_app(
        settings=settings,
        role=Role.RUNTIME_API,
        service=LogicalService.RUNTIME,
        capabilities=API_CAPABILITIES,
        on_start=identity_lifespan(settings),
    )
    app.include_router(identity_router)
    return app


def create_worker_app(settings: Settings) -> FastAPI:
    """The worker serves health and metrics on its own port; its work loops join here."""
    return create_service_app(
        settings=settings,
        role=Role.RUNTIME_WORKER,
        service=LogicalService.RUNTIME,
        capabilities=WORKER_CAPABILITIES,
    )
