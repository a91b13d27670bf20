"""Global search through the Runtime use case, with real authorization, on both backends."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import delete, text

from nexus.contracts.records import MutateItem
from nexus.platform.db.engine import session_factory, unit_of_work
from nexus.runtime.query.parser import SoqlError
from nexus.runtime.search import models as search_tables
from nexus.runtime.search.engine import Mode, search_current
from nexus.runtime.search.index import rebuild_index
from tests.integration.runtime.test_records import World, create
from tests.integration.runtime.test_records import world as world  # noqa: PLC0414  (fixture)

pytestmark = pytest.mark.asyncio(loop_scope="module")


async def find(
    w: World,
    user: str,
    *,
    sosl: str | None = None,
    term: str | None = None,
    objects: list[str] | None = None,
    mode: Mode = "auto",
) -> list[dict[str, Any]]:
    caller = await w.caller(user)
    async with unit_of_work(session_factory(w.engine), readonly=True) as session:
        access = await w.access.for_caller(session, caller)
        return await search_current(
            session,
            cache=w.metadata,
            access=access,
            sosl=sosl,
            term=term,
            objects=objects,
            mode=mode,
        )


def names(records: list[dict[str, Any]]) -> list[str]:
    return [r["Name"] for r in records]


async def account(w: World, user: str = "rep1", **fields: Any) -> str:
    result = await w.mutate(user, create("Account", Revenue__c=1, **fields))
    assert result.results[0].success, result.results[0].errors
    return result.results[0].id or ""


async def test_a_created_record_is_found_at_once_and_follows_renames(world: World) -> None:
    record = await account(world, Name="Quillfeather Logistics")
    found = await find(world, "rep1", term="quillfeather")
    assert [(r["attributes"]["type"], r["Id"], r["Name"]) for r in found] == [
        ("Account", record, "Quillfeather Logistics")
    ]
    assert names(await find(world, "rep1", term="QUILLFEATH*")) == ["Quillfeather Logistics"]
    renamed = await world.mutate(
        "rep1", MutateItem(op="update", id=record, fields={"Name": "Brightwater Freight"})
    )
    assert renamed.results[0].success
    assert await find(world, "rep1", term="quillfeather") == []
    assert names(await find(world, "rep1", term="brightwater")) == ["Brightwater Freight"]
    # an update that touches no searchable field keeps the record findable
    await world.mutate("rep1", MutateItem(op="update", id=record, fields={"Revenue__c": 5}))
    assert names(await find(world, "rep1", term="brightwater")) == ["Brightwater Freight"]


async def test_deleted_records_disappear_and_undeleted_ones_return(world: World) -> None:
    record = await account(world, Name="Marrowdale Farms")
    note = await world.mutate("rep1", create("Note__c", Name="Marrowdale visit"))
    assert len(await find(world, "rep1", term="marrowdale")) == 2
    await world.mutate("rep1", MutateItem(op="delete", id=record))
    assert names(await find(world, "rep1", term="marrowdale")) == ["Marrowdale visit"]
    await world.mutate("rep1", MutateItem(op="undelete", id=record))
    assert sorted(names(await find(world, "rep1", term="marrowdale"))) == [
        "Marrowdale Farms",
        "Marrowdale visit",
    ]
    assert note.results[0].success


async def test_row_and_field_access_decide_what_is_found(world: World) -> None:
    record = await account(world, Name="Zephyrine Optics")  # Private: owner rep1
    assert names(await find(world, "rep1", term="zephyrine")) == ["Zephyrine Optics"]
    assert names(await find(world, "vp", term="zephyrine")) == ["Zephyrine Optics"]  # above
    assert await find(world, "rep2", term="zephyrine") == []  # a peer cannot read it
    assert await find(world, "outsider", term="zephyrine") == []  # no object access at all
    with pytest.raises(SoqlError) as refused:
        await find(world, "outsider", sosl="FIND {zephyrine} RETURNING Account")
    assert refused.value.code == "INVALID_TYPE"
    # a term only in a field the caller may not read (Secret__c) finds nothing for them
    await world.mutate(
        "admin", MutateItem(op="update", id=record, fields={"Secret__c": "Kestrelcode"})
    )
    assert names(await find(world, "admin", term="kestrelcode")) == ["Zephyrine Optics"]
    assert await find(world, "rep1", term="kestrelcode") == []


async def test_find_returning_with_fields_where_order_and_limits(world: World) -> None:
    for name, industry in (
        ("Orbital Alpha", "Tech"),
        ("Orbital Beta", "Retail"),
        ("Orbital Gamma", "Tech"),
    ):
        await account(world, Name=name, Industry=industry)
    await world.mutate("rep1", create("Note__c", Name="Orbital notes"))
    found = await find(
        world,
        "rep1",
        sosl="FIND {orbital} RETURNING Account(Name, Industry WHERE Industry = 'Tech' "
        "ORDER BY Name DESC), Note__c(Id, Name)",
    )
    assert [(r["attributes"]["type"], r["Name"]) for r in found] == [
        ("Account", "Orbital Gamma"),
        ("Account", "Orbital Alpha"),
        ("Note__c", "Orbital notes"),
    ]
    assert found[0]["Industry"] == "Tech"
    assert set(found[0]) == {"attributes", "Id", "Name", "Industry"}
    limited = await find(
        world, "rep1", sosl="find 'orbital' returning Account(Name LIMIT 2), Note__c LIMIT 2"
    )
    assert len(limited) == 2
    only_notes = await find(world, "rep1", term="orbital", objects=["Note__c"])
    assert names(only_notes) == ["Orbital notes"]
    # IN NAME FIELDS ignores a match in another field (Industry, a picklist)
    await account(world, Name="Plain Holdings", Industry="Retail")
    assert "Plain Holdings" in names(await find(world, "rep1", term="retail"))
    by_name = await find(world, "rep1", sosl="FIND {retail} IN NAME FIELDS RETURNING Account")
    assert by_name == []
    with pytest.raises(SoqlError) as hidden_field:
        await find(world, "rep1", sosl="FIND {orbital} RETURNING Account(Secret__c)")
    assert hidden_field.value.code == "INVALID_FIELD"


@pytest.mark.parametrize("mode", ["auto", "like"])
async def test_the_better_match_comes_first(world: World, mode: Mode) -> None:
    if not await world_has(world, "Nimbus"):
        await account(world, Name="Other Nimbus Holdings", Ext_Key__c="rank-other-2")
        await account(world, Name="Nimbus", Ext_Key__c="nimbus-1")
        await world.mutate("rep1", create("Note__c", Name="Unrelated", Account__c=None))
    found = await find(world, "rep1", term="nimbus", mode=mode)
    assert names(found) == ["Nimbus", "Other Nimbus Holdings"]


async def world_has(w: World, name: str) -> bool:
    return name in names(await find(w, "admin", term=name))


async def test_short_terms_use_substring_matching(world: World) -> None:
    await account(world, Name="Qx Partners")
    assert names(await find(world, "rep1", term="qx")) == ["Qx Partners"]
    assert "Qx Partners" in names(await find(world, "rep1", term="qx part*"))


async def test_fts_operator_characters_are_plain_text(world: World) -> None:
    await account(world, Name='Vortex (North) - O\'Brien "Group"')
    for term in (
        '"vortex',
        "vortex*",
        "vortex OR north",
        "vortex -north",
        "(vortex)",
        "o'brien",
        "north:vortex",
        "^vortex",
        "+vortex ~north",
    ):
        assert names(await find(world, "rep1", term=term)) == [
            'Vortex (North) - O\'Brien "Group"'
        ], term
    for term in ("NEAR(vortex north)", "vortex AND", "vortex NOT north", "*", '"-()', "{}"):
        assert await find(world, "rep1", term=term) == [], term  # every word must occur
    braced = await find(world, "rep1", sosl='FIND {vortex \\} "group"} RETURNING Account')
    assert len(braced) == 1


async def test_malformed_search_names_the_position(world: World) -> None:
    for sosl, where in (
        ("FIND {acme} RETURNING Account(Name", "end of search"),
        ("FIND {acme} RETURNING Account(Name,)", "')' at line 1, column 36"),
        ("FIND acme RETURNING Account", "line 1, column 6"),
        ("FIND {acme} IN EVERY FIELDS RETURNING Account", "line 1, column 16"),
        ("FIND {} RETURNING Account", "empty"),
    ):
        with pytest.raises(SoqlError) as error:
            await find(world, "rep1", sosl=sosl)
        assert error.value.code == "MALFORMED_SEARCH", sosl
        assert where in str(error.value), (sosl, str(error.value))


async def test_reindex_makes_older_records_findable(world: World) -> None:
    record = await account(world, Name="Halcyon Mills")
    async with unit_of_work(session_factory(world.engine)) as session:
        if session.get_bind().dialect.name == "sqlite":
            await session.execute(
                text("DELETE FROM runtime_search_index WHERE record_id = :id"), {"id": record}
            )
        else:
            await session.execute(
                delete(search_tables.search_index).where(
                    search_tables.search_index.c.record_id == record
                )
            )
    assert await find(world, "rep1", term="halcyon") == []  # as if written before search
    async with unit_of_work(session_factory(world.engine)) as session:
        view = await world.metadata.view(session, world.org_id)
        counts = await rebuild_index(session, view=view, objects=["Account"])
    assert counts["Account"] >= 1
    assert names(await find(world, "rep1", term="halcyon")) == ["Halcyon Mills"]
    assert names(await find(world, "rep1", term="quillfeather")) == []  # renamed earlier
