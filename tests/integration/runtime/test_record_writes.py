"""The record writes of a command group (ADR 0052): built-once statements that run straight
on runtime-worker's on-loop SQLite connection store exactly what SQLAlchemy stores; the
search index and the unique checks skip only what an update leaves as it was."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from sqlalchemy import func, select

from nexus.contracts.records import ErrorCategory, MutateItem
from nexus.contracts.roles import LogicalService
from nexus.platform.db.engine import create_engine, reading
from nexus.runtime.records import models as records_tables
from nexus.runtime.search import models as search_tables
from nexus.runtime.search.index import fts_table
from tests.conftest import Backend
from tests.integration.runtime.test_records import World, create
from tests.integration.runtime.test_records import world as world  # noqa: PLC0414  (fixture)
from tests.integration.runtime.test_search import find, names
from tests.integration.runtime.test_statement_budget import counting

pytestmark = pytest.mark.asyncio(loop_scope="module")
#: Columns that differ between two records written alike.
OWN = {"id", "name", "ext_key__c", "created_date", "last_modified_date", "system_modstamp"}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def on_loop(world: World, backend: Backend) -> AsyncIterator[World]:
    """The same database through an engine like runtime-worker's (on the loop on SQLite)."""
    engine = create_engine(
        backend.url(LogicalService.RUNTIME), application_name="nexus-test", sqlite_on_loop=True
    )
    yield dataclasses.replace(world, engine=engine)
    await engine.dispose()


async def account_row(w: World, record_id: str) -> dict[str, Any]:
    async with reading(w.engine) as conn:
        session_view = w.metadata.peek(w.org_id)
        assert session_view is not None
        obj = session_view.object("Account")
        assert obj is not None
        table = session_view.table(obj)
        row = (await conn.execute(select(table).where(table.c.id == record_id))).mappings().one()
    return dict(row)


async def history_of(w: World, record_id: str) -> list[tuple[str, str | None, str | None]]:
    t = records_tables.field_history
    async with reading(w.engine) as conn:
        rows = await conn.execute(
            select(t.c.field_name, t.c.old_value, t.c.new_value)
            .where(t.c.record_id == record_id)
            .order_by(t.c.changed_at_ms, t.c.field_name)
        )
    return [(r[0], r[1], r[2]) for r in rows]


async def index_rows(w: World, record_id: str) -> list[tuple[str, str]]:
    table = fts_table if w.engine.dialect.name == "sqlite" else search_tables.search_index
    async with reading(w.engine) as conn:
        rows = await conn.execute(
            select(table.c.field_name, table.c.content)
            .where(table.c.record_id == record_id)
            .order_by(table.c.field_name)
        )
    return [(r[0], r[1]) for r in rows]


async def write_account(w: World, key: str) -> str:
    """Create, update, upsert (an update by external id) and one refused duplicate."""
    made = await w.mutate(
        "rep1",
        create(
            "Account", Name=f"Juniper {key}", Revenue__c=1234.5, Industry="Tech", Ext_Key__c=key
        ),
    )
    record_id = made.results[0].id or ""
    assert made.results[0].success, made.results[0].errors
    changed = await w.mutate(
        "rep1", MutateItem(op="update", id=record_id, fields={"Industry": "Retail"})
    )
    assert changed.results[0].success, changed.results[0].errors
    upserted = await w.mutate(
        "rep1",
        MutateItem(
            op="upsert",
            object="Account",
            external_id_field="Ext_Key__c",
            external_id=key,
            fields={"Revenue__c": 99.25, "Name": f"Juniper {key} Two"},
        ),
    )
    assert upserted.results[0].success, upserted.results[0].errors
    assert upserted.results[0].id == record_id
    assert not upserted.results[0].created
    duplicate = await w.mutate("rep1", create("Account", Name="Copy", Revenue__c=1, Ext_Key__c=key))
    assert [e.category for e in duplicate.results[0].errors] == [ErrorCategory.DUPLICATE_VALUE]
    return record_id


async def test_writes_on_the_loop_store_what_sqlalchemy_stores(
    world: World, on_loop: World
) -> None:
    with counting(world.engine) as plain_statements:
        plain = await write_account(world, "w-plain")
    with counting(on_loop.engine) as loop_statements:
        fast = await write_account(on_loop, "w-loop")
    plain_row, fast_row = await account_row(world, plain), await account_row(world, fast)
    assert {k: v for k, v in fast_row.items() if k not in OWN} == {
        k: v for k, v in plain_row.items() if k not in OWN
    }
    for column in ("created_date", "last_modified_date", "system_modstamp"):
        assert type(fast_row[column]) is type(plain_row[column])
    assert fast_row["row_version"] == 3
    assert await history_of(world, fast) == await history_of(world, plain)
    assert [f for f, _ in await index_rows(world, fast)] == [
        f for f, _ in await index_rows(world, plain)
    ]
    assert names(await find(world, "rep1", term="w-loop")) == ["Juniper w-loop Two"]
    if world.engine.dialect.name == "sqlite":  # the hot statements bypassed SQLAlchemy
        assert len(loop_statements) < len(plain_statements) // 2, (
            len(loop_statements),
            len(plain_statements),
        )


async def test_an_update_rewrites_the_index_rows_of_the_fields_it_changed(world: World) -> None:
    made = await world.mutate(
        "rep1", create("Account", Name="Quince Harbour", Revenue__c=1, Ext_Key__c="wren-quill")
    )
    record_id = made.results[0].id or ""
    assert await index_rows(world, record_id) == [
        ("Ext_Key__c", "wren-quill"),
        ("Name", "Quince Harbour"),
    ]

    async def update(**fields: Any) -> int:
        with counting(world.engine) as statements:
            result = await world.mutate(
                "rep1", MutateItem(op="update", id=record_id, fields=fields)
            )
        assert result.results[0].success, result.results[0].errors
        return len(statements)

    untouched = await update(Revenue__c=2)
    assert await update(Revenue__c=3, Name="Quince Harbour") == untouched  # same text: no rows
    assert await update(Name="Sorrel Harbour") == untouched + 2  # one delete, one insert
    assert await index_rows(world, record_id) == [
        ("Ext_Key__c", "wren-quill"),
        ("Name", "Sorrel Harbour"),
    ]
    assert names(await find(world, "rep1", term="quince")) == []
    assert names(await find(world, "rep1", term="sorrel")) == ["Sorrel Harbour"]
    assert names(await find(world, "rep1", term="wren")) == ["Sorrel Harbour"]
    await update(Ext_Key__c=None)  # emptied: its row goes
    assert await index_rows(world, record_id) == [("Name", "Sorrel Harbour")]
    assert await find(world, "rep1", term="wren") == []


async def test_a_unique_value_the_record_keeps_is_not_looked_up_yet_duplicates_are_refused(
    world: World,
) -> None:
    first = await world.mutate(
        "rep1",
        create("Account", Name="Kept", Revenue__c=1, Ext_Key__c="keep-1"),
        create("Account", Name="Other", Revenue__c=1, Ext_Key__c="keep-2"),
    )
    kept, other = (r.id or "" for r in first.results)

    async def statements(*items: MutateItem) -> tuple[int, list[Any]]:
        with counting(world.engine) as seen:
            result = await world.mutate("rep1", *items)
        return len(seen), result.results

    plain, _ = await statements(MutateItem(op="update", id=kept, fields={"Revenue__c": 2}))
    resent, results = await statements(
        MutateItem(op="update", id=kept, fields={"Revenue__c": 3, "Ext_Key__c": "keep-1"})
    )
    assert results[0].success
    assert resent == plain  # the record holds its own value: no lookup
    # a value another record holds is still refused, the record keeping its own is not
    _, results = await statements(
        MutateItem(op="update", id=kept, fields={"Ext_Key__c": "keep-1"}),
        MutateItem(op="update", id=other, fields={"Ext_Key__c": "keep-1"}),
    )
    assert results[0].success
    assert [e.category for e in results[1].errors] == [ErrorCategory.DUPLICATE_VALUE]
    _, results = await statements(
        MutateItem(op="update", id=other, fields={"Ext_Key__c": "keep-1"}),
        MutateItem(op="update", id=kept, fields={"Ext_Key__c": "keep-1"}),
    )
    assert [e.category for e in results[0].errors] == [ErrorCategory.DUPLICATE_VALUE]
    assert [e.category for e in results[1].errors] == [ErrorCategory.DUPLICATE_VALUE]
    async with reading(world.engine) as conn:
        view = world.metadata.peek(world.org_id)
        assert view is not None
        obj = view.object("Account")
        assert obj is not None
        table = view.table(obj)
        holders = (
            await conn.execute(select(func.count()).where(table.c.ext_key__c == "keep-1"))
        ).scalar_one()
    assert holders == 1
