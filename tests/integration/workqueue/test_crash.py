"""Real worker processes: kill -9 mid-item, and a paused (SIGSTOP) holder coming back."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import time
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from sqlalchemy import MetaData, func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from nexus.contracts.roles import LogicalService
from nexus.platform.db.engine import create_engine, reading
from nexus.platform.workqueue.store import NewItem, WorkStore
from nexus.platform.workqueue.tables import WorkTables, work_tables
from tests.conftest import Backend
from tests.support.work_worker import effect_tables, spawn

pytestmark = pytest.mark.asyncio(loop_scope="module")
LEASE_MS = 1500


def start_worker(url: str, prefix: str, sleep_ms: int) -> subprocess.Popen[str]:
    return spawn(url, prefix, "me", LEASE_MS, sleep_ms).process


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def engine(backend: Backend) -> AsyncIterator[tuple[AsyncEngine, str]]:
    url = backend.url(LogicalService.INTEGRATION)
    engine = create_engine(url, application_name="crash-test")
    yield engine, url
    await engine.dispose()


async def prepare(engine: AsyncEngine, prefix: str, count: int) -> WorkTables:
    metadata = MetaData()
    tables = work_tables(metadata, prefix)
    effect_tables(metadata, prefix)
    async with engine.begin() as conn:
        await conn.run_sync(metadata.create_all)
        store = WorkStore(tables, owner="me")
        await store.ensure_queue(conn, "org1/fam", "default")
        await store.enqueue(conn, [NewItem("org1/fam", "default", str(i)) for i in range(count)])
    return tables


async def wait_all_in(engine: AsyncEngine, tables: WorkTables, state: str, count: int) -> None:
    items = tables.items
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        async with reading(engine) as conn:
            done = (
                await conn.execute(select(func.count()).where(items.c.state == state))
            ).scalar_one()
        if done == count:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"only {done} of {count} items {state}")


async def wait_between_writes(
    engine: AsyncEngine, tables: WorkTables, prefix: str, count: int
) -> None:
    """Until the holder's `count` handlers are mid-effect (their execution rows written) and
    a heartbeat has just committed: the moment to freeze it outside any transaction. (A
    process frozen inside a write transaction keeps its locks: on SQLite the whole file,
    which no lease can take back.)"""
    items, execution = tables.items, effect_tables(MetaData(), prefix)[1]
    deadline = time.monotonic() + 60
    renewed_from: int | None = None
    while time.monotonic() < deadline:
        async with reading(engine) as conn:
            started = (await conn.execute(select(func.count()).select_from(execution))).scalar_one()
            lease = (await conn.execute(select(func.max(items.c.lease_until)))).scalar_one()
        if started == count and renewed_from is None:
            renewed_from = lease
        elif renewed_from is not None and lease is not None and lease > renewed_from:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the holder never started its items and renewed their leases")


async def wait_effects_started(engine: AsyncEngine, prefix: str) -> None:
    """Until a handler is mid-effect (its execution row written; each takes `sleep_ms`): a
    loaded machine may start the worker's first claim late, so no fixed wait is enough."""
    execution = effect_tables(MetaData(), prefix)[1]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        async with reading(engine) as conn:
            if (await conn.execute(select(func.count()).select_from(execution))).scalar_one():
                return
        await asyncio.sleep(0.01)
    raise AssertionError("the worker never started an effect")


async def wait_all_succeeded(engine: AsyncEngine, tables: WorkTables, count: int) -> None:
    await wait_all_in(engine, tables, "succeeded", count)


async def test_a_killed_workers_items_are_reclaimed_and_done_once(
    engine: tuple[AsyncEngine, str],
) -> None:
    db, url = engine
    tables = await prepare(db, "crash_kill", 24)
    first = start_worker(url, "crash_kill", sleep_ms=400)
    await wait_effects_started(db, "crash_kill")  # it holds items, some mid-effect
    first.send_signal(signal.SIGKILL)
    first.communicate(timeout=10)
    second = start_worker(url, "crash_kill", sleep_ms=10)
    try:
        await wait_all_succeeded(db, tables, 24)
    finally:
        second.send_signal(signal.SIGTERM)
        second.communicate(timeout=20)
    effect, execution = effect_tables(MetaData(), "crash_kill")
    items = tables.items
    async with reading(db) as conn:
        effects = (await conn.execute(select(func.count()).select_from(effect))).scalar_one()
        reclaimed = list(
            await conn.execute(
                select(items.c.attempt, items.c.reclaims).where(items.c.reclaims > 0)
            )
        )
        pids = {r[0] for r in await conn.execute(select(execution.c.pid))}
    assert effects == 24  # every effect exactly once (the effect is keyed by the work id)
    assert reclaimed, "the killed worker held items: they must have been reclaimed"
    assert all(attempt == 2 and reclaims == 1 for attempt, reclaims in reclaimed)
    assert first.pid in pids
    assert second.pid in pids


async def test_a_paused_holder_cannot_finish_what_was_reclaimed(
    engine: tuple[AsyncEngine, str],
) -> None:
    db, url = engine
    tables = await prepare(db, "crash_pause", 8)
    paused = start_worker(url, "crash_pause", sleep_ms=2500)
    await wait_between_writes(db, tables, "crash_pause", 8)
    paused.send_signal(signal.SIGSTOP)  # a GC pause, a frozen VM: it still thinks it holds
    other = start_worker(url, "crash_pause", sleep_ms=10)
    try:
        await wait_all_succeeded(db, tables, 8)
    finally:
        paused.send_signal(signal.SIGCONT)
        await asyncio.sleep(2.5)  # its executors finish, its heartbeat and flush are fenced
        for process in (paused, other):
            process.send_signal(signal.SIGTERM)
        reports = [
            json.loads(p.communicate(timeout=20)[0].strip().splitlines()[-1])
            for p in (paused, other)
        ]
    items = tables.items
    async with reading(db) as conn:
        rows = list(await conn.execute(select(items.c.state, items.c.reclaims)))
    assert {state for state, _ in rows} == {"succeeded"}
    assert reports[0]["lost"] > 0  # the paused holder learned it had lost its leases
    assert reports[0]["succeeded"] + reports[1]["succeeded"] == 8  # never counted twice
