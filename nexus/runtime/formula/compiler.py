"""Parse, type-check and compile a formula into a closure over an evaluation context.

    compile_formula("IF(Amount > 100, 'big', 'small')", env) -> Formula(type, evaluate)

`env` maps field paths (`Amount`, `Account.Name`, case-insensitive) to their types. Parsing
is Lark (LALR); type errors and syntax errors carry a line/column position and a reason. The
result is a tree of Python closures: no `eval`, bounded length and depth. Blank semantics:
arithmetic and most functions on null give null, concatenation treats null as "", boolean
operators treat null as false, division by zero gives null.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import date, timedelta
from decimal import Decimal, InvalidOperation
from functools import cache
from importlib import resources
from typing import Any, Protocol

from lark import Lark, Token, Transformer, v_args
from lark.exceptions import UnexpectedInput, VisitError
from sqlalchemy import and_, false, func, literal, literal_column, not_, null, or_, true

from nexus.runtime.formula.functions import FUNCTIONS
from nexus.runtime.formula.nodes import (
    Context,
    Fn,
    FormulaError,
    Node,
    SqlFn,
    blank_sql,
    const,
    fail,
    num,
    sql_of,
    truthy,
)

MAX_LENGTH = 3900
MAX_DEPTH = 50
TYPES = ("number", "text", "boolean", "date", "datetime", "picklist", "multipicklist", "null")


class PathTypes(Protocol):
    """Field path (lower-case, `account.owner.name`) -> formula type, or None if unknown."""

    def get(self, key: str, /) -> str | None: ...


@dataclass(frozen=True)
class Formula:
    source: str
    type: str
    evaluate: Fn
    paths: frozenset[str] = frozenset()  # the field paths it reads, lower-case
    sql: SqlFn | None = None  # its SQL expression builder, when the database can compute it
    not_in_sql: tuple[str, ...] = ()  # why not: the functions/operators SQL lacks


@cache
def _parser() -> Lark:
    grammar = resources.files("nexus.runtime.formula").joinpath("grammar.lark").read_text()
    return Lark(grammar, parser="lalr", propagate_positions=True, maybe_placeholders=False)


def compile_formula(
    source: str, env: Mapping[str, str] | PathTypes, *, expect: str | None = None
) -> Formula:
    """A compiled formula, or FormulaError (with position) when it does not parse or type-check."""
    if len(source) > MAX_LENGTH:
        raise FormulaError(f"a formula has at most {MAX_LENGTH} characters")
    try:
        tree = _parser().parse(source)
    except UnexpectedInput as exc:
        token = getattr(exc, "token", None)
        shown = f" at {str(token)!r}" if token else ""
        raise FormulaError(f"syntax error{shown}", exc.line, exc.column) from None
    types = {k.lower(): v for k, v in env.items()} if isinstance(env, Mapping) else env
    builder = _Builder(types)
    try:
        node: Node = builder.transform(tree)
    except VisitError as exc:
        if isinstance(exc.orig_exc, FormulaError):
            raise exc.orig_exc from None
        raise
    if expect not in (None, "any") and not _assignable(node.type, expect or ""):
        raise FormulaError(f"the formula is {node.type}, {expect} is needed")
    return Formula(
        source=source,
        type=node.type,
        evaluate=node.fn,
        paths=frozenset(builder.paths),
        sql=node.sql,
        not_in_sql=tuple(dict.fromkeys(builder.not_in_sql)),
    )


def _assignable(actual: str, wanted: str) -> bool:
    if actual in (wanted, "null"):
        return True
    return {actual, wanted} <= {"text", "picklist"}


@v_args(meta=True)
class _Builder(Transformer[Token, Node]):
    def __init__(self, env: Mapping[str, str] | PathTypes) -> None:
        super().__init__()
        self.env = env
        self.paths: set[str] = set()
        self.not_in_sql: list[str] = []

    # ---------------------------------------------------------------- literals and refs
    def number(self, meta: Any, children: list[Token]) -> Node:
        value = Decimal(str(children[0]))
        return Node("number", const(value), literal=value, sql=lambda _c: literal(value))

    def string(self, meta: Any, children: list[Token]) -> Node:
        raw = str(children[0])[1:-1]
        value = re.sub(r"\\(.)", lambda m: {"n": "\n", "t": "\t"}.get(m.group(1), m.group(1)), raw)
        return Node("text", const(value), literal=value, sql=lambda _c: literal(value))

    def ref(self, meta: Any, children: list[Token]) -> Node:
        path = ".".join(str(c) for c in children)
        key = path.lower()
        if key in ("true", "false"):
            value = key == "true"
            return Node(
                "boolean", const(value), literal=value, sql=lambda _c: true() if value else false()
            )
        if key == "null":
            return Node("null", const(None), literal=None, sql=lambda _c: null())
        kind = self.env.get(key)
        if kind is None:
            raise fail(meta, f"unknown field {path}")
        self.paths.add(key)
        sql: SqlFn = (
            (lambda column: func.coalesce(column(key), false()))
            if kind == "boolean"
            else (lambda column: column(key))
        )
        return Node(kind, lambda ctx: ctx.values.get(key), path=key, sql=sql)

    # ---------------------------------------------------------------- operators
    def _single(self, children: list[Node]) -> Node | None:
        return children[0] if len(children) == 1 else None

    def or_(self, meta: Any, children: list[Node]) -> Node:
        return self._single(children) or self._logic(meta, children, any_of=True)

    def and_(self, meta: Any, children: list[Node]) -> Node:
        return self._single(children) or self._logic(meta, children, any_of=False)

    def _logic(self, meta: Any, nodes: list[Node], *, any_of: bool) -> Node:
        for node in nodes:
            if node.type not in ("boolean", "null"):
                raise fail(meta, f"&& and || need booleans, not {node.type}")
        fns = [n.fn for n in nodes]
        if any_of:
            fn: Fn = lambda ctx: any(truthy(f(ctx)) for f in fns)  # noqa: E731
        else:
            fn = lambda ctx: all(truthy(f(ctx)) for f in fns)  # noqa: E731
        sql = sql_of(nodes, or_ if any_of else and_)
        return Node("boolean", fn, depth=1 + max(n.depth for n in nodes), sql=sql)

    def not_(self, meta: Any, children: list[Node]) -> Node:
        (node,) = children
        if node.type not in ("boolean", "null"):
            raise fail(meta, f"! needs a boolean, not {node.type}")
        inner = node.fn
        return Node(
            "boolean",
            lambda ctx: not truthy(inner(ctx)),
            depth=node.depth + 1,
            sql=sql_of([node], not_),
        )

    def compare(self, meta: Any, children: list[Any]) -> Node:
        if len(children) == 1:
            return children[0]  # type: ignore[no-any-return]
        left, op, right = children
        families = {left.type, right.type} - {"null"}
        if len({"text" if t == "picklist" else t for t in families}) > 1:
            raise fail(meta, f"cannot compare {left.type} with {right.type}")
        if "picklist" in families:
            raise fail(meta, "compare a picklist with ISPICKVAL() or TEXT()")
        lf, rf, symbol = left.fn, right.fn, str(op)
        compare = _COMPARATORS[symbol]
        kind = left.type if left.type != "null" else right.type
        return Node(
            "boolean",
            lambda ctx: compare(lf(ctx), rf(ctx)),
            depth=1 + max(left.depth, right.depth),
            sql=sql_of([left, right], lambda a, b: _compare_sql(symbol, kind, a, b)),
        )

    def concat(self, meta: Any, children: list[Node]) -> Node:
        if len(children) == 1:
            return children[0]
        for node in children:
            if node.type not in ("text", "picklist", "null"):
                raise fail(meta, f"& joins text, not {node.type} (use TEXT())")
        fns = [n.fn for n in children]
        return Node(
            "text",
            lambda ctx: "".join(v for f in fns if (v := f(ctx)) is not None),
            depth=1 + max(n.depth for n in children),
            sql=sql_of(children, _concat_sql),
        )

    def arith(self, meta: Any, children: list[Any]) -> Node:
        node: Node = children[0]
        for op, right in zip(children[1::2], children[2::2], strict=True):
            node = self._binary(meta, str(op), node, right)
        return node

    def _binary(self, meta: Any, op: str, left: Node, right: Node) -> Node:
        depth = 1 + max(left.depth, right.depth)
        if left.type == "date" and right.type == "number" and op in "+-":
            lf, rf = left.fn, right.fn
            sign = 1 if op == "+" else -1
            self.not_in_sql.append("date arithmetic")
            return Node("date", lambda ctx: _add_days(lf(ctx), rf(ctx), sign), depth=depth)
        if left.type == right.type == "date" and op == "-":
            lf, rf = left.fn, right.fn
            self.not_in_sql.append("date arithmetic")
            return Node("number", lambda ctx: _days_between(lf(ctx), rf(ctx)), depth=depth)
        for node in (left, right):
            if node.type not in ("number", "null"):
                raise fail(meta, f"{op} needs numbers, not {node.type}")
        lf, rf = left.fn, right.fn
        operate = _ARITHMETIC[op]
        return Node(
            "number",
            lambda ctx: operate(num(lf(ctx)), num(rf(ctx))),
            depth=depth,
            sql=sql_of([left, right], _ARITHMETIC_SQL[op]),
        )

    def neg(self, meta: Any, children: list[Node]) -> Node:
        (node,) = children
        if node.type not in ("number", "null"):
            raise fail(meta, f"- needs a number, not {node.type}")
        inner = node.fn
        return Node(
            "number",
            lambda ctx: None if (v := num(inner(ctx))) is None else -v,
            depth=node.depth + 1,
            sql=sql_of([node], lambda a: -a),
        )

    def power(self, meta: Any, children: list[Node]) -> Node:
        if len(children) == 1:
            return children[0]
        base, exponent = children
        for node in children:
            if node.type not in ("number", "null"):
                raise fail(meta, f"^ needs numbers, not {node.type}")
        bf, ef = base.fn, exponent.fn
        self.not_in_sql.append("^")
        return Node(
            "number",
            lambda ctx: _pow(num(bf(ctx)), num(ef(ctx))),
            depth=1 + max(base.depth, exponent.depth),
        )

    # ---------------------------------------------------------------- functions
    def call(self, meta: Any, children: list[Any]) -> Node:
        name = str(children[0]).upper()
        args: list[Node] = children[1:]
        spec = FUNCTIONS.get(name)
        if spec is None:
            raise fail(meta, f"unknown function {name}")
        node = spec(self, meta, args)
        depth = 1 + max((a.depth for a in args), default=0)
        if depth > MAX_DEPTH:
            raise fail(meta, f"the formula nests deeper than {MAX_DEPTH} levels")
        if node.sql is None and all(a.sql is not None for a in args):
            self.not_in_sql.append(f"{name}()")
        return Node(node.type, node.fn, depth=depth, sql=node.sql)


# -------------------------------------------------------------------- operator tables


def _cmp(op: Callable[[Any, Any], bool]) -> Callable[[Any, Any], bool]:
    def compare(a: Any, b: Any) -> bool:
        if a is None or b is None:
            return False
        if isinstance(a, (int, float, Decimal)) and isinstance(b, (int, float, Decimal)):
            return op(num(a), num(b))
        return op(a, b)

    return compare


def _equal(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return (a is None or a == "") and (b is None or b == "")
    if isinstance(a, (int, float, Decimal)) and isinstance(b, (int, float, Decimal)):
        return num(a) == num(b)
    return bool(a == b)


_COMPARATORS: dict[str, Callable[[Any, Any], bool]] = {
    "=": _equal,
    "==": _equal,
    "!=": lambda a, b: not _equal(a, b),
    "<>": lambda a, b: not _equal(a, b),
    "<": _cmp(lambda a, b: a < b),
    "<=": _cmp(lambda a, b: a <= b),
    ">": _cmp(lambda a, b: a > b),
    ">=": _cmp(lambda a, b: a >= b),
}


def _compare_sql(op: str, kind: str, a: Any, b: Any) -> Any:
    """A comparison as two-valued SQL with the formula's blank semantics."""
    if op in ("=", "==", "!=", "<>"):
        equal = or_(
            and_(blank_sql(kind, a), blank_sql(kind, b)),
            and_(a.isnot(None), b.isnot(None), a == b),
        )
        return equal if op in ("=", "==") else not_(equal)
    operators = {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}
    return and_(a.isnot(None), b.isnot(None), operators[op])


def _concat_sql(*parts: Any) -> Any:
    joined: Any = func.coalesce(parts[0], "")
    for part in parts[1:]:
        joined = joined.concat(func.coalesce(part, ""))
    return joined


_ARITHMETIC_SQL: dict[str, Callable[[Any, Any], Any]] = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    # x * 1.0 keeps SQLite from dividing integers; / 0 gives null, as in Python
    "/": lambda a, b: (a * literal_column("1.0")) / func.nullif(b, 0),
}


def _divide(a: Decimal | None, b: Decimal | None) -> Decimal | None:
    if a is None or b is None or b == 0:
        return None
    return a / b


_ARITHMETIC: dict[str, Callable[[Decimal | None, Decimal | None], Decimal | None]] = {
    "+": lambda a, b: None if a is None or b is None else a + b,
    "-": lambda a, b: None if a is None or b is None else a - b,
    "*": lambda a, b: None if a is None or b is None else a * b,
    "/": _divide,
}


def _pow(a: Decimal | None, b: Decimal | None) -> Decimal | None:
    if a is None or b is None:
        return None
    try:
        if abs(b) > 1000:
            return None
        return a**b
    except (InvalidOperation, ZeroDivisionError, OverflowError):
        return None


def _add_days(day: Any, count: Any, sign: int) -> date | None:
    if day is None or count is None:
        return None
    try:
        return day + sign * timedelta(days=int(count))  # type: ignore[no-any-return]
    except OverflowError:
        return None


def _days_between(a: Any, b: Any) -> Decimal | None:
    if a is None or b is None:
        return None
    return Decimal((a - b).days)


__all__ = ["Context", "Formula", "FormulaError", "Node", "compile_formula"]
