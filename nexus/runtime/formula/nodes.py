"""Formula building blocks shared by the compiler and the function library."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any


class FormulaError(Exception):
    def __init__(self, reason: str, line: int = 1, column: int = 1) -> None:
        super().__init__(f"line {line}, column {column}: {reason}")
        self.reason = reason
        self.line = line
        self.column = column


@dataclass
class Context:
    """What a formula sees: the record (lower-case paths), its prior values, and the clock."""

    values: Mapping[str, Any]
    prior: Mapping[str, Any] | None = None
    is_new: bool = False
    now: datetime = field(default_factory=lambda: datetime.now(UTC).replace(tzinfo=None))


Fn = Callable[[Context], Any]


@dataclass(frozen=True)
class Node:
    type: str
    fn: Fn
    depth: int = 1
    literal: Any = None
    path: str | None = None  # set for field references


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
