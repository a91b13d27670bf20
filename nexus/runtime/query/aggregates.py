"""Aggregate SOQL (`GROUP BY`, `HAVING`, COUNT/COUNT_DISTINCT/SUM/AVG/MIN/MAX, ROLLUP) -> one
SQL statement the database groups and aggregates; no row reaches Python (ADR 0073).

The FROM object, its parents and the WHERE are compiled as for a record query (object and
field access, the row predicate and the deleted filter inside the SQL), so a group counts only
records the caller may read. Each grouping set is one `SELECT ... GROUP BY ... HAVING ...`:
one for a plain GROUP BY, one per level for `ROLLUP(a, b)` (a and b, a, the grand total; a
rolled-up field reads null and its GROUPING() flag 1), joined by UNION ALL: plain SQL that
SQLite, MariaDB and TiDB run alike (no WITH ROLLUP, no window functions). An outer SELECT
orders the groups (ORDER BY's keys, then the groups themselves, so pages are stable) and pages
them like records. Selected expressions are exactly the grouped ones (ONLY_FULL_GROUP_BY holds
on MySQL and TiDB); on SQLite text groups by `COLLATE NOCASE`, as MariaDB's collation does.

Results are `AggregateResult` records: grouped fields under their field name (`Name` for
`Account.Name`) or alias, aggregates under their alias or `expr0`, `expr1`, ... in the order of
the unaliased ones.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from sqlalchemy import Numeric, distinct, func, literal, null, select, type_coerce
from sqlalchemy.ext.asyncio import AsyncSession

from nexus.runtime.metadata import models as m
from nexus.runtime.metadata.definitions import FieldDef
from nexus.runtime.query.engine import (
    _CONVERTERS,
    Compiler,
    QueryPage,
    _Column,
    _converter,
    _Plan,
    _source,
)
from nexus.runtime.query.functions import NUMBERS, field_scale, format_display, to_label
from nexus.runtime.query.parser import Call, Condition, Path, Select, SoqlError

RESULT_TYPE = "AggregateResult"
#: Types that neither group nor aggregate (describe says `groupable: false` for them).
UNGROUPABLE = frozenset({"textarea", "long_text", "multi_picklist"})
COUNTS = frozenset({"COUNT", "COUNT_DISTINCT", "GROUPING"})


@dataclass
class Output:
    """One column of an aggregate result: what column metadata describes."""

    name: str  # the result key: field name, alias or exprN
    shown: str  # display name: the field name, or the function as written
    kind: str  # a field type, a system kind, or "int" (counts)
    definition: FieldDef | None
    aggregate: bool
    expr: Callable[[int], Any]  # the SQL at a grouping level (how many groups are kept)
    convert: Callable[[Any], Any] | None


@dataclass
class _Group:
    column: _Column
    value: Any  # the SQL selected
    key: Any  # the SQL grouped by (NOCASE text on SQLite)


@dataclass
class AggregatePlan:
    obj_name: str
    key_prefix: str
    outputs: list[Output]
    statement: Any  # groups ordered, not paged
    union: Any  # the groups, as a subquery (for totalSize)
    grouped: bool
    id_selected: bool
    pages: dict[tuple[int, int], Any] = field(default_factory=dict)


def compile_aggregate(compiler: Compiler, query: Select) -> AggregatePlan:
    return _Aggregation(compiler, query).plan()


#: an ORDER BY key: its SQL at a grouping level, descending, NULLS LAST (None: the default),
#: and whether it is text (SQLite sorts it NOCASE)
_OrderKey = tuple[Callable[[int], Any], bool, bool | None, bool]


class _Aggregation:
    """One aggregate query being compiled: its groups, outputs, HAVING and ORDER BY."""

    def __init__(self, compiler: Compiler, query: Select) -> None:
        self.compiler = compiler
        self.query = query
        self.obj = compiler.object(query.object, query.object_position)
        self.sql_plan = _Plan(obj=self.obj, table=compiler.alias(self.obj))
        self.groups = [_group(compiler, self.sql_plan, path) for path in query.group_by]
        self.by_key = {g.column.path.text.lower(): i for i, g in enumerate(self.groups)}

    def plan(self) -> AggregatePlan:
        query, groups = self.query, self.groups
        outputs = self.outputs()
        order = self.order()
        where = [self.compiler.visible(self.sql_plan.table, self.obj)]
        if query.where is not None:
            where.append(self.compiler.condition(self.sql_plan, query.where))
        levels = list(range(len(groups), -1, -1)) if query.rollup else [len(groups)]
        first, *rest = [self.branch(level, outputs, order, where) for level in levels]
        union = (first.union_all(*rest) if rest else first).subquery("groups")
        keys: list[Any] = []
        for i, (_, descending, nulls_last, textual) in enumerate(order):
            key = _nocase(self.compiler, union.c[f"o{i}"], textual)
            last = nulls_last if nulls_last is not None else descending
            if last != descending:  # SQLite and MariaDB: NULLs first ascending, last descending
                keys.append(key.is_(None) if last else key.isnot(None))
            keys.append(key.desc() if descending else key.asc())
        for j, group in enumerate(groups):  # then the groups: stable pages, subtotals last
            if query.rollup:
                keys.append(union.c[f"g{j}"].asc())
            textual = group.column.kind not in _CONVERTERS
            keys.append(_nocase(self.compiler, union.c[f"k{j}"], textual).asc())
        revision = (
            select(m.org_state.c.metadata_revision)
            .where(m.org_state.c.org_id == self.compiler.access.org_id)
            .scalar_subquery()
        )
        statement = select(
            *(union.c[f"c{i}"] for i in range(len(outputs))), revision.label("rev")
        ).order_by(*keys)
        selected = [i.expr for i in query.items if isinstance(i.expr, Path)]
        return AggregatePlan(
            obj_name=self.obj.api_name,
            key_prefix=self.obj.key_prefix,
            outputs=outputs,
            statement=statement,
            union=union,
            grouped=bool(groups),
            id_selected=any(p.text.lower() == "id" for p in selected),
        )

    def branch(
        self, level: int, outputs: list[Output], order: list[_OrderKey], where: list[Any]
    ) -> Any:
        """The SELECT of one grouping level: the first `level` groups kept."""
        having = None
        if self.query.having is not None:  # compiled before the FROM: it may join a parent
            having = self.compiler.condition(
                self.sql_plan, self.query.having, operand=self.operand(level)
            )
        count = len(self.groups)
        columns = [o.expr(level).label(f"c{i}") for i, o in enumerate(outputs)]
        columns += [self.value(j)(level).label(f"k{j}") for j in range(count)]
        if self.query.rollup:
            columns += [_flag(j)(level).label(f"g{j}") for j in range(count)]
        columns += [key(level).label(f"o{i}") for i, (key, _, _, _) in enumerate(order)]
        branch = select(*columns).select_from(_source(self.sql_plan)).where(*where)
        if level:
            branch = branch.group_by(*(g.key for g in self.groups[:level]))
        if having is None:
            return branch
        if level:
            return branch.having(having)
        # the grand total: SQLite before 3.39 takes no HAVING without a GROUP BY, so the one
        # row's test is a column of it, filtered outside
        total = branch.add_columns(having.label("keep")).subquery("grand_total")
        return select(*(total.c[c.name] for c in columns)).where(total.c.keep)

    def grouped(self, path: Path, what: str = "Field") -> int:
        """The index of the group `path` names; refused when it names none."""
        column = self.compiler.resolve(self.sql_plan, path)
        index = self.by_key.get(column.path.text.lower())
        if index is None:
            raise SoqlError(
                f"{what} must be grouped or aggregated: {path.text} "
                f"(line {path.line}, column {path.column})"
            )
        return index

    def value(self, index: int) -> Callable[[int], Any]:
        """A group's value at a level: null where it is rolled up."""
        group = self.groups[index]
        return lambda level: group.value if index < level else null()

    def outputs(self) -> list[Output]:
        outputs: list[Output] = []
        unnamed = 0
        for item in self.query.items:
            expr = item.expr
            if isinstance(expr, Path) or not (expr.aggregate or expr.name == "GROUPING"):
                outputs.append(self.group_output(expr, item.alias))
                continue
            if item.alias is None:
                name, unnamed = f"expr{unnamed}", unnamed + 1
            else:
                name = item.alias
            if expr.name == "GROUPING":
                index = self.grouped(expr.args[0])  # type: ignore[arg-type]  # parser: a path
                outputs.append(Output(name, expr.text, "int", None, True, _flag(index), int))
            else:
                outputs.append(_aggregate_output(self.compiler, self.sql_plan, expr, name))
        _unique(outputs)
        return outputs

    def group_output(self, expr: Path | Call, alias: str | None) -> Output:
        """A grouped field, or toLabel() / FORMAT() of one."""
        path = expr if isinstance(expr, Path) else expr.args[0]
        if not isinstance(path, Path):  # pragma: no cover - the parser's
            raise SoqlError(f"{expr.text} takes a field")
        index = self.grouped(path)
        column = self.groups[index].column
        name = column.path.parts[-1]
        return Output(
            name=alias or name,
            shown=name if isinstance(expr, Path) else expr.text,
            kind=column.kind,
            definition=column.definition,
            aggregate=False,
            expr=self.value(index),
            convert=_converter(column) if isinstance(expr, Path) else _display(expr, column),
        )

    def operand(self, level: int) -> Callable[[Condition], _Column]:
        """HAVING's left sides at a level: an aggregate, or a grouped field."""

        def resolve(cond: Condition) -> _Column:
            if cond.call is not None:
                sql, kind, definition = _aggregate(self.compiler, self.sql_plan, cond.call)
                if kind in NUMBERS or kind == "int":  # compared with a number literal
                    sql, kind = type_coerce(sql, Numeric(asdecimal=True)), "number"
                shown = Path((cond.call.text,), cond.call.line, cond.call.column)
                return _Column(cond.call.text, shown, kind, definition, sql)
            if cond.path is None:  # pragma: no cover - the grammar's
                raise SoqlError("malformed HAVING")
            index = self.grouped(cond.path)
            column = self.groups[index].column
            value = self.value(index)(level)
            return _Column(column.key, column.path, column.kind, column.definition, value)

        return resolve

    def order(self) -> list[_OrderKey]:
        order: list[_OrderKey] = []
        for item in self.query.order:
            if item.call is not None:
                sql, kind, _ = _aggregate(self.compiler, self.sql_plan, item.call)
                textual = kind not in _CONVERTERS and kind != "int"  # MIN/MAX of text
                order.append((_constant(sql), item.descending, item.nulls_last, textual))
            else:
                index = self.grouped(item.path, "Ordered field")
                textual = self.groups[index].column.kind not in _CONVERTERS
                order.append((self.value(index), item.descending, item.nulls_last, textual))
        return order


async def run_aggregate(
    session: AsyncSession, *, compiler: Compiler, query: Select, page_size: int, start: int
) -> QueryPage:
    """One statement for a page of groups; a second for totalSize only when it is full."""
    plan = compile_aggregate(compiler, query)
    offset = (query.offset or 0) + start
    remaining = None if query.limit is None else max(query.limit - start, 0)
    fetch = page_size + 1 if remaining is None else min(page_size + 1, remaining)
    rows = list(await session.execute(plan.statement.offset(offset).limit(fetch))) if fetch else []
    more = len(rows) > page_size
    rows = rows[:page_size]
    if more:
        bounded = select(plan.union.c.c0)
        if query.limit is not None:
            bounded = bounded.limit(query.limit)
        if query.offset:
            bounded = bounded.offset(query.offset)
        counted = select(func.count()).select_from(bounded.subquery())
        total = int((await session.execute(counted)).scalar_one())
    else:
        total = start + len(rows)
    converters = [(o.name, o.convert) for o in plan.outputs]
    records = []
    for row in rows:
        record: dict[str, Any] = {"attributes": {"type": RESULT_TYPE}}
        for i, (name, convert) in enumerate(converters):
            value = row[i]
            record[name] = value if value is None or convert is None else convert(value)
        records.append(record)
    revision = int(rows[0][-1]) if rows and rows[0][-1] is not None else None
    return QueryPage(total_size=total, done=not more, records=records, revision=revision)


# ------------------------------------------------------------------ pieces


def _group(compiler: Compiler, plan: _Plan, path: Path) -> _Group:
    column = compiler.resolve(plan, path)
    if column.kind in UNGROUPABLE:
        raise SoqlError(
            f"field '{path.text}' can not be grouped in a query call "
            f"(line {path.line}, column {path.column})",
            code="INVALID_FIELD",
        )
    return _Group(column, compiler.sql_expr(plan, column), compiler.text_expr(plan, column))


def _aggregate(compiler: Compiler, plan: _Plan, call: Call) -> tuple[Any, str, FieldDef | None]:
    """An aggregate function's SQL, its result kind and the field it reads."""
    if call.name == "FORMAT":
        inner = call.args[0]
        if not isinstance(inner, Call):  # pragma: no cover - the parser's
            raise SoqlError(f"{call.text} takes an aggregate")
        return _aggregate(compiler, plan, inner)
    path = call.args[0]
    if not isinstance(path, Path):  # pragma: no cover - the parser's
        raise SoqlError(f"{call.text} takes a field")
    column = compiler.resolve(plan, path)
    kind = column.kind
    numeric = kind in NUMBERS
    refused = (
        kind in UNGROUPABLE
        or (call.name in ("SUM", "AVG") and not numeric)
        or (call.name in ("MIN", "MAX") and kind in ("checkbox", "boolean"))
    )
    if refused:
        raise SoqlError(
            f"field {path.text} does not support aggregate operator {call.name} "
            f"(line {call.line}, column {call.column})",
            code="INVALID_FIELD",
        )
    expr = compiler.sql_expr(plan, column)
    if call.name == "COUNT":
        return func.count(expr), "int", None
    if call.name == "COUNT_DISTINCT":
        return func.count(distinct(compiler.text_expr(plan, column))), "int", None
    if call.name == "SUM":
        return func.sum(expr), kind, column.definition
    if call.name == "AVG":
        return func.avg(expr), kind, column.definition
    text = compiler.text_expr(plan, column)  # MIN/MAX of text: case-insensitively
    return (func.min if call.name == "MIN" else func.max)(text), kind, column.definition


def _aggregate_output(compiler: Compiler, plan: _Plan, call: Call, name: str) -> Output:
    sql, kind, definition = _aggregate(compiler, plan, call)
    inner = call.args[0] if call.name == "FORMAT" else call
    function = inner.name if isinstance(inner, Call) else call.name
    scale = field_scale(definition)
    convert: Callable[[Any], Any] | None
    if function in COUNTS:
        convert = int
    elif function == "AVG":
        convert = float
    elif kind in NUMBERS:
        convert = _number(scale)
    else:
        probe = _Column(name, Path((name,)), kind, definition, sql)
        convert = _converter(probe)
    if call.name == "FORMAT":
        convert = format_display("number" if kind == "int" else kind, scale) or convert
    return Output(name, call.text, kind, definition, True, _constant(sql), convert)


def _display(call: Call, column: _Column) -> Callable[[Any], Any] | None:
    """toLabel() or FORMAT() of a grouped field."""
    path = call.args[0]
    if call.name == "TOLABEL" and isinstance(path, Path):
        return to_label(column.definition, path)  # refuses any other than a picklist
    return format_display(column.kind, field_scale(column.definition)) or _converter(column)


def _number(scale: int) -> Callable[[Any], Any]:
    """A SUM/MIN/MAX of a number field at the field's scale (SQLite sums in floating point)."""
    step = Decimal(1).scaleb(-scale)

    def convert(value: Any) -> Any:
        exact = Decimal(str(value)).quantize(step)
        return int(exact) if scale == 0 else float(exact)

    return convert


def _constant(sql: Any) -> Callable[[int], Any]:
    """An aggregate: the same SQL at every level."""
    return lambda level: sql


def _flag(index: int) -> Callable[[int], Any]:
    """GROUPING(field): 1 on the rows where the field is rolled up."""
    return lambda level: literal(0 if index < level else 1)


def _nocase(compiler: Compiler, column: Any, textual: bool) -> Any:
    return column.collate("NOCASE") if textual and compiler.dialect == "sqlite" else column


def _unique(outputs: list[Output]) -> None:
    seen: set[str] = set()
    for output in outputs:
        if output.name.lower() in seen:
            raise SoqlError(
                f"duplicate alias or field '{output.name}' in an aggregate query: give one "
                "of them an alias"
            )
        seen.add(output.name.lower())
