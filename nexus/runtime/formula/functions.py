"""The formula function library: each entry type-checks its arguments at save time and
returns the closure that evaluates it. Null in -> null out unless the function says otherwise."""

from __future__ import annotations

import calendar
import re
from collections.abc import Callable, Sequence
from datetime import date, datetime
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Any

from sqlalchemy import and_, case, func, not_, or_

from nexus.runtime.formula.nodes import Context, Node, blank_sql, fail, num, sql_of, truthy

Builder = Callable[[Any, Any, list[Node]], Node]
FUNCTIONS: dict[str, Builder] = {}
NUMERIC = ("number", "null")
TEXTUAL = ("text", "picklist", "null")
MAX_TEXT = 100_000


def _register(*names: str) -> Callable[[Builder], Builder]:
    def add(builder: Builder) -> Builder:
        for name in names:
            FUNCTIONS[name] = builder
        return builder

    return add


def _check(
    meta: Any, name: str, args: Sequence[Node], *kinds: Sequence[str], optional: int = 0
) -> None:
    if not len(kinds) - optional <= len(args) <= len(kinds):
        expected = f"{len(kinds) - optional}-{len(kinds)}" if optional else str(len(kinds))
        raise fail(meta, f"{name} takes {expected} argument(s), not {len(args)}")
    for i, (arg, allowed) in enumerate(zip(args, kinds, strict=False)):
        if arg.type not in allowed:
            wanted = " or ".join(a for a in allowed if a != "null")
            raise fail(meta, f"{name} argument {i + 1} must be {wanted}, not {arg.type}")


def _common(meta: Any, name: str, nodes: Sequence[Node]) -> str:
    kinds = {n.type for n in nodes} - {"null"}
    if {"text", "picklist"} >= kinds and kinds:
        return "text"
    if len(kinds) > 1:
        raise fail(meta, f"{name}: results must have one type, not {', '.join(sorted(kinds))}")
    return kinds.pop() if kinds else "null"


def _text_fn(name: str, op: Callable[[str], Any], result: str = "text", sql: Any = None) -> None:
    @_register(name)
    def build(_b: Any, meta: Any, args: list[Node]) -> Node:
        _check(meta, name, args, TEXTUAL)
        f = args[0].fn
        return Node(
            result,
            lambda ctx: None if (v := f(ctx)) is None else op(v),
            sql=sql_of(args, sql) if sql else None,
        )


_text_fn("LEN", lambda v: Decimal(len(v)), "number")  # LENGTH counts bytes on MariaDB
_text_fn("UPPER", str.upper, sql=func.upper)
_text_fn("LOWER", str.lower, sql=func.lower)
_text_fn("TRIM", str.strip, sql=func.trim)


@_register("IF")
def _if(_b: Any, meta: Any, args: list[Node]) -> Node:
    if len(args) != 3:
        raise fail(meta, f"IF takes 3 arguments, not {len(args)}")
    cond, then, other = args
    if cond.type not in ("boolean", "null"):
        raise fail(meta, f"IF needs a boolean condition, not {cond.type}")
    kind = _common(meta, "IF", (then, other))
    c, t, o = cond.fn, then.fn, other.fn
    return Node(
        kind,
        lambda ctx: t(ctx) if truthy(c(ctx)) else o(ctx),
        sql=sql_of(args, lambda cs, ts, os: case((cs, ts), else_=os)),
    )


@_register("CASE")
def _case(_b: Any, meta: Any, args: list[Node]) -> Node:
    if len(args) < 4 or len(args) % 2:
        raise fail(meta, "CASE takes an expression, value/result pairs and an else result")
    subject, pairs, default = args[0], args[1:-1], args[-1]
    values, results = pairs[0::2], pairs[1::2]
    for value in values:
        if _common(meta, "CASE", (subject, value)) == "":
            raise fail(meta, "CASE values must match the expression")
    kind = _common(meta, "CASE", (*results, default))
    s = subject.fn
    table = [(v.fn, r.fn) for v, r in zip(values, results, strict=True)]
    d = default.fn

    def evaluate(ctx: Context) -> Any:
        current = s(ctx)
        for value, result in table:
            if current is not None and current == value(ctx):
                return result(ctx)
        return d(ctx)

    def sql(subject_sql: Any, *rest: Any) -> Any:
        whens = [
            (and_(subject_sql.isnot(None), subject_sql == v), r)
            for v, r in zip(rest[:-1:2], rest[1:-1:2], strict=True)
        ]
        return case(*whens, else_=rest[-1])

    return Node(kind, evaluate, sql=sql_of(args, sql))


def _logic(kind: str) -> Builder:
    def build(_b: Any, meta: Any, args: list[Node]) -> Node:
        if not args:
            raise fail(meta, f"{kind} needs at least one argument")
        for arg in args:
            if arg.type not in ("boolean", "null"):
                raise fail(meta, f"{kind} needs booleans, not {arg.type}")
        fns = [a.fn for a in args]
        if kind == "AND":
            return Node(
                "boolean", lambda ctx: all(truthy(f(ctx)) for f in fns), sql=sql_of(args, and_)
            )
        return Node("boolean", lambda ctx: any(truthy(f(ctx)) for f in fns), sql=sql_of(args, or_))

    return build


FUNCTIONS["AND"] = _logic("AND")
FUNCTIONS["OR"] = _logic("OR")


@_register("NOT")
def _not(_b: Any, meta: Any, args: list[Node]) -> Node:
    _check(meta, "NOT", args, ("boolean", "null"))
    f = args[0].fn
    return Node("boolean", lambda ctx: not truthy(f(ctx)), sql=sql_of(args, not_))


def _blank(value: Any) -> bool:
    return value is None or value == ""


@_register("ISBLANK", "ISNULL")
def _isblank(_b: Any, meta: Any, args: list[Node]) -> Node:
    if len(args) != 1:
        raise fail(meta, "ISBLANK takes 1 argument")
    f = args[0].fn
    kind = args[0].type
    return Node(
        "boolean",
        lambda ctx: _blank(f(ctx)),
        sql=sql_of(args, lambda expr: blank_sql(kind, expr)),
    )


@_register("BLANKVALUE", "NULLVALUE")
def _blankvalue(_b: Any, meta: Any, args: list[Node]) -> Node:
    if len(args) != 2:
        raise fail(meta, "BLANKVALUE takes 2 arguments")
    kind = _common(meta, "BLANKVALUE", args)
    f, g = args[0].fn, args[1].fn
    first = args[0].type
    return Node(
        kind,
        lambda ctx: g(ctx) if _blank(v := f(ctx)) else v,
        sql=sql_of(args, lambda a, b: case((blank_sql(first, a), b), else_=a)),
    )


def _count(value: Any) -> int | None:
    n = num(value)
    return None if n is None else int(n)


@_register("LEFT")
def _left(_b: Any, meta: Any, args: list[Node]) -> Node:
    _check(meta, "LEFT", args, TEXTUAL, NUMERIC)
    f, g = args[0].fn, args[1].fn

    def left(ctx: Context) -> Any:
        text, n = f(ctx), _count(g(ctx))
        return None if text is None or n is None else text[: max(n, 0)]

    return Node("text", left)


@_register("RIGHT")
def _right(_b: Any, meta: Any, args: list[Node]) -> Node:
    _check(meta, "RIGHT", args, TEXTUAL, NUMERIC)
    f, g = args[0].fn, args[1].fn

    def right(ctx: Context) -> Any:
        text, n = f(ctx), _count(g(ctx))
        if text is None or n is None:
            return None
        return text[-n:] if n > 0 else ""

    return Node("text", right)


@_register("MID")
def _mid(_b: Any, meta: Any, args: list[Node]) -> Node:
    _check(meta, "MID", args, TEXTUAL, NUMERIC, NUMERIC)
    f, s, n = (a.fn for a in args)

    def mid(ctx: Context) -> Any:
        text, start, length = f(ctx), _count(s(ctx)), _count(n(ctx))
        if text is None or start is None or length is None:
            return None
        begin = max(start, 1) - 1
        return text[begin : begin + max(length, 0)]

    return Node("text", mid)


def _pair_text(name: str, op: Callable[[str, str], bool], sql: Any = None) -> None:
    @_register(name)
    def build(_b: Any, meta: Any, args: list[Node]) -> Node:
        _check(meta, name, args, TEXTUAL, TEXTUAL)
        f, g = args[0].fn, args[1].fn
        return Node(
            "boolean",
            lambda ctx: op(f(ctx) or "", g(ctx) or ""),
            sql=sql_of(args, sql) if sql else None,
        )


_pair_text(
    "CONTAINS",
    lambda a, b: b in a,
    lambda a, b: func.instr(func.coalesce(a, ""), func.coalesce(b, "")) > 0,
)
_pair_text("BEGINS", lambda a, b: a.startswith(b))


@_register("TEXT")
def _text(_b: Any, meta: Any, args: list[Node]) -> Node:
    _check(
        meta, "TEXT", args, ("number", "text", "picklist", "date", "datetime", "boolean", "null")
    )
    f = args[0].fn

    def text(ctx: Context) -> Any:
        value = f(ctx)
        if value is None:
            return None
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, Decimal):
            return (
                format(value.normalize(), "f")
                if value == value.to_integral_value()
                else format(value, "f")
            )
        if isinstance(value, datetime):
            return value.strftime("%Y-%m-%d %H:%M:%SZ")
        if isinstance(value, date):
            return value.isoformat()
        return str(value)

    return Node("text", text)


@_register("VALUE")
def _value(_b: Any, meta: Any, args: list[Node]) -> Node:
    _check(meta, "VALUE", args, TEXTUAL)
    f = args[0].fn

    def value(ctx: Context) -> Any:
        text = f(ctx)
        if text is None:
            return None
        try:
            number = Decimal(text.strip())
        except InvalidOperation:
            return None
        return number if number.is_finite() else None

    return Node("number", value)


@_register("ROUND")
def _round(_b: Any, meta: Any, args: list[Node]) -> Node:
    _check(meta, "ROUND", args, NUMERIC, NUMERIC)
    f, g = args[0].fn, args[1].fn

    def rounded(ctx: Context) -> Any:
        value, digits = num(f(ctx)), _count(g(ctx))
        if value is None or digits is None:
            return None
        return value.quantize(Decimal(1).scaleb(-digits), rounding=ROUND_HALF_UP)

    return Node("number", rounded, sql=sql_of(args, func.round))


@_register("ABS")
def _abs(_b: Any, meta: Any, args: list[Node]) -> Node:
    _check(meta, "ABS", args, NUMERIC)
    f = args[0].fn
    return Node(
        "number",
        lambda ctx: None if (v := num(f(ctx))) is None else abs(v),
        sql=sql_of(args, func.abs),
    )


def _extreme(kind: str) -> Builder:
    def build(_b: Any, meta: Any, args: list[Node]) -> Node:
        if not args:
            raise fail(meta, f"{kind} needs at least one argument")
        for arg in args:
            if arg.type not in NUMERIC:
                raise fail(meta, f"{kind} needs numbers, not {arg.type}")
        fns = [a.fn for a in args]
        pick = max if kind == "MAX" else min

        def evaluate(ctx: Context) -> Any:
            values = [num(f(ctx)) for f in fns]
            return None if any(v is None for v in values) else pick(values)  # type: ignore[type-var]

        return Node("number", evaluate)

    return build


FUNCTIONS["MAX"] = _extreme("MAX")
FUNCTIONS["MIN"] = _extreme("MIN")


@_register("TODAY")
def _today(_b: Any, meta: Any, args: list[Node]) -> Node:
    _check(meta, "TODAY", args)
    return Node("date", lambda ctx: ctx.now.date())


@_register("NOW")
def _now(_b: Any, meta: Any, args: list[Node]) -> Node:
    _check(meta, "NOW", args)
    return Node("datetime", lambda ctx: ctx.now)


@_register("DATE")
def _date(_b: Any, meta: Any, args: list[Node]) -> Node:
    _check(meta, "DATE", args, NUMERIC, NUMERIC, NUMERIC)
    fns = [a.fn for a in args]

    def make(ctx: Context) -> Any:
        parts = [_count(f(ctx)) for f in fns]
        if any(p is None for p in parts):
            return None
        try:
            return date(*parts)  # type: ignore[arg-type]
        except ValueError:
            return None

    return Node("date", make)


def _part(name: str, attribute: str) -> None:
    @_register(name)
    def build(_b: Any, meta: Any, args: list[Node]) -> Node:
        _check(meta, name, args, ("date", "datetime", "null"))
        f = args[0].fn
        return Node(
            "number", lambda ctx: None if (v := f(ctx)) is None else Decimal(getattr(v, attribute))
        )


_part("YEAR", "year")
_part("MONTH", "month")
_part("DAY", "day")


@_register("ADDMONTHS")
def _addmonths(_b: Any, meta: Any, args: list[Node]) -> Node:
    _check(meta, "ADDMONTHS", args, ("date", "null"), NUMERIC)
    f, g = args[0].fn, args[1].fn

    def add(ctx: Context) -> Any:
        day, months = f(ctx), _count(g(ctx))
        if day is None or months is None:
            return None
        index = day.year * 12 + day.month - 1 + months
        year, month = divmod(index, 12)
        if not 1 <= year <= 9999:
            return None
        last = calendar.monthrange(year, month + 1)[1]
        return date(year, month + 1, min(day.day, last))

    return Node("date", add)


@_register("ISPICKVAL")
def _ispickval(_b: Any, meta: Any, args: list[Node]) -> Node:
    _check(meta, "ISPICKVAL", args, ("picklist", "null"), ("text",))
    f, g = args[0].fn, args[1].fn
    return Node("boolean", lambda ctx: (f(ctx) or "") == (g(ctx) or ""))


@_register("INCLUDES")
def _includes(_b: Any, meta: Any, args: list[Node]) -> Node:
    _check(meta, "INCLUDES", args, ("multipicklist", "null"), ("text",))
    f, g = args[0].fn, args[1].fn
    return Node("boolean", lambda ctx: (g(ctx) or "") in (f(ctx) or "").split(";"))


def _field_arg(meta: Any, name: str, args: list[Node]) -> Node:
    if len(args) != 1 or args[0].path is None:
        raise fail(meta, f"{name} takes one field")
    if "." in (args[0].path or ""):
        raise fail(meta, f"{name} takes a field of this record, not a parent path")
    return args[0]


@_register("PRIORVALUE")
def _priorvalue(_b: Any, meta: Any, args: list[Node]) -> Node:
    ref = _field_arg(meta, "PRIORVALUE", args)
    path, current = ref.path or "", ref.fn
    return Node(ref.type, lambda ctx: current(ctx) if ctx.prior is None else ctx.prior.get(path))


@_register("ISCHANGED")
def _ischanged(_b: Any, meta: Any, args: list[Node]) -> Node:
    ref = _field_arg(meta, "ISCHANGED", args)
    path, current = ref.path or "", ref.fn
    return Node(
        "boolean", lambda ctx: ctx.prior is not None and ctx.prior.get(path) != current(ctx)
    )


@_register("ISNEW")
def _isnew(_b: Any, meta: Any, args: list[Node]) -> Node:
    _check(meta, "ISNEW", args)
    return Node("boolean", lambda ctx: ctx.is_new)


@_register("REGEX")
def _regex(_b: Any, meta: Any, args: list[Node]) -> Node:
    _check(meta, "REGEX", args, TEXTUAL, ("text",))
    pattern = args[1].literal
    if not isinstance(pattern, str):
        raise fail(meta, "REGEX needs a literal pattern")
    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        raise fail(meta, f"invalid regular expression: {exc}") from None
    f = args[0].fn
    return Node(
        "boolean",
        lambda ctx: (
            (v := f(ctx)) is not None and len(v) <= MAX_TEXT and compiled.fullmatch(v) is not None
        ),
    )
