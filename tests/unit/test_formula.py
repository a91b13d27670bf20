"""The formula language: functions with nulls, operators, type errors with positions, safety."""

from __future__ import annotations

from datetime import date, datetime
from decimal import Decimal
from typing import Any

import pytest
from sqlalchemy import Boolean, Column, MetaData, Numeric, String, Table, create_engine, select

from nexus.runtime.formula.compiler import MAX_DEPTH, Context, FormulaError, compile_formula

ENV = {
    "amount": "number",
    "qty": "number",
    "name": "text",
    "stage": "picklist",
    "tags": "multipicklist",
    "closed": "date",
    "stamp": "datetime",
    "flag": "boolean",
    "account.name": "text",
    "account.owner.name": "text",
}
NOW = datetime(2026, 11, 29, 10, 30, 0)
VALUES: dict[str, Any] = {
    "amount": Decimal("150.50"),
    "qty": Decimal(3),
    "name": "  Acme Corp ",
    "stage": "Won",
    "tags": "a;b",
    "closed": date(2026, 1, 31),
    "stamp": NOW,
    "flag": True,
    "account.name": "Parent",
    "account.owner.name": "Olga",
}


def run(source: str, values: dict[str, Any] | None = None, **ctx: Any) -> Any:
    formula = compile_formula(source, ENV)
    return formula.evaluate(Context(values=VALUES if values is None else values, now=NOW, **ctx))


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("1 + 2 * 3", Decimal(7)),
        ("(1 + 2) * 3", Decimal(9)),
        ("2 ^ 3", Decimal(8)),
        ("-Qty + 1", Decimal(-2)),
        ("Amount / 0", None),
        ("Amount > 100 && Flag", True),
        ("Amount > 100 || 1 = 2", True),
        ("!(Qty = 3)", False),
        ("Qty <> 3", False),
        ("Qty != 4", True),
        ("'a' & \"b\" & Name", "ab  Acme Corp "),
        ("IF(Qty >= 3, 'many', 'few')", "many"),
        ("CASE(Qty, 1, 'one', 3, 'three', 'other')", "three"),
        ("CASE(Qty, 1, 'one', 'other')", "other"),
        ("AND(Flag, Qty = 3)", True),
        ("OR(Qty = 1, Qty = 2)", False),
        ("NOT(Flag)", False),
        ("ISBLANK(Name)", False),
        ("ISNULL(Amount)", False),
        ("BLANKVALUE(Name, 'x')", "  Acme Corp "),
        ("LEN(Name)", Decimal(12)),
        ("LEFT(TRIM(Name), 4)", "Acme"),
        ("RIGHT(TRIM(Name), 4)", "Corp"),
        ("MID(TRIM(Name), 6, 4)", "Corp"),
        ("UPPER(TRIM(Name))", "ACME CORP"),
        ("LOWER('AbC')", "abc"),
        ("CONTAINS(Name, 'Acme')", True),
        ("BEGINS(TRIM(Name), 'Ac')", True),
        ("TEXT(Qty)", "3"),
        ("TEXT(Amount)", "150.50"),
        ("TEXT(Stage)", "Won"),
        ("TEXT(Closed)", "2026-01-31"),
        ("VALUE('12.5') + 1", Decimal("13.5")),
        ("VALUE('twelve')", None),
        ("ROUND(Amount, 0)", Decimal(151)),
        ("ROUND(2.345, 2)", Decimal("2.35")),
        ("ABS(-4)", Decimal(4)),
        ("MAX(1, Qty, 2)", Decimal(3)),
        ("MIN(1, Qty, 2)", Decimal(1)),
        ("TODAY()", date(2026, 11, 29)),
        ("NOW()", NOW),
        ("DATE(2026, 2, 30)", None),
        ("DATE(2026, 2, 28)", date(2026, 2, 28)),
        ("YEAR(Closed)", Decimal(2026)),
        ("MONTH(Closed)", Decimal(1)),
        ("DAY(Closed)", Decimal(31)),
        ("ADDMONTHS(Closed, 1)", date(2026, 2, 28)),
        ("Closed + 1", date(2026, 2, 1)),
        ("TODAY() - Closed", Decimal(302)),
        ("ISPICKVAL(Stage, 'Won')", True),
        ("INCLUDES(Tags, 'b')", True),
        ("INCLUDES(Tags, 'c')", False),
        ("REGEX(TRIM(Name), '[A-Za-z ]+')", True),
        ("Account.Owner.Name & '/' & Account.Name", "Olga/Parent"),
        ("ISNEW()", False),
    ],
)
def test_functions_and_operators(source: str, expected: Any) -> None:
    assert run(source) == expected


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("Amount + 1", None),
        ("Amount > 1", False),
        ("ISBLANK(Amount)", True),
        ("ISBLANK(Name)", True),
        ("BLANKVALUE(Amount, 0)", Decimal(0)),
        ("LEN(Name)", None),
        ("UPPER(Name)", None),
        ("'x' & Name", "x"),
        ("IF(Flag, 1, 2)", Decimal(2)),
        ("Flag && True", False),
        ("TEXT(Amount)", None),
        ("ROUND(Amount, 2)", None),
        ("MAX(Amount, 1)", None),
        ("YEAR(Closed)", None),
        ("ADDMONTHS(Closed, 1)", None),
        ("ISPICKVAL(Stage, 'Won')", False),
        ("INCLUDES(Tags, 'a')", False),
        ("CONTAINS(Name, 'a')", False),
        ("REGEX(Name, 'a')", False),
        ("Name = ''", True),
        ("Closed + 1", None),
    ],
)
def test_nulls(source: str, expected: Any) -> None:
    assert run(source, values={}) == expected


def test_prior_values() -> None:
    prior = {**VALUES, "stage": "Open"}
    assert run("ISCHANGED(Stage)", prior=prior) is True
    assert run("ISCHANGED(Qty)", prior=prior) is False
    assert run("TEXT(PRIORVALUE(Stage))", prior=prior) == "Open"
    assert run("ISCHANGED(Stage)") is False  # a new record has no prior values
    assert run("ISNEW()", is_new=True) is True


@pytest.mark.parametrize(
    ("source", "reason", "column"),
    [
        ("Amount + Name", "+ needs numbers, not text", 1),
        ("IF(Amount, 1, 2)", "IF needs a boolean condition", 1),
        ("Bogus__c > 1", "unknown field Bogus__c", 1),
        ("NOPE(1)", "unknown function NOPE", 1),
        ("IF(Amount > , 1, 2)", "syntax error at ','", 13),
        ("Stage = 'Won'", "compare a picklist with ISPICKVAL", 1),
        ("LEN(1, 2)", "LEN takes 1 argument(s), not 2", 1),
        ("IF(Flag, 1, 'x')", "results must have one type", 1),
        ("REGEX(Name, Name)", "literal pattern", 1),
        ("REGEX(Name, '(')", "invalid regular expression", 1),
        ("ISCHANGED(1)", "ISCHANGED takes one field", 1),
    ],
)
def test_type_errors_name_position_and_reason(source: str, reason: str, column: int) -> None:
    with pytest.raises(FormulaError) as caught:
        compile_formula(source, ENV)
    assert reason in caught.value.reason
    assert caught.value.column == column


def test_expected_result_type_is_checked() -> None:
    compile_formula("Amount > 1", ENV, expect="boolean")
    with pytest.raises(FormulaError, match="the formula is number, boolean is needed"):
        compile_formula("Amount + 1", ENV, expect="boolean")


def test_bounded_length_and_depth() -> None:
    with pytest.raises(FormulaError, match="at most 3900"):
        compile_formula("1+" * 2000 + "1", ENV)
    deep = "ABS(" * (MAX_DEPTH + 1) + "1" + ")" * (MAX_DEPTH + 1)
    with pytest.raises(FormulaError, match="nests deeper"):
        compile_formula(deep, ENV)


def test_no_python_escapes() -> None:
    for attempt in ("__import__('os')", "name.__class__", "Amount.__class__"):
        with pytest.raises(FormulaError):
            compile_formula(attempt, ENV)


SQL_ENV = {"amount": "number", "name": "text", "code": "text", "active": "boolean"}
SQL_ROWS = [
    {"amount": Decimal("150"), "name": "Acme", "code": "", "active": True},
    {"amount": Decimal("0"), "name": None, "code": "x", "active": False},
    {"amount": None, "name": "beta", "code": None, "active": None},
]


@pytest.mark.parametrize(
    "source",
    [
        "Amount > 100",
        "Amount / 0",
        "Amount / 4 + 1",
        "-Amount * 2",
        "Name = 'Acme'",
        "Name != 'Acme'",
        "Code = ''",
        "Name = Code",
        "ISBLANK(Code)",
        "ISBLANK(Amount) || Amount < 1",
        "NOT(Active)",
        "!(Amount >= 150) && Active",
        "IF(Amount > 100, 'big', 'small')",
        "BLANKVALUE(Name, 'none')",
        "UPPER(Name) & '-' & LOWER(Code)",
        "CASE(Name, 'Acme', 1, 'beta', 2, 0)",
        "ROUND(ABS(Amount / 7), 2)",
        "CONTAINS(Name, 'cm')",
        "AND(Active, OR(Amount > 1000, TRUE))",
    ],
)
def test_sql_compilation_agrees_with_evaluation(source: str) -> None:
    """The SQL a formula compiles to (for SOQL WHERE / ORDER BY) gives what Python gives,
    nulls included: booleans are two-valued, division by zero is null, blank text is ''."""
    table = Table(
        "t",
        MetaData(),
        Column("amount", Numeric(18, 2)),
        Column("name", String(80)),
        Column("code", String(10)),
        Column("active", Boolean),
    )
    formula = compile_formula(source, SQL_ENV)
    assert formula.sql is not None, formula.not_in_sql
    expr = formula.sql(lambda path: table.c[path])
    engine = create_engine("sqlite://")
    table.metadata.create_all(engine)
    with engine.begin() as connection:
        connection.execute(table.insert(), SQL_ROWS)
        for row in SQL_ROWS:
            (computed,) = connection.execute(
                select(expr).where(
                    table.c.name.is_(row["name"])
                    if row["name"] is None
                    else table.c.name == row["name"]
                )
            ).one()
            expected = formula.evaluate(Context(values=dict(row)))
            if formula.type == "boolean":
                assert bool(computed) is bool(expected), (source, row)
            elif formula.type == "number" and expected is not None:
                assert Decimal(str(computed)) == pytest.approx(expected), (source, row)
            else:
                assert computed == expected, (source, row)


def test_formulas_the_database_cannot_compute_say_why() -> None:
    formula = compile_formula("LEFT(Name, 2) & TEXT(Closed + 1)", ENV)
    assert formula.sql is None
    assert formula.not_in_sql == ("LEFT()", "date arithmetic")
