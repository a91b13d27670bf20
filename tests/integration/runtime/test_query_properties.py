"""Property: for generated WHERE clauses, the SOQL engine returns exactly what a naive Python
filter over the same records returns, for callers with and without row-level restrictions."""

from __future__ import annotations

from collections.abc import AsyncIterator
from decimal import Decimal
from typing import Any

import pytest
import pytest_asyncio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nexus.platform.db.engine import session_factory, unit_of_work
from nexus.runtime.query.engine import run_query
from tests.integration.runtime.test_records import World, create
from tests.integration.runtime.test_records import world as world  # noqa: PLC0414  (fixture)

pytestmark = pytest.mark.asyncio(loop_scope="module")

NAMES = ["Apex", "Atlas", "Birch", "Cobalt", "apex", "Delta", "Ember"]
INDUSTRIES = ["Tech", "Retail", None]
REVENUES = [0, 5, 10, 100, 250]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def dataset(world: World) -> AsyncIterator[list[dict[str, Any]]]:
    rows = []
    owners = ["rep1", "rep2", "vp", "admin"]
    for i in range(16):
        owner = owners[i % len(owners)]
        fields: dict[str, Any] = {
            "Name": NAMES[i % len(NAMES)],
            "Revenue__c": REVENUES[i % len(REVENUES)],
        }
        industry = INDUSTRIES[i % len(INDUSTRIES)]
        if industry:
            fields["Industry"] = industry
        result = await world.mutate(owner, create("Account", **fields))
        assert result.results[0].success, result.results[0].errors
        rows.append(
            {
                "Id": result.results[0].id,
                "owner": owner,
                "Name": fields["Name"],
                "Industry": industry,
                "Revenue__c": Decimal(fields["Revenue__c"]),
            }
        )
    yield rows


# ------------------------------------------------------------------ generated conditions
text_value = st.sampled_from([*NAMES, "Zed"])
industry_value = st.sampled_from(["Tech", "Retail", "Mining"])
number_value = st.sampled_from([0, 5, 7, 10, 100, 300])

comparison = st.one_of(
    st.tuples(st.just("Name"), st.sampled_from(["=", "!="]), text_value),
    st.tuples(
        st.just("Industry"), st.sampled_from(["=", "!="]), st.one_of(industry_value, st.none())
    ),
    st.tuples(
        st.just("Revenue__c"), st.sampled_from(["=", "!=", "<", "<=", ">", ">="]), number_value
    ),
    st.tuples(st.just("Name"), st.just("LIKE"), st.sampled_from(["A%", "%a", "%e%", "Birch"])),
    st.tuples(
        st.just("Industry"),
        st.sampled_from(["IN", "NOT IN"]),
        st.lists(industry_value, min_size=1, max_size=2),
    ),
)
conditions = st.recursive(
    comparison.map(lambda c: ("cmp", c)),
    lambda inner: st.one_of(
        st.tuples(st.just("and"), st.lists(inner, min_size=2, max_size=3)),
        st.tuples(st.just("or"), st.lists(inner, min_size=2, max_size=3)),
        st.tuples(st.just("not"), inner),
    ),
    max_leaves=5,
)


def literal(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, str):
        return "'" + value.replace("'", "\\'") + "'"
    return str(value)


def to_soql(cond: Any) -> str:
    kind, body = cond
    if kind == "cmp":
        field, op, value = body
        if op in ("IN", "NOT IN"):
            return f"{field} {op} ({', '.join(literal(v) for v in value)})"
        return f"{field} {op} {literal(value)}"
    if kind == "not":
        return f"(NOT {to_soql(body)})"
    return "(" + f" {kind.upper()} ".join(to_soql(c) for c in body) + ")"


def like(value: str | None, pattern: str) -> bool:
    if value is None:
        return False
    import re  # noqa: PLC0415

    regex = "^" + re.escape(pattern).replace("%", ".*") + "$"
    # SQLite's LIKE and MariaDB's default collation are both case-insensitive for ASCII
    return re.match(regex, value, re.IGNORECASE) is not None


def matches(row: dict[str, Any], cond: Any) -> bool:  # noqa: PLR0911  (one branch per operator)
    kind, body = cond
    if kind == "and":
        return all(matches(row, c) for c in body)
    if kind == "or":
        return any(matches(row, c) for c in body)
    if kind == "not":
        return not matches(row, body)
    field, op, value = body
    actual = row[field]
    if field == "Revenue__c" and value is not None and op not in ("IN", "NOT IN", "LIKE"):
        value = Decimal(value)
    if op == "LIKE":
        return like(actual, value)
    if op in ("IN", "NOT IN"):
        inside = actual is not None and actual in value
        return inside if op == "IN" else not inside
    if value is None:
        return actual is None if op == "=" else actual is not None
    if op == "=":
        return actual is not None and _eq(actual, value)
    if op == "!=":
        return actual is None or not _eq(actual, value)
    if actual is None:
        return False
    return {"<": actual < value, "<=": actual <= value, ">": actual > value, ">=": actual >= value}[
        op
    ]


def _eq(a: Any, b: Any) -> bool:
    # text equality is case-insensitive on both backends' default collations
    return a.lower() == b.lower() if isinstance(a, str) and isinstance(b, str) else a == b


VISIBLE = {
    "admin": lambda row: True,
    "vp": lambda row: row["owner"] in ("vp", "rep1", "rep2"),
    "rep1": lambda row: row["owner"] == "rep1",
    "support": lambda row: row["Industry"] == "Tech",
}


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(cond=conditions, user=st.sampled_from(sorted(VISIBLE)))
async def test_soql_equals_a_naive_filter(
    world: World, dataset: list[dict[str, Any]], cond: Any, user: str
) -> None:
    soql = f"SELECT Id FROM Account WHERE {to_soql(cond)}"
    caller = await world.caller(user)
    async with unit_of_work(session_factory(world.engine), readonly=True) as session:
        view = await world.metadata.view(session, world.org_id)
        access = await world.access.for_caller(session, caller)
        page = await run_query(session, view=view, access=access, soql=soql)
    ours = {r["Id"] for r in page.records}
    ids = {row["Id"] for row in dataset}
    expected = {row["Id"] for row in dataset if VISIBLE[user](row) and matches(row, cond)}
    assert ours & ids == expected, soql
    assert page.total_size >= len(expected)
