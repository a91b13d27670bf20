"""A hypothesis state machine of the work engine against a real database (SQLite, MariaDB).

Rules drive `WorkStore` the way workers and operators do: enqueue (source and target lanes),
claim (by the owner and by a stale owner), renew, finish with every outcome, expire a lease
(the database moves `lease_until` into the past), reclaim, release, and transfer the family.
Each holder keeps what it was handed (`Claimed`), so stale holders keep trying to write.

After every step the database is checked against the engine's invariants (ENGINE.md):
at most one holder can write an item; terminal states are final; attempts never decrease; a
source lane runs only its head, and only its head is ever claimable (the rest wait, and the
next one is promoted when the head finishes); a target lane never has two items in flight, and
an item parked on one is never stranded (the lane is held, or a waiter was promoted); and each
holder write reports exactly the items whose lease it had lost (and changes nothing for those).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)
from sqlalchemy import MetaData, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from nexus.contracts.roles import LogicalService
from nexus.platform.db.clock import db_now_ms
from nexus.platform.db.engine import create_engine
from nexus.platform.workqueue.families import TransferBlocked, transfer
from nexus.platform.workqueue.store import (
    CANCELLED,
    DEAD,
    OUTCOME_UNKNOWN,
    PENDING,
    PROCESSING,
    RETRYABLE,
    SUCCEEDED,
    TARGET_WAIT,
    TERMINAL,
    UNKNOWN,
    WAITING,
    Claimed,
    NewItem,
    Outcome,
    QueuePolicy,
    WorkStore,
    effective,
)
from nexus.platform.workqueue.tables import WorkTables, work_tables
from tests.conftest import Backend

QUEUE = "q"
OWNERS = ("a", "b")
MAX_ATTEMPTS = 3
FINAL = {SUCCEEDED, DEAD, CANCELLED}
OPEN = {PENDING, WAITING, TARGET_WAIT, PROCESSING}
PARKED = {DEAD, OUTCOME_UNKNOWN}
OUTCOMES = {
    "success": Outcome(SUCCEEDED),
    "retry": Outcome(PENDING, RETRYABLE, "try again"),
    "terminal": Outcome(DEAD, TERMINAL, "refused"),
    "unknown": Outcome(OUTCOME_UNKNOWN, UNKNOWN, "timed out after sending"),
}
EXAMPLES = {"sqlite": 40, "mariadb": 20}
LEASE_MS = 600_000  # a lease runs out only when a rule says so


@dataclass
class World:
    """One event loop and one engine for the whole test; each example uses a new family."""

    loop: asyncio.AbstractEventLoop
    engine: AsyncEngine
    tables: WorkTables
    families: int = 0

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)


@pytest.fixture(scope="module")
def world(backend: Backend) -> Iterator[World]:
    loop = asyncio.new_event_loop()
    engine = create_engine(backend.url(LogicalService.INTEGRATION), application_name="wq-states")
    tables = work_tables(MetaData(), "sm_work")

    async def create() -> None:
        async with engine.begin() as conn:
            for table in tables.all:
                await conn.run_sync(table.create)

    loop.run_until_complete(create())
    yield World(loop, engine, tables)
    loop.run_until_complete(engine.dispose())
    loop.close()


@dataclass
class Holder:
    """What one claim handed out: the holder believes it holds `items` until told otherwise."""

    owner: str
    epoch: int
    token: str
    items: dict[str, Claimed] = field(default_factory=dict)


@dataclass(frozen=True)
class Row:
    state: str
    attempt: int
    token: str | None
    lease_until: int | None
    lane_key: str | None
    lane_seq: int | None
    target_key: str | None
    finished_at: int | None
    failure_class: str | None


@dataclass(frozen=True)
class Snapshot:
    now: int
    epoch: int
    owner: str
    items: dict[str, Row]
    lane_heads: dict[str, int]
    targets: dict[str, tuple[str | None, str | None, int | None]]  # holder id, token, until


def test_the_engine_keeps_its_invariants(world: World, backend: Backend) -> None:
    class EngineMachine(RuleBasedStateMachine):
        holders = Bundle("holders")

        def __init__(self) -> None:
            super().__init__()
            world.families += 1
            self.family = f"org1/fam{world.families}"
            self.stores = {o: WorkStore(world.tables, owner=o, lease_ms=LEASE_MS) for o in OWNERS}
            self.owner = "a"
            self.policy = "halt"
            self.known: dict[str, int] = {}  # item id -> highest attempt ever seen
            self.final: dict[str, Row] = {}
            self.seen: Snapshot | None = None  # the state after the last step
            self.fresh: Snapshot | None = None  # taken by the last rule, not checked yet

        # -------------------------------------------------------------- helpers
        async def _snapshot(self) -> Snapshot:
            t = world.tables
            async with world.engine.connect() as conn:
                family = (
                    await conn.execute(
                        select(t.families.c.ownership_epoch, t.families.c.owner, db_now_ms()).where(
                            t.families.c.family == self.family
                        )
                    )
                ).one()
                items = {
                    r.id: Row(
                        r.state,
                        r.attempt,
                        r.lease_token,
                        r.lease_until,
                        r.lane_key,
                        r.lane_seq,
                        r.target_key,
                        r.finished_at,
                        r.failure_class,
                    )
                    for r in await conn.execute(
                        select(t.items).where(t.items.c.family == self.family)
                    )
                }
                heads = {
                    r.lane_key: int(r.head_seq)
                    for r in await conn.execute(
                        select(t.source_lanes).where(t.source_lanes.c.family == self.family)
                    )
                }
                targets = {
                    r.target_key: (r.holder_id, r.holder_token, r.lease_until)
                    for r in await conn.execute(
                        select(t.target_lanes).where(t.target_lanes.c.family == self.family)
                    )
                }
                await conn.rollback()
            return Snapshot(int(family[2]), int(family[0]), str(family[1]), items, heads, targets)

        def snapshot(self) -> Snapshot:
            snap: Snapshot = world.run(self._snapshot())
            self.fresh = snap
            return snap

        @property
        def before(self) -> Snapshot:
            """The state before this rule: what the invariant check saw after the last one
            (only rules change it; leases are long enough never to expire on their own)."""
            assert self.seen is not None
            return self.seen

        def holds(self, snap: Snapshot, holder: Holder, item_id: str, *, epoch: bool) -> bool:
            row = snap.items[item_id]
            return (
                row.state == PROCESSING
                and row.token == holder.token
                and (not epoch or holder.epoch == snap.epoch)
            )

        def target_free(self, snap: Snapshot, key: str) -> bool:
            holder_id, token, until = snap.targets.get(key, (None, None, None))
            if holder_id is None:
                return True
            row = snap.items.get(holder_id)
            still = row is not None and row.state == PROCESSING and row.token == token
            return not still and until is not None and until < snap.now

        def eligible(self, snap: Snapshot) -> set[str]:
            return {
                i
                for i, r in snap.items.items()
                if r.state == PENDING
                and (r.lane_key is None or snap.lane_heads[r.lane_key] == r.lane_seq)
                and (r.target_key is None or self.target_free(snap, r.target_key))
            }

        def pending(self, snap: Snapshot) -> int:
            return sum(1 for r in snap.items.values() if r.state == PENDING)

        # -------------------------------------------------------------- rules
        @initialize(policy=st.sampled_from(["halt", "skip"]))
        def start(self, policy: str) -> None:
            self.policy = policy

            async def go() -> None:
                async with world.engine.begin() as conn:
                    await self.stores["a"].ensure_queue(
                        conn,
                        self.family,
                        QUEUE,
                        owner="a",
                        policy=QueuePolicy(max_attempts=MAX_ATTEMPTS, lane_policy=policy),
                    )

            world.run(go())
            self.seen = self.snapshot()

        @rule(
            items=st.lists(
                st.tuples(st.sampled_from([None, "L1", "L2"]), st.sampled_from([None, "T1", "T2"])),
                min_size=1,
                max_size=4,
            )
        )
        def enqueue(self, items: list[tuple[str | None, str | None]]) -> None:
            async def go() -> list[str]:
                async with world.engine.begin() as conn:
                    return await self.stores["a"].enqueue(
                        conn,
                        [
                            NewItem(self.family, QUEUE, "{}", lane_key=lane, target_key=target)
                            for lane, target in items
                        ],
                    )

            ids = world.run(go())
            after = self.snapshot()
            for item_id, (lane, target) in zip(ids, items, strict=True):
                row = after.items[item_id]
                head = lane is None or after.lane_heads[lane] == row.lane_seq
                assert (row.state, row.attempt, row.lane_key, row.target_key) == (
                    PENDING if head else WAITING,
                    0,
                    lane,
                    target,
                )
            lanes = [after.items[i] for i in ids if after.items[i].lane_key]
            for lane in {r.lane_key for r in lanes}:  # sequences follow arrival order
                seqs = [r.lane_seq for r in lanes if r.lane_key == lane]
                assert seqs == sorted(seqs)
                assert len(set(seqs)) == len(seqs)

        @rule(target=holders, limit=st.sampled_from([1, 2, 50]))
        def claim(self, limit: int) -> Any:
            before = self.before
            store = self.stores[self.owner]

            async def go() -> list[Claimed]:
                async with world.engine.begin() as conn:
                    return await store.claim(conn, self.family, QUEUE, before.epoch, limit)

            got = world.run(go())
            eligible = self.eligible(before)
            ids = {c.id for c in got}
            assert ids <= eligible, f"claimed items that were not claimable: {ids - eligible}"
            after = self.snapshot()
            if limit >= self.pending(before):  # every candidate was read: nothing left behind
                free = {i for i in eligible if before.items[i].target_key is None}
                assert free <= ids
                keys = {before.items[i].target_key for i in eligible} - {None}
                assert {before.items[i].target_key for i in ids} - {None} == keys
                for item_id, row in before.items.items():  # the rest wait for their targets
                    if row.state == PENDING and item_id not in ids:
                        assert after.items[item_id].state == TARGET_WAIT, item_id
            for c in got:
                assert c.attempt == before.items[c.id].attempt + 1
                assert after.items[c.id].state == PROCESSING
                assert after.items[c.id].token == c.token
                assert after.items[c.id].attempt == c.attempt
            # a holder even when nothing was claimed: the bundle then grows by one per claim
            # whatever the database answered (an answer that differed between two runs of one
            # rule sequence, a clock step say, made hypothesis see a flaky strategy)
            token = got[0].token if got else ""
            return Holder(self.owner, before.epoch, token, {c.id: c for c in got})

        @rule()
        def stale_owner_claims_nothing(self) -> None:
            stale = "b" if self.owner == "a" else "a"
            before = self.before

            async def go() -> list[Claimed]:
                async with world.engine.begin() as conn:
                    return await self.stores[stale].claim(
                        conn, self.family, QUEUE, before.epoch, 50
                    )

            assert world.run(go()) == []

        @rule(holder=holders)
        def renew(self, holder: Holder) -> None:
            before = self.before
            ids = sorted(holder.items)
            if not ids:
                return

            async def go() -> set[str]:
                async with world.engine.begin() as conn:
                    return await self.stores[holder.owner].renew(
                        conn,
                        self.family,
                        holder.epoch,
                        holder.token,
                        ids,
                        target_keys={c.target_key for c in holder.items.values() if c.target_key},
                    )

            lost = world.run(go())
            expected = {i for i in ids if not self.holds(before, holder, i, epoch=True)}
            assert lost == expected
            after = self.snapshot()
            for item_id in ids:
                if item_id in lost:
                    assert after.items[item_id] == before.items[item_id]
                    del holder.items[item_id]
                else:
                    until = after.items[item_id].lease_until
                    assert until is not None
                    assert until >= after.now

        @rule(
            holder=holders,
            data=st.data(),
        )
        def finish(self, holder: Holder, data: st.DataObject) -> None:
            if not holder.items:
                return
            chosen = data.draw(
                st.lists(st.sampled_from(sorted(holder.items)), min_size=1, unique=True)
            )
            results = [
                (holder.items[i], OUTCOMES[data.draw(st.sampled_from(sorted(OUTCOMES)))])
                for i in chosen
            ]
            before = self.before

            async def go() -> set[str]:
                async with world.engine.begin() as conn:
                    return await self.stores[holder.owner].finish(
                        conn, self.family, holder.epoch, holder.token, results
                    )

            lost = world.run(go())
            expected = {i for i in chosen if not self.holds(before, holder, i, epoch=True)}
            assert lost == expected
            after = self.snapshot()
            for claimed, outcome in results:
                del holder.items[claimed.id]
                if claimed.id in lost:
                    assert after.items[claimed.id] == before.items[claimed.id]
                    continue
                recorded = effective(claimed, outcome)
                row = after.items[claimed.id]
                assert row.state == recorded.state
                assert row.attempt == before.items[claimed.id].attempt
                if outcome.state == PENDING and recorded.state == DEAD:
                    assert claimed.attempt >= MAX_ATTEMPTS  # a retry on the last attempt

        @rule(holder=holders)
        def expire(self, holder: Holder) -> None:
            """The holder stalls past its lease: the database clock runs out on it."""
            t = world.tables

            async def go() -> None:
                async with world.engine.begin() as conn:
                    await conn.execute(
                        update(t.items)
                        .where(
                            t.items.c.family == self.family,
                            t.items.c.lease_token == holder.token,
                            t.items.c.state == PROCESSING,
                        )
                        .values(lease_until=0, run_after=0)
                    )
                    await conn.execute(
                        update(t.target_lanes)
                        .where(
                            t.target_lanes.c.family == self.family,
                            t.target_lanes.c.holder_token == holder.token,
                        )
                        .values(lease_until=0)
                    )

            world.run(go())

        @rule()
        def reclaim(self) -> None:
            before = self.before

            async def go() -> int:
                async with world.engine.begin() as conn:
                    return await self.stores[self.owner].reclaim_expired(conn, self.family, QUEUE)

            count = world.run(go())
            expired = {
                i
                for i, r in before.items.items()
                if r.state == PROCESSING
                and r.lease_until is not None
                and r.lease_until < before.now
            }
            assert count == len(expired)
            after = self.snapshot()
            for item_id in expired:
                row = after.items[item_id]
                exhausted = before.items[item_id].attempt >= MAX_ATTEMPTS
                assert row.state == (DEAD if exhausted else PENDING)
                assert row.attempt == before.items[item_id].attempt

        @rule(holder=consumes(holders))
        def release(self, holder: Holder) -> None:
            before = self.before
            ids = sorted(holder.items)

            async def go() -> None:
                async with world.engine.begin() as conn:
                    await self.stores[holder.owner].release(
                        conn,
                        self.family,
                        holder.token,
                        ids,
                        target_keys={
                            i: c.target_key for i, c in holder.items.items() if c.target_key
                        },
                    )

            world.run(go())
            after = self.snapshot()
            for item_id in ids:
                if self.holds(before, holder, item_id, epoch=False):
                    assert after.items[item_id].state == PENDING
                    assert after.items[item_id].attempt == before.items[item_id].attempt
                else:
                    assert after.items[item_id] == before.items[item_id]

        @rule()
        def transfer_family(self) -> None:
            before = self.before
            to = "b" if self.owner == "a" else "a"
            live = any(
                r.state == PROCESSING and r.lease_until is not None and r.lease_until >= before.now
                for r in before.items.values()
            ) or any(
                h is not None and u is not None and u >= before.now
                for h, _, u in before.targets.values()
            )
            try:
                epoch = world.run(
                    transfer(world.engine, world.tables, self.family, to, timeout_s=0, poll_s=0)
                )
            except TransferBlocked:
                assert live, "the transfer was blocked with no live lease"
                return
            assert not live, "the transfer went through while a lease was live"
            assert epoch == before.epoch + 1
            self.owner = to

        def lanes_hold(self, snap: Snapshot) -> None:
            # a source lane runs only its head
            for lane in {r.lane_key for r in snap.items.values() if r.lane_key}:
                rows = sorted(
                    (r for r in snap.items.values() if r.lane_key == lane),
                    key=lambda r: r.lane_seq or 0,
                )
                running = [r for r in rows if r.state == PROCESSING]
                assert len(running) <= 1, f"lane {lane} runs {len(running)} items"
                for r in running:
                    earlier = [e for e in rows if (e.lane_seq or 0) < (r.lane_seq or 0)]
                    assert all(e.state not in OPEN for e in earlier)
                    if self.policy == "halt":
                        assert all(e.state == SUCCEEDED for e in earlier), "ran past a halt"
                # only the head is claimable, and a head never waits (it was promoted)
                head = snap.lane_heads[lane]
                for r in rows:
                    if r.state in (PENDING, TARGET_WAIT):
                        assert r.lane_seq == head, f"lane {lane}: {r.state} behind its head"
                    if r.state == WAITING:
                        assert (r.lane_seq or 0) > head, f"lane {lane}: its head is stranded"

        def targets_hold(self, snap: Snapshot) -> None:
            # a target lane never has two items in flight
            for key in {r.target_key for r in snap.items.values() if r.target_key}:
                flying = [
                    i
                    for i, r in snap.items.items()
                    if r.target_key == key and r.state == PROCESSING
                ]
                assert len(flying) <= 1, f"target {key} has {len(flying)} items in flight"
                # an item waiting for a target is never stranded: the lane is held, or one
                # of its items was promoted and will take it
                states = {r.state for r in snap.items.values() if r.target_key == key}
                if TARGET_WAIT in states:
                    holder_id = snap.targets.get(key, (None, None, None))[0]
                    assert holder_id is not None or PENDING in states, f"target {key} stranded"

        # -------------------------------------------------------------- invariants
        @invariant()
        def engine_invariants(self) -> None:
            if self.seen is None:
                return
            snap = self.fresh or self.snapshot()
            self.fresh = None
            previous = self.seen
            for item_id, row in snap.items.items():
                # attempts never decrease
                assert row.attempt >= self.known.get(item_id, 0), item_id
                self.known[item_id] = row.attempt
                # terminal states are final (and parked items move only by an operator)
                if item_id in self.final:
                    assert row == self.final[item_id], f"{item_id} left a final state"
                elif row.state in FINAL | PARKED:
                    self.final[item_id] = row
                if row.state == PROCESSING:
                    assert row.token is not None
            assert set(previous.items) <= set(snap.items)  # no item is ever lost
            self.lanes_hold(snap)
            self.targets_hold(snap)
            self.seen = snap

    EngineMachine.TestCase.settings = settings(
        max_examples=EXAMPLES[backend.name],
        stateful_step_count=30,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    run_state_machine_as_test(EngineMachine, settings=EngineMachine.TestCase.settings)
