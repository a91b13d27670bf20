"""The work engine on SQLite and MariaDB: fencing, retries, lanes, fairness, ownership, drain."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, replace

import pytest
import pytest_asyncio
from sqlalchemy import MetaData, event, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from nexus.contracts.roles import LogicalService
from nexus.platform.db.engine import create_engine, reading
from nexus.platform.loops import SideTaskDied
from nexus.platform.workqueue.families import TransferBlocked, transfer
from nexus.platform.workqueue.store import (
    DEAD,
    PENDING,
    PROCESSING,
    SUCCEEDED,
    SUCCESS,
    WAITING,
    Claimed,
    NewItem,
    PassOn,
    QueuePolicy,
    WorkStore,
)
from nexus.platform.workqueue.tables import WorkTables, work_tables
from nexus.platform.workqueue.worker import (
    Along,
    Deferred,
    Retryable,
    Terminal,
    Worker,
    WorkerSettings,
)
from tests.conftest import Backend

pytestmark = pytest.mark.asyncio(loop_scope="module")


@dataclass
class Queue:
    engine: AsyncEngine
    tables: WorkTables
    counter: int = 0

    def family(self) -> str:
        self.counter += 1
        return f"org1/fam{self.counter}"

    def store(self, owner: str = "me", lease_ms: int = 30_000) -> WorkStore:
        return WorkStore(self.tables, owner=owner, lease_ms=lease_ms)

    async def enqueue(
        self,
        items: list[NewItem],
        *,
        policy: QueuePolicy | None = None,
        owner: str = "me",
    ) -> list[str]:
        store = self.store(owner)
        async with self.engine.begin() as conn:
            for family, queue_class in sorted({(i.family, i.queue_class) for i in items}):
                await store.ensure_queue(conn, family, queue_class, owner=owner, policy=policy)
            return await store.enqueue(conn, items)

    async def rows(self, family: str) -> dict[str, dict[str, object]]:
        items = self.tables.items
        async with reading(self.engine) as conn:
            result = await conn.execute(select(items).where(items.c.family == family))
            return {r["id"]: dict(r) for r in result.mappings()}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def queue(backend: Backend) -> AsyncIterator[Queue]:
    engine = create_engine(backend.url(LogicalService.INTEGRATION), application_name="wq-test")
    tables = work_tables(MetaData(), "t_work")
    async with engine.begin() as conn:
        for table in tables.all:
            await conn.run_sync(table.create)
    yield Queue(engine, tables)
    await engine.dispose()


async def run_until(worker: Worker, done: Callable[[], Awaitable[bool]]) -> None:
    """Run the worker until `done()` says so (the database is polled: it is the truth)."""
    task = asyncio.create_task(worker.run())
    try:
        async with asyncio.timeout(90):
            while not await done():  # noqa: ASYNC110 - polling the database, the truth
                await asyncio.sleep(0.02)
    finally:
        worker.stop()
        await task


def fast(**overrides: object) -> WorkerSettings:
    settings = WorkerSettings(idle_poll_ms=10, queue_refresh_ms=0, backoff_base_ms=1)
    for key, value in overrides.items():
        setattr(settings, key, value)
    return settings


async def all_final(queue: Queue, family: str, count: int) -> bool:
    rows = await queue.rows(family)
    return len(rows) == count and all(
        r["state"] not in (PENDING, PROCESSING) for r in rows.values()
    )


async def test_every_item_runs_once_and_succeeds(queue: Queue) -> None:
    family = queue.family()
    ids = await queue.enqueue([NewItem(family, "default", f'{{"n": {i}}}') for i in range(300)])
    seen: list[str] = []

    async def handler(item: Claimed) -> None:
        seen.append(item.id)

    worker = Worker(queue.engine, queue.store(), handler, fast(batch=32))
    await run_until(worker, lambda: all_final(queue, family, 300))
    assert sorted(seen) == sorted(ids)
    rows = await queue.rows(family)
    assert {r["state"] for r in rows.values()} == {SUCCEEDED}
    assert {r["attempt"] for r in rows.values()} == {1}
    assert worker.stats.succeeded == 300


async def test_a_lost_lease_cannot_renew_or_finish(queue: Queue) -> None:
    family = queue.family()
    (item_id,) = await queue.enqueue([NewItem(family, "default", "{}")])
    store = queue.store()
    async with queue.engine.begin() as conn:
        epoch = (await store.admitted_families(conn))[family]
        (first,) = await store.claim(conn, family, "default", epoch, 10)
        # the holder pauses; its lease runs out (the database clock decides)
        await conn.execute(
            update(queue.tables.items)
            .where(queue.tables.items.c.id == item_id)
            .values(lease_until=0, run_after=0)
        )
    async with queue.engine.begin() as conn:
        assert await store.reclaim_expired(conn, family, "default") == 1
        (second,) = await store.claim(conn, family, "default", epoch, 10)
    assert second.token != first.token
    assert second.attempt == 2  # attempts never go back
    async with queue.engine.begin() as conn:
        assert await store.renew(conn, family, epoch, first.token, [item_id]) == {item_id}
        assert await store.finish(conn, family, epoch, first.token, [(first, SUCCESS)]) == {item_id}
        row = (await queue.rows(family))[item_id]
        assert row["state"] == PROCESSING
        assert row["lease_token"] == second.token
        assert await store.finish(conn, family, epoch, second.token, [(second, SUCCESS)]) == set()
    row = (await queue.rows(family))[item_id]
    assert (row["state"], row["attempt"], row["reclaims"]) == (SUCCEEDED, 2, 1)


async def test_retries_back_off_then_succeed_and_terminal_errors_are_dead_at_once(
    queue: Queue,
) -> None:
    family = queue.family()
    flaky, broken, secret = await queue.enqueue(
        [NewItem(family, "default", p) for p in ("flaky", "broken", "secret")],
        policy=QueuePolicy(max_attempts=3),
    )

    async def handler(item: Claimed) -> None:
        if item.payload == "flaky" and item.attempt < 3:
            raise Retryable("the target answered 503")
        if item.payload == "broken":
            raise Terminal("the target refused the record: INVALID_FIELD")
        if item.payload == "secret":
            raise ValueError("token=abc123 password=hunter2")

    worker = Worker(queue.engine, queue.store(), handler, fast())
    await run_until(worker, lambda: all_final(queue, family, 3))
    rows = await queue.rows(family)
    assert (rows[flaky]["state"], rows[flaky]["attempt"]) == (SUCCEEDED, 3)
    assert (rows[broken]["state"], rows[broken]["attempt"]) == (DEAD, 1)
    assert rows[broken]["failure_class"] == "terminal"
    assert rows[broken]["last_error"] == "the target refused the record: INVALID_FIELD"
    assert (rows[secret]["state"], rows[secret]["attempt"]) == (DEAD, 3)  # out of attempts
    assert rows[secret]["last_error"] == "unexpected ValueError"  # never the message text


async def test_a_deferral_gives_its_attempt_back_so_an_outage_never_kills_work(
    queue: Queue,
) -> None:
    """Seven deferrals (nothing reached the target) of an item allowed 2 attempts: it is never
    dead, and succeeds when the target is back; its budget grew by one per deferral."""
    family = queue.family()
    (item_id,) = await queue.enqueue(
        [NewItem(family, "default", "x")], policy=QueuePolicy(max_attempts=2)
    )

    async def handler(item: Claimed) -> None:
        if item.attempt <= 7:
            raise Deferred("target unreachable (ConnectionRefusedError); nothing sent", delay_ms=1)

    worker = Worker(queue.engine, queue.store(), handler, fast())
    await run_until(worker, lambda: all_final(queue, family, 1))
    row = (await queue.rows(family))[item_id]
    assert (row["state"], row["attempt"], row["max_attempts"]) == (SUCCEEDED, 8, 9)
    assert worker.stats.deferred == 7
    assert worker.stats.dead == worker.stats.retried == 0


async def test_a_paused_worker_claims_nothing_until_its_target_is_back(queue: Queue) -> None:
    family = queue.family()
    await queue.enqueue([NewItem(family, "default", f"p{i}") for i in range(3)])
    ran: list[str] = []
    paused = [True]

    async def handler(item: Claimed) -> None:
        ran.append(item.payload)

    worker = Worker(
        queue.engine, queue.store(), handler, fast(), paused_for=lambda: 0.05 if paused[0] else 0
    )
    task = asyncio.create_task(worker.run())
    try:
        await asyncio.sleep(0.5)
        assert ran == []
        assert worker.stats.claimed == 0
        paused[0] = False
        async with asyncio.timeout(30):
            while len(ran) < 3:  # noqa: ASYNC110 - the handler's own record
                await asyncio.sleep(0.02)
    finally:
        worker.stop()
        await task
    assert sorted(ran) == ["p0", "p1", "p2"]


async def test_a_source_lane_runs_in_order_and_a_dead_head_halts_it(queue: Queue) -> None:
    family = queue.family()
    ids = await queue.enqueue(
        [NewItem(family, "default", str(i), lane_key="contact-1") for i in range(12)]
        + [NewItem(family, "default", f"other{i}", lane_key="contact-2") for i in range(3)]
    )
    order: list[str] = []

    async def handler(item: Claimed) -> None:
        if item.payload == "3" and item.attempt == 1:
            raise Retryable("try again")  # a retrying head blocks its lane
        if item.payload == "8":
            raise Terminal("poison")
        await asyncio.sleep(0.001)
        order.append(item.payload)

    async def settled() -> bool:
        rows = await queue.rows(family)
        return rows[ids[8]]["state"] == DEAD and all(
            rows[i]["state"] == SUCCEEDED for i in ids[12:]
        )

    worker = Worker(queue.engine, queue.store(), handler, fast(concurrency=8))
    await run_until(worker, settled)
    assert [p for p in order if not p.startswith("other")] == [str(i) for i in range(8)]
    rows = await queue.rows(family)
    assert all(rows[i]["state"] == WAITING for i in ids[9:12])  # halted behind the dead head
    lanes = queue.tables.source_lanes
    async with reading(queue.engine) as conn:
        halted_by = (
            await conn.execute(
                select(lanes.c.halted_by).where(
                    lanes.c.family == family, lanes.c.lane_key == "contact-1"
                )
            )
        ).scalar_one()
    assert halted_by == ids[8]


async def test_a_finished_head_passes_its_executor_on_to_its_lanes_next_item(
    queue: Queue,
) -> None:
    """ADR 0068: the completion claims the lane's next item for its holder (processing under
    a fresh token, attempt 1); a follower with a target lane, one not due yet, or one of
    another class is promoted to `pending` instead, and a head that already passed on
    `below` times gives its executor back."""
    family = queue.family()
    ids = await queue.enqueue(
        [NewItem(family, "default", str(i), lane_key=f"lane-{i % 4}") for i in range(8)]
    )
    ids += await queue.enqueue(
        [NewItem(family, "default", "t", lane_key="lane-0", target_key="hot")]
    )
    store = queue.store()
    async with queue.engine.begin() as conn:
        epoch = (await store.admitted_families(conn))[family]
        heads = await store.claim(conn, family, "default", epoch, 10)
    assert sorted(c.payload for c in heads) == ["0", "1", "2", "3"]
    by_payload = {c.payload: c for c in heads}
    tired = replace(by_payload["3"], passes=4)  # passed on 4 times already: gives back
    results = [(by_payload[p], SUCCESS) for p in "012"] + [(tired, SUCCESS)]
    async with queue.engine.begin() as conn:
        lost, passed = await store.finish_passing_on(
            conn, family, epoch, heads[0].token, results, pass_on=PassOn("next", below=4)
        )
    assert lost == set()
    assert sorted(c.payload for c in passed) == ["4", "5", "6"]
    assert {(c.token, c.attempt, c.passes) for c in passed} == {("next", 1, 1)}
    rows = await queue.rows(family)
    assert rows[ids[7]]["state"] == PENDING  # lane-3: its head had passed on enough
    assert all(rows[c.id]["state"] == PROCESSING for c in passed)
    assert all(rows[c.id]["lease_token"] == "next" for c in passed)
    # lane-0's next is on a target lane: promoted for a claim to take that lane
    four = next(c for c in passed if c.payload == "4")
    async with queue.engine.begin() as conn:
        _, passed = await store.finish_passing_on(
            conn, family, epoch, "next", [(four, SUCCESS)], pass_on=PassOn("again", below=4)
        )
    assert passed == []
    assert (await queue.rows(family))[ids[8]]["state"] == PENDING


async def test_a_lane_run_by_passing_on_keeps_its_order_and_the_worker_its_slots(
    queue: Queue,
) -> None:
    """A Worker on deep lanes: most items are passed on rather than claimed, each lane runs
    in order one at a time, and a retrying item still blocks its lane (it is not passed)."""
    family = queue.family()
    await queue.enqueue(  # an owner of its own: no other test's leftovers in its claims
        [NewItem(family, "default", f"{i % 3}:{i // 3}", lane_key=f"l{i % 3}") for i in range(60)],
        owner="passer",
    )
    order: dict[str, list[int]] = {}
    running: set[str] = set()
    overlap: list[str] = []

    async def handler(item: Claimed) -> None:
        lane, seq = item.payload.split(":")
        if lane in running:
            overlap.append(lane)
        running.add(lane)
        await asyncio.sleep(0.001)
        running.discard(lane)
        if seq == "5" and item.attempt == 1:
            raise Retryable("again", delay_ms=0)
        order.setdefault(lane, []).append(int(seq))

    async def settled() -> bool:
        return all(r["state"] == SUCCEEDED for r in (await queue.rows(family)).values())

    settings = fast(concurrency=8, lane_passes=4)
    worker = Worker(queue.engine, queue.store("passer"), handler, settings)
    await run_until(worker, settled)
    assert overlap == []
    assert order == {lane: list(range(20)) for lane in ("0", "1", "2")}
    assert worker.stats.passed >= 30  # of 60 items on 3 lanes, 4 passes per claim at most
    assert worker.stats.claimed == 63  # the retries were claimed again


async def test_heads_finished_together_advance_each_lane_once_in_one_statement(
    queue: Queue, backend: Backend
) -> None:
    """A batch's heads are usually on as many lanes as it has items: one UPDATE moves them
    all (on a server each statement is a round trip), each lane by exactly one."""
    family = queue.family()
    lanes = 20
    await queue.enqueue(
        [
            NewItem(family, "default", f"{lane}-{n}", lane_key=f"lane-{lane}")
            for n in range(3)
            for lane in range(lanes)
        ]
    )
    store = queue.store()
    lane_updates: list[str] = []  # one per statement the server runs

    def seen(
        _conn: object, _cursor: object, statement: str, params: object, _ctx: object, many: bool
    ) -> None:
        if statement.startswith("UPDATE t_work_source_lane"):  # an executemany runs each row
            lane_updates.extend([statement] * (len(params) if many else 1))  # type: ignore[arg-type]

    event.listen(queue.engine.sync_engine, "before_cursor_execute", seen)
    try:
        for n in range(3):
            async with queue.engine.begin() as conn:
                epoch = (await store.admitted_families(conn))[family]
                claimed = await store.claim(conn, family, "default", epoch, 100)
            # only each lane's head runs: the n-th item of every lane, none twice
            assert sorted(c.payload for c in claimed) == sorted(f"{i}-{n}" for i in range(lanes))
            before = len(lane_updates)
            async with queue.engine.begin() as conn:
                done = [(c, SUCCESS) for c in claimed]
                assert await store.finish(conn, family, epoch, claimed[0].token, done) == set()
            if backend.name == "mariadb":  # SQLite's on-loop statements skip engine events
                assert len(lane_updates) - before == 1
    finally:
        event.remove(queue.engine.sync_engine, "before_cursor_execute", seen)
    source = queue.tables.source_lanes
    async with reading(queue.engine) as conn:
        heads = (
            await conn.execute(select(source.c.head_seq).where(source.c.family == family))
        ).scalars()
        assert list(heads) == [4] * lanes  # three heads finished, so three steps, per lane


async def test_a_target_lane_never_has_two_items_in_flight(queue: Queue) -> None:
    family = queue.family()
    await queue.enqueue(
        [NewItem(family, "default", str(i), target_key="crm-account-7") for i in range(40)]
        + [NewItem(family, "default", f"free{i}") for i in range(40)]
    )
    in_flight: dict[str, Claimed] = {}  # the target items whose handler runs now
    overlaps: list[tuple[str, ...]] = []
    free_peak = 0
    free_now = 0

    async def handler(item: Claimed) -> None:
        nonlocal free_now, free_peak
        if item.family != family:  # an earlier test's leftover (another family, target)
            return
        if item.target_key:
            if in_flight:  # who overlapped (payload, attempt, token): what a failure says
                running = (*in_flight.values(), item)
                overlaps.append(tuple(f"{c.payload}@{c.attempt}/{c.token[:6]}" for c in running))
            in_flight[item.id] = item
            try:
                await asyncio.sleep(0.002)
            finally:
                del in_flight[item.id]
        else:
            free_now += 1
            free_peak = max(free_peak, free_now)
            await asyncio.sleep(0.01)
            free_now -= 1

    worker = Worker(queue.engine, queue.store(), handler, fast(concurrency=16))
    await run_until(worker, lambda: all_final(queue, family, 80))
    assert not overlaps, f"two target items in flight at once: {overlaps}, stats {worker.stats}"
    assert free_peak > 1  # the rest still ran in parallel


async def test_a_flood_in_one_family_does_not_starve_another(queue: Queue) -> None:
    flood, small = queue.family(), queue.family()
    await queue.enqueue([NewItem(flood, "default", "f") for _ in range(800)])
    await queue.enqueue([NewItem(small, "default", "s") for _ in range(30)])
    finished: list[str] = []

    async def handler(item: Claimed) -> None:
        finished.append(item.family)

    worker = Worker(queue.engine, queue.store(), handler, fast(batch=16, concurrency=16))
    await run_until(worker, lambda: all_final(queue, small, 30))
    last_small = max(i for i, f in enumerate(finished) if f == small)
    assert last_small < 200, f"the small family finished only at position {last_small}"
    worker = Worker(queue.engine, queue.store(), handler, fast(batch=256, concurrency=256))
    await run_until(worker, lambda: all_final(queue, flood, 800))


async def test_transfer_waits_for_in_flight_items_then_fences_the_old_owner(
    queue: Queue,
) -> None:
    family = queue.family()
    await queue.enqueue([NewItem(family, "default", str(i)) for i in range(4)], owner="old")
    old = queue.store("old")
    async with queue.engine.begin() as conn:
        epoch = (await old.admitted_families(conn))[family]
        held = await old.claim(conn, family, "default", epoch, 2)
    assert len(held) == 2
    with pytest.raises(TransferBlocked, match="still has live leases"):
        await transfer(queue.engine, queue.tables, family, "new", timeout_s=0.3, poll_s=0.05)
    async with queue.engine.begin() as conn:  # the failed transfer re-admitted the old owner
        assert family in await old.admitted_families(conn)

    async def finish_later() -> None:
        await asyncio.sleep(0.2)
        async with queue.engine.begin() as conn:
            lost = await old.finish(conn, family, epoch, held[0].token, [(held[0], SUCCESS)])
        assert lost == set()  # a draining family's holders still finish under their epoch

    finisher = asyncio.create_task(finish_later())
    async with queue.engine.begin() as conn:  # expire the second one: a dead holder
        await conn.execute(
            update(queue.tables.items)
            .where(queue.tables.items.c.id == held[1].id)
            .values(lease_until=0, run_after=0)
        )
    new_epoch = await transfer(queue.engine, queue.tables, family, "new", timeout_s=5, poll_s=0.05)
    await finisher
    assert new_epoch == epoch + 1
    async with queue.engine.begin() as conn:
        assert family not in await old.admitted_families(conn)
        assert await old.claim(conn, family, "default", epoch, 10) == []
        # the old holder of the expired item comes back: fenced by the epoch
        assert await old.renew(conn, family, epoch, held[1].token, [held[1].id]) == {held[1].id}
    new = queue.store("new")
    seen: list[str] = []

    async def handler(item: Claimed) -> None:
        seen.append(item.payload)

    worker = Worker(queue.engine, new, handler, fast())
    await run_until(worker, lambda: all_final(queue, family, 4))
    assert sorted(seen) == sorted(p for p in "0123" if p != held[0].payload)


async def test_a_dead_completer_stops_the_worker_loudly_and_a_restart_finishes_the_work(
    queue: Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before the side tasks were supervised, a bug in `_settle` killed the completer
    silently: executors stalled and shutdown waited forever on the results queue."""
    family = queue.family()
    ids = await queue.enqueue([NewItem(family, "default", str(i)) for i in range(20)])
    runs: list[str] = []

    async def handler(item: Claimed) -> None:
        runs.append(item.id)

    worker = Worker(queue.engine, queue.store(lease_ms=1_000), handler, fast(batch=5))

    def broken(*_args: object) -> None:
        raise ValueError("a bug in settling outcomes")

    monkeypatch.setattr(worker, "_settle", broken)
    with pytest.raises(SideTaskDied, match="work-completer"):
        await asyncio.wait_for(worker.run(), 20)  # stops by itself, and says why
    monkeypatch.undo()
    await run_until(worker, lambda: all_final(queue, family, 20))  # the owner's restart
    rows = await queue.rows(family)
    assert {rows[i]["state"] for i in ids} == {SUCCEEDED}
    assert set(runs) == set(ids)


async def test_drain_releases_unfinished_items_keeping_their_attempts(queue: Queue) -> None:
    family = queue.family()
    ids = await queue.enqueue([NewItem(family, "default", str(i)) for i in range(3)])
    started = asyncio.Event()

    async def handler(item: Claimed) -> None:
        started.set()
        await asyncio.sleep(30)

    worker = Worker(queue.engine, queue.store(), handler, fast(drain_timeout_s=0.2))
    task = asyncio.create_task(worker.run())
    await asyncio.wait_for(started.wait(), 10)
    await asyncio.sleep(0.05)
    worker.stop()
    await asyncio.wait_for(task, 10)
    rows = await queue.rows(family)
    assert {rows[i]["state"] for i in ids} == {PENDING}
    assert {rows[i]["attempt"] for i in ids} == {1}
    assert {rows[i]["lease_until"] for i in ids} == {None}
    # the released items are claimable: hand them to nobody, or the next test's worker runs them
    await transfer(queue.engine, queue.tables, family, "nobody", timeout_s=5, poll_s=0.05)


async def test_a_head_that_runs_out_of_retries_is_dead_and_its_lane_follows_the_policy(
    queue: Queue,
) -> None:
    skipping, halting = queue.family(), queue.family()
    skip_ids = await queue.enqueue(
        [NewItem(skipping, "default", str(i), lane_key="lane") for i in range(3)],
        policy=QueuePolicy(max_attempts=2, lane_policy="skip"),
    )
    halt_ids = await queue.enqueue(
        [NewItem(halting, "default", str(i), lane_key="lane") for i in range(3)],
        policy=QueuePolicy(max_attempts=2),
    )

    async def handler(item: Claimed) -> None:
        if item.payload == "0":
            raise Retryable("never works", delay_ms=0)

    async def settled() -> bool:
        skip_rows, halt_rows = await queue.rows(skipping), await queue.rows(halting)
        return all(skip_rows[i]["state"] == SUCCEEDED for i in skip_ids[1:]) and (
            halt_rows[halt_ids[0]]["state"] == DEAD
        )

    worker = Worker(queue.engine, queue.store(), handler, fast())
    await run_until(worker, settled)
    skip_rows, halt_rows = await queue.rows(skipping), await queue.rows(halting)
    assert (skip_rows[skip_ids[0]]["state"], skip_rows[skip_ids[0]]["attempt"]) == (DEAD, 2)
    assert {halt_rows[i]["state"] for i in halt_ids[1:]} == {WAITING}
    lanes = queue.tables.source_lanes
    async with reading(queue.engine) as conn:
        halted_by = (
            await conn.execute(select(lanes.c.halted_by).where(lanes.c.family == halting))
        ).scalar_one()
    assert halted_by == halt_ids[0]


async def test_an_effect_and_its_completion_commit_together(queue: Queue) -> None:
    """`complete_in`: the handler's own write and the item's success are one transaction, so
    a handler that fails after writing leaves neither (the retry then writes exactly once)."""
    family = queue.family()
    ids = await queue.enqueue([NewItem(family, "default", str(i)) for i in range(20)])
    effects = queue.tables.families  # any table the test can write a marker row into
    failed_once: set[str] = set()
    worker: Worker

    async def handler(item: Claimed) -> None:
        if item.family != family:
            return  # the worker serves every queue this owner has: leftovers of other tests
        async with queue.engine.begin() as conn:
            await conn.execute(
                effects.insert().values(
                    family=f"fx/{item.id}",
                    org_id="fx",
                    owner="fx",
                    ownership_epoch=1,
                    admitting=False,
                    updated_at=0,
                )
            )
            await worker.complete_in(conn, item)
            if item.payload == "7" and item.id not in failed_once:
                failed_once.add(item.id)
                raise Retryable("the commit did not happen")  # rolls the effect back too

    worker = Worker(queue.engine, queue.store(), handler, fast())
    await run_until(worker, lambda: all_final(queue, family, 20))
    rows = await queue.rows(family)
    assert {r["state"] for r in rows.values()} == {SUCCEEDED}
    async with reading(queue.engine) as conn:
        marks = (
            (await conn.execute(select(effects.c.family).where(effects.c.owner == "fx")))
            .scalars()
            .all()
        )
    assert sorted(marks) == sorted(f"fx/{i}" for i in ids)  # each effect exactly once
    assert worker.stats.retried == 1


async def test_a_claimer_that_waits_for_another_gets_the_next_items(queue: Queue) -> None:
    """Claimers of one queue take turns: the second reads its candidates after the first has
    committed, so it claims the next items instead of waiting on the same rows to win none."""
    family = queue.family()
    await queue.enqueue([NewItem(family, "default", str(i)) for i in range(20)])
    store = queue.store()
    async with queue.engine.begin() as first:
        epoch = (await store.admitted_families(first))[family]
        taken = await store.claim(first, family, "default", epoch, 10)
        second = asyncio.create_task(claim_in_own_transaction(queue, store, family, epoch, 10))
        await asyncio.sleep(0.3)  # the second claimer is waiting for its turn
        assert not second.done()
    got = await asyncio.wait_for(second, 10)
    assert len(taken) == 10
    assert len(got) == 10
    assert not {c.id for c in taken} & {c.id for c in got}


async def claim_in_own_transaction(
    queue: Queue, store: WorkStore, family: str, epoch: int, limit: int
) -> list[Claimed]:
    async with queue.engine.begin() as conn:
        return await store.claim(conn, family, "default", epoch, limit)


async def test_work_claimed_along_in_a_writers_transaction_starts_only_once_it_commits(
    queue: Queue,
) -> None:
    """`claim_along`: a writer that makes work claimable claims it in its own transaction
    (the receipt router does, ADR 0059). Nothing runs before the commit; after it every item
    runs once, fenced as any claim; a writer that rolls back leaves no item and no held slot."""
    family = queue.family()
    store = queue.store()
    ran: list[str] = []
    started = asyncio.Event()

    async def handler(item: Claimed) -> None:
        if item.family == family:
            ran.append(item.payload)
            started.set()

    worker = Worker(queue.engine, store, handler, fast())
    task = asyncio.create_task(worker.run())
    try:
        await queue.enqueue([NewItem(family, "default", "warm")])  # the worker learns the family
        async with asyncio.timeout(30):
            await started.wait()
        key = {(family, "default")}
        async with queue.engine.begin() as conn:
            ids = await store.enqueue(conn, [NewItem(family, "default", str(i)) for i in range(5)])
            along = await worker.claim_along(conn, key, len(ids))
            assert sorted(c.id for c in along.claimed) == sorted(ids)
            assert not along.short
        await asyncio.sleep(0.05)
        assert ran == ["warm"]  # claimed, but not started: the commit has not been announced
        worker.along_ended(along, committed=True)
        gone: list[str] = []
        rolled: list[Along] = []

        async def write_then_fail() -> None:
            async with queue.engine.begin() as conn:
                gone.extend(await store.enqueue(conn, [NewItem(family, "default", "undone")]))
                rolled.append(await worker.claim_along(conn, key, 1))
                raise RuntimeError("the writer fails: its items never existed")

        with pytest.raises(RuntimeError):
            await write_then_fail()
        assert [c.id for c in rolled[0].claimed] == gone
        worker.along_ended(rolled[0], committed=False)
        assert gone[0] not in worker._live  # its slot is free again
        await queue.enqueue([NewItem(family, "default", "after")])
        async with asyncio.timeout(30):
            while not await all_final(queue, family, 7):  # noqa: ASYNC110 - the database
                await asyncio.sleep(0.02)
    finally:
        worker.stop()
        await task
    assert sorted(ran) == sorted(["warm", "after", *map(str, range(5))])
    rows = await queue.rows(family)
    assert gone[0] not in rows
    assert {r["state"] for r in rows.values()} == {SUCCEEDED}
    assert {r["attempt"] for r in rows.values()} == {1}


async def test_a_drain_releases_what_was_claimed_along_and_never_started(queue: Queue) -> None:
    """A worker told to stop while a writer's transaction held its claims starts none of
    them: the drain gives them back (pending again), as it does running items."""
    family = queue.family()
    store = queue.store()
    ran: list[str] = []

    async def handler(item: Claimed) -> None:
        if item.family == family:
            ran.append(item.payload)

    worker = Worker(queue.engine, store, handler, fast())
    task = asyncio.create_task(worker.run())
    await queue.enqueue([NewItem(family, "default", "warm")])
    async with asyncio.timeout(30):
        while ran != ["warm"]:  # noqa: ASYNC110 - the worker's own progress
            await asyncio.sleep(0.01)
    async with queue.engine.begin() as conn:
        ids = await store.enqueue(conn, [NewItem(family, "default", str(i)) for i in range(3)])
        along = await worker.claim_along(conn, {(family, "default")}, len(ids))
    assert len(along.claimed) == 3
    worker.stop()
    worker.along_ended(along, committed=True)
    await task
    assert ran == ["warm"]
    rows = await queue.rows(family)
    assert {rows[i]["state"] for i in ids} == {PENDING}
    assert {rows[i]["lease_token"] for i in ids} == {None}
