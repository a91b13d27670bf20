"""Every SQL statement of release fencing and replica acknowledgements (docs/adr/0034)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import case, select, update
from sqlalchemy.engine import RowMapping
from sqlalchemy.ext.asyncio import AsyncSession

from nexus.platform.db.backend import upsert
from nexus.runtime.releases import models as m


class ReleaseRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def keep_newest_token(self, *, org_id: str, token: int, now_ms: int) -> int | None:
        """Record `token` when it is the newest the org has seen; returns the newest one."""
        t = m.release_fence
        newer = t.c.fencing_token < token

        def keep_newest(_incoming: Any) -> list[tuple[str, Any]]:
            # the time first: on MySQL a CASE after the token's own assignment would see
            # the new token and never move the time
            return [
                ("updated_at_ms", case((newer, now_ms), else_=t.c.updated_at_ms)),
                ("fencing_token", case((newer, token), else_=t.c.fencing_token)),
            ]

        dialect = self.session.get_bind().dialect.name
        await self.session.execute(
            upsert(t, dialect, [t.c.org_id], keep_newest).values(
                org_id=org_id, fencing_token=token, prepared_revision=0, updated_at_ms=now_ms
            )
        )
        newest = await self.session.scalar(select(t.c.fencing_token).where(t.c.org_id == org_id))
        return None if newest is None else int(newest)

    async def record_prepared(self, *, org_id: str, revision: int, now_ms: int) -> None:
        """The org's prepared CatalogRevision moves forward only."""
        t = m.release_fence
        await self.session.execute(
            update(t)
            .where((t.c.org_id == org_id) & (t.c.prepared_revision < revision))
            .values(prepared_revision=revision, updated_at_ms=now_ms)
        )

    async def fences(self) -> list[RowMapping]:
        return list((await self.session.execute(select(m.release_fence))).mappings())

    async def replicas(self) -> list[RowMapping]:
        t = m.replica
        return list((await self.session.execute(select(t).order_by(t.c.replica_id))).mappings())

    async def record_replica(
        self, *, replica_id: str, org_id: str | None, revision: int, now_ms: int
    ) -> None:
        """One statement: the heartbeat and a prepare's `ack` write this row concurrently."""
        t = m.replica
        values = {"org_id": org_id, "prepared_revision": revision, "seen_at_ms": now_ms}
        dialect = self.session.get_bind().dialect.name
        await self.session.execute(
            upsert(t, dialect, [t.c.replica_id], lambda _incoming: values).values(
                replica_id=replica_id, **values
            )
        )
