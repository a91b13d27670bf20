"""A process stopped inside a SQLite write transaction cannot stall the file's other writers
beyond a bound (issue 25, point 1): the next writer that waits for the turn finds the holder
stopped and kills it, the killed transaction leaves nothing behind, and the write goes on in
well under a second. A holder that is merely slow, or a stopped process that holds no turn,
is left alone."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from nexus.platform.db.engine import create_engine
from nexus.platform.db.sqlite.fencing import STOPPED_BOUND_S
from tests.support.commands import process_state

pytestmark = pytest.mark.asyncio(loop_scope="module")
ROOT = Path(__file__).resolve().parents[2]
BUSY_TIMEOUT_MS = 5000

#: Another process writing the file through a Nexus engine: it inserts `who`, prints
#: "holding" inside the open transaction, then stops itself (`stop`), sleeps (`slow`) or, with
#: `idle`, commits first and then stops.
HOLDER = """
import asyncio, os, signal, sys
from sqlalchemy import text
from nexus.platform.db.engine import create_engine

async def main(url, how):
    engine = create_engine(url, application_name="holder", sqlite_busy_timeout_ms=5000)
    async with engine.begin() as conn:
        await conn.execute(text("INSERT INTO t (who) VALUES (:w)"), {"w": how})
        if how != "idle":
            print("holding", flush=True)
            if how == "stop":
                os.kill(os.getpid(), signal.SIGSTOP)
            await asyncio.sleep(1.5)
    if how == "idle":
        print("holding", flush=True)
        os.kill(os.getpid(), signal.SIGSTOP)
    await engine.dispose()

asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def database(
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[tuple[str, AsyncEngine]]:
    path = tmp_path_factory.mktemp("fencing") / "db.sqlite3"
    url = f"sqlite+aiosqlite:///{path}"
    engine = create_engine(url, application_name="writer", sqlite_busy_timeout_ms=BUSY_TIMEOUT_MS)
    async with engine.begin() as conn:
        await conn.execute(text("CREATE TABLE t (who TEXT)"))
    yield url, engine
    await engine.dispose()


async def holding(url: str, how: str) -> subprocess.Popen[str]:
    process = subprocess.Popen(  # noqa: ASYNC220 - started once, read below
        [sys.executable, "-c", HOLDER, url, how],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    line = await asyncio.wait_for(asyncio.to_thread(process.stdout.readline), 30)
    assert line.strip() == "holding", process.stderr.read() if process.stderr else ""
    return process


async def ended(process: subprocess.Popen[str]) -> tuple[int, str]:
    """Exit status and stderr of a holder (killed first if it still runs past 10 s)."""
    try:
        _, err = await asyncio.to_thread(process.communicate, None, 10)
    except subprocess.TimeoutExpired:
        process.kill()
        _, err = await asyncio.to_thread(process.communicate)
    return process.returncode, err


def state(process: subprocess.Popen[str]) -> str:
    return process_state(process.pid)


async def until_stopped(process: subprocess.Popen[str]) -> None:
    async with asyncio.timeout(10):
        while state(process) != "T":  # noqa: ASYNC110 - polling another process
            await asyncio.sleep(0.01)


async def timed_write(engine: AsyncEngine, who: str) -> float:
    started = time.monotonic()
    async with engine.begin() as conn:
        await conn.execute(text("INSERT INTO t (who) VALUES (:w)"), {"w": who})
    return time.monotonic() - started


async def rows(engine: AsyncEngine) -> list[str]:
    async with engine.connect() as conn:
        return [r[0] for r in await conn.execute(text("SELECT who FROM t ORDER BY rowid"))]


async def test_a_writer_stopped_mid_transaction_is_killed_and_writes_go_on(
    database: tuple[str, AsyncEngine],
) -> None:
    url, engine = database
    holder = await holding(url, "stop")
    try:
        await until_stopped(holder)
        waited = await timed_write(engine, "after-stop")
    finally:
        status, err = await ended(holder)
    assert status == -signal.SIGKILL, err
    assert STOPPED_BOUND_S <= waited < STOPPED_BOUND_S + 0.5, waited  # bounded, not the freeze
    assert await rows(engine) == ["after-stop"]  # the killed transaction left nothing
    assert await timed_write(engine, "next") < 0.2  # and nothing stays wedged


async def test_a_slow_holder_that_runs_is_waited_for_not_killed(
    database: tuple[str, AsyncEngine],
) -> None:
    url, engine = database
    holder = await holding(url, "slow")
    try:
        waited = await timed_write(engine, "after-slow")
    finally:
        status, err = await ended(holder)
    assert status == 0, err
    assert waited > 1.0  # it waited out the 1.5 s transaction
    assert (await rows(engine))[-2:] == ["slow", "after-slow"]


async def test_a_stopped_process_that_holds_no_turn_is_left_alone(
    database: tuple[str, AsyncEngine],
) -> None:
    url, engine = database
    holder = await holding(url, "idle")
    try:
        await until_stopped(holder)
        assert await timed_write(engine, "beside-idle") < 0.2
        await asyncio.sleep(STOPPED_BOUND_S * 2)
        assert state(holder) == "T"  # still stopped, not killed
    finally:
        holder.send_signal(signal.SIGCONT)
        status, err = await ended(holder)
    assert status == 0, err
    assert (await rows(engine))[-2:] == ["idle", "beside-idle"]
