"""SOSL text -> `Search`: the term, the scope, each RETURNING item as a SOQL `Select`."""

from __future__ import annotations

import pytest

from nexus.runtime.query.parser import Path, SoqlError, parse_soql, parse_sosl
from nexus.runtime.search.engine import Token, boolean_query, fts5_query, tokens


def test_find_returning_with_scope_items_and_limits() -> None:
    search = parse_sosl(
        "find {Acme \\} Co*} In Name Fields RETURNING Account(Id, Owner.Name WHERE "
        "Industry = 'Tech' ORDER BY Name DESC LIMIT 5), Contact__c LIMIT 10"
    )
    assert search.term == "Acme } Co*"
    assert search.scope == "NAME"
    assert search.limit == 10
    account, contact = search.returning
    assert account.object == "Account"
    assert [p.parts for p in account.fields] == [("Id",), ("Owner", "Name")]
    assert account.where is not None
    assert account.order[0].path == Path(("Name",), 1, 101)
    assert account.order[0].descending
    assert account.limit == 5
    assert (contact.object, contact.fields, contact.limit) == ("Contact__c", (), None)


def test_a_quoted_term_and_the_default_scope() -> None:
    search = parse_sosl("FIND 'o\\'brien' RETURNING Account")
    assert (search.term, search.scope) == ("o'brien", "ALL")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("FIND {x} RETURNING", "unexpected end of search"),
        ("FIND {x} RETURNING Account(", "unexpected end of search"),
        ("FIND x RETURNING Account", "'x' at line 1, column 6"),
        ("FIND {x} IN BODY FIELDS RETURNING Account", "'BODY' at line 1, column 13"),
        ("FIND {x}\nRETURNING Account(Name Name)", "line 2, column 24"),
        ("FIND {  } RETURNING Account", "the search term is empty"),
        ("SELECT Id FROM Account", "'SELECT' at line 1, column 1"),
    ],
)
def test_malformed_search_is_reported_with_its_position(text: str, message: str) -> None:
    with pytest.raises(SoqlError) as error:
        parse_sosl(text)
    assert error.value.code == "MALFORMED_SEARCH"
    assert message in str(error.value)


def test_soql_is_unchanged_by_the_second_start_rule() -> None:
    assert parse_soql("SELECT Name FROM Account").object == "Account"
    with pytest.raises(SoqlError) as error:
        parse_soql("FIND {x} RETURNING Account")
    assert error.value.code == "MALFORMED_QUERY"


def test_terms_become_quoted_words_never_match_syntax() -> None:
    words = tokens('acme* "OR" -(co) NEAR/2 x_y é')
    assert words == [
        Token("acme", True),
        Token("OR", False),
        Token("co", False),
        Token("NEAR", False),
        Token("2", False),
        Token("x", False),
        Token("y", False),
        Token("é", False),
    ]
    assert fts5_query(words[:3]) == '"acme"* "OR" "co"'
    assert boolean_query(words[:3]) == "+acme* +OR +co"
    assert tokens("*-()\"'") == []
