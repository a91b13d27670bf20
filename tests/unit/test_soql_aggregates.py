"""The parser's side of aggregates, semi-joins, FIELDS(), toLabel() and FORMAT(): the tree it
builds, and what it refuses before any metadata is read (Salesforce's rules)."""

from __future__ import annotations

from datetime import date, datetime
from decimal import Decimal

import pytest

from nexus.runtime.metadata.definitions import FieldDef
from nexus.runtime.query.functions import format_display, to_label
from nexus.runtime.query.parser import Call, Path, SelectItem, SoqlError, parse_soql, parse_sosl


def test_an_aggregate_query_keeps_its_items_groups_having_and_order() -> None:
    query = parse_soql(
        "select Industry, count(Id), SUM(Revenue__c) total from Account where Name like 'A%' "
        "group by Industry having COUNT(Id) > 1 order by sum(Revenue__c) desc limit 5"
    )
    assert query.aggregate
    assert [i.alias for i in query.items] == [None, None, "total"]
    count = query.items[1].expr
    assert isinstance(count, Call)
    assert (count.name, count.text, count.args) == ("COUNT", "count(Id)", (Path(("Id",), 1, 24),))
    assert query.group_by == (Path(("Industry",), 1, 94),)
    assert not query.rollup
    assert query.having is not None
    having = query.having.children[0].children[0]
    assert (having.op, having.call and having.call.text, having.operator) == (
        "compare",
        "COUNT(Id)",
        ">",
    )
    assert query.order[0].call is not None
    assert (query.order[0].call.text, query.order[0].descending) == ("sum(Revenue__c)", True)
    assert query.limit == 5


def test_count_rollup_and_plain_queries() -> None:
    assert parse_soql("SELECT COUNT() FROM Account").count
    assert not parse_soql("SELECT COUNT() FROM Account").aggregate
    rollup = parse_soql(
        "SELECT LeadSource, GROUPING(LeadSource) g, COUNT(Name) FROM Lead "
        "GROUP BY ROLLUP(LeadSource, Rating)"
    )
    assert rollup.rollup
    assert [p.text for p in rollup.group_by] == ["LeadSource", "Rating"]
    plain = parse_soql("SELECT Name, Account.Name FROM Contact")
    assert not plain.aggregate
    assert plain.items == (
        SelectItem(Path(("Name",), 1, 8)),
        SelectItem(Path(("Account", "Name"), 1, 14)),
    )
    # function names are not reserved words: fields may share them
    named = parse_soql("SELECT Count, Format, Sum__c FROM Thing__c ORDER BY Count")
    assert [p.text for p in named.fields] == ["Count", "Format", "Sum__c"]


def test_functions_of_a_record_query() -> None:
    query = parse_soql(
        "SELECT FIELDS(STANDARD), toLabel(Industry), FORMAT(AnnualRevenue) revenue FROM Account"
    )
    assert not query.aggregate
    assert [(i.expr.text, i.alias) for i in query.items] == [
        ("FIELDS(STANDARD)", None),
        ("toLabel(Industry)", None),
        ("FORMAT(AnnualRevenue)", "revenue"),
    ]
    assert parse_soql("SELECT FIELDS(ALL) FROM Account LIMIT 200").items
    assert parse_soql("SELECT FORMAT(MIN(CloseDate)) d FROM Opportunity").aggregate


def test_semi_and_anti_joins_parse_into_conditions() -> None:
    query = parse_soql(
        "SELECT Id FROM Account WHERE Id IN (SELECT AccountId FROM Contact WHERE Title = 'CEO') "
        "AND Id NOT IN (SELECT AccountId FROM Opportunity) AND Name != null"
    )
    assert query.where is not None
    semi, anti, _ = query.where.children[0].children
    assert (semi.op, semi.path, anti.op) == ("in_select", Path(("Id",), 1, 30), "not_in_select")
    assert semi.query is not None
    assert (semi.query.object, semi.query.fields[0].text) == ("Contact", "AccountId")
    assert semi.query.where is not None


@pytest.mark.parametrize(
    ("soql", "message"),
    [
        ("SELECT Name n FROM Account", "Only aggregate expressions use field aliasing: Name n"),
        ("SELECT FIELDS(ALL) FROM Account", "must have a LIMIT of at most 200 for FIELDS(ALL)"),
        ("SELECT FIELDS(CUSTOM) FROM Account LIMIT 201", "LIMIT of at most 200"),
        ("SELECT FIELDS(SOME) FROM Account", "FIELDS takes ALL, STANDARD or CUSTOM"),
        ("SELECT FIELDS(ALL), COUNT(Id) FROM Account LIMIT 1", "cannot be used in an aggregate"),
        ("SELECT Foo(Id) FROM Account", "function Foo() is not supported (line 1, column 8)"),
        ("SELECT CALENDAR_YEAR(CreatedDate) FROM Account", "CALENDAR_YEAR() is not supported"),
        ("SELECT COUNT() FROM Account GROUP BY Name", "COUNT() cannot be used with GROUP BY"),
        ("SELECT COUNT(), Name FROM Account", "COUNT() cannot be combined"),
        ("SELECT SUM(Id, Name) FROM Account", "SUM takes one field"),
        ("SELECT SUM(MAX(Amount)) FROM Account", "SUM takes one field"),
        ("SELECT GROUPING(Name) FROM Account GROUP BY Name", "needs GROUP BY ROLLUP"),
        ("SELECT Name FROM Account GROUP BY CUBE(Name)", "GROUP BY CUBE(Name) is not supported"),
        ("SELECT Name FROM Account GROUP BY ROLLUP(Name), Type", "cannot be combined"),
        ("SELECT Name FROM Account GROUP BY ROLLUP(A, B, C, D)", "one to three fields"),
        ("SELECT Id FROM Account WHERE COUNT(Id) > 1", "use HAVING"),
        ("SELECT Id FROM Account WHERE toLabel(Industry) = 'x'", "cannot be used in WHERE"),
        ("SELECT Name FROM Account ORDER BY COUNT(Id)", "needs an aggregate query"),
        ("SELECT Name, COUNT(Id) FROM Account GROUP BY Name ORDER BY toLabel(Name)", "ORDER BY"),
        ("SELECT Name, (SELECT Id FROM Contacts), COUNT(Id) FROM Account", "relationship sub"),
        (
            "SELECT Industry FROM Account GROUP BY Industry HAVING Id IN (SELECT AccountId FROM "
            "Contact)",
            "HAVING cannot contain semi-join",
        ),
    ],
)
def test_what_salesforce_refuses_is_refused_before_metadata(soql: str, message: str) -> None:
    with pytest.raises(SoqlError) as error:
        parse_soql(soql)
    assert error.value.code == "MALFORMED_QUERY"
    assert message in str(error.value)


SUB = "(SELECT AccountId FROM Contact)"


@pytest.mark.parametrize(
    ("where", "message"),
    [
        (f"Name = 'x' OR Id IN {SUB}", "cannot be combined with OR or NOT"),
        (f"NOT Id IN {SUB}", "cannot be combined with OR or NOT"),
        (f"NOT (Name = 'x' AND Id IN {SUB})", "cannot be combined with OR or NOT"),
        (f"Id IN {SUB} AND Id IN {SUB} AND Id NOT IN {SUB}", "at most 2 semi-join"),
        (
            "Id IN (SELECT AccountId FROM Contact WHERE Id IN (SELECT ContactId FROM Case))",
            "cannot be nested",
        ),
        ("Id IN (SELECT AccountId, Name FROM Contact)", "exactly one Id or reference field"),
        ("Id IN (SELECT COUNT() FROM Contact)", "exactly one Id or reference field"),
        ("Id IN (SELECT toLabel(AccountId) FROM Contact)", "exactly one Id or reference field"),
        ("Id IN (SELECT AccountId FROM Contact ORDER BY Name)", "cannot use ORDER BY or LIMIT"),
        ("Id IN (SELECT AccountId FROM Contact LIMIT 5)", "cannot use ORDER BY or LIMIT"),
    ],
)
def test_semi_join_rules(where: str, message: str) -> None:
    with pytest.raises(SoqlError) as error:
        parse_soql(f"SELECT Id FROM Account WHERE {where}")
    assert error.value.code == "MALFORMED_QUERY"
    assert message in str(error.value)


def test_two_semi_joins_and_one_in_a_child_subquery_are_fine() -> None:
    parse_soql(f"SELECT Id FROM Account WHERE Id IN {SUB} AND Id NOT IN {SUB}")
    parse_soql(f"SELECT Id, (SELECT Id FROM Contacts WHERE AccountId IN {SUB}) FROM Account")


def test_find_without_returning() -> None:
    search = parse_sosl("FIND {Acme*}")
    assert (search.term, search.scope, search.returning, search.limit) == ("Acme*", "ALL", (), None)
    scoped = parse_sosl("FIND {x} IN EMAIL FIELDS LIMIT 5")
    assert (scoped.scope, scoped.returning, scoped.limit) == ("EMAIL", (), 5)
    with pytest.raises(SoqlError) as error:
        parse_sosl("FIND {x} RETURNING Account(Id WHERE Id IN (SELECT Id FROM A) OR Id = 'x')")
    assert "OR or NOT" in str(error.value)


def test_format_is_locale_neutral() -> None:
    money = format_display("currency", 2)
    assert money is not None
    assert money(Decimal("1234567.5")) == "1,234,567.50"
    assert money(0.1 + 0.2) == "0.30"
    count = format_display("number", 0)
    assert count is not None
    assert count(Decimal(1500)) == "1,500"
    share = format_display("percent", 1)
    assert share is not None
    assert share(Decimal("12.25")) == "12.2%"  # half-even, as Decimal formats
    day = format_display("date", 0)
    assert day is not None
    assert day(date(2026, 1, 5)) == "2026-01-05"
    moment = format_display("datetime", 0)
    assert moment is not None
    assert moment(datetime(2026, 1, 5, 14, 3, 5)) == "2026-01-05 14:03:05 UTC"
    assert format_display("text", 0) is None


def test_to_label_maps_values_and_refuses_other_types() -> None:
    stage = FieldDef.model_validate(
        {
            "api_name": "Stage__c",
            "label": "Stage",
            "type": "multi_picklist",
            "values": [{"value": "a", "label": "Alpha"}, {"value": "b"}],
        }
    )
    label = to_label(stage, Path(("Stage__c",)))
    assert label("a;b;gone") == "Alpha;b;gone"
    text = FieldDef.model_validate(
        {"api_name": "Name", "label": "Name", "type": "text", "length": 10}
    )
    with pytest.raises(SoqlError) as error:
        to_label(text, Path(("Name",)))
    assert error.value.code == "INVALID_FIELD"
