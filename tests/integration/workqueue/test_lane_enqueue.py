"""Enqueueing onto a source lane while a worker finishes its head: no deadlock, lane order
kept (on InnoDB an insert-or-ignore of the lane row before bumping it deadlocked with the
completion that advances the same lane)."""

from __future__ import annotations

import asyncio

import pytest

from nexus.platform.workqueue.store import SUCCEEDED, Claimed, NewItem
from nexus.platform.workqueue.worker import Worker
from tests.integration.workqueue.test_engine import Queue, all_final, fast, run_until
from tests.integration.workqueue.test_engine import queue as queue  # noqa: PLC0414  (fixture)

pytestmark = pytest.mark.asyncio(loop_scope="module")


async def test_enqueue_and_completion_on_one_lane_do_not_deadlock(queue: Queue) -> None:
    family = queue.family()
    senders, each = 3, 60
    executed: list[str] = []
    worker: Worker

    async def handler(item: Claimed) -> None:  # completes inside its own transaction
        async with queue.engine.begin() as conn:
            executed.append(item.payload)
            await worker.complete_in(conn, item)

    async def send(sender: int) -> None:
        for n in range(each):  # each in its own transaction, racing the completions
            await queue.enqueue([NewItem(family, "default", f"{sender}-{n}", lane_key="one")])

    worker = Worker(queue.engine, queue.store(), handler, fast(concurrency=8))
    running = asyncio.create_task(
        run_until(worker, lambda: all_final(queue, family, senders * each))
    )
    # before the fix, this raised OperationalError 1213 (deadlock) on MariaDB
    await asyncio.gather(*(send(s) for s in range(senders)))
    await running
    rows = await queue.rows(family)
    assert {r["state"] for r in rows.values()} == {SUCCEEDED}
    by_seq = sorted(rows.values(), key=lambda r: int(r["lane_seq"]))
    assert [int(r["lane_seq"]) for r in by_seq] == list(range(1, senders * each + 1))
    assert executed == [r["payload"] for r in by_seq]  # lane order, one at a time
    for s in range(senders):  # and each sender's items in the order it sent them
        mine = [p for p in executed if p.startswith(f"{s}-")]
        assert mine == [f"{s}-{n}" for n in range(each)]


async def test_keys_that_differ_only_in_case_are_different_lanes(queue: Queue) -> None:
    """MariaDB's default collation compares 'Acct-1' equal to 'acct-1': the two lanes merged
    (and enqueueing both in one batch raised KeyError). Keys now compare byte for byte."""
    family = queue.family()
    ids = await queue.enqueue(
        [
            NewItem(family, "default", "upper", lane_key="Acct-1", target_key="Target"),
            NewItem(family, "default", "lower", lane_key="acct-1", target_key="target"),
        ]
    )
    rows = await queue.rows(family)
    assert [rows[i]["lane_seq"] for i in ids] == [1, 1]  # each the head of its own lane
    both_held = asyncio.Event()
    held: list[str] = []

    async def handler(item: Claimed) -> None:  # both in flight at once: separate target lanes
        held.append(item.payload)
        if len(held) == 2:
            both_held.set()
        await asyncio.wait_for(both_held.wait(), timeout=10)

    worker = Worker(queue.engine, queue.store(), handler, fast(concurrency=4))
    await run_until(worker, lambda: all_final(queue, family, 2))
    assert sorted(held) == ["lower", "upper"]
    assert {r["state"] for r in (await queue.rows(family)).values()} == {SUCCEEDED}
