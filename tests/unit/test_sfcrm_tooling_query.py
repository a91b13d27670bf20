"""The Tooling API's SOQL subset (`tooling/query`): what it parses, what it refuses, and how
its WHERE, ORDER BY and LIMIT pick rows; `LIKE` without regular expressions."""

from __future__ import annotations

from typing import Any

import pytest

from nexus.apps.sfcrm.errors import SfError
from nexus.apps.sfcrm.tooling import Condition, like, parse, run

ROWS: list[dict[str, Any]] = [
    {
        "attributes": {"type": "FieldDefinition", "url": "/x/Account.Name"},
        "QualifiedApiName": name,
        "Length": length,
        "IsNillable": nillable,
        "EntityDefinition": {"attributes": {"type": "EntityDefinition"}, "Label": "Account"},
    }
    for name, length, nillable in (
        ("Name", 255, False),
        ("BillingCity", 40, True),
        ("BillingCountry", 80, True),
        ("Phone", 40, True),
    )
]


def test_parse_the_queries_clients_send() -> None:
    query = parse(
        "select QualifiedApiName, EntityDefinition.Label from FieldDefinition where "
        "EntityDefinition.QualifiedApiName = 'Account' and QualifiedApiName in ('a', 'b') "
        "and Label like 'x%' and IsNillable != false order by QualifiedApiName desc limit 7"
    )
    assert query.fields == ["QualifiedApiName", "EntityDefinition.Label"]
    assert query.source == "FieldDefinition"
    assert query.where == [
        Condition("EntityDefinition.QualifiedApiName", "=", ["Account"]),
        Condition("QualifiedApiName", "in", ["a", "b"]),
        Condition("Label", "like", ["x%"]),
        Condition("IsNillable", "!=", [False]),
    ]
    assert (query.order, query.limit) == (("QualifiedApiName", True), 7)
    assert parse("SELECT Id FROM X WHERE Name = 'O\\'Brien'").where[0].values == ["O'Brien"]


@pytest.mark.parametrize(
    "soql",
    [
        "",
        "SELECT FROM X",
        "SELECT Id X",
        "SELECT Id FROM X WHERE",
        "SELECT Id FROM X WHERE Name > 'a'",
        "SELECT Id FROM X WHERE Name IN 'a'",
        "SELECT Id FROM X LIMIT -1",
        "SELECT Id FROM X LIMIT 1 OFFSET 2",
        "SELECT Id FROM X WHERE Name = 'unterminated",
        "SELECT Id; DROP TABLE X",
        "SELECT Id FROM X" + " AND" * 10,
    ],
)
def test_malformed_queries_are_malformed_query(soql: str) -> None:
    with pytest.raises(SfError) as caught:
        parse(soql)
    assert (caught.value.status, caught.value.code) == (400, "MALFORMED_QUERY")


def test_where_order_limit_and_projection() -> None:
    query = parse(
        "SELECT QualifiedApiName, EntityDefinition.Label FROM FieldDefinition "
        "WHERE IsNillable = true AND QualifiedApiName LIKE 'billing%' "
        "ORDER BY Length DESC LIMIT 1"
    )
    assert run(query, ROWS) == [
        {
            "attributes": ROWS[2]["attributes"],
            "QualifiedApiName": "BillingCountry",
            "EntityDefinition": {"attributes": {"type": "EntityDefinition"}, "Label": "Account"},
        }
    ]
    by_length = run(parse("SELECT QualifiedApiName FROM F ORDER BY Length DESC"), ROWS)
    assert [r["QualifiedApiName"] for r in by_length] == [
        "Name",  # 255 > 80: numbers compare as numbers, not as text
        "BillingCountry",
        "BillingCity",
        "Phone",
    ]
    names = run(parse("SELECT QualifiedApiName FROM F WHERE Length IN (40, 255)"), ROWS)
    assert [r["QualifiedApiName"] for r in names] == ["Name", "BillingCity", "Phone"]


def test_an_unknown_column_is_invalid_field() -> None:
    with pytest.raises(SfError) as caught:
        run(parse("SELECT Nope FROM FieldDefinition"), ROWS)
    assert (caught.value.code, caught.value.message) == (
        "INVALID_FIELD",
        "No such column 'Nope' on entity 'FieldDefinition'",
    )
    with pytest.raises(SfError):
        run(parse("SELECT Name FROM F WHERE attributes = 'x'"), ROWS)  # no envelope column


@pytest.mark.parametrize(
    ("value", "pattern", "matches"),
    [
        ("BillingCity", "Billing%", True),
        ("BillingCity", "billing%", True),
        ("BillingCity", "%city", True),
        ("BillingCity", "B_lling%", True),
        ("BillingCity", "%x%", False),
        ("abc", "abc", True),
        ("abc", "ab", False),
        ("", "%", True),
        ("ab", "a_", True),
        ("a", "a_", False),
        (None, "%", False),
    ],
)
def test_like(value: Any, pattern: str, matches: bool) -> None:
    assert like(value, pattern) is matches


def test_like_stays_linear_on_hostile_patterns() -> None:
    assert like("a" * 255, "%a" * 2000 + "b") is False  # a regex would backtrack for ages
