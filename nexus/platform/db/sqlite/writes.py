"""One queue for SQLite write transactions on one database file: in-process, then across
processes.

SQLite admits one writer at a time. A connection that finds the write lock taken waits in
SQLite's busy handler, which sleeps in growing steps (1, 2, 5, ... 100 ms) and retries; a
waiter keeps waking up to find the lock taken again and waits for tens to hundreds of
milliseconds while the lock is free most of the time (measured: claim rounds and webhook acks
of 0.4-1 s with the integration loops running; Runtime's accepts and executions, two
processes on one file, the same).

So a write transaction first takes its turn, in two steps, and gives it back once it has
committed or rolled back:
1. an asyncio lock shared by every engine of this process on the same file (per event loop):
   this process's writers queue in FIFO order and start the moment the previous one is done;
2. an exclusive `flock` on `<database>-writers.lock`, shared by every process that writes the
   file: a waiting process blocks in the kernel (on a small thread of its own, never on the
   event loop) and is woken the moment the holder lets go, instead of polling.
Then `BEGIN IMMEDIATE` finds the write lock free. If a step cannot be had within the busy
timeout (a holder that never finished), the transaction goes ahead without it and meets
SQLite's busy handler, exactly as before: the queue only ever shortens waits. A process that
dies holding the `flock` loses it with its file descriptor; one that is stopped holding it
(SIGSTOP, a frozen cgroup) is killed by the next waiter after a bound (`fencing.py`), since
nothing else can end a stopped process's transaction.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import queue
import threading
import weakref
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy.util import await_only

from nexus.platform.db.sqlite.fencing import fence_stopped_holders, turn_lock_path

_GATE_KEY = "nexus_sqlite_write_gate"
#: Per event loop (a lock belongs to one loop), per database file.
_locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, asyncio.Lock]] = (
    weakref.WeakKeyDictionary()
)
_files: dict[str, _FileLock] = {}
_files_mutex = threading.Lock()
#: How often a process waiting for another process's turn checks that the holder runs.
FENCE_CHECK_S = 0.1


class _Waiters:
    """Daemon threads where a process waits for another process's turn to end. Not a
    `ThreadPoolExecutor`: the interpreter joins those at exit, so a role told to stop while
    another process held the turn could not exit until that process let go."""

    def __init__(self, size: int) -> None:
        self._requests: queue.SimpleQueue[tuple[Callable[[], bool], Callable[..., Any]]] = (
            queue.SimpleQueue()
        )
        for n in range(size):
            threading.Thread(target=self._serve, name=f"sqlite-turn-{n}", daemon=True).start()

    def _serve(self) -> None:
        while True:
            function, answer = self._requests.get()
            try:
                result: Any = function()
            except BaseException as exc:  # noqa: BLE001 - handed to the waiting coroutine
                answer(None, exc)
            else:
                answer(result, None)

    def run(self, function: Callable[[], bool]) -> asyncio.Future[bool]:
        """`function()` on a waiter thread; its result as a future of the running loop."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[bool] = loop.create_future()

        def settle(result: Any, error: BaseException | None) -> None:
            if future.done():
                return
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(result)

        def answer(result: Any, error: BaseException | None) -> None:
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(settle, result, error)

        self._requests.put((function, answer))
        return future


#: Where a process waits for another process's turn to end (one waiter per loop and file).
_waiters = _Waiters(4)


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


@dataclass
class _Wait:
    granted: bool = False
    abandoned: bool = False


class _FileLock:
    """The cross-process step: an exclusive `flock` on one lock file next to the database."""

    def __init__(self, database: str) -> None:
        self.database = database
        self.fd = os.open(turn_lock_path(database), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        self._mutex = threading.Lock()

    def try_acquire(self) -> bool:
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True

    async def acquire(self, timeout_s: float) -> bool:
        """Wait (on a waiter thread) for the lock; False after `timeout_s`. Every
        `FENCE_CHECK_S` of waiting, a holder stopped past its bound is killed (`fencing`).
        A wait that ends after its caller gave up lets go at once, so an abandoned wait
        never holds it."""
        if self.try_acquire():
            return True
        wait = _Wait()
        future = _waiters.run(lambda: self._block(wait))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        try:
            while True:
                step = min(deadline - loop.time(), FENCE_CHECK_S)
                if step <= 0:
                    raise TimeoutError
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(step):  # not `wait_for`: no extra loop trip
                        return await asyncio.shield(future)  # between grant and writer
                fence_stopped_holders(self.database)
        except TimeoutError:
            self._abandon(wait)
            return False
        except asyncio.CancelledError:
            self._abandon(wait)
            raise

    def _abandon(self, wait: _Wait) -> None:
        with self._mutex:
            if wait.granted:
                self.release()
            wait.abandoned = True

    def _block(self, wait: _Wait) -> bool:
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        with self._mutex:
            if wait.abandoned:
                fcntl.flock(self.fd, fcntl.LOCK_UN)
                return False
            wait.granted = True
            return True

    def release(self) -> None:
        fcntl.flock(self.fd, fcntl.LOCK_UN)


def _file_lock(database: str) -> _FileLock | None:
    """The lock file of a database file (none for in-memory databases)."""
    if database.startswith("memory:"):
        return None
    with _files_mutex:
        lock = _files.get(database)
        if lock is None:
            try:
                lock = _files[database] = _FileLock(database)
            except OSError:
                return None  # a read-only directory: SQLite's busy handler only
        return lock


@dataclass
class _Turn:
    lock: asyncio.Lock
    file: _FileLock | None

    def release(self) -> None:
        try:
            if self.file is not None:
                self.file.release()
        finally:
            if self.lock.locked():
                self.lock.release()


async def _take_turn(database: str, timeout_s: float) -> _Turn | None:
    lock = _lock(database)
    if lock is None:
        return None
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    try:
        # not `wait_for`: it runs the acquire as a task of its own, one trip through the loop
        # even when the lock is free, and on a busy loop each trip is milliseconds that the
        # turn stands idle while every writer queues behind it (ADR 0057)
        async with asyncio.timeout(timeout_s):
            await lock.acquire()
    except TimeoutError:
        return None  # a stuck holder in this process: SQLite's own busy handling
    file = _file_lock(database)
    try:
        if file is not None and not await file.acquire(max(0.0, deadline - loop.time())):
            file = None  # another process holds on: go ahead, meet it in SQLite
    except BaseException:
        lock.release()
        raise
    return _Turn(lock, file)


def enter_write(conn: Any, database: str, timeout_s: float) -> None:
    """Called by the engine's `begin` hook before `BEGIN IMMEDIATE`."""
    turn = await_only(_take_turn(database, timeout_s)) if _lock(database) is not None else None
    if turn is not None:
        conn.info[_GATE_KEY] = turn


def leave_write(conn: Any, *, end: str | None) -> None:
    """Called on commit and rollback (`end`: the DBAPI method, run here first so the next
    writer starts after it, not during it; SQLAlchemy's own call then finds no transaction
    and does nothing), and with `end=None` when BEGIN itself failed."""
    turn: _Turn | None = conn.info.pop(_GATE_KEY, None)
    if turn is None:
        return
    try:
        if end is not None:
            getattr(conn.connection, end)()
    finally:
        turn.release()


@contextlib.asynccontextmanager
async def write_turn(database: str, timeout_s: float) -> AsyncIterator[None]:
    """This process's turn to write `database`, for a write transaction that runs off the
    event loop (a whole transaction on a worker thread): the thread's `BEGIN IMMEDIATE` then
    finds the lock free instead of sleeping in SQLite's busy handler. Same fallback as
    `enter_write`: no turn within the timeout, go ahead."""
    turn = await _take_turn(database, timeout_s)
    try:
        yield
    finally:
        if turn is not None:
            turn.release()


def release_abandoned(info: dict[Any, Any]) -> None:
    """Called when a connection goes back to the pool or is discarded: a transaction that
    never reached commit or rollback (its task was cancelled) must not keep the queue."""
    turn: _Turn | None = info.pop(_GATE_KEY, None)
    if turn is not None:
        turn.release()
