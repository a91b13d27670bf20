"""The database clock: leases, expiry and every `*_at_ms` are read from the database, never
from a process's clock (processes on several hosts disagree; the database is one).

`db_now_ms()` is the clock as a SQL expression (epoch milliseconds, computed inside the
statement); `read_now_ms(conn_or_session)` reads it in the caller's transaction, through
`fast_sql` (straight to sqlite3 on the loop for SQLite).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.expression import FunctionElement
from sqlalchemy.types import BigInteger

from nexus.platform.db import fast_sql


class db_now_ms(FunctionElement[int]):
    """The database clock as integer epoch milliseconds, computed inside the statement."""

    type = BigInteger()
    inherit_cache = True
    name = "db_now_ms"


@compiles(db_now_ms)
def _db_now_generic(element: db_now_ms, compiler: Any, **kw: Any) -> str:
    return "db_now_ms()"  # only for str(statement); every real dialect has its own below


@compiles(db_now_ms, "sqlite")
def _db_now_sqlite(element: db_now_ms, compiler: Any, **kw: Any) -> str:
    # 'now' is stable within one sqlite3_step, so both halves read the same instant.
    return (
        "(CAST(strftime('%s','now') AS INTEGER) * 1000"
        " + CAST(substr(strftime('%f','now'), 4) AS INTEGER))"
    )


@compiles(db_now_ms, "mysql")
def _db_now_mysql(element: db_now_ms, compiler: Any, **kw: Any) -> str:
    # Sessions run with time_zone '+00:00' (see create_engine), so NOW(3) is UTC.
    return "CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)"


_NOW_MS = db_now_ms().select()


async def read_now_ms(on: AsyncConnection | AsyncSession) -> int:
    """The database clock in epoch milliseconds, read in `on`'s transaction."""
    conn = await on.connection() if isinstance(on, AsyncSession) else on
    return int((await fast_sql.execute(conn, _NOW_MS)).scalar_one())


async def db_now(on: AsyncConnection | AsyncSession) -> datetime:
    """The database clock as an aware UTC datetime."""
    return datetime.fromtimestamp(await read_now_ms(on) / 1000, tz=UTC)
