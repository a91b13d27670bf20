"""SQL statements per use case are fixed: they do not grow with batch size, fields, lookups or
related lists. Budgets (warm caches, SQLite and MariaDB alike) are recorded here."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import pytest_asyncio
from sqlalchemy import event

from nexus.contracts.records import MutateItem
from nexus.platform.db.engine import session_factory, unit_of_work
from nexus.runtime.describe import describe_global, describe_object
from nexus.runtime.records.graph import read_graph
from nexus.runtime.records.read import read_selected
from tests.integration.runtime.test_records import World, create
from tests.integration.runtime.test_records import world as world  # noqa: PLC0414  (fixture)

pytestmark = pytest.mark.asyncio(loop_scope="module")

BUDGET = {
    "create": 9,  # revision, clock, idempotency lookup, references, uniques, numbers, insert
    "update": 10,
    "read": 2,  # revision, the authorized select
    "graph": 5,  # revision, record, access decisions, parents, related lists (+ history)
    "describe": 1,  # revision only: describe is computed from cached metadata and access
}


@contextmanager
def counting(engine: Any) -> Iterator[list[str]]:
    statements: list[str] = []

    def count(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if (
            not statement.lstrip()
            .upper()
            .startswith(("BEGIN", "SAVEPOINT", "RELEASE", "ROLLBACK", "COMMIT", "PRAGMA"))
        ):
            statements.append(statement)

    event.listen(engine.sync_engine, "before_cursor_execute", count)
    try:
        yield statements
    finally:
        event.remove(engine.sync_engine, "before_cursor_execute", count)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def warm(world: World) -> AsyncIterator[World]:
    await world.mutate("rep1", create("Account", Name="warm", Revenue__c=1))
    yield world


async def statements_for(subject: World, action: Any) -> int:
    with counting(subject.engine) as statements:
        await action()
    return len(statements)


async def test_mutations_do_not_grow_with_batch_size(warm: World) -> None:
    def creates(n: int) -> Any:
        return lambda: warm.mutate(
            "rep1",
            *(
                create("Account", f"b-{n}-{i}", Name=f"n{i}", Revenue__c=1, Ext_Key__c=f"k-{n}-{i}")
                for i in range(n)
            ),
        )

    one, many = await statements_for(warm, creates(1)), await statements_for(warm, creates(40))
    assert one == many <= BUDGET["create"], (one, many)

    ids = [r.id for r in (await creates(40)()).results]

    def updates(subset: list[str | None]) -> Any:
        return lambda: warm.mutate(
            "rep1", *(MutateItem(op="update", id=i, fields={"Industry": "Tech"}) for i in subset)
        )

    one, many = (
        await statements_for(warm, updates(ids[:1])),
        await statements_for(warm, updates(ids[1:])),
    )
    assert one == many <= BUDGET["update"], (one, many)


async def test_reads_do_not_grow_with_fields_lookups_or_related_lists(warm: World) -> None:
    account = (await warm.mutate("rep1", create("Account", Name="g", Revenue__c=1))).results[
        0
    ].id or ""
    note = (await warm.mutate("rep1", create("Note__c", Name="n", Account__c=account))).results[
        0
    ].id or ""
    contract = (await warm.mutate("rep1", create("Contract__c", Name="c"))).results[0].id or ""
    await warm.mutate("rep1", create("Invoice__c", Account__c=account))
    caller = await warm.caller("vp")

    async def graph(record_id: str) -> None:
        async with unit_of_work(session_factory(warm.engine), readonly=True) as session:
            view = await warm.metadata.view(session, warm.org_id)
            access = await warm.access.for_caller(session, caller)
            await read_graph(
                session, view=view, access=access, object_name=None, record_id=record_id
            )

    await graph(account)  # warm the access cache for this caller
    counts = {
        name: await statements_for(warm, lambda i=i: graph(i))
        for name, i in (
            ("account: 3 related lists, 5 fields", account),
            ("note: 1 lookup", note),
            ("contract: no lookup value", contract),
        )
    }
    # each part is one statement or none: 3 related lists cost what 1 would, never 3
    assert max(counts.values()) <= BUDGET["graph"], counts

    async def read(record_id: str) -> None:
        async with unit_of_work(session_factory(warm.engine), readonly=True) as session:
            view = await warm.metadata.view(session, warm.org_id)
            access = await warm.access.for_caller(session, caller)
            await read_selected(
                session, view=view, access=access, object_name=None, record_id=record_id
            )

    reads = {
        name: await statements_for(warm, lambda i=i: read(i))
        for name, i in (("account", account), ("note", note))
    }
    assert set(reads.values()) == {BUDGET["read"]}, reads

    async def describe() -> None:
        async with unit_of_work(session_factory(warm.engine), readonly=True) as session:
            view = await warm.metadata.view(session, warm.org_id)
            access = await warm.access.for_caller(session, caller)
            describe_global(view, access)
            describe_object(view, access, "Account")

    assert await statements_for(warm, describe) == BUDGET["describe"]
