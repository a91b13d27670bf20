"""Use cases over connector routes: apply a route file, apply the routes of a Catalog
snapshot (docs/adr/0033), read one route (for `hooks send`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError
from sqlalchemy.ext.asyncio import AsyncEngine

from nexus.integration.routing.repository import AppliedRoute, RouteRepository
from nexus.integration.routing.routes import ActiveRoute, RouteDeclaration, RouteFile
from nexus.platform.db.engine import session_factory, unit_of_work
from nexus.platform.observability import get_logger

log = get_logger(__name__)


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


@dataclass
class CatalogRoutes:
    """What applying a Catalog snapshot's routes did (route keys as `connector/route`)."""

    applied: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    deactivated: list[str] = field(default_factory=list)
    #: declared by the snapshot but held by a hand-applied route or another App: left alone
    conflicts: list[str] = field(default_factory=list)
    invalid: list[str] = field(default_factory=list)


async def apply_catalog_routes(
    engine: AsyncEngine, *, org_id: str, routes: list[dict[str, Any]]
) -> CatalogRoutes:
    """Make the org's App-owned routes what the snapshot declares, in one transaction.

    Each declared route (with its `owner` App) is applied and owned by that App; an App-owned
    route the snapshot no longer declares for that App is deactivated. A route applied by
    hand (no owner) is never changed, except that one with exactly the declared content is
    adopted by the App (what the interim composition-root sync wrote); a route owned by
    another App is never taken over. Idempotent: an unchanged snapshot writes nothing.
    """
    result = CatalogRoutes()
    declared: dict[tuple[str, str], tuple[str, RouteDeclaration]] = {}
    named: set[tuple[tuple[str, str], str]] = set()  # (key, owner), valid or not
    for raw in routes:
        body = {k: v for k, v in raw.items() if k != "owner"}
        key = (str(body.get("connector")), str(body.get("route")))
        named.add((key, str(raw.get("owner"))))
        try:
            declared[key] = (str(raw["owner"]), RouteDeclaration.model_validate(body))
        except (KeyError, ValidationError):
            result.invalid.append("/".join(key))
    async with unit_of_work(session_factory(engine)) as session:
        repo = RouteRepository(session)
        stored = {r.key: r for r in await repo.stored_routes(org_id=org_id)}
        for key, (owner, declaration) in sorted(declared.items()):
            name = "/".join(key)
            current = stored.get(key)
            if current is not None and current.owner != owner:
                adoptable = current.owner is None and current.digest == declaration.digest()
                if not adoptable:
                    result.conflicts.append(name)
                    continue
            applied = await repo.apply(org_id=org_id, declaration=declaration, owner=owner)
            result.applied.append(name)
            if applied.changed:
                result.changed.append(name)
        for key, current in stored.items():
            if current.owner is None or (key, current.owner) in named or not current.active:
                continue
            retired = current.declaration.model_copy(update={"active": False})
            await repo.apply(org_id=org_id, declaration=retired, owner=current.owner)
            result.deactivated.append("/".join(key))
    if result.conflicts or result.invalid:
        log.warning(
            "integration.catalog_routes_skipped",
            conflicts=result.conflicts,
            invalid=result.invalid,
        )
    return result
