"""The cross-process step of the SQLite write queue: a `flock` handed over without polling."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from nexus.platform.sqlite_writes import _FileLock

pytestmark = pytest.mark.asyncio


async def test_a_waiter_gets_the_lock_the_moment_the_holder_lets_go(tmp_path: Path) -> None:
    path = str(tmp_path / "db-writers.lock")
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
    path = str(tmp_path / "db-writers.lock")
    holder, waiter, third = _FileLock(path), _FileLock(path), _FileLock(path)
    assert holder.try_acquire()
    assert await waiter.acquire(0.1) is False  # gave up: the caller goes ahead without it
    holder.release()
    await asyncio.sleep(0.1)  # the abandoned waiter thread got it and let go at once
    assert third.try_acquire()
    third.release()


async def test_a_cancelled_wait_never_holds_the_lock(tmp_path: Path) -> None:
    path = str(tmp_path / "db-writers.lock")
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
