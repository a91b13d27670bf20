"""`fast_sql.execute` gives what `conn.execute` gives (rows, rowcounts, expanding IN lists,
literal binds, executemany, bind processors, the database clock), and on an on-loop SQLite
connection it never goes through SQLAlchemy's cursor execution."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import (
    Boolean,
    Column,
    Integer,
    MetaData,
    String,
    Table,
    bindparam,
    event,
    insert,
    select,
    update,
)
from sqlalchemy.ext.asyncio import AsyncConnection

from nexus.platform import fast_sql
from nexus.platform.db import create_engine, db_now_ms

pytestmark = pytest.mark.asyncio

metadata = MetaData()
things = Table(
    "things",
    metadata,
    Column("id", String(20), primary_key=True),
    Column("org", String(20), nullable=False),
    Column("n", Integer, nullable=False),
    Column("on", Boolean, nullable=False),
)
INSERT = insert(things)
PICK = (
    select(things.c.id, things.c.n, things.c.on)
    .where(
        things.c.org == bindparam("b_org"),
        things.c.id.in_(bindparam("b_ids", expanding=True)),
        things.c.n >= 0,  # a literal bind
    )
    .order_by(things.c.id)
)
BUMP = (
    update(things)
    .where(things.c.org == bindparam("b_org"), things.c.on == bindparam("b_on"))
    .values(n=things.c.n + bindparam("b_by"))
)
NOW = db_now_ms().select()


async def exercise(conn: AsyncConnection, run: Any) -> list[Any]:
    seen: list[Any] = []
    await run(
        conn,
        INSERT,
        [
            {"id": f"t{i}", "org": "o1" if i < 4 else "o2", "n": i, "on": i % 2 == 0}
            for i in range(6)
        ],
    )
    picked = await run(conn, PICK, {"b_org": "o1", "b_ids": ["t0", "t2", "t3", "t5"]})
    seen.append([(r.id, r.n, bool(r.on)) for r in picked])
    bumped = await run(conn, BUMP, {"b_org": "o1", "b_on": True, "b_by": 10})
    seen.append(bumped.rowcount)
    picked = await run(conn, PICK, {"b_org": "o1", "b_ids": ["t0", "t1", "t2"]})
    seen.append([(r[0], r[1]) for r in picked])
    empty = await run(conn, PICK, {"b_org": "o2", "b_ids": ["t0"]})
    seen.append(list(empty))
    now = (await run(conn, NOW)).scalar_one()
    seen.append(int(now) > 1_700_000_000_000)  # epoch ms from the database clock
    return seen


async def through_sqlalchemy(conn: AsyncConnection, statement: Any, params: Any = None) -> Any:
    return await conn.execute(statement, params)


async def run_on(tmp_path: Path, name: str, *, on_loop: bool, run: Any) -> tuple[list[Any], int]:
    engine = create_engine(
        f"sqlite+aiosqlite:///{tmp_path / name}", application_name="t", sqlite_on_loop=on_loop
    )
    executed = 0

    def count(_conn: object, _cursor: object, statement: str, *_rest: object) -> None:
        nonlocal executed
        if not statement.startswith(
            "BEGIN"
        ):  # the writer's BEGIN IMMEDIATE (db.py) is SQLAlchemy's
            executed += 1

    try:
        async with engine.begin() as conn:
            await conn.run_sync(metadata.create_all)
        event.listen(engine.sync_engine, "before_cursor_execute", count)
        async with engine.begin() as conn:
            return await exercise(conn, run), executed
    finally:
        await engine.dispose()


async def test_the_fast_path_answers_as_sqlalchemy_does(tmp_path: Path) -> None:
    expected, through = await run_on(tmp_path, "a.db", on_loop=True, run=through_sqlalchemy)
    fast, skipped = await run_on(tmp_path, "b.db", on_loop=True, run=fast_sql.execute)
    fallback, _ = await run_on(tmp_path, "c.db", on_loop=False, run=fast_sql.execute)
    assert expected == [
        [("t0", 0, True), ("t2", 2, True), ("t3", 3, False)],
        2,
        [("t0", 10), ("t1", 1), ("t2", 12)],
        [],
        True,
    ]
    assert fast == expected
    assert fallback == expected  # not on the loop (aiosqlite): plain conn.execute
    assert through > 0
    assert skipped == 0  # the on-loop connection ran every statement on sqlite3 directly


async def test_statements_built_per_call_do_not_pile_up(tmp_path: Path) -> None:
    """A store made per call (an operator action) builds its statements anew each time:
    the compiled cache keeps at most `COMPILED_MAX` of them, not every one ever seen."""
    engine = create_engine(
        f"sqlite+aiosqlite:///{tmp_path / 'd.db'}", application_name="t", sqlite_on_loop=True
    )
    try:
        async with engine.begin() as conn:
            await conn.run_sync(metadata.create_all)
            for n in range(fast_sql.COMPILED_MAX + 50):
                fresh = select(things.c.id).where(things.c.n == bindparam("b_n"))
                assert list(await fast_sql.execute(conn, fresh, {"b_n": n})) == []
        assert len(fast_sql._compiled) <= fast_sql.COMPILED_MAX
    finally:
        await engine.dispose()
