"""The syntax tree of SOQL and SOSL (`parser` builds it): selects, their items and
functions, conditions, orderings, searches. Positions are kept for error messages."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from nexus.contracts.errors import BadRequest

#: Functions of the select list that aggregate rows (COUNT() without an argument is the count
#: query, `Select.count`).
AGGREGATES = frozenset({"COUNT", "COUNT_DISTINCT", "SUM", "AVG", "MIN", "MAX"})


class SoqlError(BadRequest):
    """MALFORMED_QUERY (syntax) or INVALID_FIELD / INVALID_TYPE (names), with position."""

    default_code = "MALFORMED_QUERY"


@dataclass(frozen=True)
class Path:
    parts: tuple[str, ...]
    line: int = 1
    column: int = 1

    @property
    def text(self) -> str:
        return ".".join(self.parts)


@dataclass(frozen=True)
class Call:
    """A function as written: `COUNT(Id)`, `toLabel(Industry)`, `FORMAT(MIN(Amount))`,
    `FIELDS(ALL)`, `ROLLUP(a, b)`. `name` is upper case; `text` keeps the caller's spelling
    (a column's display name, as Salesforce shows it)."""

    name: str
    args: tuple[Path | Call, ...]
    text: str
    line: int = 1
    column: int = 1

    @property
    def aggregate(self) -> bool:
        """An aggregate function, or FORMAT() of one."""
        if self.name in AGGREGATES:
            return True
        return self.name == "FORMAT" and any(isinstance(a, Call) and a.aggregate for a in self.args)


@dataclass(frozen=True)
class SelectItem:
    expr: Path | Call
    alias: str | None = None


@dataclass(frozen=True)
class Literal:
    kind: str  # string, number, date, datetime, null, boolean, date_literal
    value: Any


@dataclass(frozen=True)
class Condition:
    op: str  # and, or, not, compare, like, in, not_in, in_select, not_in_select, includes, excludes
    children: tuple[Condition, ...] = ()
    path: Path | None = None
    operator: str = ""
    values: tuple[Literal, ...] = ()
    call: Call | None = None  # a function on the left (HAVING COUNT(Id) > 1); path is None
    query: Select | None = None  # the sub-select of a semi-join (in_select) or anti-join


@dataclass(frozen=True)
class OrderItem:
    path: Path  # for a function, its text as one part (what a non-aggregate query reports)
    descending: bool = False
    nulls_last: bool | None = None
    call: Call | None = None  # ORDER BY COUNT(Id): aggregate queries only


@dataclass(frozen=True)
class Select:
    """One SELECT. `fields` are its plain field paths; `items` every select-list entry in
    order (fields, functions, aliases), empty for a `Select` built in code (then `fields`)."""

    fields: tuple[Path, ...]
    children: tuple[Select, ...]
    count: bool
    object: str
    object_position: tuple[int, int]
    where: Condition | None = None
    order: tuple[OrderItem, ...] = ()
    limit: int | None = None
    offset: int | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False)
    items: tuple[SelectItem, ...] = ()
    group_by: tuple[Path, ...] = ()
    rollup: bool = False  # GROUP BY ROLLUP(...)
    having: Condition | None = None

    @property
    def aggregate(self) -> bool:
        """Rows become groups: GROUP BY, HAVING or an aggregate function in the select list."""
        return bool(
            self.group_by
            or self.having is not None
            or any(isinstance(i.expr, Call) and i.expr.aggregate for i in self.items)
        )


@dataclass(frozen=True)
class Search:
    """`FIND {term} [IN scope FIELDS] [RETURNING Obj(fields [WHERE] [ORDER BY] [LIMIT]), ...]
    [LIMIT n]`: each RETURNING item is a `Select` without children or COUNT(); without
    RETURNING (`returning` empty) every searchable object the caller may read is searched."""

    term: str
    scope: str  # ALL, NAME, EMAIL, PHONE
    returning: tuple[Select, ...]
    limit: int | None = None
