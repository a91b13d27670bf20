"""Org-scoped work (ADR 0067): each org's work is its own family, so two orgs never share a
lane; a store scoped to org A neither sees nor can claim org B's items (the claim CAS checks
the family's org, so even B's family key and epoch get nothing); operators act on their own
org's items only; a worker serving two orgs splits its executors between the orgs, not
between their queues."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from sqlalchemy import MetaData, select
from sqlalchemy.ext.asyncio import AsyncEngine

from nexus.contracts.roles import LogicalService
from nexus.platform.db.engine import create_engine, reading
from nexus.platform.workqueue import operate
from nexus.platform.workqueue.keys import family_key, installation_of, org_of
from nexus.platform.workqueue.stats import queue_stats
from nexus.platform.workqueue.store import (
    DEAD,
    SUCCESS,
    NewItem,
    Outcome,
    QueuePolicy,
    WorkStore,
)
from nexus.platform.workqueue.tables import WorkTables, work_tables
from nexus.platform.workqueue.worker import Worker, WorkerSettings
from tests.conftest import Backend

pytestmark = pytest.mark.asyncio(loop_scope="module")

A, B = "00D00000000000AAAA", "00D00000000000BBBB"
PACK = "routes:shop"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def db(backend: Backend) -> AsyncIterator[tuple[AsyncEngine, WorkTables]]:
    engine = create_engine(backend.url(LogicalService.INTEGRATION), application_name="org-test")
    tables = work_tables(MetaData(), "t_org_work")
    async with engine.begin() as conn:
        for table in tables.all:
            await conn.run_sync(table.create)
    yield engine, tables
    await engine.dispose()


async def test_a_family_key_leads_with_its_org_and_refuses_what_names_none() -> None:
    key = family_key(A, PACK)
    assert (key, org_of(key), installation_of(key)) == (f"{A}/{PACK}", A, PACK)
    for org, installation in (("", PACK), ("a/b", PACK), ("x" * 19, PACK), (A, ""), (A, "a/b")):
        with pytest.raises(ValueError, match="work family"):
            family_key(org, installation)
    long = family_key(A, "routes:" + "c" * 64)  # shortened stably, as the router and the
    assert len(long) == 64  # upgrade both name it
    assert long == family_key(A, "routes:" + "c" * 64) != family_key(A, "routes:" + "d" * 64)
    with pytest.raises(ValueError, match="not a work family key"):
        org_of("routes:shop")


async def test_a_store_of_org_a_never_sees_or_claims_org_b_work(
    db: tuple[AsyncEngine, WorkTables],
) -> None:
    engine, tables = db
    everyone = WorkStore(tables, owner="exec")
    only_a = WorkStore(tables, owner="exec", orgs=[A])
    fa, fb = family_key(A, "scope"), family_key(B, "scope")
    async with engine.begin() as conn:  # the same lane key in both orgs: two lanes
        await everyone.enqueue(conn, [NewItem(fa, "q", "a", lane_key="contact-1")])
        await everyone.enqueue(conn, [NewItem(fb, "q", "b", lane_key="contact-1")])
    async with reading(engine) as conn:
        assert set(await only_a.admitted_families(conn)) >= {fa}
        assert fb not in await only_a.admitted_families(conn)
        assert {q[0] for q in await only_a.active_queues(conn)} == {fa}
        epoch_b = (await everyone.admitted_families(conn))[fb]
    async with engine.begin() as conn:
        assert await only_a.claim(conn, fb, "q", epoch_b, 10) == []  # fenced in the CAS
        (mine,) = await only_a.claim(conn, fa, "q", 1, 10)
    assert mine.payload == "a"
    async with engine.begin() as conn:  # org A's head still runs: org B's lane is its own
        (theirs,) = await everyone.claim(conn, fb, "q", epoch_b, 10)
        assert theirs.payload == "b"
        await everyone.finish(conn, fb, epoch_b, theirs.token, [(theirs, SUCCESS)])
        await only_a.finish(conn, fa, 1, mine.token, [(mine, SUCCESS)])


async def test_an_operator_lists_replays_and_skips_only_their_org_items(
    db: tuple[AsyncEngine, WorkTables],
) -> None:
    engine, tables = db
    store = WorkStore(tables, owner="exec")
    fa, fb = family_key(A, "ops"), family_key(B, "ops")
    dead = Outcome(DEAD, "terminal", "refused")
    ids = {}
    for org, family in ((A, fa), (B, fb)):
        async with engine.begin() as conn:
            await store.enqueue(conn, [NewItem(family, "q", org, lane_key="lane")])
            epoch = (await store.admitted_families(conn))[family]
            (item,) = await store.claim(conn, family, "q", epoch, 1)
            await store.finish(conn, family, epoch, item.token, [(item, dead)])
            ids[org] = item.id
    async with engine.begin() as conn:
        listed = await operate.list_parked(conn, tables, org_id=A)
        assert {p.id for p in listed} == {ids[A]}
        halted = await operate.list_parked(conn, tables, org_id=A, halting_only=True)
        assert [p.id for p in halted] == [ids[A]]
        replayed = await operate.replay(conn, tables, [ids[B]], org_id=A)
        skipped = await operate.skip_head(conn, tables, ids[B], org_id=A)
    assert replayed.done == []
    assert [r.reason for r in replayed.refused] == [operate.NOT_FOUND]
    assert skipped.done == []
    assert [r.reason for r in skipped.refused] == [operate.NOT_FOUND]
    items = tables.items
    async with reading(engine) as conn:
        state = select(items.c.state).where(items.c.id == ids[B])
        assert (await conn.execute(state)).scalar_one() == DEAD  # untouched
    async with engine.begin() as conn:
        assert (await operate.skip_head(conn, tables, ids[B], org_id=B)).done == [ids[B]]


async def test_a_new_org_queue_follows_the_installation_policy(
    db: tuple[AsyncEngine, WorkTables],
) -> None:
    engine, tables = db
    store = WorkStore(tables, owner="exec")  # e.g. runtime-api, which sets no policy
    queues = tables.queues
    async with engine.begin() as conn:
        await store.enqueue(conn, [NewItem(family_key(A, "policy"), "q", "{}")])
        # the installation's workers start with their configured policy
        await store.apply_policy(
            conn, "policy", "q", QueuePolicy(max_attempts=3, lane_policy="skip")
        )
        await store.enqueue(conn, [NewItem(family_key(B, "policy"), "q", "{}")])
    async with reading(engine) as conn:
        rows = {
            r.family: (r.max_attempts, r.lane_policy)
            for r in await conn.execute(
                select(queues.c.family, queues.c.max_attempts, queues.c.lane_policy).where(
                    queues.c.family.in_([family_key(A, "policy"), family_key(B, "policy")])
                )
            )
        }
        stats = await queue_stats(conn, tables)
    assert rows == {family_key(A, "policy"): (3, "skip"), family_key(B, "policy"): (3, "skip")}
    assert "policy" not in {c.family for c in stats.counts}  # the policy row is not a queue


async def test_a_worker_splits_its_executors_between_orgs_not_their_queues() -> None:
    worker = Worker.__new__(Worker)  # only the round's ordering is under test
    worker.settings = WorkerSettings(idle_poll_ms=1000)
    worker._idle = {}
    worker._turn = 0
    busy = [(family_key(A, f"p{n}"), "q", 1, A) for n in range(4)]  # one org, four queues
    quiet = [(family_key(B, "p0"), "q", 1, B)]
    worker._queues = type("Q", (), {})()
    worker._queues.keys = busy + quiet
    worker._queues.epochs = {k[0]: 1 for k in busy + quiet}
    quanta: dict[str, int] = {}
    for family, _, _, share in worker._round_order(16):
        org = org_of(family)
        quanta[org] = quanta.get(org, 0) + share
    assert quanta == {A: 8, B: 8}  # per queue: 2 each for A's four, 8 for B's one
