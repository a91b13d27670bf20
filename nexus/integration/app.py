"""The `integration` role."""

from __future__ import annotations

from fastapi import FastAPI

from nexus.contracts.roles import LogicalService, Role
from nexus.platform.service_app import create_service_app
from nexus.platform.settings import Settings

CAPABILITIES = ("ops.v1",)


def create_app(settings: Settings) -> FastAPI:
    return create_service_app(
        settings=settings,
        role=Role.INTEGRATION,
        service=LogicalService.INTEGRATION,
        capabilities=CAPABILITIES,
    )
