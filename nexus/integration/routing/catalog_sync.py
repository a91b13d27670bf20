"""Integration as a consumer of Catalog (issue 7 §5, docs/adr/0033): the `integration`
snapshot's connector routes, fetched and verified by this role itself at start-up and every
`integration_catalog_poll_seconds`, applied to Integration's database (App-owned routes only).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import httpx
from sqlalchemy.ext.asyncio import AsyncEngine

from nexus.contracts.catalog import Snapshot
from nexus.contracts.roles import Role
from nexus.integration.routing.service import apply_catalog_routes
from nexus.platform.catalog_follower import SnapshotFollower, following
from nexus.platform.observability import get_logger
from nexus.platform.secrets import workload_signer
from nexus.platform.settings import Settings

log = get_logger(__name__)


@asynccontextmanager
async def following_catalog(
    settings: Settings,
    engine: AsyncEngine,
    client: httpx.AsyncClient,
    *,
    on_change: Callable[[], None],
) -> AsyncIterator[SnapshotFollower | None]:
    """Poll Catalog while the block runs (not at all when the interval is 0)."""
    signer = workload_signer(settings, Role.INTEGRATION.value)

    async def apply(snapshot: Snapshot) -> None:
        result = await apply_catalog_routes(
            engine, org_id=snapshot.org_id, routes=list(snapshot.content.get("routes", []))
        )
        if result.changed or result.deactivated:
            on_change()
        log.info(
            "integration.catalog_routes",
            catalog_revision=snapshot.catalog_revision,
            routes=len(result.applied),
            changed=len(result.changed),
            deactivated=result.deactivated,
        )

    async with following(
        "integration",
        catalog_url=settings.upstream_url("catalog"),
        signer=signer,
        apply=apply,
        interval_s=settings.integration.integration_catalog_poll_seconds,
        org_id=settings.integration.integration_org_id,
        client=client,
    ) as follower:
        yield follower
