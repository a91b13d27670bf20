"""Async engines, units of work and the database clock, for SQLite and MySQL/MariaDB/TiDB.

Only portable SQL is allowed here and in every repository: no `SKIP LOCKED`, no advisory
locks, no triggers, no stored procedures (TiDB honours none of them the same way). Claims are
compare-and-set updates; time for leases and expiry is read from the database (`db_now_ms`).

SQLite write transactions start with `BEGIN IMMEDIATE`, so a writer takes the write lock up
front and waits `busy_timeout` for it instead of failing to upgrade a read lock halfway
through a transaction; writers of one process queue for it in FIFO order first
(`sqlite_writes`). Read-only units of work use a plain deferred `BEGIN`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, event, text
from sqlalchemy import create_engine as sa_create_engine
from sqlalchemy.ext.asyncio import (
    AsyncConnection,
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)

from nexus.platform.db.sqlite import checkpoints as sqlite_checkpoints
from nexus.platform.db.sqlite import on_loop as sqlite_on_loop
from nexus.platform.db.sqlite import writes as sqlite_writes
from nexus.platform.settings import parse_database_url

_READONLY_OPTION = "nexus_readonly"
#: `PRAGMA synchronous` values an engine accepts (never interpolated from elsewhere).
SYNCHRONOUS = {"NORMAL": "NORMAL", "FULL": "FULL"}


def create_engine(
    url: str,
    *,
    application_name: str,
    pool_size: int = 10,
    connect_timeout_seconds: float = 5.0,
    sqlite_busy_timeout_ms: int = 5000,
    idle_write_transaction_timeout_seconds: int = 60,
    sqlite_on_loop: bool = False,
    sqlite_synchronous: str = "NORMAL",
) -> AsyncEngine:
    """An engine for one logical service, labelled with the process's role.

    `sqlite_on_loop`: on SQLite, run each call on the event loop's thread instead of
    aiosqlite's (`sqlite_on_loop`); for engines whose statements are all short."""
    parsed = parse_database_url(url)
    if parsed.drivername.startswith("sqlite"):
        return _sqlite_engine(
            url, parsed.database or "", sqlite_busy_timeout_ms, sqlite_on_loop, sqlite_synchronous
        )
    engine = create_async_engine(
        url,
        pool_size=pool_size,
        max_overflow=pool_size,
        pool_pre_ping=True,
        pool_recycle=1800,
        isolation_level="READ COMMITTED",
        connect_args={
            "program_name": application_name[:32],
            "init_command": "SET time_zone = '+00:00'",
            "connect_timeout": max(1, round(connect_timeout_seconds)),
            "charset": "utf8mb4",
        },
    )
    _mariadb_session(engine.sync_engine, idle_write_transaction_timeout_seconds)
    return engine


def _mariadb_session(engine: Engine, idle_write_seconds: int | None) -> None:
    """On MariaDB, each new connection keeps its IN lists as lists
    (`in_predicate_conversion_threshold = 0`: MariaDB rewrites a list of 1,000 values or more
    into a join with a derived table, and for the work engine's lane join, driven by the lane
    rows, it then read every lane and every item of the family: a completion of 1,000 lane
    heads took seconds instead of milliseconds), and gets `idle_write_transaction_timeout`
    when asked for. MySQL and TiDB have neither variable: left alone there."""

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute("SELECT VERSION()")
            if "mariadb" not in str(cursor.fetchone()[0]).lower():
                return
            cursor.execute("SET SESSION in_predicate_conversion_threshold = 0")
            if idle_write_seconds:
                cursor.execute(
                    f"SET SESSION idle_write_transaction_timeout = {int(idle_write_seconds)}"
                )
        finally:
            cursor.close()


def _sqlite_engine(
    url: str, database: str, busy_timeout_ms: int, on_loop: bool, synchronous: str
) -> AsyncEngine:
    if database != ":memory:":
        Path(database).parent.mkdir(parents=True, exist_ok=True)
    driver: dict[str, Any] = {"module": sqlite_on_loop.dbapi()} if on_loop else {}
    engine = create_async_engine(url, connect_args={"timeout": busy_timeout_ms / 1000}, **driver)
    gate = _write_gate(database) if database != ":memory:" else f"memory:{id(engine)}"
    _configure_sqlite(
        engine.sync_engine,
        busy_timeout_ms,
        write_gate=gate,
        database=database,
        synchronous=synchronous,
    )
    return engine


def _write_gate(database: str) -> str:
    return str(Path(database).resolve())


def sqlite_write_gate(url: str) -> str:
    """The key of the in-process write queue (`sqlite_writes`) of a SQLite database file."""
    if not is_sqlite_file(url):
        raise ValueError("a write gate needs a SQLite database file")
    return _write_gate(parse_database_url(url).database or "")


def is_sqlite_file(url: str) -> bool:
    parsed = parse_database_url(url)
    return parsed.drivername.startswith("sqlite") and parsed.database not in (None, "", ":memory:")


def create_sqlite_sync_engine(url: str, *, sqlite_busy_timeout_ms: int = 5000) -> Engine:
    """A synchronous engine on the same SQLite file as `url` (any SQLite driver name).

    For code that runs a whole transaction straight on a sqlite3 connection in one call:
    through aiosqlite every statement, BEGIN and COMMIT is its own round trip to the driver's
    thread, and on a busy machine each hop can cost hundreds of microseconds. Same pragmas as
    `create_engine`; the engine has no write queue of its own, so the caller takes its turn in
    the in-process write queue first (`sqlite_writes.write_turn` with `sqlite_write_gate(url)`),
    else it meets the other writers in SQLite's busy handler.
    """
    if not is_sqlite_file(url):
        raise ValueError("a synchronous SQLite engine needs a database file")
    parsed = parse_database_url(url)
    engine = sa_create_engine(
        parsed.set(drivername="sqlite+pysqlite"),
        connect_args={"timeout": sqlite_busy_timeout_ms / 1000, "check_same_thread": False},
    )
    _configure_sqlite(engine, sqlite_busy_timeout_ms, write_gate=None, database=parsed.database)
    return engine


def _configure_sqlite(
    engine: Engine,
    busy_timeout_ms: int,
    *,
    write_gate: str | None,
    database: str | None,
    synchronous: str = "NORMAL",
) -> None:
    """Pragmas, `BEGIN IMMEDIATE` for writers, with `write_gate` the in-process FIFO queue
    of write transactions on that file (`sqlite_writes`), and for a file `database` the
    process's background checkpoints when it has them (`sqlite_checkpoints`)."""
    path = _write_gate(database) if database and database != ":memory:" else None

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Take transaction control away from the driver; `_on_begin` issues BEGIN itself.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
        cursor.execute(f"PRAGMA synchronous={SYNCHRONOUS[synchronous]}")
        if path is not None:
            sqlite_checkpoints.configure(cursor, path)
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        if conn.get_execution_options().get(_READONLY_OPTION, False):
            conn.exec_driver_sql("BEGIN")
            return
        if write_gate is None:
            conn.exec_driver_sql("BEGIN IMMEDIATE")
            return
        sqlite_writes.enter_write(conn, write_gate, busy_timeout_ms / 1000)  # in-process FIFO
        try:
            conn.exec_driver_sql("BEGIN IMMEDIATE")
        except BaseException:
            sqlite_writes.leave_write(conn, end=None)
            raise

    if write_gate is None:
        return

    @event.listens_for(engine, "commit")
    def _on_commit(conn: Any) -> None:
        sqlite_writes.leave_write(conn, end="commit")

    @event.listens_for(engine, "rollback")
    def _on_rollback(conn: Any) -> None:
        sqlite_writes.leave_write(conn, end="rollback")

    @event.listens_for(engine.pool, "checkin")
    def _on_checkin(_dbapi_connection: Any, record: Any) -> None:
        sqlite_writes.release_abandoned(record.info)

    @event.listens_for(engine.pool, "invalidate")
    def _on_invalidate(_dbapi_connection: Any, record: Any, _exception: Any) -> None:
        sqlite_writes.release_abandoned(record.info)


def session_factory(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    return async_sessionmaker(engine, expire_on_commit=False, autoflush=False)


@asynccontextmanager
async def unit_of_work(
    sessions: async_sessionmaker[AsyncSession], *, readonly: bool = False
) -> AsyncIterator[AsyncSession]:
    """One transaction for one use case: commits when the block ends, rolls back on error.

    Only edges (a request dependency, a worker's per-job block) open units of work; services
    and repositories flush, never commit.
    """
    async with sessions() as session:
        await session.connection(execution_options={_READONLY_OPTION: readonly})
        try:
            yield session
            if readonly:
                await session.rollback()
            else:
                await session.commit()
        except BaseException:
            await session.rollback()
            raise


async def ping(engine: AsyncEngine) -> None:
    """Raise if the database cannot answer a trivial query."""
    async with engine.connect() as conn:
        await conn.execute(text("SELECT 1"))


def describe_backend(engine: AsyncEngine) -> str:
    """A log-safe name for the backend (never the URL: it may carry credentials)."""
    return f"{engine.dialect.name}+{engine.dialect.driver}"


@asynccontextmanager
async def reading(engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
    """A read-only connection-level transaction (a plain `BEGIN` on SQLite, so it never
    takes the write lock), rolled back at the end."""
    async with engine.connect() as conn:
        await conn.execution_options(**{_READONLY_OPTION: True})
        try:
            yield conn
        finally:
            await conn.rollback()
