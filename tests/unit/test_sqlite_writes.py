"""The SQLite write queue: a free turn is taken without a trip through the event loop, a
held one is waited for in order and given up after its timeout; the cross-process step, a
`flock`, is handed over without polling."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from nexus.platform.db.sqlite.writes import _FileLock, write_turn

pytestmark = pytest.mark.asyncio
ROOT = Path(__file__).resolve().parents[2]


async def test_a_free_turn_is_taken_without_yielding_to_the_loop(tmp_path: Path) -> None:
    database = str(tmp_path / "db.sqlite3")
    ran: list[str] = []
    asyncio.get_running_loop().call_soon(ran.append, "another callback")
    async with write_turn(database, 5.0):
        # nothing else ran before the turn was ours: on a busy loop each trip is milliseconds
        # in which the turn stands idle while every writer of the file queues behind it
        assert ran == []
    await asyncio.sleep(0)
    assert ran == ["another callback"]


async def test_a_held_turn_is_waited_for_in_order_and_given_up_after_its_timeout(
    tmp_path: Path,
) -> None:
    database = str(tmp_path / "db.sqlite3")
    order: list[str] = []

    async def writer(name: str, timeout_s: float) -> None:
        async with write_turn(database, timeout_s):
            order.append(name)
            await asyncio.sleep(0.05)

    async with write_turn(database, 5.0):
        waiting = [asyncio.create_task(writer(name, 5.0)) for name in ("first", "second")]
        await asyncio.sleep(0.1)
        assert order == []  # both wait while the turn is held
        loop = asyncio.get_running_loop()
        started = loop.time()
        await writer("impatient", 0.05)  # no turn within its timeout: goes ahead without one
        assert loop.time() - started < 1.0
        assert order == ["impatient"]
    await asyncio.gather(*waiting)
    assert order == ["impatient", "first", "second"]


async def test_a_waiter_gets_the_lock_the_moment_the_holder_lets_go(tmp_path: Path) -> None:
    path = str(tmp_path / "db")
    holder, waiter = _FileLock(path), _FileLock(path)  # two open files: as two processes
    assert holder.try_acquire()
    assert not waiter.try_acquire()
    loop = asyncio.get_running_loop()
    waiting = asyncio.create_task(waiter.acquire(5.0))
    await asyncio.sleep(0.2)
    assert not waiting.done()  # blocked while the holder holds
    released = loop.time()
    holder.release()
    assert await waiting
    assert loop.time() - released < 0.1  # woken by the release, not by a poll
    assert not holder.try_acquire()  # the waiter holds it now
    waiter.release()
    assert holder.try_acquire()
    holder.release()


async def test_a_wait_that_timed_out_never_holds_the_lock(tmp_path: Path) -> None:
    path = str(tmp_path / "db")
    holder, waiter, third = _FileLock(path), _FileLock(path), _FileLock(path)
    assert holder.try_acquire()
    assert await waiter.acquire(0.1) is False  # gave up: the caller goes ahead without it
    holder.release()
    await asyncio.sleep(0.1)  # the abandoned waiter thread got it and let go at once
    assert third.try_acquire()
    third.release()


async def test_a_cancelled_wait_never_holds_the_lock(tmp_path: Path) -> None:
    path = str(tmp_path / "db")
    holder, waiter, third = _FileLock(path), _FileLock(path), _FileLock(path)
    assert holder.try_acquire()
    waiting = asyncio.create_task(waiter.acquire(5.0))
    await asyncio.sleep(0.1)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    holder.release()
    await asyncio.sleep(0.1)
    assert third.try_acquire()
    third.release()


async def test_a_process_waiting_for_the_turn_still_exits_when_told_to(tmp_path: Path) -> None:
    """A role stopped while another process holds the write turn exits at once; its waiter
    thread (blocked in the kernel) does not keep the interpreter alive."""
    path = str(tmp_path / "db")
    holder = _FileLock(path)
    assert holder.try_acquire()
    script = (
        "import asyncio\n"
        "from nexus.platform.db.sqlite.writes import _FileLock\n"
        "async def main():\n"
        f"    waiting = asyncio.create_task(_FileLock({path!r}).acquire(60.0))\n"
        "    await asyncio.sleep(0.3)\n"
        "    print('waiting' if not waiting.done() else 'got it', flush=True)\n"
        "asyncio.run(main())\n"
    )
    try:
        done = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-c", script],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=10,
        )
    finally:
        holder.release()
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "waiting"
