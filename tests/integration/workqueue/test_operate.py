"""Operating the work engine on SQLite and MariaDB: replay, skip, purge, retention, stats,
metrics. Items are parked through the engine's own claim and finish, as a worker would."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
import pytest_asyncio
from prometheus_client import generate_latest
from sqlalchemy import MetaData, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from nexus.contracts.roles import LogicalService
from nexus.platform.db.clock import db_now_ms
from nexus.platform.db.engine import create_engine, reading
from nexus.platform.workqueue import operate
from nexus.platform.workqueue import retention as work_retention
from nexus.platform.workqueue.metrics import watching_queues
from nexus.platform.workqueue.stats import ALL_STATES, queue_stats
from nexus.platform.workqueue.store import (
    CANCELLED,
    DEAD,
    OUTCOME_UNKNOWN,
    PENDING,
    SUCCEEDED,
    SUCCESS,
    TERMINAL,
    Claimed,
    NewItem,
    Outcome,
    QueuePolicy,
    WorkStore,
)
from nexus.platform.workqueue.tables import WorkTables, work_tables
from nexus.platform.workqueue.worker import Worker, WorkerSettings
from tests.conftest import Backend

pytestmark = pytest.mark.asyncio(loop_scope="module")
HOUR_MS = 3_600_000


@dataclass
class Queue:
    engine: AsyncEngine
    tables: WorkTables
    counter: int = 0

    def family(self) -> str:
        self.counter += 1
        return f"org1/ops{self.counter}"

    def store(self) -> WorkStore:
        return WorkStore(self.tables, owner="me")

    async def enqueue(self, items: list[NewItem], policy: QueuePolicy | None = None) -> list[str]:
        store = self.store()
        async with self.engine.begin() as conn:
            for family, queue_class in sorted({(i.family, i.queue_class) for i in items}):
                await store.ensure_queue(conn, family, queue_class, policy=policy)
            return await store.enqueue(conn, items)

    async def run_once(self, family: str, outcomes: dict[str, Outcome]) -> list[str]:
        """Claim what is claimable now and finish it: `outcomes` by payload, else success."""
        store = self.store()
        async with self.engine.begin() as conn:
            epoch = (await store.admitted_families(conn))[family]
            claimed = await store.claim(conn, family, "default", epoch, 100)
            results = [(c, outcomes.get(c.payload, SUCCESS)) for c in claimed]
            if claimed:
                await store.finish(conn, family, epoch, claimed[0].token, results)
        return [c.payload for c in claimed]

    async def rows(self, family: str) -> dict[str, dict[str, object]]:
        items = self.tables.items
        async with reading(self.engine) as conn:
            result = await conn.execute(select(items).where(items.c.family == family))
            return {r["id"]: dict(r) for r in result.mappings()}

    async def lane(self, family: str, lane_key: str) -> dict[str, object]:
        lanes = self.tables.source_lanes
        async with reading(self.engine) as conn:
            row = await conn.execute(
                select(lanes).where(lanes.c.family == family, lanes.c.lane_key == lane_key)
            )
            return dict(row.mappings().one())

    async def set_times(self, ids: list[str], *, ago_ms: int) -> None:
        """Move items' finish (and last lease) into the past, by the database clock."""
        items = self.tables.items
        async with self.engine.begin() as conn:
            await conn.execute(
                update(items)
                .where(items.c.id.in_(ids))
                .values(finished_at=db_now_ms() - ago_ms, run_after=db_now_ms() - ago_ms)
            )


DIE = Outcome(DEAD, TERMINAL, "the target refused the record: INVALID_FIELD")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def queue(backend: Backend) -> AsyncIterator[Queue]:
    engine = create_engine(backend.url(LogicalService.INTEGRATION), application_name="ops-test")
    tables = work_tables(MetaData(), "t_ops")
    async with engine.begin() as conn:
        for table in tables.all:
            await conn.run_sync(table.create)
    yield Queue(engine, tables)
    await engine.dispose()


async def test_a_replayed_dead_item_runs_again_as_a_new_attempt_and_succeeds(
    queue: Queue,
) -> None:
    family = queue.family()
    (item,) = await queue.enqueue(
        [NewItem(family, "default", "poison")], policy=QueuePolicy(max_attempts=3)
    )
    assert await queue.run_once(family, {"poison": DIE}) == ["poison"]
    async with reading(queue.engine) as conn:
        (parked,) = await operate.list_parked(
            conn, queue.tables, operate.Filters(family=family), org_id="org1"
        )
    assert (parked.id, parked.state, parked.failure_class) == (item, DEAD, TERMINAL)
    assert parked.error == "the target refused the record: INVALID_FIELD"

    async with queue.engine.begin() as conn:
        done = await operate.replay(conn, queue.tables, [item], org_id="org1")
    assert done == operate.Done([item], [])
    row = (await queue.rows(family))[item]
    assert (row["state"], row["attempt"], row["max_attempts"]) == (PENDING, 1, 1 + 3)
    assert row["finished_at"] is None

    ran: list[int] = []

    async def handler(claimed: Claimed) -> None:
        if claimed.family == family:
            ran.append(claimed.attempt)

    worker = Worker(queue.engine, queue.store(), handler, WorkerSettings(idle_poll_ms=10))
    task = asyncio.create_task(worker.run())
    try:
        async with asyncio.timeout(30):
            while (await queue.rows(family))[item]["state"] != SUCCEEDED:  # noqa: ASYNC110
                await asyncio.sleep(0.02)
    finally:
        worker.stop()
        await task
    assert ran == [2]  # attempts keep growing across the replay
    async with queue.engine.begin() as conn:  # a second replay of a finished item: refused
        again = await operate.replay(conn, queue.tables, [item, "no-such-item"], org_id="org1")
    assert again == operate.Done(
        [], [operate.Refused("no-such-item", "NOT_FOUND"), operate.Refused(item, "NOT_PARKED")]
    )


async def test_a_halted_lane_is_listed_and_resumes_at_its_head_when_replayed(
    queue: Queue,
) -> None:
    family = queue.family()
    ids = await queue.enqueue(
        [NewItem(family, "default", f"c{i}", lane_key="contact:1") for i in range(3)]
    )
    assert await queue.run_once(family, {"c0": DIE}) == ["c0"]
    assert await queue.run_once(family, {}) == []  # the lane is halted behind its dead head
    async with reading(queue.engine) as conn:
        halted = await operate.list_parked(
            conn, queue.tables, operate.Filters(family=family), halting_only=True, org_id="org1"
        )
    assert [(h.id, h.lane_key, h.halting) for h in halted] == [(ids[0], "contact:1", True)]

    async with queue.engine.begin() as conn:
        assert (await operate.replay(conn, queue.tables, [ids[0]], org_id="org1")).done == [ids[0]]
    assert (await queue.lane(family, "contact:1"))["halted_by"] is None
    order = []
    for _ in range(3):
        order += await queue.run_once(family, {})
    assert order == ["c0", "c1", "c2"]  # the head first, then the lane in order
    assert {r["state"] for r in (await queue.rows(family)).values()} == {SUCCEEDED}


async def test_skip_cancels_a_halted_head_and_the_lane_moves_on(queue: Queue) -> None:
    family = queue.family()
    ids = await queue.enqueue(
        [NewItem(family, "default", f"s{i}", lane_key="contact:2") for i in range(3)]
    )
    await queue.run_once(family, {"s0": DIE})
    async with queue.engine.begin() as conn:
        not_head = await operate.skip_head(conn, queue.tables, ids[1], org_id="org1")
        skipped = await operate.skip_head(conn, queue.tables, ids[0], org_id="org1")
    assert not_head.refused == [operate.Refused(ids[1], "NOT_PARKED")]
    assert skipped == operate.Done([ids[0]], [])
    assert await queue.run_once(family, {}) == ["s1"]
    assert await queue.run_once(family, {}) == ["s2"]
    rows = await queue.rows(family)
    assert [rows[i]["state"] for i in ids] == [CANCELLED, SUCCEEDED, SUCCEEDED]
    lane = await queue.lane(family, "contact:2")
    assert (lane["head_seq"], lane["halted_by"]) == (4, None)


async def test_a_parked_item_without_a_halted_lane_cannot_be_skipped(queue: Queue) -> None:
    family = queue.family()
    (item,) = await queue.enqueue([NewItem(family, "default", "x")])
    await queue.run_once(family, {"x": DIE})
    async with queue.engine.begin() as conn:
        done = await operate.skip_head(conn, queue.tables, item, org_id="org1")
    assert done.refused == [operate.Refused(item, "NOT_A_HALTED_LANE_HEAD")]
    assert (await queue.rows(family))[item]["state"] == DEAD


async def test_a_skip_lane_takes_a_replayed_item_back_at_its_tail(queue: Queue) -> None:
    family = queue.family()
    ids = await queue.enqueue(
        [NewItem(family, "default", f"k{i}", lane_key="contact:3") for i in range(3)],
        policy=QueuePolicy(lane_policy="skip"),
    )
    await queue.run_once(family, {"k0": DIE})  # dead, and the lane skips past it
    assert await queue.run_once(family, {}) == ["k1"]
    async with queue.engine.begin() as conn:
        assert (await operate.replay(conn, queue.tables, [ids[0]], org_id="org1")).done == [ids[0]]
    assert await queue.run_once(family, {}) == ["k2"]  # the lane's own order first
    assert await queue.run_once(family, {}) == ["k0"]  # then the replayed item, at the tail
    rows = await queue.rows(family)
    assert rows[ids[0]]["lane_seq"] == 4
    assert {r["state"] for r in rows.values()} == {SUCCEEDED}


async def test_replay_since_t_picks_exactly_the_items_parked_after_t(queue: Queue) -> None:
    family = queue.family()
    ids = await queue.enqueue([NewItem(family, "default", f"t{i}") for i in range(6)])
    await queue.run_once(family, {f"t{i}": DIE for i in range(6)})
    for index, item in enumerate(ids):  # parked 6h, 5h, ... 1h ago
        await queue.set_times([item], ago_ms=(6 - index) * HOUR_MS)
    async with reading(queue.engine) as conn:
        now = int((await conn.execute(db_now_ms().select())).scalar_one())
    since = now - 3 * HOUR_MS - 60_000  # between the 4h and 3h items
    pages: list[list[str]] = []
    cursor = None
    while True:  # two per page: the paging a bulk replay does
        async with queue.engine.begin() as conn:
            page = await operate.list_parked(
                conn,
                queue.tables,
                operate.Filters(family=family, since_ms=since, until_ms=now),
                cursor=cursor,
                limit=2,
                org_id="org1",
            )
            if not page:
                break
            await operate.replay(conn, queue.tables, [p.id for p in page], org_id="org1")
        pages.append([p.id for p in page])
        cursor = (page[-1].finished_at or 0, page[-1].id)
    assert pages == [ids[3:5], ids[5:]]
    rows = await queue.rows(family)
    assert [rows[i]["state"] for i in ids] == [DEAD] * 3 + [PENDING] * 3


async def test_purge_deletes_parked_items_but_never_a_head_that_halts_its_lane(
    queue: Queue,
) -> None:
    family = queue.family()
    loose, head, behind = await queue.enqueue(
        [
            NewItem(family, "default", "loose"),
            NewItem(family, "default", "head", lane_key="contact:4"),
            NewItem(family, "default", "behind", lane_key="contact:4"),
        ]
    )
    await queue.run_once(family, {"loose": DIE, "head": Outcome(OUTCOME_UNKNOWN, "u", "timeout")})
    async with queue.engine.begin() as conn:
        done = await work_retention.purge(conn, queue.tables, [loose, head, behind])
    assert done.done == [loose]
    assert sorted(done.refused, key=lambda r: r.id) == sorted(
        [operate.Refused(head, "HALTS_ITS_LANE"), operate.Refused(behind, "NOT_PARKED")],
        key=lambda r: r.id,
    )
    assert set(await queue.rows(family)) == {head, behind}


async def test_retention_prunes_only_old_succeeded_and_cancelled_items(queue: Queue) -> None:
    family = queue.family()
    ids = await queue.enqueue(
        [NewItem(family, "default", p) for p in ("ok-old", "ok-new", "dead-old", "waiting")]
        + [NewItem(family, "default", f"lane{i}", lane_key="contact:5") for i in range(2)]
    )
    names = ["ok-old", "ok-new", "dead-old", "waiting", "lane0", "lane1"]
    by_payload = dict(zip(names, ids, strict=True))
    await queue.run_once(family, {"dead-old": DIE, "lane0": DIE, "waiting": Outcome(PENDING)})
    async with queue.engine.begin() as conn:  # lane0 is cancelled by an operator
        assert (
            await operate.skip_head(conn, queue.tables, by_payload["lane0"], org_id="org1")
        ).done
    old = [by_payload[p] for p in ("ok-old", "dead-old", "waiting", "lane0")]
    await queue.set_times(old, ago_ms=48 * HOUR_MS)
    async with reading(queue.engine) as conn:
        now = int((await conn.execute(db_now_ms().select())).scalar_one())
    pruned: list[str] = []
    while True:
        async with queue.engine.begin() as conn:
            batch = await work_retention.prune_finished(
                conn, queue.tables, before_ms=now - 24 * HOUR_MS, limit=1
            )
        pruned += batch
        if len(batch) < 1:
            break
    assert sorted(pruned) == sorted([by_payload["ok-old"], by_payload["lane0"]])
    left = await queue.rows(family)
    assert set(left) == set(ids) - set(pruned)  # the dead one, the new and the waiting stay


async def test_stats_count_each_queue_state_and_the_oldest_pending_age(queue: Queue) -> None:
    family = queue.family()
    await queue.enqueue([NewItem(family, "default", f"n{i}") for i in range(5)])
    await queue.run_once(family, {"n0": DIE, "n1": Outcome(PENDING, delay_ms=HOUR_MS)})
    await queue.enqueue([NewItem(family, "default", f"m{i}") for i in range(3)])
    store = queue.store()
    async with queue.engine.begin() as conn:  # one of them runs under a live lease
        epoch = (await store.admitted_families(conn))[family]
        (running,) = await store.claim(conn, family, "default", epoch, 1)
    waiting = next(p for p in ("m0", "m1", "m2") if p != running.payload)
    items = queue.tables.items
    async with queue.engine.begin() as conn:  # the oldest runnable item waited 90 s
        await conn.execute(
            update(items)
            .where(items.c.family == family, items.c.payload == waiting)
            .values(run_after=db_now_ms() - 90_000)
        )
    async with reading(queue.engine) as conn:
        stats = await queue_stats(conn, queue.tables, states=ALL_STATES)
    mine = {c.state: c for c in stats.counts if c.family == family}
    assert {s: c.count for s, c in mine.items()} == {
        PENDING: 3,  # two of the m's and n1 (a retry, not runnable for an hour)
        "waiting": 0,
        "target_wait": 0,
        "processing": 1,
        SUCCEEDED: 3,
        DEAD: 1,
        OUTCOME_UNKNOWN: 0,
        CANCELLED: 0,
    }
    assert mine["processing"].in_flight == 1
    assert 89_000 <= (mine[PENDING].oldest_age_ms or 0) < 120_000


async def test_metrics_publish_queue_gauges_from_the_last_count(queue: Queue) -> None:
    family = queue.family()

    async def handler(claimed: Claimed) -> None:
        del claimed

    Worker(queue.engine, queue.store(), handler)  # its counters are on /metrics (all zero)
    await queue.enqueue([NewItem(family, "default", f"g{i}") for i in range(4)])
    await queue.run_once(family, {"g0": DIE, "g1": DIE})
    await queue.enqueue([NewItem(family, "default", "late")])
    async with watching_queues(queue.engine, [queue.tables], interval_s=0.05):
        await asyncio.sleep(0.3)
        text = generate_latest().decode()
    assert f'nexus_work_items{{family="{family}",queue_class="default",state="dead"}} 2.0' in text
    assert f'nexus_work_items{{family="{family}",queue_class="default",state="pending"}} 1.0' in (
        text
    )
    assert f'nexus_work_in_flight{{family="{family}",queue_class="default"}} 0.0' in text
    assert "nexus_work_claim_latency_seconds_count" in text
    async with watching_queues(queue.engine, [queue.tables], interval_s=60):
        pass
    assert "nexus_work_items{" not in generate_latest().decode()  # nothing watched: no gauges
