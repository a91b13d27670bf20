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
