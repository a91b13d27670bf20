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
from sqlalchemy.dialects import sqlite
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection

from nexus.integration.delivery.models import work
from nexus.integration.routing import router_repository as routing_repository
from nexus.integration.routing.models import connector_event
from nexus.platform.db import fast_sql
from nexus.platform.db.backend import insert_ignore, upsert
from nexus.platform.db.clock import db_now_ms
from nexus.platform.db.engine import create_engine
from nexus.platform.workqueue.store import ITEM_COLUMNS, WorkStore
from nexus.platform.workqueue.tables import work_tables

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


# ---------------------------------------------------------------- plans (ADR 0053)
def _hot_statements() -> list[tuple[str, Any, dict[str, Any]]]:
    """The router's and the work engine's inserts and updates that run with plans, each with
    parameters as their callers give them."""

    store = WorkStore(work, owner="o")
    event = {c.name: f"v-{c.name}" for c in connector_event.c}
    link = {
        "org_id": "o",
        "event_id": "e",
        "work_type": "command",
        "work_id": "w",
        "created_at_ms": 1,
    }
    item = {name: f"v-{name}" for name in ITEM_COLUMNS}
    lane = {"family": "f", "lane_key": "k", "head_seq": 1, "next_seq": 3}
    return [
        ("events", routing_repository._insert_events("sqlite"), event),
        ("links", routing_repository._LINK_WORK, link),
        ("items", store._insert_items, item),
        ("lanes", store._bump("sqlite"), lane),
        ("targets", store._insert_targets("sqlite"), {"family": "f", "target_key": "t"}),
        ("touch", store._touch_queues, {"b_family": "f", "b_class": "q", "b_now": 5_000}),
        ("halt", store._halt_lanes, {"b_family": "f", "b_key": "k", "b_id": "i"}),
        (
            "take",
            store._take_target_lane,
            {"b_family": "f", "b_key": "t", "b_id": "i", "b_token": "x"},
        ),
        ("bump", BUMP, {"b_org": "o1", "b_on": True, "b_by": 10}),  # a Boolean, a literal
        ("insert", INSERT, {"id": "t9", "org": "o", "n": 1, "on": False}),
    ]


@pytest.mark.parametrize("name", [name for name, _, _ in _hot_statements()])
async def test_a_plan_binds_what_sqlalchemy_binds(name: str) -> None:
    """Same SQL, same values in the same order (literals bound into the statement, repeated
    names, bind processors) as `construct_expanded_state`, which the plan replaces."""
    statement, params = next((s, p) for n, s, p in _hot_statements() if n == name)
    compiled = statement.compile(dialect=sqlite.dialect())
    plan = fast_sql._plan(compiled)
    assert plan is not None
    assert (plan.sql, plan.values(params)) == fast_sql._positional(compiled, params)


async def test_a_list_plan_renders_what_sqlalchemy_expands() -> None:
    """Id lists and (key, seq) pairs: the SQL and values of SQLAlchemy's expansion, for any
    length; an empty list is left to SQLAlchemy (its empty-set form)."""
    store = WorkStore(work_tables(MetaData(), "t"), owner="o")
    for statement, params in [
        (PICK, {"b_org": "o1", "b_ids": ["t0"]}),
        (PICK, {"b_org": "o1", "b_ids": ["t0", "t2", "t3"]}),
        (
            store._advance_lanes,
            {"b_family": "f", "b_keys": ["a", "b"], "b_heads": [("a", 3), ("b", 9)]},
        ),
        (store._lane_followers, {"b_family": "f", "b_keys": ["a", "b", "c"]}),
        (store._pass_update, {"b_ids": ["i", "j"], "b_family": "f", "b_epoch": 2, "b_token": "x"}),
    ]:
        compiled = statement.compile(dialect=sqlite.dialect())
        plan = fast_sql._plan(compiled)
        assert isinstance(plan, fast_sql._ListPlan)
        assert plan.render(params) == fast_sql._positional(compiled, params)
    plan = fast_sql._plan(PICK.compile(dialect=sqlite.dialect()))
    assert isinstance(plan, fast_sql._ListPlan)
    assert plan.render({"b_org": "o1", "b_ids": []}) is None


async def test_a_list_whose_values_are_processed_has_no_plan() -> None:
    flags = select(things.c.id).where(things.c.on.in_(bindparam("b_on", expanding=True)))
    assert fast_sql._plan(flags.compile(dialect=sqlite.dialect())) is None


async def test_a_row_without_a_column_is_refused(tmp_path: Path) -> None:
    """An insert built with `row_values` names every column: a row missing one is refused
    (as SQLAlchemy refuses it), never written with a NULL or a stale value."""
    engine = create_engine(
        f"sqlite+aiosqlite:///{tmp_path / 'e.db'}", application_name="t", sqlite_on_loop=True
    )
    statement = insert(things).values(fast_sql.row_values(things))
    try:
        async with engine.begin() as conn:
            await conn.run_sync(metadata.create_all)
        async with engine.begin() as conn:
            rows = [{"id": "a", "org": "o", "n": 1, "on": True}, {"id": "b", "org": "o", "n": 2}]
            with pytest.raises(
                SQLAlchemyError, match="A value is required for bind parameter 'on'"
            ):
                await fast_sql.execute(conn, statement, rows)
            with pytest.raises(
                SQLAlchemyError, match="A value is required for bind parameter 'on'"
            ):
                await conn.execute(statement, rows)
    finally:
        await engine.dispose()


async def test_a_column_with_a_python_default_is_refused(tmp_path: Path) -> None:
    """SQLAlchemy computes a Python-side default per execution; the fast path would send
    NULL for it (and differ from MariaDB's path), so such a statement is refused."""
    defaults = Table(
        "defaults",
        MetaData(),
        Column("id", String(20), primary_key=True),
        Column("n", Integer, nullable=False, default=7),
    )
    engine = create_engine(
        f"sqlite+aiosqlite:///{tmp_path / 'd.db'}", application_name="t", sqlite_on_loop=True
    )
    try:
        async with engine.begin() as conn:
            await conn.run_sync(defaults.metadata.create_all)
            statement = insert(defaults).values(fast_sql.row_values(defaults, ("id",)))
            with pytest.raises(SQLAlchemyError, match="Python-side column defaults"):
                await fast_sql.execute(conn, statement, {"id": "a"})
            assert (await conn.execute(select(defaults.c.id))).all() == []
    finally:
        await engine.dispose()


async def test_insert_or_ignore_and_upsert_answer_as_sqlalchemy_does(tmp_path: Path) -> None:
    """The router's and the engine's insert-or-ignore and insert-or-increment, run on the
    fast path and through SQLAlchemy, leave the same rows (a duplicate key ignored, a
    second bump adding to the first)."""
    ignore = insert_ignore(things, "sqlite").values(fast_sql.row_values(things))
    bump = upsert(
        things, "sqlite", [things.c.id], lambda incoming: {"n": things.c.n + incoming.n}
    ).values(fast_sql.row_values(things))

    async def exercise_writes(conn: AsyncConnection, run: Any) -> list[Any]:
        rows = [{"id": f"t{i}", "org": "o", "n": i, "on": True} for i in range(3)]
        first = await run(conn, ignore, rows)
        again = await run(conn, ignore, [*rows[1:], {"id": "t7", "org": "o", "n": 7, "on": False}])
        await run(conn, bump, [{"id": "t1", "org": "o", "n": 10, "on": True}])
        await run(conn, bump, [{"id": "t8", "org": "p", "n": 8, "on": False}])
        listed = await conn.execute(select(things).order_by(things.c.id))
        return [first.rowcount, again.rowcount, [tuple(r) for r in listed]]

    seen = []
    for name, run in (("f.db", fast_sql.execute), ("g.db", through_sqlalchemy)):
        engine = create_engine(
            f"sqlite+aiosqlite:///{tmp_path / name}", application_name="t", sqlite_on_loop=True
        )
        try:
            async with engine.begin() as conn:
                await conn.run_sync(metadata.create_all)
                seen.append(await exercise_writes(conn, run))
        finally:
            await engine.dispose()
    assert seen[0] == seen[1]
    assert seen[0][1] == 1  # only t7 was new
    assert seen[0][2] == [
        ("t0", "o", 0, True),
        ("t1", "o", 11, True),
        ("t2", "o", 2, True),
        ("t7", "o", 7, False),
        ("t8", "p", 8, False),
    ]
