"""Whole write transactions straight on a kept sqlite3 connection, on the event loop's thread.

`SqliteWriter.run(work)` waits for this process's turn to write the file (`writes`), then
runs `BEGIN IMMEDIATE`, `work(sqlite3_connection)` and `COMMIT` on the connection itself:
SQLAlchemy's execution, transaction object and begin event cost about as much as SQLite's
own work for a small batch (docs/adr/0054). It runs on the loop, like the loops' engine
(docs/adr/0049), not on a writer thread: the turn was held from the moment it was granted
until the loop came back to the thread's answer, two trips through a busy loop around ~1 ms
of work, and every other writer of the file queued behind that (docs/adr/0057). The
connection is kept between transactions; one that fails is rolled back, closed and replaced.
Used by ingress's group commit (`integration/ingress/writer.py`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any, TypeVar

from sqlalchemy import Engine
from sqlalchemy.pool import PoolProxiedConnection

from nexus.platform.db.sqlite import writes

T = TypeVar("T")


class SqliteWriter:
    def __init__(
        self, engine: Engine, *, write_gate: str | None = None, turn_timeout_s: float = 5.0
    ) -> None:
        self.engine = engine  # a sync engine (`create_sqlite_sync_engine`): its pragmas
        self.write_gate = write_gate  # the file's in-process write queue (`writes`)
        self.turn_timeout_s = turn_timeout_s
        self._conn: PoolProxiedConnection | None = None

    @property
    def dialect(self) -> Any:
        return self.engine.dialect

    async def run(self, work: Callable[[Any], T]) -> T:
        """`work(sqlite3_connection)` in one write transaction; its result once committed."""
        if self.write_gate is None:
            return self._run(work)
        # queue with this process's other writers instead of meeting them in SQLite's busy
        # handler, whose sleeps were most of a webhook's ack time
        async with writes.write_turn(self.write_gate, self.turn_timeout_s):
            return self._run(work)

    def _run(self, work: Callable[[Any], T]) -> T:
        if self._conn is None:  # its pragmas are set by the engine's connect event; the
            self._conn = self.engine.raw_connection()  # driver in autocommit mode
        conn = self._conn
        sqlite: Any = conn.driver_connection
        try:
            sqlite.execute("BEGIN IMMEDIATE")
            try:
                result = work(sqlite)
                sqlite.execute("COMMIT")  # the caller hears of its work only once this returns
            except BaseException:
                if sqlite.in_transaction:
                    sqlite.execute("ROLLBACK")
                raise
        except BaseException:
            self._conn = None
            with contextlib.suppress(Exception):
                conn.invalidate()
            raise
        return result

    async def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()
            self._conn = None
        self.engine.dispose()
