"""SQLite writers of one process queue for the write lock in FIFO order, and a transaction that
ends in any way (commit, rollback, error, cancellation) lets the next writer in at once."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from sqlalchemy import text
from sqlalchemy.exc import PendingRollbackError
from sqlalchemy.ext.asyncio import AsyncEngine

from nexus.platform.db.engine import create_engine

pytestmark = pytest.mark.asyncio(loop_scope="module")

BUSY_TIMEOUT_MS = 3000


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def engines(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[list[AsyncEngine]]:
    path: Path = tmp_path_factory.mktemp("gate") / "db.sqlite3"
    made = [
        create_engine(
            f"sqlite+aiosqlite:///{path}",
            application_name=f"gate-{n}",
            sqlite_busy_timeout_ms=BUSY_TIMEOUT_MS,
        )
        for n in range(2)
    ]
    async with made[0].begin() as conn:
        await conn.execute(text("CREATE TABLE t (n INTEGER, who TEXT)"))
    yield made
    for engine in made:
        await engine.dispose()


async def write(engine: AsyncEngine, who: str, hold_s: float = 0.0) -> float:
    """One write transaction; returns how long it waited to begin."""
    started = time.perf_counter()
    async with engine.begin() as conn:
        waited = time.perf_counter() - started
        await conn.execute(text("INSERT INTO t (n, who) VALUES (1, :w)"), {"w": who})
        await asyncio.sleep(hold_s)
    return waited


async def test_writers_of_two_engines_take_turns_in_arrival_order(
    engines: list[AsyncEngine],
) -> None:
    first = asyncio.create_task(write(engines[0], "first", hold_s=0.3))
    await asyncio.sleep(0.05)
    waiters = []
    for n in range(6):
        waiters.append(asyncio.create_task(write(engines[n % 2], f"w{n}")))
        await asyncio.sleep(0.01)
    waited = await asyncio.gather(first, *waiters)
    async with engines[1].connect() as conn:
        order = [r[0] for r in await conn.execute(text("SELECT who FROM t ORDER BY rowid"))]
    assert order[-7:] == ["first", *[f"w{n}" for n in range(6)]]
    assert max(waited) < 0.3 + 1.0  # nobody was starved


@pytest.mark.parametrize("ending", ["rollback", "error", "cancelled", "invalidated"])
async def test_any_end_of_a_transaction_lets_the_next_writer_in(
    engines: list[AsyncEngine], ending: str
) -> None:
    async def holder() -> None:
        async with engines[0].begin() as conn:
            await conn.execute(text("INSERT INTO t (n, who) VALUES (2, 'holder')"))
            if ending == "rollback":
                await conn.rollback()
                return
            if ending == "error":
                raise LookupError("the use case failed")
            if ending == "invalidated":  # the connection is discarded mid-transaction
                await conn.invalidate()
                return
            await asyncio.sleep(30)  # cancelled here, mid-transaction

    task = asyncio.create_task(holder())
    await asyncio.sleep(0.1)
    if ending == "cancelled":
        task.cancel()
    if ending == "rollback":
        await task
    else:  # an invalidated connection's transaction block ends in PendingRollbackError
        with pytest.raises((LookupError, asyncio.CancelledError, PendingRollbackError)):
            await task
    waited = await write(engines[1], f"after-{ending}")
    assert waited < 1.0  # not the busy timeout of a gate left held
    async with engines[1].connect() as conn:
        holders = (await conn.execute(text("SELECT count(*) FROM t WHERE n = 2"))).scalar_one()
    assert holders == 0  # the holder's write was rolled back in every case
