"""SOQL and SOSL text -> a small, typed syntax tree (positions kept for error messages)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache, lru_cache
from importlib import resources
from typing import Any

from lark import Lark, Token, Transformer, Tree, v_args
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken

from nexus.contracts.errors import BadRequest

MAX_SOQL = 100_000
#: Parenthesised groups and NOTs nested in one condition. SQLite's parser stack holds about 35
#: levels of the parentheses the SQL spells them with (a NOT can add two).
MAX_NESTING = 20
#: Tests in one statement. SQLite refuses expressions deeper than 1000, and `a OR b OR ...`
#: is as deep as it is long; an INCLUDES or EXCLUDES value is four tests in SQL.
MAX_TERMS = 300
MAX_OFFSET = 2000  # as Salesforce
MAX_LIMIT = 2**31 - 1  # SOQL's integer; the databases take no more than 64 bits
_COMPARISONS = {"compare", "like", "in_", "not_in", "includes", "excludes"}


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
class Literal:
    kind: str  # string, number, date, datetime, null, boolean, date_literal
    value: Any


@dataclass(frozen=True)
class Condition:
    op: str  # and, or, not, compare, like, in, not_in, includes, excludes
    children: tuple[Condition, ...] = ()
    path: Path | None = None
    operator: str = ""
    values: tuple[Literal, ...] = ()


@dataclass(frozen=True)
class OrderItem:
    path: Path
    descending: bool = False
    nulls_last: bool | None = None


@dataclass(frozen=True)
class Select:
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


@dataclass(frozen=True)
class Search:
    """`FIND {term} [IN scope FIELDS] RETURNING Obj(fields [WHERE] [ORDER BY] [LIMIT]), ...
    [LIMIT n]`: each RETURNING item is a `Select` without children or COUNT()."""

    term: str
    scope: str  # ALL, NAME, EMAIL, PHONE
    returning: tuple[Select, ...]
    limit: int | None = None


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
    return _Build().transform(tree)


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
    return _parse(text, "start", "MALFORMED_QUERY", "query")  # type: ignore[no-any-return]


@lru_cache(maxsize=512)
def parse_sosl(text: str) -> Search:
    """SOSL text -> `Search`; malformed text raises `SoqlError` code MALFORMED_SEARCH."""
    search: Search = _parse(text, "search", "MALFORMED_SEARCH", "search")
    if not search.term.strip():
        raise SoqlError("the search term is empty (line 1)", code="MALFORMED_SEARCH")
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


@v_args(meta=True)
class _Build(Transformer[Token, Any]):
    def start(self, meta: Any, children: list[Any]) -> Select:
        return children[0]  # type: ignore[no-any-return]

    def _select(self, meta: Any, children: list[Any]) -> Select:
        items, name = children[0], children[1]
        rest = {type(c).__name__: c for c in children[2:]}
        fields = tuple(i for i in items if isinstance(i, Path))
        subqueries = tuple(i for i in items if isinstance(i, Select))
        return Select(
            fields=fields,
            children=subqueries,
            count=any(i == "COUNT" for i in items),
            object=str(name),
            object_position=(name.line, name.column),
            where=rest.get("_Where") and rest["_Where"].condition,
            order=rest["_Order"].items if "_Order" in rest else (),
            limit=rest["_Limit"].value if "_Limit" in rest else None,
            offset=rest["_Offset"].value if "_Offset" in rest else None,
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

    def count(self, meta: Any, children: list[Any]) -> str:
        return "COUNT"

    def child(self, meta: Any, children: list[Any]) -> Select:
        return children[0]  # type: ignore[no-any-return]

    def path(self, meta: Any, children: list[Token]) -> Path:
        return Path(tuple(str(c) for c in children), meta.line, meta.column)

    def where(self, meta: Any, children: list[Any]) -> _Where:
        return _Where(children[0])

    def or_(self, meta: Any, children: list[Condition]) -> Condition:
        return Condition("or", tuple(children))

    def and_(self, meta: Any, children: list[Condition]) -> Condition:
        return Condition("and", tuple(children))

    def not_(self, meta: Any, children: list[Condition]) -> Condition:
        return Condition("not", (children[0],))

    def compare(self, meta: Any, children: list[Any]) -> Condition:
        path, op, value = children
        return Condition("compare", path=path, operator=str(op), values=(value,))

    def like(self, meta: Any, children: list[Any]) -> Condition:
        return Condition("like", path=children[0], values=(children[1],))

    def _set(self, op: str, children: list[Any]) -> Condition:
        return Condition(op, path=children[0], values=tuple(children[1]))

    def in_(self, meta: Any, children: list[Any]) -> Condition:
        return self._set("in", children)

    def not_in(self, meta: Any, children: list[Any]) -> Condition:
        return self._set("not_in", children)

    def includes(self, meta: Any, children: list[Any]) -> Condition:
        return self._set("includes", children)

    def excludes(self, meta: Any, children: list[Any]) -> Condition:
        return self._set("excludes", children)

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
        path = children[0]
        descending = any(
            str(c).upper() == "DESC"
            for c in children[1:]
            if isinstance(c, Token) and c.type == "DIRECTION"
        )
        nulls = next(
            (str(c).upper() for c in children[1:] if isinstance(c, Token) and c.type == "NULLS"),
            None,
        )
        return OrderItem(path, descending, None if nulls is None else nulls.endswith("LAST"))

    def limit(self, meta: Any, children: list[Token]) -> _Limit:
        return _Limit(int(children[0]))

    def offset(self, meta: Any, children: list[Token]) -> _Offset:
        return _Offset(int(children[0]))


@dataclass(frozen=True)
class _Where:
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
