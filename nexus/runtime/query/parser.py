"""SOQL and SOSL text -> a small, typed syntax tree (positions kept for error messages)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache, lru_cache
from importlib import resources
from typing import Any

from lark import Lark, Token, Transformer, Tree, v_args
from lark.exceptions import (
    UnexpectedCharacters,
    UnexpectedEOF,
    UnexpectedInput,
    UnexpectedToken,
    VisitError,
)

from nexus.runtime.query.rules import check_select, check_where, position
from nexus.runtime.query.syntax import (
    AGGREGATES,
    Call,
    Condition,
    Literal,
    OrderItem,
    Path,
    Search,
    Select,
    SelectItem,
    SoqlError,
)

__all__ = [
    "AGGREGATES",
    "Call",
    "Condition",
    "Literal",
    "OrderItem",
    "Path",
    "Search",
    "Select",
    "SelectItem",
    "SoqlError",
    "check_select",
    "parse_soql",
    "parse_sosl",
]

MAX_SOQL = 100_000
#: Parenthesised groups and NOTs nested in one condition. SQLite's parser stack holds about 35
#: levels of the parentheses the SQL spells them with (a NOT can add two).
MAX_NESTING = 20
#: Tests in one statement. SQLite refuses expressions deeper than 1000, and `a OR b OR ...`
#: is as deep as it is long; an INCLUDES or EXCLUDES value is four tests in SQL.
MAX_TERMS = 300
MAX_OFFSET = 2000  # as Salesforce
MAX_LIMIT = 2**31 - 1  # SOQL's integer; the databases take no more than 64 bits
_COMPARISONS = {
    "compare",
    "like",
    "in_",
    "not_in",
    "in_select",
    "not_in_select",
    "includes",
    "excludes",
}


@cache
def _parser() -> Lark:
    grammar = resources.files("nexus.runtime.query").joinpath("soql.lark").read_text()
    return Lark(grammar, parser="lalr", propagate_positions=True, start=["start", "search"])


def _parse(text: str, start: str, code: str, what: str) -> Any:
    if len(text) > MAX_SOQL:
        raise SoqlError(f"a {what} has at most {MAX_SOQL} characters", code=code)
    try:
        tree = _parser().parse(text, start=start)
    except UnexpectedEOF:
        raise SoqlError(f"unexpected end of {what}", code=code) from None
    except (UnexpectedToken, UnexpectedCharacters) as exc:
        if getattr(getattr(exc, "token", None), "type", None) == "$END":
            raise SoqlError(f"unexpected end of {what}", code=code) from None
        position = getattr(exc, "pos_in_stream", None) or 0
        token = getattr(exc, "token", None) or text[position : position + 10]
        raise SoqlError(
            f"unexpected token {str(token)!r} at line {exc.line}, column {exc.column}", code=code
        ) from None
    except UnexpectedInput as exc:
        raise SoqlError(
            f"malformed {what} at line {exc.line}, column {exc.column}", code=code
        ) from None
    _check_size(tree, code, what)
    try:
        return _Build().transform(tree)
    except VisitError as exc:  # a rule refused while the tree is built (GROUP BY's shape)
        if isinstance(exc.orig_exc, SoqlError):
            raise exc.orig_exc from None
        raise


def _check_size(tree: Tree[Token], code: str, what: str) -> None:
    """Refuse what the steps after parsing cannot take: the tree transform and the SQL
    compiler recurse once per nesting level (Python's stack), SQLite bounds nesting and
    expression depth, and LIMIT and OFFSET become 64-bit SQL integers. Iterative, so a query
    nested 5,000 deep is refused here rather than overflowing the stack."""
    terms = 0
    stack: list[tuple[Tree[Token], int]] = [(tree, -1)]  # a WHERE's condition is one `or_`
    while stack:
        node, nesting = stack.pop()
        if node.data in ("or_", "not_"):  # and so is each parenthesised group
            nesting += 1
            if nesting > MAX_NESTING:
                raise SoqlError(
                    f"conditions nest deeper than {MAX_NESTING} levels of parentheses and NOT",
                    code=code,
                )
        elif node.data in _COMPARISONS:
            terms += _tests(node)
        elif node.data in ("limit", "offset"):
            _bounded(node, MAX_LIMIT if node.data == "limit" else MAX_OFFSET)
        stack.extend((child, nesting) for child in node.children if isinstance(child, Tree))
    if terms > MAX_TERMS:
        raise SoqlError(
            f"a {what} has at most {MAX_TERMS} conditions "
            "(each INCLUDES or EXCLUDES value counts as 4)",
            code=code,
        )


def _tests(comparison: Tree[Token]) -> int:
    """The SQL tests a comparison becomes: INCLUDES and EXCLUDES test each value four ways."""
    if comparison.data in ("includes", "excludes"):
        values: Tree[Token] = comparison.children[1]  # type: ignore[assignment]  # grammar
        return 4 * len(values.children)
    return 1


def _bounded(clause: Tree[Token], maximum: int) -> None:
    """`LIMIT n` / `OFFSET n` with n at most `maximum` (no int() of 5,000 digits)."""
    digits = str(clause.children[0]).lstrip("0")
    if len(digits) > len(str(maximum)) or int(digits or 0) > maximum:
        raise SoqlError(
            f"{clause.data.upper()} is at most {maximum} "
            f"(line {clause.meta.line}, column {clause.meta.column})",
            code="NUMBER_OUTSIDE_VALID_RANGE",
        )


@lru_cache(maxsize=512)
def parse_soql(text: str) -> Select:
    query: Select = _parse(text, "start", "MALFORMED_QUERY", "query")
    check_select(query)
    return query


@lru_cache(maxsize=512)
def parse_sosl(text: str) -> Search:
    """SOSL text -> `Search`; malformed text raises `SoqlError` code MALFORMED_SEARCH."""
    search: Search = _parse(text, "search", "MALFORMED_SEARCH", "search")
    if not search.term.strip():
        raise SoqlError("the search term is empty (line 1)", code="MALFORMED_SEARCH")
    for returning in search.returning:
        if returning.where is not None:
            check_where(returning.where, nested=False, inside=False)
    return search


def _unquote(raw: str) -> str:
    body = raw[1:-1]
    escapes = {
        "n": "\n",
        "t": "\t",
        "r": "\r",
        "b": "\b",
        "f": "\f",
        "'": "'",
        '"': '"',
        "\\": "\\",
    }
    out, i = [], 0
    while i < len(body):
        char = body[i]
        if char == "\\" and i + 1 < len(body):
            out.append(escapes.get(body[i + 1], "\\" + body[i + 1]))
            i += 2
            continue
        out.append(char)
        i += 1
    return "".join(out)


def _text(operand: Path | Call) -> str:
    return operand.text


def _is_count(expr: Path | Call) -> bool:
    """`COUNT()`: the count query (totalSize only)."""
    return isinstance(expr, Call) and expr.name == "COUNT" and not expr.args


def _grouped(items: tuple[Path | Call, ...]) -> tuple[Path, ...]:
    """GROUP BY's fields: plain paths, or the paths of one ROLLUP(...)."""
    paths: list[Path] = []
    for item in items:
        if isinstance(item, Path):
            paths.append(item)
            continue
        if item.name != "ROLLUP":
            word = "is not supported" if item.name == "CUBE" else "cannot be grouped by"
            raise SoqlError(f"GROUP BY {item.text} {word} {position(item)}")
        if len(items) > 1:
            raise SoqlError(
                f"GROUP BY ROLLUP() cannot be combined with other fields {position(item)}"
            )
        if not 1 <= len(item.args) <= 3 or not all(isinstance(a, Path) for a in item.args):
            raise SoqlError(f"ROLLUP takes one to three fields {position(item)}")
        paths.extend(a for a in item.args if isinstance(a, Path))
    return tuple(paths)


def _comparison(op: str, operand: Path | Call, **parts: Any) -> Condition:
    if isinstance(operand, Call):
        return Condition(op, call=operand, **parts)
    return Condition(op, path=operand, **parts)


@v_args(meta=True)
class _Build(Transformer[Token, Any]):
    def start(self, meta: Any, children: list[Any]) -> Select:
        return children[0]  # type: ignore[no-any-return]

    def _select(self, meta: Any, children: list[Any]) -> Select:
        entries, name = children[0], children[1]
        rest = {type(c).__name__: c for c in children[2:]}
        items = tuple(i for i in entries if isinstance(i, SelectItem))
        counts = [i for i in items if _is_count(i.expr)]
        grouping = rest["_GroupBy"].items if "_GroupBy" in rest else ()
        return Select(
            fields=tuple(i.expr for i in items if isinstance(i.expr, Path)),
            children=tuple(i for i in entries if isinstance(i, Select)),
            count=bool(counts),
            object=str(name),
            object_position=(name.line, name.column),
            where=rest.get("_Where") and rest["_Where"].condition,
            order=rest["_Order"].items if "_Order" in rest else (),
            limit=rest["_Limit"].value if "_Limit" in rest else None,
            offset=rest["_Offset"].value if "_Offset" in rest else None,
            items=tuple(i for i in items if not _is_count(i.expr) or i.alias),
            group_by=_grouped(grouping),
            rollup=any(isinstance(g, Call) for g in grouping),
            having=rest["_Having"].condition if "_Having" in rest else None,
        )

    query = _select
    subquery = _select

    def search(self, meta: Any, children: list[Any]) -> Search:
        term, rest = children[0], children[1:]
        scope = next((c for c in rest if isinstance(c, _Scope)), _Scope("ALL"))
        limit = next((c for c in rest if isinstance(c, _Limit)), None)
        return Search(
            term=term,
            scope=scope.value,
            returning=tuple(c for c in rest if isinstance(c, Select)),
            limit=None if limit is None else limit.value,
        )

    def braced(self, meta: Any, children: list[Token]) -> str:
        body = str(children[0])[1:-1]
        return re.sub(r"\\(.)", r"\1", body)

    def quoted(self, meta: Any, children: list[Token]) -> str:
        return _unquote(str(children[0]))

    def search_scope(self, meta: Any, children: list[Token]) -> _Scope:
        return _Scope(str(children[0]).upper())

    def returning(self, meta: Any, children: list[Any]) -> Select:
        name, rest = children[0], children[1:]
        return Select(
            fields=tuple(c for c in rest if isinstance(c, Path)),
            children=(),
            count=False,
            object=str(name),
            object_position=(name.line, name.column),
            where=next((c.condition for c in rest if isinstance(c, _Where)), None),
            order=next((c.items for c in rest if isinstance(c, _Order)), ()),
            limit=next((c.value for c in rest if isinstance(c, _Limit)), None),
        )

    def select_list(self, meta: Any, children: list[Any]) -> list[Any]:
        return children

    def item(self, meta: Any, children: list[Any]) -> SelectItem:
        alias = children[1] if len(children) > 1 else None
        return SelectItem(children[0], None if alias is None else str(alias))

    def alias(self, meta: Any, children: list[Token]) -> Token:
        return children[0]

    def call(self, meta: Any, children: list[Any]) -> Call:
        name, args = children[0], tuple(children[1:])
        text = f"{name}({', '.join(_text(a) for a in args)})"
        return Call(str(name).upper(), args, text, meta.line, meta.column)

    def child(self, meta: Any, children: list[Any]) -> Select:
        return children[0]  # type: ignore[no-any-return]

    def path(self, meta: Any, children: list[Token]) -> Path:
        return Path(tuple(str(c) for c in children), meta.line, meta.column)

    def where(self, meta: Any, children: list[Any]) -> _Where:
        return _Where(children[0])

    def group_by(self, meta: Any, children: list[Any]) -> _GroupBy:
        return _GroupBy(tuple(children))

    def having(self, meta: Any, children: list[Any]) -> _Having:
        return _Having(children[0])

    def or_(self, meta: Any, children: list[Condition]) -> Condition:
        return Condition("or", tuple(children))

    def and_(self, meta: Any, children: list[Condition]) -> Condition:
        return Condition("and", tuple(children))

    def not_(self, meta: Any, children: list[Condition]) -> Condition:
        return Condition("not", (children[0],))

    def compare(self, meta: Any, children: list[Any]) -> Condition:
        operand, op, value = children
        return _comparison("compare", operand, operator=str(op), values=(value,))

    def like(self, meta: Any, children: list[Any]) -> Condition:
        return _comparison("like", children[0], values=(children[1],))

    def in_(self, meta: Any, children: list[Any]) -> Condition:
        return _comparison("in", children[0], values=tuple(children[1]))

    def not_in(self, meta: Any, children: list[Any]) -> Condition:
        return _comparison("not_in", children[0], values=tuple(children[1]))

    def in_select(self, meta: Any, children: list[Any]) -> Condition:
        return _comparison("in_select", children[0], query=children[1])

    def not_in_select(self, meta: Any, children: list[Any]) -> Condition:
        return _comparison("not_in_select", children[0], query=children[1])

    def includes(self, meta: Any, children: list[Any]) -> Condition:
        return _comparison("includes", children[0], values=tuple(children[1]))

    def excludes(self, meta: Any, children: list[Any]) -> Condition:
        return _comparison("excludes", children[0], values=tuple(children[1]))

    def values(self, meta: Any, children: list[Literal]) -> list[Literal]:
        return children

    def string(self, meta: Any, children: list[Token]) -> Literal:
        return Literal("string", _unquote(str(children[0])))

    def number(self, meta: Any, children: list[Token]) -> Literal:
        return Literal("number", str(children[0]))

    def date(self, meta: Any, children: list[Token]) -> Literal:
        return Literal("date", str(children[0]))

    def datetime(self, meta: Any, children: list[Token]) -> Literal:
        return Literal("datetime", str(children[0]))

    def null(self, meta: Any, children: list[Token]) -> Literal:
        return Literal("null", None)

    def true(self, meta: Any, children: list[Token]) -> Literal:
        return Literal("boolean", True)

    def false(self, meta: Any, children: list[Token]) -> Literal:
        return Literal("boolean", False)

    def date_literal(self, meta: Any, children: list[Token]) -> Literal:
        return Literal("date_literal", str(children[0]).upper())

    def order(self, meta: Any, children: list[OrderItem]) -> _Order:
        return _Order(tuple(children))

    def order_item(self, meta: Any, children: list[Any]) -> OrderItem:
        operand = children[0]
        descending = any(
            str(c).upper() == "DESC"
            for c in children[1:]
            if isinstance(c, Token) and c.type == "DIRECTION"
        )
        nulls = next(
            (str(c).upper() for c in children[1:] if isinstance(c, Token) and c.type == "NULLS"),
            None,
        )
        nulls_last = None if nulls is None else nulls.endswith("LAST")
        if isinstance(operand, Call):
            shown = Path((operand.text,), operand.line, operand.column)
            return OrderItem(shown, descending, nulls_last, call=operand)
        return OrderItem(operand, descending, nulls_last)

    def limit(self, meta: Any, children: list[Token]) -> _Limit:
        return _Limit(int(children[0]))

    def offset(self, meta: Any, children: list[Token]) -> _Offset:
        return _Offset(int(children[0]))


@dataclass(frozen=True)
class _Where:
    condition: Condition


@dataclass(frozen=True)
class _GroupBy:
    items: tuple[Path | Call, ...]


@dataclass(frozen=True)
class _Having:
    condition: Condition


@dataclass(frozen=True)
class _Order:
    items: tuple[OrderItem, ...]


@dataclass(frozen=True)
class _Limit:
    value: int


@dataclass(frozen=True)
class _Scope:
    value: str


@dataclass(frozen=True)
class _Offset:
    value: int
