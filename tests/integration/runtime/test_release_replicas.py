"""Replica acknowledgements and release fences under concurrency: the heartbeat and a
prepare's acknowledgement write one replica row at the same moment, and racing release
calls leave the newest fencing token. Neither may fail (a deadlock here left a Catalog
install waiting for an acknowledgement that never came)."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import select, update

from nexus.platform.db.engine import reading
from nexus.runtime.metadata.view import MetadataCache
from nexus.runtime.releases import models as releases_tables
from nexus.runtime.releases.replicas import (
    ReplicaHeartbeat,
    StaleFencingToken,
    check_fence,
    record_prepared,
)
from tests.support.commands import RuntimeDb
from tests.support.commands import db as db  # noqa: PLC0414  (fixture)

pytestmark = pytest.mark.asyncio(loop_scope="module")


async def test_heartbeat_and_acknowledgement_of_one_replica_never_fail_together(
    db: RuntimeDb,
) -> None:
    await check_fence(db.engine, org_id=db.org_id, token=1)
    beat = ReplicaHeartbeat(db.engine, replica_id="replica-a", metadata=MetadataCache())
    ack = ReplicaHeartbeat(db.engine, replica_id="replica-a", metadata=MetadataCache())
    for revision in range(1, 31):
        await record_prepared(db.engine, org_id=db.org_id, revision=revision)
        # both write replica-a's row at once, as the periodic step and a prepare's ack do
        await asyncio.gather(beat.step(), ack.ack(db.org_id, revision), beat.step())
    async with reading(db.engine) as conn:
        row = (
            await conn.execute(
                select(releases_tables.replica).where(
                    releases_tables.replica.c.replica_id == "replica-a"
                )
            )
        ).one()
    assert row.prepared_revision == 30


async def test_racing_fences_keep_the_newest_token(db: RuntimeDb) -> None:
    org = "00D0000000000F1AAA"
    results = await asyncio.gather(
        *(check_fence(db.engine, org_id=org, token=t) for t in range(1, 13)),
        return_exceptions=True,
    )
    unexpected = [r for r in results if r is not None and not isinstance(r, StaleFencingToken)]
    assert unexpected == []
    assert results[-1] is None  # the newest token is never refused
    async with reading(db.engine) as conn:
        newest = await conn.scalar(
            select(releases_tables.release_fence.c.fencing_token).where(
                releases_tables.release_fence.c.org_id == org
            )
        )
    assert newest == 12
    with pytest.raises(StaleFencingToken):
        await check_fence(db.engine, org_id=org, token=11)


async def test_a_newer_token_moves_the_fence_time_and_an_older_one_does_not(
    db: RuntimeDb,
) -> None:
    org, t = "00D0000000000F2AAA", releases_tables.release_fence
    await check_fence(db.engine, org_id=org, token=1)

    async def stamp() -> int:
        async with reading(db.engine) as conn:
            return int(await conn.scalar(select(t.c.updated_at_ms).where(t.c.org_id == org)))

    async with db.engine.begin() as conn:
        await conn.execute(update(t).where(t.c.org_id == org).values(updated_at_ms=0))
    await check_fence(db.engine, org_id=org, token=2)
    assert await stamp() > 0
    async with db.engine.begin() as conn:
        await conn.execute(update(t).where(t.c.org_id == org).values(updated_at_ms=0))
    with pytest.raises(StaleFencingToken):
        await check_fence(db.engine, org_id=org, token=1)
    assert await stamp() == 0
