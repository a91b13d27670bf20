"""Work-family ownership: who may claim a family's items, under which epoch.

`transfer` moves a family to a new owner without a second claim path: it stops admitting
claims, waits until no item holds a live lease and no target lane is held, then advances the
epoch and admits the new owner in one CAS. Holders from the old epoch can no longer renew or
finish (their writes check the epoch), so nothing the old owner still runs can land.
"""

from __future__ import annotations

import asyncio
import time

from sqlalchemy import and_, func, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from nexus.contracts.errors import Conflict
from nexus.platform.db.clock import db_now_ms
from nexus.platform.workqueue.store import PROCESSING
from nexus.platform.workqueue.tables import WorkTables


class TransferBlocked(Conflict):
    """Items kept their leases past the transfer's timeout; claims were re-admitted."""

    default_code = "TRANSFER_BLOCKED"

    def __init__(self, message: str, *, blocking: list[str]) -> None:
        super().__init__(message)
        self.blocking = blocking  # the items still holding live leases (at most 20)


async def transfer(
    engine: AsyncEngine,
    tables: WorkTables,
    family: str,
    to_owner: str,
    *,
    timeout_s: float = 60.0,
    poll_s: float = 0.2,
) -> int:
    """Move `family` to `to_owner`; returns the new ownership epoch."""
    f, items, targets = tables.families, tables.items, tables.target_lanes
    async with engine.begin() as conn:
        row = (await conn.execute(select(f.c.ownership_epoch).where(f.c.family == family))).first()
        if row is None:
            raise Conflict(f"no work family {family!r}", code="NOT_FOUND")
        epoch = int(row[0])
        await conn.execute(
            update(f)
            .where(f.c.family == family, f.c.ownership_epoch == epoch)
            .values(admitting=False, updated_at=db_now_ms())
        )
    deadline = time.monotonic() + timeout_s
    while True:
        async with engine.begin() as conn:
            now = db_now_ms()
            live = list(
                await conn.execute(
                    select(items.c.id)
                    .where(
                        items.c.family == family,
                        items.c.state == PROCESSING,
                        items.c.lease_until >= now,
                    )
                    .limit(20)
                )
            )
            held = (
                await conn.execute(
                    select(func.count()).where(
                        and_(
                            targets.c.family == family,
                            targets.c.holder_id.isnot(None),
                            targets.c.lease_until >= now,
                        )
                    )
                )
            ).scalar_one()
            if not live and not held:
                moved = await conn.execute(
                    update(f)
                    .where(f.c.family == family, f.c.ownership_epoch == epoch)
                    .values(
                        owner=to_owner,
                        ownership_epoch=epoch + 1,
                        admitting=True,
                        updated_at=db_now_ms(),
                    )
                )
                if moved.rowcount != 1:
                    raise Conflict(f"work family {family!r} changed during the transfer")
                return epoch + 1
        if time.monotonic() >= deadline:
            async with engine.begin() as conn:
                await conn.execute(
                    update(f)
                    .where(f.c.family == family, f.c.ownership_epoch == epoch)
                    .values(admitting=True, updated_at=db_now_ms())
                )
            blocking = ", ".join(r[0] for r in live) or f"{held} target lane lease(s)"
            raise TransferBlocked(
                f"work family {family!r} still has live leases: {blocking}; claims re-admitted",
                blocking=[r[0] for r in live],
            )
        await asyncio.sleep(poll_s)
