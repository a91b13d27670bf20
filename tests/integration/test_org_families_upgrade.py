"""The upgrade to org-scoped families (integration_0010, ADR 0067): in-flight work of two
orgs that shared one family and one source lane comes out as one family and one lane per
org, each lane's head where it was (or promoted: the other org's first waiting item), its
queue policy kept; the downgrade refuses while an installation has two orgs' work."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from alembic import command
from sqlalchemy import Connection, select
from sqlalchemy.ext.asyncio import AsyncEngine

from nexus.contracts.roles import LogicalService
from nexus.integration.delivery.models import work
from nexus.platform.db.engine import create_engine, reading
from nexus.platform.migrations import alembic_config, upgrade_to_head
from tests.conftest import Backend

pytestmark = pytest.mark.asyncio(loop_scope="module")
A, B = "00D00000000000AAAA", "00D00000000000BBBB"
OLD = "routes:shop"


async def move_to(engine: AsyncEngine, revision: str) -> None:
    config = alembic_config(LogicalService.INTEGRATION)

    def _downgrade(conn: Connection) -> None:
        config.attributes["connection"] = conn
        command.downgrade(config, revision)

    async with engine.begin() as conn:
        await conn.run_sync(_downgrade)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def engine(backend: Backend) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(backend.url(LogicalService.INTEGRATION), application_name="upgrade")
    await upgrade_to_head(engine, LogicalService.INTEGRATION)
    yield engine
    await engine.dispose()


def item(item_id: str, org: str, state: str, seq: int) -> dict[str, object]:
    return {
        "id": item_id,
        "family": OLD,
        "queue_class": "orders",
        "state": state,
        "run_after": 1,
        "lane_key": "contact-1",
        "lane_seq": seq,
        "attempt": 1 if state != "waiting" else 0,
        "max_attempts": 3,
        "reclaims": 0,
        "payload": json.dumps({"org_id": org, "message_id": item_id}),
        "created_at": 1,
        "finished_at": 2 if state == "dead" else None,
    }


async def test_two_orgs_sharing_a_lane_come_out_with_a_lane_each(engine: AsyncEngine) -> None:
    await move_to(engine, "integration_0009")
    t = work
    async with engine.begin() as conn:  # the old shape: no org_id column on families yet
        await conn.execute(
            t.families.insert().values(
                family=OLD, owner="executor", ownership_epoch=4, admitting=True, updated_at=1
            )
        )
        await conn.execute(
            t.queues.insert().values(
                family=OLD,
                queue_class="orders",
                weight=1,
                max_attempts=3,
                lane_policy="halt",
                last_enqueued_at=1,
            )
        )
        await conn.execute(  # A's dead head halts the lane; B's item and A's next wait
            t.items.insert(),
            [
                item("a-1", A, "dead", 1),
                item("b-1", B, "waiting", 2),
                item("a-2", A, "waiting", 3),
            ],
        )
        await conn.execute(
            t.source_lanes.insert().values(
                family=OLD, lane_key="contact-1", head_seq=1, next_seq=4, halted_by="a-1"
            )
        )
    await upgrade_to_head(engine, LogicalService.INTEGRATION)
    async with reading(engine) as conn:
        items = {
            r.id: (r.family, r.state)
            for r in await conn.execute(select(t.items.c.id, t.items.c.family, t.items.c.state))
        }
        lanes = {
            r.family: (r.head_seq, r.next_seq, r.halted_by)
            for r in await conn.execute(select(t.source_lanes))
        }
        families = {
            r.family: (r.org_id, r.owner, r.ownership_epoch)
            for r in await conn.execute(select(t.families))
        }
        queues = {
            r.family: (r.max_attempts, r.lane_policy) for r in await conn.execute(select(t.queues))
        }
    fa, fb = f"{A}/{OLD}", f"{B}/{OLD}"
    assert items == {"a-1": (fa, "dead"), "a-2": (fa, "waiting"), "b-1": (fb, "pending")}
    assert lanes == {fa: (1, 4, "a-1"), fb: (2, 4, None)}  # A still halted; B runs now
    assert families == {fa: (A, "executor", 4), fb: (B, "executor", 4)}
    assert queues == {fa: (3, "halt"), fb: (3, "halt")}

    with pytest.raises(RuntimeError, match="more than one org"):
        await move_to(engine, "integration_0009")
    async with engine.begin() as conn:  # one org left: the downgrade goes through
        for table in (t.items, t.source_lanes, t.families, t.queues):
            await conn.execute(table.delete().where(table.c.family == fb))
    await move_to(engine, "integration_0009")
    async with reading(engine) as conn:
        assert {r[0] for r in await conn.execute(select(t.items.c.family))} == {OLD}
    await upgrade_to_head(engine, LogicalService.INTEGRATION)
