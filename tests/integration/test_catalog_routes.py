"""Applying the connector routes of Integration's Catalog snapshot (docs/adr/0033), on both
backends: App ownership, deactivation of dropped routes, and routes applied by hand."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from nexus.contracts.roles import LogicalService
from nexus.integration.routing import models as routing_tables
from nexus.integration.routing.routes import parse_route_file
from nexus.integration.routing.service import apply_catalog_routes, apply_routes
from nexus.platform.db.engine import create_engine
from nexus.platform.migrations import upgrade_to_head
from tests.conftest import Backend

pytestmark = pytest.mark.asyncio(loop_scope="module")
ORG = "00D000000000002AAA"


def route(connector: str, name: str, owner: str | None = None, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "connector": connector,
        "route": name,
        "signature": {"scheme": "standard_webhooks"},
        "secrets": ["catalog-routes"],
        **extra,
    }
    return {**body, "owner": owner} if owner else body


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def engine(backend: Backend) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(backend.url(LogicalService.INTEGRATION), application_name="nexus-test")
    await upgrade_to_head(engine, LogicalService.INTEGRATION)
    try:
        yield engine
    finally:
        await engine.dispose()


async def stored(engine: AsyncEngine) -> dict[str, tuple[bool, str | None, int]]:
    t = routing_tables.route
    async with engine.connect() as conn:
        rows = await conn.execute(
            select(t.c.connector, t.c.route_key, t.c.active, t.c.owner, t.c.version).where(
                t.c.org_id == ORG
            )
        )
        return {f"{r.connector}/{r.route_key}": (bool(r.active), r.owner, r.version) for r in rows}


async def test_snapshot_routes_are_owned_and_dropped_ones_deactivated(engine: AsyncEngine) -> None:
    hand = parse_route_file(
        {
            "org_id": ORG,
            "routes": [
                route("ops", "feed"),  # the operator's own
                route("shop", "same"),  # what the old composition-root sync wrote
                route("shop", "mine", event_kind={"pointer": "/kind"}),  # other content
            ],
        }
    )
    await apply_routes(engine, org_id=ORG, route_file=hand)
    first = await apply_catalog_routes(
        engine,
        org_id=ORG,
        routes=[
            route("shop", "orders", "shop-app"),
            route("shop", "refunds", "shop-app"),
            route("shop", "same", "shop-app"),
            route("shop", "mine", "shop-app"),
            route("crm", "leads", "crm-app"),
        ],
    )
    assert first.applied == ["crm/leads", "shop/orders", "shop/refunds", "shop/same"]
    assert first.changed == ["crm/leads", "shop/orders", "shop/refunds"]  # `same` adopted
    assert first.conflicts == ["shop/mine"]
    routes = await stored(engine)
    assert routes["shop/same"] == (True, "shop-app", 1)
    assert routes["shop/mine"] == (True, None, 1)  # the hand-applied content is kept
    assert routes["ops/feed"] == (True, None, 1)

    again = await apply_catalog_routes(
        engine,
        org_id=ORG,
        routes=[
            route("shop", "orders", "shop-app"),
            route("shop", "refunds", "shop-app"),
            route("shop", "same", "shop-app"),
            route("crm", "leads", "crm-app"),
        ],
    )
    assert again.changed == []  # idempotent
    assert again.deactivated == []
    assert await stored(engine) == routes

    # shop-app dropped `refunds` (and its `same`), crm-app was uninstalled; crm-app's
    # `leads` is claimed by shop-app now: another App's route is never taken over
    later = await apply_catalog_routes(
        engine,
        org_id=ORG,
        routes=[
            route("shop", "orders", "shop-app"),
            route("crm", "leads", "shop-app"),
            {"connector": "shop", "route": "broken", "owner": "shop-app"},
        ],
    )
    assert later.invalid == ["shop/broken"]
    assert later.conflicts == ["crm/leads"]
    assert sorted(later.deactivated) == ["crm/leads", "shop/refunds", "shop/same"]
    routes = await stored(engine)
    assert routes["shop/refunds"] == (False, "shop-app", 2)  # a new version, history kept
    assert routes["crm/leads"] == (False, "crm-app", 2)
    assert routes["shop/orders"] == (True, "shop-app", 1)
    assert routes["ops/feed"] == (True, None, 1)
    assert routes["shop/mine"] == (True, None, 1)

    back = await apply_catalog_routes(
        engine,
        org_id=ORG,
        routes=[route("shop", "orders", "shop-app"), route("shop", "refunds", "shop-app")],
    )
    assert back.changed == ["shop/refunds"]  # a release that declares it again revives it
    assert (await stored(engine))["shop/refunds"] == (True, "shop-app", 3)
