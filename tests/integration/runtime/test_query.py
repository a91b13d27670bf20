"""SOQL through the engine: permissions inside the SQL, parent paths, child subqueries, cursors."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from nexus.platform.db.engine import session_factory, unit_of_work
from nexus.runtime.query.engine import QueryPage, make_locator, read_locator, run_query
from nexus.runtime.query.parser import SoqlError
from tests.integration.runtime.test_records import World, create
from tests.integration.runtime.test_records import world as world  # noqa: PLC0414  (fixture)

pytestmark = pytest.mark.asyncio(loop_scope="module")


async def query(w: World, user: str, soql: str, **kw: Any) -> QueryPage:
    caller = await w.caller(user)
    async with unit_of_work(session_factory(w.engine), readonly=True) as session:
        view = await w.metadata.view(session, w.org_id)
        access = await w.access.for_caller(session, caller)
        return await run_query(session, view=view, access=access, soql=soql, **kw)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def data(world: World) -> AsyncIterator[dict[str, str]]:
    ids = {}
    for user, name, industry, revenue in (
        ("rep1", "Alpha", "Tech", 100),
        ("rep1", "Beta", "Retail", 200),
        ("rep2", "Gamma", "Tech", 300),
        ("rep2", "Delta", None, 400),
    ):
        fields = {"Name": name, "Revenue__c": revenue}
        if industry:
            fields["Industry"] = industry
        result = await world.mutate(user, create("Account", **fields))
        ids[name] = result.results[0].id or ""
    for i in range(3):
        await world.mutate("rep1", create("Note__c", Name=f"note {i}", Account__c=ids["Alpha"]))
    yield ids


async def test_rows_are_filtered_in_sql_and_total_size_is_right(
    world: World, data: dict[str, str]
) -> None:
    rep1 = await query(world, "rep1", "SELECT Id, Name FROM Account ORDER BY Name")
    assert [r["Name"] for r in rep1.records] == ["Alpha", "Beta"]
    assert rep1.total_size == 2
    vp = await query(world, "vp", "select name from ACCOUNT order by name desc")
    assert [r["Name"] for r in vp.records] == ["Gamma", "Delta", "Beta", "Alpha"]
    support = await query(world, "support", "SELECT Name FROM Account")
    assert {r["Name"] for r in support.records} == {"Alpha", "Gamma"}  # the Tech sharing rule
    counted = await query(world, "vp", "SELECT COUNT() FROM Account WHERE Revenue__c > 150")
    assert counted.total_size == 3


async def test_where_operators(world: World, data: dict[str, str]) -> None:
    cases = {
        "Name LIKE 'A%'": {"Alpha"},
        "Industry IN ('Tech', 'Retail')": {"Alpha", "Beta", "Gamma"},
        "Industry NOT IN ('Tech')": {"Beta", "Delta"},
        "Industry = null": {"Delta"},
        "Industry != null AND NOT Name = 'Alpha'": {"Beta", "Gamma"},
        "(Revenue__c >= 300 OR Name = 'Alpha') AND Revenue__c < 400": {"Alpha", "Gamma"},
        "CreatedDate = LAST_N_DAYS:1": {"Alpha", "Beta", "Gamma", "Delta"},
        "CreatedDate > 2030-01-01T00:00:00Z": set(),
    }
    for where, expected in cases.items():
        page = await query(world, "vp", "SELECT Name FROM Account WHERE " + where)
        assert {r["Name"] for r in page.records} == expected, where


async def test_parent_paths_and_child_subqueries(world: World, data: dict[str, str]) -> None:
    notes = await query(
        world,
        "rep1",
        "SELECT Name, Account__r.Name, Account__r.Owner.Username FROM Note__c ORDER BY Name",
    )
    first = notes.records[0]
    assert first["Account__r"]["Name"] == "Alpha"
    assert first["Account__r"]["Owner"]["Username"] == "rep1@records.test"
    accounts = await query(
        world,
        "rep1",
        "SELECT Name, (SELECT Name FROM Notes__r ORDER BY Name DESC) "
        "FROM Account WHERE Name = 'Alpha'",
    )
    children = accounts.records[0]["Notes__r"]
    assert [c["Name"] for c in children["records"]] == ["note 2", "note 1", "note 0"]


async def test_invisible_fields_and_objects_fail_like_absent_ones(
    world: World, data: dict[str, str]
) -> None:
    with pytest.raises(SoqlError) as hidden:
        await query(world, "rep1", "SELECT Secret__c FROM Account")
    assert hidden.value.code == "INVALID_FIELD"
    with pytest.raises(SoqlError) as missing:
        await query(world, "rep1", "SELECT Nope__c FROM Account")
    assert str(missing.value).replace("Nope__c", "X") == str(hidden.value).replace("Secret__c", "X")
    with pytest.raises(SoqlError) as no_object:
        await query(world, "outsider", "SELECT Id FROM Account")
    assert no_object.value.code == "INVALID_TYPE"
    with pytest.raises(SoqlError) as malformed:
        await query(world, "rep1", "SELECT Name FROM Account WHERE")
    assert malformed.value.code == "MALFORMED_QUERY"


async def test_paging_with_locators(world: World, data: dict[str, str]) -> None:
    key = b"k" * 32
    locator = make_locator(
        key,
        org_id=world.org_id,
        user_id=world.users["rep1"],
        soql="SELECT Id FROM Account",
        include_deleted=False,
        page_size=200,
        start=200,
    )
    state = read_locator(key, locator, org_id=world.org_id, user_id=world.users["rep1"])
    assert state["s"] == 200
    with pytest.raises(SoqlError):
        read_locator(key, locator, org_id=world.org_id, user_id=world.users["rep2"])
    with pytest.raises(SoqlError):
        read_locator(b"x" * 32, locator, org_id=world.org_id, user_id=world.users["rep1"])


async def test_query_all_includes_deleted_rows(world: World, data: dict[str, str]) -> None:
    from nexus.contracts.records import MutateItem  # noqa: PLC0415

    doomed = (
        (await world.mutate("rep1", create("Account", Name="Doomed", Revenue__c=1))).results[0].id
    )
    await world.mutate("rep1", MutateItem(op="delete", id=doomed))
    live = await query(world, "rep1", "SELECT Name FROM Account WHERE Name = 'Doomed'")
    assert live.records == []
    everything = await query(
        world,
        "rep1",
        "SELECT Name, IsDeleted FROM Account WHERE Name = 'Doomed'",
        include_deleted=True,
    )
    assert everything.records[0]["IsDeleted"] is True


async def test_statement_count_does_not_grow_with_rows(world: World, data: dict[str, str]) -> None:
    from tests.integration.runtime.test_statement_budget import counting  # noqa: PLC0415

    soql = (
        "SELECT Name, Owner.Username, CreatedBy.Email, (SELECT Name FROM Notes__r) "
        "FROM Account WHERE {} ORDER BY Name"
    )
    caller = await world.caller("vp")
    counts = []
    for where in ("Name = 'Alpha'", "Revenue__c > 0"):  # 1 row vs every row
        async with unit_of_work(session_factory(world.engine), readonly=True) as session:
            view = await world.metadata.view(session, world.org_id)
            access = await world.access.for_caller(session, caller)
            with counting(world.engine) as statements:
                page = await run_query(session, view=view, access=access, soql=soql.format(where))
        counts.append(len(statements))
        assert page.records
    # the rows (parent paths joined) + one statement for the child subquery
    assert counts == [2, 2], counts


async def test_a_metadata_change_is_queryable_on_the_next_request(
    world: World, data: dict[str, str]
) -> None:
    from nexus.runtime.metadata.service import apply_metadata  # noqa: PLC0415
    from nexus.runtime.query.engine import query_current  # noqa: PLC0415
    from tests.integration.runtime.test_records import METADATA  # noqa: PLC0415

    caller = await world.caller("admin")

    async def ask(soql: str) -> QueryPage:
        async with unit_of_work(session_factory(world.engine), readonly=True) as session:
            access = await world.access.for_caller(session, caller)
            return await query_current(session, cache=world.metadata, access=access, soql=soql)

    assert (await ask("SELECT Name FROM Note__c")).records  # the cache now holds a view
    note = next(o for o in METADATA["objects"] if o["api_name"] == "Note__c")
    grown = {
        **note,
        "fields": [
            *note["fields"],
            {"api_name": "Topic__c", "label": "Topic", "type": "text", "length": 20},
        ],
    }
    await apply_metadata(world.engine, org_id=world.org_id, raw={"objects": [grown]})
    page = await ask("SELECT Name, Topic__c FROM Note__c")  # a field the cached view lacks
    assert all("Topic__c" in r for r in page.records)


async def test_list_views_run_through_the_query_engine(world: World, data: dict[str, str]) -> None:
    from nexus.runtime.metadata.definitions import InvalidMetadata  # noqa: PLC0415
    from nexus.runtime.metadata.service import apply_metadata  # noqa: PLC0415
    from nexus.runtime.query.list_views import run_list_view  # noqa: PLC0415

    view = {
        "api_name": "Big_Tech",
        "object": "Account",
        "label": "Big tech",
        "columns": ["Name", "Revenue__c", "Owner.Username"],
        "filters": [
            {"field": "Industry", "operator": "in", "value": ["Tech", "Retail"]},
            {"field": "Name", "operator": "contains", "value": "a"},
        ],
        "sort": [{"field": "Revenue__c", "descending": True}],
    }
    await apply_metadata(world.engine, org_id=world.org_id, raw={"list_views": [view]})

    async def rows(user: str) -> list[dict[str, Any]]:
        caller = await world.caller(user)
        async with unit_of_work(session_factory(world.engine), readonly=True) as session:
            access = await world.access.for_caller(session, caller)
            _definition, page = await run_list_view(
                session, cache=world.metadata, access=access, name="big_tech"
            )
        return page.records

    assert [r["Name"] for r in await rows("vp")] == ["Gamma", "Beta", "Alpha"]
    assert [r["Name"] for r in await rows("rep1")] == ["Beta", "Alpha"]  # rows stay filtered
    assert (await rows("rep1"))[0]["Owner"]["Username"] == "rep1@records.test"
    with pytest.raises(InvalidMetadata):
        await apply_metadata(
            world.engine,
            org_id=world.org_id,
            raw={"list_views": [{**view, "columns": ["Name FROM Account --"]}]},
        )
