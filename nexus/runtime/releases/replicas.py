"""Runtime's side of release fencing and replica acknowledgements (docs/adr/0034).

- **Fencing**: each schema/prepare call carries the release job's fencing token. Runtime
  records the newest token it has seen per org and refuses an older one with 409
  `STALE_FENCING_TOKEN` before it changes anything, so a job whose writer lease was taken
  over cannot reach Runtime's schema or metadata even if Catalog's own check were bypassed.
- **Acknowledgements**: a prepare records the job's CatalogRevision as the org's prepared
  revision. Every runtime-api replica heartbeats (`ReplicaHeartbeat.step`, periodic): when
  the prepared revision moved past what it acknowledged, it preloads the org's metadata view
  at the current metadata revision, then records the revision as acknowledged, with the
  database time it was last alive. The replica that served the prepare acknowledges at once.
  Catalog's RUNTIME_PREPARED waits until every live replica acknowledged.
"""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession

from nexus.contracts.catalog import ReplicaAck, ReplicaAcks
from nexus.contracts.errors import Conflict
from nexus.platform.db.clock import read_now_ms
from nexus.platform.db.engine import session_factory, unit_of_work
from nexus.runtime.metadata.view import MetadataCache
from nexus.runtime.releases.repository import ReleaseRepository


class StaleFencingToken(Conflict):
    default_code = "STALE_FENCING_TOKEN"


async def check_fence(engine: AsyncEngine, *, org_id: str, token: int) -> None:
    """Record `token` as the org's newest, or refuse it when a newer one was seen."""
    async with unit_of_work(session_factory(engine)) as session:
        now = await read_now_ms(session)
        newest = await ReleaseRepository(session).keep_newest_token(
            org_id=org_id, token=token, now_ms=now
        )
    if newest is not None and newest > token:
        raise StaleFencingToken(
            f"fencing token {token} is older than {newest}, the newest this org's Runtime has "
            "seen: another release job holds the org's writer lease; nothing was changed"
        )


async def record_prepared(engine: AsyncEngine, *, org_id: str, revision: int) -> None:
    async with unit_of_work(session_factory(engine)) as session:
        await ReleaseRepository(session).record_prepared(
            org_id=org_id, revision=revision, now_ms=await read_now_ms(session)
        )


async def replica_acks(engine: AsyncEngine, *, live_ms: int) -> ReplicaAcks:
    async with unit_of_work(session_factory(engine), readonly=True) as session:
        now = await read_now_ms(session)
        rows = await ReleaseRepository(session).replicas()
    return ReplicaAcks(
        replicas=[
            ReplicaAck(
                replica_id=r["replica_id"],
                prepared_revision=int(r["prepared_revision"]),
                live=int(r["seen_at_ms"]) >= now - live_ms,
            )
            for r in rows
        ]
    )


class ReplicaHeartbeat:
    """This runtime-api replica's acknowledgements (see the module docstring)."""

    def __init__(self, engine: AsyncEngine, *, replica_id: str, metadata: MetadataCache) -> None:
        self.sessions = session_factory(engine)
        self.replica_id = replica_id
        self.metadata = metadata
        self.acked: dict[str, int] = {}

    async def step(self) -> None:
        async with unit_of_work(self.sessions) as session:
            for fence in await ReleaseRepository(session).fences():
                await self._preload(session, fence["org_id"], int(fence["prepared_revision"]))
            await self._record(session)

    async def ack(self, org_id: str, revision: int) -> None:
        """Acknowledge `revision` now (the replica that served the prepare)."""
        async with unit_of_work(self.sessions) as session:
            await self._preload(session, org_id, revision)
            await self._record(session)

    async def _preload(self, session: AsyncSession, org_id: str, revision: int) -> None:
        if revision > self.acked.get(org_id, 0):
            await self.metadata.view(session, org_id)  # loads the new definitions
            self.acked[org_id] = revision

    async def _record(self, session: AsyncSession) -> None:
        org_id, revision = max(self.acked.items(), key=lambda i: i[1], default=(None, 0))
        await ReleaseRepository(session).record_replica(
            replica_id=self.replica_id,
            org_id=org_id,
            revision=revision,
            now_ms=await read_now_ms(session),
        )
