"""Aggregate SOQL, semi-joins and anti-joins, FIELDS(), toLabel(), FORMAT(), FIND without
RETURNING and column metadata through the Runtime engine, with real sharing and field-level
security, on both backends. Every group, sub-select and expansion counts only what the caller
may read."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from nexus.identity import service as identity
from nexus.identity.repository import IdentityRepository
from nexus.platform.db.engine import session_factory, unit_of_work
from nexus.platform.ids import to_18
from nexus.runtime.access.service import assign_permission_set
from nexus.runtime.metadata.service import apply_metadata
from nexus.runtime.query.columns import query_columns
from nexus.runtime.query.engine import QueryPage, run_query
from nexus.runtime.query.parser import SoqlError
from nexus.runtime.search.engine import search_current
from nexus.runtime.system_objects.definitions import assignment_id
from tests.integration.runtime.test_records import World, create
from tests.integration.runtime.test_records import world as world  # noqa: PLC0414  (fixture)
from tests.integration.runtime.test_statement_budget import counting

pytestmark = pytest.mark.asyncio(loop_scope="module")

DEALS = {
    "objects": [
        {
            "api_name": "Deal__c",
            "label": "Deal",
            "plural_label": "Deals",
            "key_prefix": "a0D",
            "sharing_model": "Private",
            "name_field": {"api_name": "Name", "label": "Name", "type": "text", "length": 80},
            "fields": [
                {
                    "api_name": "Account__c",
                    "label": "Account",
                    "type": "lookup",
                    "reference_to": "Account",
                    "relationship_name": "Account__r",
                    "child_relationship_name": "Deals__r",
                },
                {
                    "api_name": "Stage__c",
                    "label": "Stage",
                    "type": "picklist",
                    "values": [
                        {"value": "Prospecting", "label": "Prospect"},
                        {"value": "Won", "label": "Closed Won"},
                        {"value": "Lost"},
                    ],
                },
                {"api_name": "Amount__c", "label": "Amount", "type": "currency"},
                {"api_name": "Close__c", "label": "Close", "type": "date"},
                {"api_name": "Notes__c", "label": "Notes", "type": "textarea"},
            ],
        }
    ],
    "permission_sets": [
        {
            "api_name": "Deals",
            "label": "Deals",
            "objects": [
                {
                    "object": "Deal__c",
                    "create": True,
                    "read": True,
                    "edit": True,
                    "all_fields": "edit",
                }
            ],
        }
    ],
}


async def query(w: World, user: str, soql: str, **kw: Any) -> QueryPage:
    caller = await w.caller(user)
    async with unit_of_work(session_factory(w.engine), readonly=True) as session:
        view = await w.metadata.view(session, w.org_id)
        access = await w.access.for_caller(session, caller)
        return await run_query(session, view=view, access=access, soql=soql, **kw)


async def rows(w: World, user: str, soql: str) -> list[dict[str, Any]]:
    page = await query(w, user, soql)
    for record in page.records:
        assert record.pop("attributes") == {"type": "AggregateResult"}
    return page.records


async def refused(w: World, user: str, soql: str) -> SoqlError:
    with pytest.raises(SoqlError) as error:
        await query(w, user, soql)
    return error.value


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def data(world: World) -> AsyncIterator[dict[str, str]]:
    await apply_metadata(world.engine, org_id=world.org_id, raw=DEALS)
    async with unit_of_work(session_factory(world.engine)) as session:
        for name in ("vp", "rep1", "rep2"):
            await assign_permission_set(
                session, org_id=world.org_id, user_id=world.users[name], permission_set="Deals"
            )
    ids: dict[str, str] = {}
    for user, name, industry, revenue in (
        ("rep1", "Alpha", "Tech", 100),
        ("rep1", "Beta", "Retail", 200),
        ("rep2", "Gamma", "Tech", 300),
        ("rep2", "Delta", None, 450),
    ):
        fields: dict[str, Any] = {"Name": name, "Revenue__c": revenue}
        if industry:
            fields["Industry"] = industry
        ids[name] = (await world.mutate(user, create("Account", **fields))).results[0].id or ""
    for user, name, account, stage, amount, close in (
        ("rep1", "D1", "Alpha", "Prospecting", 10.25, "2026-01-05"),
        ("rep1", "D2", "Alpha", "Won", 20.5, "2026-02-01"),
        ("rep1", "D3", "Beta", "Won", 30, "2026-03-01"),
        ("rep2", "D4", "Gamma", "Won", 1000, "2026-04-01"),
        ("rep2", "D5", None, "Prospecting", 5, None),
        ("admin", "D6", "Beta", "Lost", 7, None),  # above everyone's role: seen by admin only
    ):
        fields = {"Name": name, "Stage__c": stage, "Amount__c": amount, "Close__c": close}
        if account:
            fields["Account__c"] = ids[account]
        result = await world.mutate(user, create("Deal__c", **fields))
        assert result.results[0].success, result.results[0].errors
        ids[name] = result.results[0].id or ""
    yield ids


async def test_group_by_counts_what_each_caller_may_see(world: World, data: dict[str, str]) -> None:
    soql = "SELECT Industry, COUNT(Id) FROM Account GROUP BY Industry"
    assert await rows(world, "rep1", soql) == [
        {"Industry": "Retail", "expr0": 1},
        {"Industry": "Tech", "expr0": 1},
    ]
    vp = await query(world, "vp", soql)
    assert vp.total_size == 3
    assert vp.done
    assert [(r["Industry"], r["expr0"]) for r in vp.records] == [
        (None, 1),
        ("Retail", 1),
        ("Tech", 2),
    ]
    # the Tech sharing rule: support sees the two Tech accounts only
    assert await rows(world, "support", soql) == [{"Industry": "Tech", "expr0": 2}]


async def test_aggregate_functions_aliases_and_expr_names(
    world: World, data: dict[str, str]
) -> None:
    soql = (
        "SELECT COUNT(Id), SUM(Revenue__c) total, MAX(Revenue__c), AVG(Revenue__c), "
        "MIN(Name), COUNT(Industry), COUNT_DISTINCT(Industry) FROM Account"
    )
    assert await rows(world, "vp", soql) == [
        {
            "expr0": 4,
            "total": 1050.0,
            "expr1": 450.0,
            "expr2": 262.5,
            "expr3": "Alpha",
            "expr4": 3,
            "expr5": 2,
        }
    ]
    # no visible row: one group all the same, counts 0, the others null
    nothing = await rows(
        world, "rep1", "SELECT COUNT(Id), SUM(Revenue__c) FROM Account WHERE Name = 'Gamma'"
    )
    assert nothing == [{"expr0": 0, "expr1": None}]
    assert (await query(world, "vp", "SELECT COUNT() FROM Account")).total_size == 4


async def test_having_order_by_an_aggregate_limit_and_offset(
    world: World, data: dict[str, str]
) -> None:
    base = "SELECT Industry, SUM(Revenue__c) s FROM Account GROUP BY Industry "
    assert await rows(world, "vp", base + "ORDER BY SUM(Revenue__c) DESC LIMIT 2") == [
        {"Industry": None, "s": 450.0},
        {"Industry": "Tech", "s": 400.0},
    ]
    assert await rows(world, "vp", base + "HAVING COUNT(Id) > 1") == [
        {"Industry": "Tech", "s": 400.0}
    ]
    assert await rows(
        world, "vp", base + "HAVING Industry IN ('Retail') OR SUM(Revenue__c) < 0"
    ) == [{"Industry": "Retail", "s": 200.0}]
    # HAVING without GROUP BY, and on a rollup's grand total: the one row kept or dropped
    total = "SELECT COUNT(Id) FROM Account HAVING COUNT(Id) > {}"
    assert await rows(world, "vp", total.format(3)) == [{"expr0": 4}]
    assert await rows(world, "vp", total.format(4)) == []
    rolled = await rows(
        world,
        "vp",
        "SELECT Industry, COUNT(Id) n FROM Account GROUP BY ROLLUP(Industry) HAVING COUNT(Id) > 1",
    )
    assert rolled == [{"Industry": "Tech", "n": 2}, {"Industry": None, "n": 4}]
    paged = await query(world, "vp", base + "ORDER BY Industry DESC NULLS LAST LIMIT 2 OFFSET 1")
    assert [r["Industry"] for r in paged.records] == ["Retail", None]


async def test_groups_of_parent_fields_and_a_rollup(world: World, data: dict[str, str]) -> None:
    soql = (
        "SELECT Account__r.Name, COUNT(Id) n, SUM(Amount__c) FROM Deal__c "
        "GROUP BY Account__r.Name ORDER BY Account__r.Name"
    )
    assert await rows(world, "vp", soql) == [
        {"Name": None, "n": 1, "expr0": 5.0},
        {"Name": "Alpha", "n": 2, "expr0": 30.75},
        {"Name": "Beta", "n": 1, "expr0": 30.0},
        {"Name": "Gamma", "n": 1, "expr0": 1000.0},
    ]
    rollup = await rows(
        world,
        "vp",
        "SELECT Stage__c, Account__r.Name, GROUPING(Account__r.Name) sub, COUNT(Id) "
        "FROM Deal__c GROUP BY ROLLUP(Stage__c, Account__r.Name)",
    )
    assert [(r["Stage__c"], r["Name"], r["sub"], r["expr0"]) for r in rollup] == [
        ("Prospecting", None, 0, 1),
        ("Prospecting", "Alpha", 0, 1),
        ("Prospecting", None, 1, 2),
        ("Won", "Alpha", 0, 1),
        ("Won", "Beta", 0, 1),
        ("Won", "Gamma", 0, 1),
        ("Won", None, 1, 3),
        (None, None, 1, 5),
    ]


async def test_an_aggregate_page_is_one_statement(world: World, data: dict[str, str]) -> None:
    """Groups, a rollup, parents, a semi-join and HAVING: one statement the database runs,
    whatever the rows (the metadata view and the caller's access are warm)."""
    soql = (
        "SELECT Stage__c, Account__r.Industry, COUNT(Id), SUM(Amount__c) FROM Deal__c "
        "WHERE Account__c IN (SELECT Id FROM Account WHERE Revenue__c > 0) "
        "GROUP BY ROLLUP(Stage__c, Account__r.Industry) HAVING COUNT(Id) > 0"
    )
    await query(world, "vp", soql)
    caller = await world.caller("vp")
    async with unit_of_work(session_factory(world.engine), readonly=True) as session:
        view = await world.metadata.view(session, world.org_id)
        access = await world.access.for_caller(session, caller)
        with counting(world.engine) as statements:
            page = await run_query(session, view=view, access=access, soql=soql)
    assert page.total_size == 6  # 3 groups, 2 stage subtotals, the grand total
    assert len(statements) == 1


async def test_aggregates_never_count_records_outside_sharing(
    world: World, data: dict[str, str]
) -> None:
    stages = "SELECT Stage__c, COUNT(Id), SUM(Amount__c) FROM Deal__c GROUP BY Stage__c"
    assert await rows(world, "rep2", stages) == [
        {"Stage__c": "Prospecting", "expr0": 1, "expr1": 5.0},
        {"Stage__c": "Won", "expr0": 1, "expr1": 1000.0},
    ]
    assert [r["Stage__c"] for r in await rows(world, "rep1", stages)] == ["Prospecting", "Won"]
    assert [r["Stage__c"] for r in await rows(world, "admin", stages)] == [
        "Lost",
        "Prospecting",
        "Won",
    ]
    assert (await query(world, "rep2", "SELECT COUNT() FROM Deal__c")).total_size == 2


async def test_aggregates_are_validated_like_salesforce(world: World, data: dict[str, str]) -> None:
    ungrouped = await refused(world, "vp", "SELECT Name, COUNT(Id) FROM Account GROUP BY Industry")
    assert ungrouped.code == "MALFORMED_QUERY"
    assert "Field must be grouped or aggregated: Name" in str(ungrouped)
    summed = await refused(world, "vp", "SELECT SUM(Name) FROM Account")
    assert summed.code == "INVALID_FIELD"
    assert "does not support aggregate operator SUM" in str(summed)
    grouped = await refused(world, "vp", "SELECT Notes__c FROM Deal__c GROUP BY Notes__c")
    assert (grouped.code, "can not be grouped" in str(grouped)) == ("INVALID_FIELD", True)
    hidden = await refused(world, "rep1", "SELECT MAX(Secret__c) FROM Account")
    assert hidden.code == "INVALID_FIELD"  # field-level security: as absent
    ordered = await refused(
        world, "vp", "SELECT Industry, COUNT(Id) FROM Account GROUP BY Industry ORDER BY Name"
    )
    assert "Ordered field must be grouped or aggregated: Name" in str(ordered)
    alias = await refused(world, "vp", "SELECT Name n FROM Account")
    assert "Only aggregate expressions use field aliasing" in str(alias)
    duplicate = await refused(world, "vp", "SELECT COUNT(Id) expr0, COUNT(Name) FROM Account")
    assert "duplicate alias" in str(duplicate)


async def test_semi_joins_and_anti_joins_respect_the_inner_objects_sharing(
    world: World, data: dict[str, str]
) -> None:
    won = (
        "SELECT Name FROM Account WHERE Id IN (SELECT Account__c FROM Deal__c "
        "WHERE Stage__c = 'Won') ORDER BY Name"
    )
    assert [r["Name"] for r in (await query(world, "vp", won)).records] == [
        "Alpha",
        "Beta",
        "Gamma",
    ]
    assert [r["Name"] for r in (await query(world, "rep2", won)).records] == ["Gamma"]
    # Beta's lost deal is the admin's: rep1 sees Beta but not the deal that would match it
    lost = (
        "SELECT Name FROM Account WHERE Id {} (SELECT Account__c FROM Deal__c "
        "WHERE Stage__c = 'Lost') ORDER BY Name"
    )
    assert (await query(world, "rep1", lost.format("IN"))).records == []
    assert [r["Name"] for r in (await query(world, "admin", lost.format("IN"))).records] == ["Beta"]
    assert [r["Name"] for r in (await query(world, "rep1", lost.format("NOT IN"))).records] == [
        "Alpha",
        "Beta",
    ]
    assert "Beta" not in {
        r["Name"] for r in (await query(world, "admin", lost.format("NOT IN"))).records
    }
    # on a reference field, both ways; an anti-join keeps an empty reference
    tech = (
        "SELECT Name FROM Deal__c WHERE Account__c {} (SELECT Id FROM Account "
        "WHERE Industry = 'Tech') ORDER BY Name"
    )
    assert [r["Name"] for r in (await query(world, "vp", tech.format("IN"))).records] == [
        "D1",
        "D2",
        "D4",
    ]
    assert [r["Name"] for r in (await query(world, "vp", tech.format("NOT IN"))).records] == [
        "D3",
        "D5",
    ]
    owners = await query(
        world,
        "vp",
        "SELECT Name FROM Account WHERE OwnerId IN "
        "(SELECT OwnerId FROM Deal__c WHERE Amount__c > 500) ORDER BY Name",
    )
    assert [r["Name"] for r in owners.records] == ["Delta", "Gamma"]  # rep2's, who owns D4
    counted = await rows(
        world,
        "rep1",
        "SELECT COUNT(Id) FROM Account WHERE Id IN (SELECT Account__c FROM Deal__c)",
    )
    assert counted == [{"expr0": 2}]


async def test_semi_joins_are_checked_like_the_outer_query(
    world: World, data: dict[str, str]
) -> None:
    no_object = await refused(
        world, "support", "SELECT Name FROM Account WHERE Id IN (SELECT Account__c FROM Deal__c)"
    )
    assert no_object.code == "INVALID_TYPE"
    no_field = await refused(
        world,
        "rep1",
        "SELECT Name FROM Deal__c WHERE Account__c IN "
        "(SELECT Id FROM Account WHERE Secret__c = 'x')",
    )
    assert no_field.code == "INVALID_FIELD"
    mismatch = await refused(
        world, "vp", "SELECT Name FROM Account WHERE Id IN (SELECT Id FROM Deal__c)"
    )
    assert (mismatch.code, "same object type" in str(mismatch)) == ("INVALID_FIELD", True)
    not_a_key = await refused(
        world, "vp", "SELECT Name FROM Account WHERE Name IN (SELECT Account__c FROM Deal__c)"
    )
    assert not_a_key.code == "INVALID_FIELD"
    with_or = await refused(
        world,
        "vp",
        "SELECT Name FROM Account WHERE Name = 'x' OR Id IN (SELECT Account__c FROM Deal__c)",
    )
    assert with_or.code == "MALFORMED_QUERY"


async def test_fields_expands_to_readable_fields_only(world: World, data: dict[str, str]) -> None:
    rep1 = (await query(world, "rep1", "SELECT FIELDS(ALL) FROM Account LIMIT 10")).records
    admin = (await query(world, "admin", "SELECT FIELDS(ALL) FROM Account LIMIT 10")).records
    assert "Secret__c" not in rep1[0]
    assert "Secret__c" in admin[0]
    assert {"Id", "Name", "Industry", "Revenue__c", "OwnerId", "CreatedDate"} <= set(rep1[0])
    custom = (await query(world, "rep1", "SELECT FIELDS(CUSTOM) FROM Account LIMIT 200")).records
    assert set(custom[0]) == {"attributes", "Id", "Ext_Key__c", "Revenue__c"}
    standard = (await query(world, "rep1", "SELECT FIELDS(STANDARD) FROM Account")).records
    assert "Revenue__c" not in standard[0]
    assert {"Id", "Name", "Industry", "OwnerId"} <= set(standard[0])
    unbounded = await refused(world, "rep1", "SELECT FIELDS(ALL) FROM Account")
    assert "LIMIT of at most 200" in str(unbounded)


async def test_to_label_and_format(world: World, data: dict[str, str]) -> None:
    page = await query(
        world,
        "vp",
        "SELECT Name, toLabel(Stage__c), FORMAT(Amount__c) amount, FORMAT(Close__c), "
        "Account__r.Name FROM Deal__c WHERE Name IN ('D1', 'D4', 'D5') ORDER BY Name",
    )
    assert [
        (r["Stage__c"], r["amount"], r["Close__c"], (r["Account__r"] or {}).get("Name"))
        for r in page.records
    ] == [
        ("Prospect", "10.25", "2026-01-05", "Alpha"),
        ("Closed Won", "1,000.00", "2026-04-01", "Gamma"),
        ("Prospect", "5.00", None, None),
    ]
    grouped = await rows(
        world,
        "vp",
        "SELECT toLabel(Stage__c) stage, FORMAT(SUM(Amount__c)) FROM Deal__c GROUP BY Stage__c",
    )
    assert grouped == [
        {"stage": "Prospect", "expr0": "15.25"},
        {"stage": "Closed Won", "expr0": "1,050.50"},
    ]
    not_a_picklist = await refused(world, "vp", "SELECT toLabel(Name) FROM Deal__c")
    assert not_a_picklist.code == "INVALID_FIELD"


async def test_find_without_returning_searches_every_readable_object(
    world: World, data: dict[str, str]
) -> None:
    async def find(user: str, sosl: str) -> list[dict[str, Any]]:
        caller = await world.caller(user)
        async with unit_of_work(session_factory(world.engine), readonly=True) as session:
            access = await world.access.for_caller(session, caller)
            return await search_current(session, cache=world.metadata, access=access, sosl=sosl)

    found = await find("rep1", "FIND {Alpha}")
    assert found == [{"attributes": {"type": "Account"}, "Id": data["Alpha"]}]
    assert await find("rep2", "FIND {Alpha}") == []  # rep1's account: outside rep2's sharing
    deals = await find("vp", "FIND {D4}")
    assert deals == [{"attributes": {"type": "Deal__c"}, "Id": data["D4"]}]
    assert await find("support", "FIND {D4}") == []  # no access to deals at all


async def test_column_metadata_describes_without_running(
    world: World, data: dict[str, str]
) -> None:
    async def columns(user: str, soql: str) -> dict[str, Any]:
        caller = await world.caller(user)
        async with unit_of_work(session_factory(world.engine), readonly=True) as session:
            access = await world.access.for_caller(session, caller)
            return await query_columns(session, cache=world.metadata, access=access, soql=soql)

    plain = await columns(
        "rep1",
        "SELECT Name, Amount__c, Account__r.Name, Account__r.Owner.Username FROM Deal__c",
    )
    assert (plain["entity_name"], plain["key_prefix"], plain["id_selected"]) == (
        "Deal__c",
        "a0D",
        False,
    )
    names = [c["name"] for c in plain["columns"]]
    assert names == ["Name", "Amount__c", "Account__r"]
    amount = plain["columns"][1]
    assert (amount["type"], amount["custom"], amount["updatable"]) == ("currency", True, True)
    account = plain["columns"][2]
    assert account["foreign_key"] == "Account__c"
    assert [c["name"] for c in account["join"]] == ["Name", "Owner"]
    assert account["join"][1]["join"][0]["name"] == "Username"
    children = await columns("rep1", "SELECT Id, (SELECT Name FROM Deals__r) FROM Account")
    assert children["id_selected"] is True
    deals = children["columns"][1]
    assert (deals["name"], deals["aggregate"], [c["name"] for c in deals["join"]]) == (
        "Deals__r",
        True,
        ["Name"],
    )
    aggregate = await columns(
        "vp", "SELECT Stage__c, COUNT(Id), SUM(Amount__c) s FROM Deal__c GROUP BY Stage__c"
    )
    assert aggregate["group_by"] is True
    assert [(c["name"], c["display"], c["aggregate"]) for c in aggregate["columns"]] == [
        ("Stage__c", "Stage__c", False),
        ("expr0", "COUNT(Id)", True),
        ("s", "SUM(Amount__c)", True),
    ]
    with pytest.raises(SoqlError) as hidden:
        await columns("rep1", "SELECT Secret__c FROM Account")
    assert hidden.value.code == "INVALID_FIELD"


#: Odd queries and what each answers: rows (their count) or a Salesforce error code.
ODD_QUERIES = {
    "SELECT COUNT(Owner.Name) FROM Account": 1,
    "SELECT Owner.Name, COUNT(Id) FROM Account GROUP BY Owner.Name": 2,
    "SELECT MAX(CreatedDate), MIN(Close__c), FORMAT(MAX(Close__c)) FROM Deal__c": 1,
    "SELECT Id, COUNT(Id) FROM Account GROUP BY Id": 4,
    "SELECT FORMAT(CreatedDate), FORMAT(Name), FORMAT(OwnerId) FROM Account": 4,
    "SELECT toLabel(Owner.Name) FROM Account": "INVALID_FIELD",
    "SELECT Industry FROM Account GROUP BY Industry HAVING MIN(Name) LIKE 'A%'": 1,
    "SELECT Industry FROM Account GROUP BY Industry HAVING MIN(Name) LIKE 1": "INVALID_FIELD",
    "SELECT Industry FROM Account GROUP BY Industry HAVING COUNT(Id) = 'x'": "INVALID_FIELD",
    "SELECT Industry FROM Account GROUP BY Industry HAVING COUNT(Id) > 2026-01-01": "INVALID_FIELD",
    "SELECT Industry FROM Account GROUP BY Industry HAVING COUNT(Id) = null": 0,
    "SELECT Industry FROM Account GROUP BY Industry HAVING COUNT(Id) > null": "MALFORMED_QUERY",
    "SELECT Industry FROM Account GROUP BY Industry HAVING COUNT(Id) IN (1, 2, null)": 3,
    "SELECT Industry FROM Account GROUP BY Industry HAVING COUNT(Id) INCLUDES (1)": "INVALID_FIELD",
    "SELECT Industry FROM Account GROUP BY Industry HAVING NOT COUNT(Id) != 1": 2,
    "SELECT Industry FROM Account GROUP BY Industry HAVING Name = 'x'": "MALFORMED_QUERY",
    "SELECT Industry FROM Account GROUP BY Industry HAVING Industry = true": "INVALID_FIELD",
    "SELECT Industry FROM Account GROUP BY Industry HAVING MAX(CreatedDate) > LAST_N_DAYS:3": 0,
    (
        "SELECT Industry, COUNT(Id) FROM Account GROUP BY Industry ORDER BY COUNT(Id) "
        "DESC NULLS LAST"
    ): 3,
    "SELECT Industry, COUNT(Id) FROM Account GROUP BY ROLLUP(Industry) HAVING Industry = 'Tech'": 1,
    "SELECT Industry, MAX(Name) FROM Account GROUP BY ROLLUP(Industry) ORDER BY MAX(Name)": 4,
    "SELECT Id FROM Account WHERE OwnerId IN (SELECT Id FROM Account)": "INVALID_FIELD",
    "SELECT Id FROM Account WHERE OwnerId IN (SELECT OwnerId FROM Note__c)": 0,
    # Owner is the User system object: its Id is an id, like Account__r.Id below
    "SELECT Id FROM Account WHERE Owner.Id IN (SELECT OwnerId FROM Note__c)": 0,
    "SELECT Id FROM Account WHERE Owner.Id IN (SELECT Id FROM Profile)": "INVALID_FIELD",
    "SELECT Id FROM Note__c WHERE Account__r.Id IN (SELECT Id FROM Account)": 0,
    "SELECT Id FROM Note__c WHERE account.id IN (SELECT account__r.id FROM Note__c)": 0,
    "SELECT Id FROM Account WHERE Id IN (SELECT Nope__c FROM Note__c)": "INVALID_FIELD",
    "SELECT Id FROM Account WHERE Id IN (SELECT Id FROM Nope)": "INVALID_TYPE",
    "SELECT Id FROM Account WHERE Id IN (SELECT Account__c FROM Note__c WHERE Name = 1)": (
        "INVALID_FIELD"
    ),
    "SELECT COUNT(Id) FROM Nope": "INVALID_TYPE",
    "SELECT SUM(Revenue__c) FROM Account GROUP BY Revenue__c": 4,
    "SELECT Name FROM Account GROUP BY Name LIMIT 0": 0,
    "SELECT Name FROM Account GROUP BY Name OFFSET 1": 3,
    "SELECT FORMAT(COUNT(Id)), FORMAT(MAX(Name)), FORMAT(AVG(Revenue__c)) FROM Account": 1,
    "SELECT COUNT_DISTINCT(Id), COUNT_DISTINCT(Name), COUNT_DISTINCT(CreatedDate) FROM Account": 1,
    "SELECT MAX(IsDeleted) FROM Account": "INVALID_FIELD",
    "SELECT AVG(CreatedDate) FROM Account": "INVALID_FIELD",
    "SELECT toLabel(Industry), Industry FROM Account": "MALFORMED_QUERY",
    "SELECT toLabel(Industry) i, Industry FROM Account": 4,
    "SELECT COUNT(Id) c, COUNT(Id) c FROM Account": "MALFORMED_QUERY",
    "SELECT Name, Owner.Name FROM Account GROUP BY Name, Owner.Name": "MALFORMED_QUERY",
    "SELECT Name, Account__r.Name n FROM Note__c GROUP BY Name, Account__r.Name": 0,
    "SELECT Id, (SELECT FIELDS(ALL) FROM Notes__r LIMIT 5) FROM Account": 4,
    "SELECT Id, (SELECT toLabel(Name) FROM Notes__r) FROM Account": "INVALID_FIELD",
    "SELECT FIELDS(STANDARD), FIELDS(CUSTOM), Name FROM Account LIMIT 3": 3,
    (
        "SELECT Industry, COUNT(Id) FROM Account GROUP BY Industry HAVING COUNT(Id) > "
        "99999999999999999999999"
    ): 0,
    "SELECT GROUPING(Industry), COUNT(Id) FROM Account GROUP BY ROLLUP(Industry)": 4,
    (
        "SELECT COUNT(Id) FROM Account WHERE Id NOT IN (SELECT Account__c FROM "
        "Note__c) AND Id IN (SELECT Account__c FROM Contract__c)"
    ): 1,
}


@pytest.mark.parametrize(("soql", "expected"), ODD_QUERIES.items())
async def test_odd_queries_answer_or_refuse_cleanly(
    world: World, data: dict[str, str], soql: str, expected: int | str
) -> None:
    """Never an unexpected exception: rows, or a SoqlError with a Salesforce error code."""
    outcome: int | str
    try:
        outcome = (await query(world, "vp", soql)).total_size
    except SoqlError as error:
        outcome = error.code
    assert outcome == expected


# ------------------------------------------------------- system objects (User, Profile, ...)


async def _set_active(w: World, user: str, active: bool) -> None:
    async with unit_of_work(session_factory(w.engine)) as session:
        await identity.set_user_active(
            IdentityRepository(session), org_id=w.org_id, user_id=w.users[user], active=active
        )


async def names(w: World, user: str, soql: str, key: str = "Name") -> list[Any]:
    return [r[key] for r in (await query(w, user, soql)).records]


async def test_semi_joins_over_system_objects_both_ways(world: World, data: dict[str, str]) -> None:
    active_owners = (
        "SELECT Name FROM Account WHERE OwnerId {} (SELECT Id FROM User "
        "WHERE IsActive = true) ORDER BY Name"
    )
    assert await names(world, "vp", active_owners.format("IN")) == [
        "Alpha",
        "Beta",
        "Delta",
        "Gamma",
    ]
    await _set_active(world, "rep2", False)
    try:
        assert await names(world, "vp", active_owners.format("IN")) == ["Alpha", "Beta"]
        assert await names(world, "vp", active_owners.format("NOT IN")) == ["Delta", "Gamma"]
    finally:
        await _set_active(world, "rep2", True)
    # what `sf org display user` sends: the profile of one user
    profile = "SELECT Name FROM Profile WHERE Id IN (SELECT ProfileId FROM User WHERE Id = '{}')"
    assert await names(world, "rep1", profile.format(world.users["admin"])) == [
        "System Administrator"
    ]
    assert await names(world, "admin", profile.format(world.users["rep1"])) == ["Standard User"]
    # a system object outside, records inside: only the records the caller may read decide
    owners = "SELECT Username FROM User WHERE Id IN (SELECT OwnerId FROM Account) ORDER BY Username"
    assert await names(world, "rep1", owners, "Username") == ["rep1@records.test"]
    assert await names(world, "vp", owners, "Username") == [
        "rep1@records.test",
        "rep2@records.test",
    ]
    assert (await refused(world, "outsider", owners)).code == "INVALID_TYPE"
    wrong_target = await refused(
        world, "vp", "SELECT Name FROM Account WHERE OwnerId IN (SELECT ProfileId FROM User)"
    )
    assert (wrong_target.code, "same object type" in str(wrong_target)) == ("INVALID_FIELD", True)
    hidden = await refused(
        world, "vp", "SELECT Name FROM Account WHERE OwnerId IN (SELECT Id FROM User WHERE X = 1)"
    )
    assert hidden.code == "INVALID_FIELD"


async def test_owner_paths_read_every_user_field(world: World, data: dict[str, str]) -> None:
    page = await query(
        world,
        "rep1",
        "SELECT Name, Owner.IsActive, Owner.Alias, Owner.Username, Owner.Profile.Name, "
        "Owner.UserRole.Name, CreatedBy.Email, LastModifiedBy.TimeZoneSidKey FROM Account "
        "WHERE Owner.IsActive = true AND Owner.Profile.Name = 'Standard User' ORDER BY Name",
    )
    alpha = page.records[0]
    assert [r["Name"] for r in page.records] == ["Alpha", "Beta"]
    assert alpha["Owner"] == {
        "attributes": {"type": "User"},
        "IsActive": True,
        "Alias": "rep1",
        "Username": "rep1@records.test",
        "Profile": {"attributes": {"type": "Profile"}, "Name": "Standard User"},
        "UserRole": {"attributes": {"type": "UserRole"}, "Name": "Rep"},
    }
    rep1 = (
        await query(
            world,
            "rep1",
            f"SELECT Email, TimeZoneSidKey FROM User WHERE Id = '{world.users['rep1']}'",
        )
    ).records[0]
    assert alpha["CreatedBy"] == {"attributes": {"type": "User"}, "Email": rep1["Email"]}
    assert alpha["LastModifiedBy"]["TimeZoneSidKey"] == rep1["TimeZoneSidKey"]
    unknown = await refused(world, "rep1", "SELECT Owner.PasswordHash FROM Account")
    assert unknown.code == "INVALID_FIELD"
    grouped = await rows(
        world,
        "vp",
        "SELECT Owner.Alias, COUNT(Id) FROM Account GROUP BY Owner.Alias ORDER BY Owner.Alias",
    )
    assert grouped == [{"Alias": "rep1", "expr0": 2}, {"Alias": "rep2", "expr0": 2}]
    caller = await world.caller("rep1")
    async with unit_of_work(session_factory(world.engine), readonly=True) as session:
        view = await world.metadata.view(session, world.org_id)
        access = await world.access.for_caller(session, caller)
        with counting(world.engine) as statements:
            paths = await run_query(
                session,
                view=view,
                access=access,
                soql="SELECT Owner.Profile.Name, Owner.UserRole.Name FROM Account LIMIT 5",
            )
    assert paths.records[0]["Owner"]["Profile"]["Name"] == "Standard User"
    assert len(statements) == 1  # the parents are joins of the one statement


async def test_aggregates_and_fields_on_system_objects(world: World, data: dict[str, str]) -> None:
    assert await rows(world, "rep1", "SELECT IsActive, COUNT(Id) FROM User GROUP BY IsActive") == [
        {"IsActive": True, "expr0": 6}
    ]
    by_profile = await rows(
        world,
        "rep1",
        "SELECT Profile.Name, COUNT(Id) n FROM User GROUP BY Profile.Name ORDER BY Profile.Name",
    )
    assert by_profile == [
        {"Name": "Standard User", "n": 5},
        {"Name": "System Administrator", "n": 1},
    ]
    distinct = await rows(world, "rep1", "SELECT COUNT_DISTINCT(UserRoleId) roles FROM User")
    assert distinct == [{"roles": 4}]
    summed = await refused(world, "rep1", "SELECT SUM(IsActive) FROM User")
    assert summed.code == "INVALID_FIELD"
    standard = await query(world, "rep1", "SELECT FIELDS(STANDARD) FROM User LIMIT 10")
    assert standard.total_size == 6
    assert {"Id", "Username", "Name", "Email", "IsActive", "ProfileId", "Alias"} <= set(
        standard.records[0]
    )
    assert not [k for k in standard.records[0] if "password" in k.lower()]
    custom = await query(world, "rep1", "SELECT FIELDS(CUSTOM) FROM User LIMIT 10")
    assert set(custom.records[0]) == {"attributes", "Id"}
    everything = await query(world, "rep1", "SELECT FIELDS(ALL) FROM Profile LIMIT 10")
    assert {r["Name"] for r in everything.records} == {"Standard User", "System Administrator"}


async def test_permission_set_assignments_are_read_only_projections(
    world: World, data: dict[str, str]
) -> None:
    soql = (
        "SELECT Id, AssigneeId, PermissionSetId, PermissionSet.Name, Assignee.Username "
        "FROM PermissionSetAssignment ORDER BY Assignee.Username, PermissionSet.Name"
    )
    every = (await query(world, "admin", soql)).records
    assert [
        (r["Assignee"]["Username"].split("@")[0], r["PermissionSet"]["Name"]) for r in every
    ] == [
        ("rep1", "Deals"),
        ("rep1", "Sales"),
        ("rep2", "Deals"),
        ("rep2", "Sales"),
        ("support", "Sales"),
        ("vp", "Deals"),
        ("vp", "Sales"),
    ]
    sets = {
        r["Name"]: r["Id"]
        for r in (await query(world, "admin", "SELECT Id, Name FROM PermissionSet")).records
    }
    for row in every:
        assert row["PermissionSetId"] == sets[row["PermissionSet"]["Name"]]
        assert row["Id"] == assignment_id(row["AssigneeId"], row["PermissionSetId"])
        assert row["Id"].startswith("0Pa")
        assert to_18(row["Id"][:15]) == row["Id"]
    assert len({r["Id"] for r in every}) == len(every)
    assert [r["Id"] for r in (await query(world, "admin", soql)).records] == [
        r["Id"] for r in every
    ]  # stable
    # what a client asks before assigning: is this set assigned to this user already?
    one = every[1]
    pinned = await query(
        world,
        "admin",
        f"SELECT Id FROM PermissionSetAssignment WHERE AssigneeId = '{one['AssigneeId']}' "
        f"AND PermissionSetId = '{one['PermissionSetId']}'",
    )
    assert [r["Id"] for r in pinned.records] == [one["Id"]]
    by_id = await query(
        world, "admin", f"SELECT AssigneeId FROM PermissionSetAssignment WHERE Id = '{one['Id']}'"
    )
    assert [r["AssigneeId"] for r in by_id.records] == [one["AssigneeId"]]
    holders = await names(
        world,
        "admin",
        "SELECT Username FROM User WHERE Id IN (SELECT AssigneeId FROM "
        "PermissionSetAssignment WHERE PermissionSet.Name = 'Deals') ORDER BY Username",
        "Username",
    )
    assert holders == ["rep1@records.test", "rep2@records.test", "vp@records.test"]
    # anyone but an administrator reads their own assignments only
    own = await query(world, "rep1", "SELECT AssigneeId FROM PermissionSetAssignment")
    assert {r["AssigneeId"] for r in own.records} == {world.users["rep1"]}
    assert own.total_size == 2
    assert (await query(world, "outsider", "SELECT Id FROM PermissionSetAssignment")).records == []
    counted = await rows(
        world,
        "admin",
        "SELECT PermissionSet.Name, COUNT(Id) FROM PermissionSetAssignment "
        "GROUP BY PermissionSet.Name ORDER BY PermissionSet.Name",
    )
    assert counted == [{"Name": "Deals", "expr0": 3}, {"Name": "Sales", "expr0": 4}]
