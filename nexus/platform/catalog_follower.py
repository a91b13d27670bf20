"""A consumer's side of Catalog's snapshots (issue 7 §5, docs/adr/0033): fetch
`GET /internal/v1/catalog/snapshot?consumer=...` with this role's workload token, adopt it only
through a `SnapshotKeeper` (checksum, consumer, org, never backwards), and hand each newly
verified revision to the consumer's `apply`.

A snapshot that fails verification is refused with its reason logged (never its content) and
the last verified one stays in force; Catalog unreachable or with no active release changes
nothing. `step` is meant for `nexus.platform.periodic.every`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager

import httpx

from nexus.contracts.catalog import (
    SNAPSHOT_PATH,
    Consumer,
    Snapshot,
    SnapshotKeeper,
    SnapshotRejected,
)
from nexus.contracts.roles import CATALOG_AUDIENCE
from nexus.platform.http_client import InternalClient, InternalRefused, InternalUnreachable
from nexus.platform.observability import get_logger
from nexus.platform.periodic import every
from nexus.platform.workload import WorkloadSigner

log = get_logger(__name__)


class SnapshotFollower:
    def __init__(
        self,
        consumer: Consumer,
        *,
        catalog: InternalClient,
        apply: Callable[[Snapshot], Awaitable[None]],
    ) -> None:
        self.keeper = SnapshotKeeper(consumer)
        self.catalog = catalog  # signed calls to the catalog role
        self.apply = apply
        #: the revision `apply` last completed for (a failed apply is retried next step)
        self.applied_revision = 0
        self.reachable: bool | None = None

    @property
    def consumer(self) -> Consumer:
        return self.keeper.consumer

    async def fetch(self) -> object | None:
        """The raw snapshot body, or None when Catalog is unreachable or has none active."""
        try:
            body: object = await self.catalog.get(SNAPSHOT_PATH, params={"consumer": self.consumer})
        except InternalUnreachable as exc:
            if self.reachable is not False:  # log the change, not every tick
                log.warning("catalog.snapshot_unreachable", error=exc.error)
            self.reachable = False
            return None
        except InternalRefused as exc:
            self.reachable = True
            if exc.status != 404:
                log.warning("catalog.snapshot_refused", status=exc.status)
            return None
        self.reachable = True
        return {} if body is None else body  # not JSON: the keeper refuses it as not well formed

    async def step(self) -> None:
        raw = await self.fetch()
        if raw is None:
            return
        held = self.keeper.current
        try:
            snapshot = self.keeper.offer(raw)
        except SnapshotRejected as exc:
            log.warning(
                "catalog.snapshot_rejected",
                consumer=self.consumer,
                reason=str(exc),
                kept_revision=held.catalog_revision if held else None,
            )
            return
        if snapshot.catalog_revision == self.applied_revision:
            return
        await self.apply(snapshot)
        self.applied_revision = snapshot.catalog_revision
        log.info(
            "catalog.snapshot_applied",
            consumer=self.consumer,
            catalog_revision=snapshot.catalog_revision,
        )


@asynccontextmanager
async def following(
    consumer: Consumer,
    *,
    catalog_url: str,
    signer: WorkloadSigner,
    apply: Callable[[Snapshot], Awaitable[None]],
    interval_s: float,
    org_id: str | None = None,
    client: httpx.AsyncClient | None = None,
    timeout_s: float = 5.0,
) -> AsyncIterator[SnapshotFollower | None]:
    """Follow `consumer`'s snapshot every `interval_s` seconds while the block runs (not at
    all when it is 0), signed by `signer`, on `client` or, without one, on a client of its
    own."""
    if interval_s <= 0:
        yield None
        return
    async with AsyncExitStack() as stack:
        if client is None:
            client = await stack.enter_async_context(httpx.AsyncClient(trust_env=False))
        catalog = InternalClient(
            base_url=catalog_url,
            signer=signer,
            audience=CATALOG_AUDIENCE,
            client=client,
            timeout_s=timeout_s,
        )
        follower = SnapshotFollower(consumer, catalog=catalog, apply=apply)
        follower.keeper.org_id = org_id
        async with every(interval_s, follower.step, name=f"catalog-snapshot-{consumer}"):
            yield follower
