"""The sfcrm AppService (`nexus serve --role=app --app=sfcrm`)."""

from __future__ import annotations

from fastapi import FastAPI

from nexus.contracts.roles import Role
from nexus.platform.http import OpsInfo, create_role_app
from nexus.platform.settings import Settings

APP_NAME = "sfcrm"
CAPABILITIES = ("ops.v1",)


def create_app(settings: Settings) -> FastAPI:
    """The AppService owns no database: it is ready once it serves."""
    del settings  # the Runtime client arrives with the dialect endpoints
    return create_role_app(OpsInfo(role=Role.APP.value, app=APP_NAME, capabilities=CAPABILITIES))
