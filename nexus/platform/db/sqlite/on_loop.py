"""SQLite calls on the event loop's own thread, for engines whose statements are short.

SQLAlchemy's async SQLite driver, aiosqlite, runs every call (each statement, fetch, BEGIN
and COMMIT) on a thread of its own per connection: the event loop queues the call, the thread
wakes, runs it, and hands the result back through the loop's self-pipe. Each round trip costs
two thread wake-ups and a GIL hand-over, which for the work engine's small indexed statements
is more than the statement itself; under load the hand-overs queue behind each other and
behind the loop (bench/RESULTS.md, 2026-11-30 second session: end to end at 500/s, p50 / p99
467-1,034 / 805-1,607 ms with aiosqlite, 289-371 / 501-597 ms with every call on the loop).

This module is shaped like the part of aiosqlite that SQLAlchemy's `aiosqlite` dialect uses
(`connect`, the connection's `cursor`/`commit`/`rollback`/`close`, its request queue for the
isolation level, and the cursor's `execute`/`fetch*`), but each coroutine runs its sqlite3
call at once, on the caller's thread. While a statement runs the loop does nothing else, so
it suits engines whose statements are short and whose writers take their turn first
(`sqlite_writes`: a writer then finds the write lock free instead of sleeping in SQLite's
busy handler on the loop). Engines that serve arbitrary queries keep aiosqlite (ADR 0049).
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Generator, Sequence
from types import SimpleNamespace
from typing import Any

from sqlalchemy.dialects.sqlite.aiosqlite import AsyncAdapt_aiosqlite_dbapi


class Cursor:
    def __init__(self, cursor: sqlite3.Cursor) -> None:
        self._cursor = cursor

    async def __aenter__(self) -> Cursor:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        self._cursor.close()

    async def execute(self, sql: str, parameters: Sequence[Any] = ()) -> Cursor:
        self._cursor.execute(sql, parameters)
        return self

    async def executemany(self, sql: str, parameters: Sequence[Sequence[Any]]) -> Cursor:
        self._cursor.executemany(sql, parameters)
        return self

    async def fetchall(self) -> list[Any]:
        return self._cursor.fetchall()

    async def fetchone(self) -> Any:
        return self._cursor.fetchone()

    async def fetchmany(self, size: int | None = None) -> list[Any]:
        return self._cursor.fetchmany(size or self._cursor.arraysize)

    async def close(self) -> None:
        self._cursor.close()

    async def nextset(self) -> None:
        return None

    @property
    def description(self) -> Any:
        return self._cursor.description

    @property
    def rowcount(self) -> int:
        return self._cursor.rowcount

    @property
    def lastrowid(self) -> int | None:
        return self._cursor.lastrowid

    @property
    def arraysize(self) -> int:
        return self._cursor.arraysize

    @arraysize.setter
    def arraysize(self, value: int) -> None:
        self._cursor.arraysize = value


class _AtOnce:
    """Stands in for aiosqlite's request queue, which the dialect uses to set the isolation
    level: the request runs as it is put."""

    def put_nowait(self, request: tuple[asyncio.Future[Any], Callable[[], Any]]) -> None:
        future, function = request
        try:
            future.set_result(function())
        except Exception as exc:  # noqa: BLE001 - handed to the awaiting caller
            future.set_exception(exc)


class Connection:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        self._connection: sqlite3.Connection | None = conn  # None once closed (as aiosqlite)
        self._tx = _AtOnce()
        self._thread = SimpleNamespace(daemon=True)  # the dialect marks aiosqlite's thread

    def __await__(self) -> Generator[None, None, Connection]:
        return self._opened().__await__()

    async def _opened(self) -> Connection:
        return self

    def cursor(self) -> Cursor:
        return Cursor(self._conn.cursor())

    async def commit(self) -> None:
        self._conn.commit()

    async def rollback(self) -> None:
        self._conn.rollback()

    async def close(self) -> None:
        self.stop()

    async def create_function(self, *args: Any, **kwargs: Any) -> None:
        self._conn.create_function(*args, **kwargs)

    def stop(self) -> None:
        self._connection = None
        self._conn.close()

    @property
    def isolation_level(self) -> str | None:
        return self._conn.isolation_level


def connect(database: str, **kwargs: Any) -> Connection:
    # the pool may close a connection from another thread (garbage collection at exit)
    kwargs["check_same_thread"] = False
    return Connection(sqlite3.connect(database, **kwargs))


_driver = SimpleNamespace(
    connect=connect,
    Connection=Connection,
    DatabaseError=sqlite3.DatabaseError,
    Error=sqlite3.Error,
    IntegrityError=sqlite3.IntegrityError,
    NotSupportedError=sqlite3.NotSupportedError,
    OperationalError=sqlite3.OperationalError,
    ProgrammingError=sqlite3.ProgrammingError,
    sqlite_version=sqlite3.sqlite_version,
    sqlite_version_info=sqlite3.sqlite_version_info,
)


def dbapi() -> AsyncAdapt_aiosqlite_dbapi:
    """The DBAPI module to hand `create_async_engine(module=...)` for a `sqlite+aiosqlite`
    URL."""
    return AsyncAdapt_aiosqlite_dbapi(_driver, sqlite3)  # type: ignore[arg-type]
