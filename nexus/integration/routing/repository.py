"""The SQL of connector routes: declare, version, look up.

The other integration statements sit beside the use case they serve: storing receipts in
`ingress/repository.py`, the receipt router's in `routing/router_repository.py`, operating
(dead letters, audits, purge) in `operations/repository.py`, failed receipts in
`operations/receipts_repository.py`, re-routing in `operations/reroute_repository.py`.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from nexus.integration.routing import models as routing_tables
from nexus.integration.routing.routes import ActiveRoute, RouteDeclaration
from nexus.platform.db.clock import read_now_ms


@dataclass(frozen=True)
class AppliedRoute:
    connector: str
    route: str
    version: int
    changed: bool
    active: bool


@dataclass(frozen=True)
class StoredRoute:
    key: tuple[str, str]
    digest: str
    active: bool
    owner: str | None
    declaration: RouteDeclaration


class RouteRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def apply(
        self, *, org_id: str, declaration: RouteDeclaration, owner: str | None = None
    ) -> AppliedRoute:
        """Store a declaration; its version grows by one when its content changed. `owner`
        (the declaring App, from a Catalog snapshot) is recorded when given; a hand apply
        leaves an existing route's owner as it is."""
        t = routing_tables.route
        key = (
            (t.c.org_id == org_id)
            & (t.c.connector == declaration.connector)
            & (t.c.route_key == declaration.route)
        )
        current = (
            await self.session.execute(select(t.c.version, t.c.digest, t.c.owner).where(key))
        ).first()
        digest = declaration.digest()
        now = await read_now_ms(self.session)
        values = {
            "body": declaration.canonical(),
            "digest": digest,
            "active": declaration.active,
            "updated_at_ms": now,
        }
        if owner is not None:
            values["owner"] = owner
        if current is None:
            await self.session.execute(
                t.insert().values(
                    org_id=org_id,
                    connector=declaration.connector,
                    route_key=declaration.route,
                    version=1,
                    **values,
                )
            )
            version, changed = 1, True
        elif current.digest == digest:
            version, changed = int(current.version), False
            if owner is not None and current.owner != owner:
                await self.session.execute(update(t).where(key).values(owner=owner))
        else:
            version, changed = int(current.version) + 1, True
            result = await self.session.execute(
                update(t)
                .where(key & (t.c.version == current.version))
                .values(version=version, **values)
            )
            # a concurrent apply moved it: let the caller retry
            if result.rowcount != 1:  # type: ignore[attr-defined]  # CursorResult
                raise RuntimeError("route changed concurrently; apply again")
        if changed:  # the history a replay proves compatibility against (ADR 0020)
            await self.session.execute(
                routing_tables.route_version.insert().values(
                    org_id=org_id,
                    connector=declaration.connector,
                    route_key=declaration.route,
                    version=version,
                    body=declaration.canonical(),
                    digest=digest,
                    applied_at_ms=now,
                )
            )
        return AppliedRoute(
            declaration.connector, declaration.route, version, changed, declaration.active
        )

    async def stored_routes(self, *, org_id: str) -> list[StoredRoute]:
        """Every route of the org, active or not, with its owner."""
        t = routing_tables.route
        rows = await self.session.execute(
            select(t.c.connector, t.c.route_key, t.c.digest, t.c.active, t.c.owner, t.c.body)
            .where(t.c.org_id == org_id)
            .order_by(t.c.connector, t.c.route_key)
        )
        return [
            StoredRoute(
                key=(row.connector, row.route_key),
                digest=row.digest,
                active=bool(row.active),
                owner=row.owner,
                declaration=RouteDeclaration.model_validate_json(row.body),
            )
            for row in rows
        ]

    async def active_routes(self, *, org_id: str | None) -> list[ActiveRoute]:
        t = routing_tables.route
        query = select(t.c.org_id, t.c.version, t.c.body).where(t.c.active.is_(True))
        if org_id is not None:
            query = query.where(t.c.org_id == org_id)
        rows = (await self.session.execute(query)).all()
        return [
            ActiveRoute(
                org_id=row.org_id,
                version=row.version,
                declaration=RouteDeclaration.model_validate_json(row.body),
            )
            for row in rows
        ]

    async def route(self, *, org_id: str | None, connector: str, route: str) -> ActiveRoute | None:
        for found in await self.active_routes(org_id=org_id):
            if found.key == (connector, route):
                return found
        return None
