"""What Salesforce refuses that the SOQL grammar accepts, checked on the syntax tree before
any metadata is read (type and access checks are the compiler's)."""

from __future__ import annotations

from nexus.runtime.query.syntax import (
    AGGREGATES,
    Call,
    Condition,
    Path,
    Select,
    SelectItem,
    SoqlError,
)

FIELDS_KINDS = frozenset({"ALL", "STANDARD", "CUSTOM"})
MAX_FIELDS_LIMIT = 200  # FIELDS(ALL) and FIELDS(CUSTOM) need LIMIT n <= 200, as Salesforce
MAX_SEMI_JOINS = 2  # semi- and anti-join sub-selects in one WHERE, as Salesforce


def position(node: Path | Call) -> str:
    return f"(line {node.line}, column {node.column})"


def check_select(query: Select) -> None:
    """What Salesforce refuses that the grammar accepts: functions by name and argument,
    aliases, COUNT() with other fields, aggregates with relationship subqueries or FIELDS(),
    FIELDS(ALL/CUSTOM) without LIMIT 200, and the semi-join and anti-join rules (at most two
    per WHERE, never under OR or NOT, never nested, one plain Id or reference field selected,
    no ORDER BY or LIMIT). Type checks need metadata and are the compiler's."""
    aggregate = query.aggregate
    for item in query.items:
        if isinstance(item.expr, Call):
            _check_call(item.expr, query, aggregate=aggregate, alias=item.alias)
        elif item.alias and not aggregate:
            raise SoqlError(
                f"Only aggregate expressions use field aliasing: {item.expr.text} "
                f"{item.alias} {position(item.expr)}"
            )
    if query.count and (query.items or query.children):
        raise SoqlError("COUNT() cannot be combined with fields or subqueries")
    if query.count and (query.group_by or query.having):
        raise SoqlError("COUNT() cannot be used with GROUP BY or HAVING; use COUNT(Id)")
    if aggregate and query.children:
        raise SoqlError("an aggregate query cannot have relationship subqueries")
    if query.where is not None:
        semi_joins = check_where(query.where, nested=False, inside=False)
        if semi_joins > MAX_SEMI_JOINS:
            raise SoqlError(
                f"a WHERE has at most {MAX_SEMI_JOINS} semi-join or anti-join sub-selects"
            )
    if query.having is not None:
        _check_having(query.having)
    _check_order(query, aggregate=aggregate)
    for sub in query.children:
        check_select(sub)


def _check_order(query: Select, *, aggregate: bool) -> None:
    for order in query.order:
        if order.call is None:
            continue
        if not order.call.aggregate:
            raise SoqlError(f"ORDER BY {order.call.text} is not supported {position(order.call)}")
        if not aggregate:
            raise SoqlError(
                f"ORDER BY {order.call.text} needs an aggregate query (GROUP BY or an "
                f"aggregate field) {position(order.call)}"
            )
        _check_call(order.call, query, aggregate=True, alias=None)


def _check_call(call: Call, query: Select, *, aggregate: bool, alias: str | None) -> None:
    args = call.args
    paths = all(isinstance(a, Path) for a in args)
    if call.name == "COUNT" and not args:
        if alias:
            raise SoqlError(f"COUNT() takes no alias {position(call)}")
        return
    if call.name in AGGREGATES or call.name in ("TOLABEL", "GROUPING"):
        if len(args) != 1 or not paths:
            raise SoqlError(f"{call.text}: {call.name} takes one field {position(call)}")
        if call.name == "GROUPING" and not query.rollup:
            raise SoqlError(f"{call.text} needs GROUP BY ROLLUP(...) {position(call)}")
        return
    if call.name == "FORMAT":
        inner = args[0] if len(args) == 1 else None
        if isinstance(inner, Call) and inner.name in AGGREGATES and inner.args:
            _check_call(inner, query, aggregate=aggregate, alias=None)
        elif not isinstance(inner, Path):
            raise SoqlError(
                f"{call.text}: FORMAT takes one field or one aggregate function {position(call)}"
            )
        return
    if call.name == "FIELDS":
        _check_fields(call, query, aggregate=aggregate, alias=alias)
        return
    raise SoqlError(f"function {call.text.partition('(')[0]}() is not supported {position(call)}")


def _check_fields(call: Call, query: Select, *, aggregate: bool, alias: str | None) -> None:
    kind = call.args[0] if len(call.args) == 1 else None
    if not isinstance(kind, Path) or kind.text.upper() not in FIELDS_KINDS:
        raise SoqlError(f"{call.text}: FIELDS takes ALL, STANDARD or CUSTOM {position(call)}")
    if alias:
        raise SoqlError(f"FIELDS() takes no alias {position(call)}")
    if aggregate:
        raise SoqlError(f"FIELDS() cannot be used in an aggregate query {position(call)}")
    bounded = query.limit is not None and query.limit <= MAX_FIELDS_LIMIT
    if kind.text.upper() != "STANDARD" and not bounded:
        raise SoqlError(
            f"The SOQL FIELDS function must have a LIMIT of at most {MAX_FIELDS_LIMIT} "
            f"for FIELDS({kind.text.upper()}) {position(call)}"
        )


def check_where(cond: Condition, *, nested: bool, inside: bool) -> int:
    """Semi-joins in this WHERE (raising on a misplaced one); `inside`: under OR or NOT."""
    if cond.op in ("and", "or", "not"):
        # a lone condition is an `or` of one: only a real OR (or a NOT) puts it under one
        under = inside or cond.op == "not" or (cond.op == "or" and len(cond.children) > 1)
        return sum(check_where(c, nested=nested, inside=under) for c in cond.children)
    if cond.call is not None:
        what = "aggregate functions" if cond.call.aggregate else f"{cond.call.text}"
        use = "; use HAVING" if cond.call.aggregate else ""
        raise SoqlError(f"{what} cannot be used in WHERE{use} {position(cond.call)}")
    if cond.query is None:
        return 0
    here = position(cond.path) if cond.path else ""
    if nested:
        raise SoqlError(f"semi-join sub-selects cannot be nested {here}")
    if inside:
        raise SoqlError(
            "semi-join and anti-join sub-selects cannot be combined with OR or NOT "
            f"(use IN or NOT IN instead of NOT) {here}"
        )
    inner = cond.query
    items = inner.items or tuple(SelectItem(p) for p in inner.fields)
    if (
        len(items) != 1
        or not isinstance(items[0].expr, Path)
        or items[0].alias
        or inner.children
        or inner.count
    ):
        raise SoqlError(f"a semi-join sub-select selects exactly one Id or reference field {here}")
    if inner.order or inner.limit is not None:
        raise SoqlError(f"a semi-join sub-select cannot use ORDER BY or LIMIT {here}")
    if inner.where is not None:
        check_where(inner.where, nested=True, inside=False)
    return 1


def _check_having(cond: Condition) -> None:
    if cond.op in ("and", "or", "not"):
        for c in cond.children:
            _check_having(c)
        return
    if cond.query is not None:
        raise SoqlError("HAVING cannot contain semi-join or anti-join sub-selects")
    if cond.call is not None and not cond.call.aggregate:
        raise SoqlError(f"{cond.call.text} cannot be used in HAVING {position(cond.call)}")
