"""The on-loop SQLite driver (`sqlite_on_loop`) behaves as aiosqlite does for what the
engines use: transactions, `BEGIN IMMEDIATE` writers, rowcounts, errors, the write queue
shared with an aiosqlite engine on the same file, and it never hands a call to a thread."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError

from nexus.platform.db.engine import create_engine

pytestmark = pytest.mark.asyncio


async def test_transactions_rowcounts_and_errors(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'db.sqlite3'}"
    engine = create_engine(url, application_name="t", sqlite_on_loop=True)
    try:
        async with engine.begin() as conn:
            await conn.execute(text("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT NOT NULL)"))
            await conn.execute(
                text("INSERT INTO t (id, v) VALUES (:id, :v)"),
                [{"id": n, "v": f"v{n}"} for n in range(5)],
            )
        async with engine.begin() as conn:
            changed = await conn.execute(text("UPDATE t SET v = 'x' WHERE id < 3"))
            assert changed.rowcount == 3

        async def delete_then_fail() -> None:
            async with engine.begin() as conn:
                await conn.execute(text("DELETE FROM t"))
                raise RuntimeError("roll back")

        with pytest.raises(RuntimeError):
            await delete_then_fail()
        with pytest.raises(IntegrityError):
            async with engine.begin() as conn:
                await conn.execute(text("INSERT INTO t (id, v) VALUES (1, 'dup')"))
        async with engine.connect() as conn:
            rows = (await conn.execute(text("SELECT id, v FROM t ORDER BY id"))).all()
        assert [tuple(r) for r in rows] == [(0, "x"), (1, "x"), (2, "x"), (3, "v3"), (4, "v4")]
    finally:
        await engine.dispose()


async def test_runs_on_the_loop_thread_and_queues_with_an_aiosqlite_engine(
    tmp_path: Path,
) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'db.sqlite3'}"
    on_loop = create_engine(url, application_name="a", sqlite_on_loop=True)
    threaded = create_engine(url, application_name="b")
    seen: set[int] = set()

    def record_thread(*_args: object) -> None:
        seen.add(threading.get_ident())

    try:
        async with on_loop.begin() as conn:
            await conn.execute(text("CREATE TABLE n (k INTEGER NOT NULL)"))
            raw = await conn.get_raw_connection()
            raw.driver_connection._conn.set_trace_callback(record_thread)  # type: ignore[union-attr]
            await conn.execute(text("SELECT 1"))
        assert seen == {threading.get_ident()}  # the loop's own thread

        async def add(engine: object, k: int) -> None:
            async with engine.begin() as conn:  # type: ignore[attr-defined]
                current = (await conn.execute(text("SELECT COUNT(*) FROM n"))).scalar_one()
                await asyncio.sleep(0)  # let the other writers try to interleave
                await conn.execute(text("INSERT INTO n (k) VALUES (:k)"), {"k": current})

        # every writer of both engines takes its turn: each sees the count before it
        await asyncio.gather(*(add(on_loop if n % 2 else threaded, n) for n in range(40)))
        async with on_loop.connect() as conn:
            ks = sorted((await conn.execute(text("SELECT k FROM n"))).scalars())
        assert ks == list(range(40))
    finally:
        await on_loop.dispose()
        await threaded.dispose()
