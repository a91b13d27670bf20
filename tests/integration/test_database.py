"""The database platform on both backends: migrations, the database clock, units of work."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine

from nexus.contracts.roles import LogicalService
from nexus.platform.db.clock import db_now, db_now_ms, read_now_ms
from nexus.platform.db.engine import create_engine, session_factory, unit_of_work
from nexus.platform.migrations import head_revisions, migration_state, upgrade_to_head
from tests.conftest import Backend

pytestmark = pytest.mark.asyncio


@pytest_asyncio.fixture
async def engine(backend: Backend) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(backend.url(LogicalService.CATALOG), application_name="nexus-test")
    yield engine
    await engine.dispose()


async def test_every_service_history_migrates_from_empty_to_head(backend: Backend) -> None:
    for service in LogicalService:
        engine = create_engine(backend.url(service), application_name="nexus-test")
        try:
            before = await migration_state(engine, service)
            assert not before.at_head
            after = await upgrade_to_head(engine, service)
            assert after.at_head
            assert after.current == head_revisions(service)
            again = await upgrade_to_head(engine, service)  # idempotent
            assert again.current == after.current
        finally:
            await engine.dispose()


async def test_histories_are_independent_per_service(backend: Backend) -> None:
    """Each service records its position in its own version table, so histories never mix."""
    engine = create_engine(backend.url(LogicalService.RUNTIME), application_name="nexus-test")
    try:
        await upgrade_to_head(engine, LogicalService.RUNTIME)
        catalog_view = await migration_state(engine, LogicalService.CATALOG)
        assert catalog_view.current == frozenset()
        assert not catalog_view.at_head
    finally:
        await engine.dispose()


async def test_db_now_reads_the_database_clock(engine: AsyncEngine) -> None:
    sessions = session_factory(engine)
    async with unit_of_work(sessions, readonly=True) as session:
        first = await read_now_ms(session)
        aware = await db_now(session)
    assert abs(first - time.time() * 1000) < 5_000
    assert aware.tzinfo is not None
    assert abs(aware.timestamp() * 1000 - first) < 5_000


async def test_db_now_is_usable_inside_statements(engine: AsyncEngine) -> None:
    """The clock compiles into SQL, so a lease comparison never uses a process clock."""
    sessions = session_factory(engine)
    async with unit_of_work(sessions) as session:
        await session.execute(
            text("CREATE TABLE clock_probe (id INTEGER PRIMARY KEY, at_ms BIGINT)")
        )
        await session.execute(
            text("INSERT INTO clock_probe (id, at_ms) VALUES (1, :placeholder)").bindparams(
                placeholder=0
            )
        )
        compiled = db_now_ms().compile(dialect=engine.dialect)
        await session.execute(text(f"UPDATE clock_probe SET at_ms = {compiled} WHERE id = 1"))
        stored = (await session.execute(text("SELECT at_ms FROM clock_probe"))).scalar_one()
    assert abs(int(stored) - time.time() * 1000) < 5_000


async def test_unit_of_work_commits_on_success_and_rolls_back_on_error(
    engine: AsyncEngine,
) -> None:
    sessions = session_factory(engine)
    async with unit_of_work(sessions) as session:
        await session.execute(text("CREATE TABLE uow_probe (id INTEGER PRIMARY KEY)"))
    async with unit_of_work(sessions) as session:
        await session.execute(text("INSERT INTO uow_probe (id) VALUES (1)"))

    async def failing_use_case() -> None:
        async with unit_of_work(sessions) as session:
            await session.execute(text("INSERT INTO uow_probe (id) VALUES (2)"))
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        await failing_use_case()
    async with unit_of_work(sessions, readonly=True) as session:
        ids = (await session.execute(text("SELECT id FROM uow_probe ORDER BY id"))).scalars()
        assert list(ids) == [1]


async def test_connection_settings_per_backend(backend: Backend, engine: AsyncEngine) -> None:
    async with engine.connect() as conn:
        if backend.name == "sqlite":
            assert (await conn.execute(text("PRAGMA journal_mode"))).scalar() == "wal"
            assert (await conn.execute(text("PRAGMA foreign_keys"))).scalar() == 1
            assert (await conn.execute(text("PRAGMA busy_timeout"))).scalar() == 5000
        else:
            zone = (await conn.execute(text("SELECT @@session.time_zone"))).scalar()
            assert zone == "+00:00"
            rows = (
                await conn.execute(
                    text(
                        "SHOW SESSION VARIABLES WHERE Variable_name IN "
                        "('tx_isolation', 'transaction_isolation')"
                    )
                )
            ).all()
            assert rows
            assert {value for _name, value in rows} == {"READ-COMMITTED"}
            program = (
                await conn.execute(
                    text(
                        "SELECT ATTR_VALUE FROM performance_schema.session_connect_attrs "
                        "WHERE PROCESSLIST_ID = CONNECTION_ID() AND ATTR_NAME = 'program_name'"
                    )
                )
            ).scalar()
            # performance_schema is off by default in MariaDB; when on, the role is named.
            assert program in (None, "nexus-test")


@pytest.mark.mariadb_only
async def test_a_frozen_write_transaction_loses_its_locks_on_mariadb(backend: Backend) -> None:
    """A process that stops inside a write transaction (a paused VM) would keep its row locks
    forever, and no lease can take them back: the server closes it after the idle timeout."""
    url = backend.url(LogicalService.CATALOG)
    frozen = create_engine(url, application_name="frozen", idle_write_transaction_timeout_seconds=1)
    other = create_engine(url, application_name="other")
    try:
        async with other.begin() as conn:
            await conn.execute(
                text("CREATE TABLE IF NOT EXISTS idle_probe (id INT PRIMARY KEY, n INT)")
            )
            await conn.execute(text("DELETE FROM idle_probe"))
            await conn.execute(text("INSERT INTO idle_probe VALUES (1, 0)"))
        async with frozen.connect() as holder:
            assert (
                await holder.execute(text("SELECT @@session.idle_write_transaction_timeout"))
            ).scalar() == 1
            await holder.execute(text("UPDATE idle_probe SET n = 1 WHERE id = 1"))  # holds the lock
            await asyncio.sleep(3)  # "frozen": sends nothing
            async with other.begin() as conn:  # not blocked (innodb_lock_wait_timeout is 50 s)
                started = time.monotonic()
                await conn.execute(text("UPDATE idle_probe SET n = 2 WHERE id = 1"))
                assert time.monotonic() - started < 5
            with pytest.raises(DBAPIError):  # the frozen one's transaction is gone
                await holder.execute(text("SELECT n FROM idle_probe"))
        async with other.connect() as conn:
            assert (await conn.execute(text("SELECT n FROM idle_probe"))).scalar() == 2
    finally:
        await frozen.dispose()
        await other.dispose()
