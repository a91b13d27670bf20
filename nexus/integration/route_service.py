"""Use cases over connector routes: apply a route file, read one route (for `hooks send`)."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncEngine

from nexus.integration.repository import AppliedRoute, RouteRepository
from nexus.integration.routes import ActiveRoute, RouteFile
from nexus.platform.db import session_factory, unit_of_work


class OrgNotConfigured(Exception):
    """Neither the route file nor NEXUS_INTEGRATION_ORG_ID names the org."""


def route_org(route_file: RouteFile, configured: str | None) -> str:
    org_id = route_file.org_id or configured
    if org_id is None:
        raise OrgNotConfigured(
            "no org for these routes: set NEXUS_INTEGRATION_ORG_ID (the deployment's org id, "
            "00D...) or put org_id in the route file"
        )
    return org_id


async def apply_routes(
    engine: AsyncEngine, *, org_id: str, route_file: RouteFile
) -> list[AppliedRoute]:
    """Store every route of the file in one transaction (all or nothing)."""
    async with unit_of_work(session_factory(engine)) as session:
        repo = RouteRepository(session)
        return [
            await repo.apply(org_id=org_id, declaration=declaration)
            for declaration in route_file.routes
        ]


async def find_route(
    engine: AsyncEngine, *, org_id: str | None, connector: str, route: str
) -> ActiveRoute | None:
    async with unit_of_work(session_factory(engine), readonly=True) as session:
        return await RouteRepository(session).route(org_id=org_id, connector=connector, route=route)
