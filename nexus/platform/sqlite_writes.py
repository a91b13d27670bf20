"""One in-process queue for SQLite write transactions on one database file.

SQLite admits one writer at a time. A connection that finds the write lock taken waits in
SQLite's busy handler, which sleeps in growing steps (1, 2, 5, ... 100 ms) and retries; with
several writers of one process taking turns (ingress group commit, receipt router, work
poller, completer, heartbeat), a waiter keeps waking up to find the lock taken again and
waits for hundreds of milliseconds while the lock is free most of the time (measured: claim
rounds and webhook acks of 0.4-1 s with the integration loops running).

So every write transaction of an engine first takes an asyncio lock shared by every engine of
this process on the same file (per event loop), and gives it back once it has committed or
rolled back: waiters queue in FIFO order and start the moment the previous writer is done. Another
process still meets SQLite's busy handler. If the lock cannot be had within the busy timeout
(a holder that never finished), the transaction goes ahead without it, exactly as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import AsyncIterator
from typing import Any

from sqlalchemy.util import await_only

_GATE_KEY = "nexus_sqlite_write_gate"
#: Per event loop (a lock belongs to one loop), per database file.
_locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, asyncio.Lock]] = (
    weakref.WeakKeyDictionary()
)


def _lock(database: str) -> asyncio.Lock | None:
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # a synchronous use of the engine: nothing to queue on
        return None
    locks = _locks.setdefault(loop, {})
    lock = locks.get(database)
    if lock is None:
        lock = locks[database] = asyncio.Lock()
    return lock


def enter_write(conn: Any, database: str, timeout_s: float) -> None:
    """Called by the engine's `begin` hook before `BEGIN IMMEDIATE`."""
    lock = _lock(database)
    if lock is None:
        return
    try:
        await_only(asyncio.wait_for(lock.acquire(), timeout_s))
    except TimeoutError:
        return  # a stuck holder: fall back to SQLite's own busy handling
    conn.info[_GATE_KEY] = lock


def leave_write(conn: Any, *, end: str | None) -> None:
    """Called on commit and rollback (`end`: the DBAPI method, run here first so the next
    writer starts after it, not during it; SQLAlchemy's own call then finds no transaction
    and does nothing), and with `end=None` when BEGIN itself failed."""
    lock = conn.info.pop(_GATE_KEY, None)
    if lock is None:
        return
    try:
        if end is not None:
            getattr(conn.connection, end)()
    finally:
        _release(lock)


@contextlib.asynccontextmanager
async def write_turn(database: str, timeout_s: float) -> AsyncIterator[None]:
    """This process's turn to write `database`, for a write transaction that runs off the
    event loop (a whole transaction on a worker thread): the thread's `BEGIN IMMEDIATE` then
    finds the lock free instead of sleeping in SQLite's busy handler behind this process's
    own writers. Same fallback as `enter_write`: no turn within the timeout, go ahead."""
    lock = _lock(database)
    if lock is None:
        yield
        return
    try:
        await asyncio.wait_for(lock.acquire(), timeout_s)
    except TimeoutError:
        yield
        return
    try:
        yield
    finally:
        _release(lock)


def release_abandoned(info: dict[Any, Any]) -> None:
    """Called when a connection goes back to the pool or is discarded: a transaction that
    never reached commit or rollback (its task was cancelled) must not keep the queue."""
    lock = info.pop(_GATE_KEY, None)
    if lock is not None:
        _release(lock)


def _release(lock: asyncio.Lock) -> None:
    if lock.locked():
        lock.release()
