"""Formula building blocks shared by the compiler and the function library."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import or_


class FormulaError(Exception):
    def __init__(self, reason: str, line: int = 1, column: int = 1) -> None:
        super().__init__(f"line {line}, column {column}: {reason}")
        self.reason = reason
        self.line = line
        self.column = column


@dataclass
class Context:
    """What a formula sees: the record (lower-case paths), its prior values, and the clock."""

    values: dict[str, Any]
    prior: Mapping[str, Any] | None = None
    is_new: bool = False
    now: datetime = field(default_factory=lambda: datetime.now(UTC).replace(tzinfo=None))


Fn = Callable[[Context], Any]
#: A formula as SQL: given the SQL expression of each field path it references, its expression.
#: Boolean formulas compile to two-valued SQL (never NULL), matching evaluation in Python.
Column = Callable[[str], Any]
SqlFn = Callable[[Column], Any]


@dataclass(frozen=True)
class Node:
    type: str
    fn: Fn
    depth: int = 1
    literal: Any = None
    path: str | None = None  # set for field references
    sql: SqlFn | None = None  # None when the database cannot compute this node


def fail(meta: Any, reason: str) -> FormulaError:
    return FormulaError(reason, getattr(meta, "line", 1), getattr(meta, "column", 1))


def num(value: Any) -> Decimal | None:
    if value is None:
        return None
    return value if isinstance(value, Decimal) else Decimal(str(value))


def truthy(value: Any) -> bool:
    return bool(value) if value is not None else False


def const(value: Any) -> Fn:
    return lambda _ctx: value


def sql_of(args: Sequence[Node], build: Callable[..., Any]) -> SqlFn | None:
    """The SQL of a node whose arguments all compile: `build(*argument_sql)`; else None."""
    parts = [a.sql for a in args]
    if any(p is None for p in parts):
        return None
    ready: list[SqlFn] = [p for p in parts if p is not None]
    return lambda column: build(*[p(column) for p in ready])


def blank_sql(kind: str, expr: Any) -> Any:
    """ISBLANK in SQL: null, or the empty string for text."""
    if kind in ("text", "picklist", "multipicklist"):
        return or_(expr.is_(None), expr == "")
    return expr.is_(None)
