"""The work pipeline's hottest statements straight to the on-loop SQLite driver (ADR 0050).

`execute(conn, statement, params)` runs a statement built once (a module constant or a
cached property: bound parameters, expanding IN lists) in `conn`'s transaction. On an
on-loop SQLite connection (`sqlite_on_loop`) it compiles the statement once per dialect,
expands its parameters (bind processors applied) and calls sqlite3 directly: ~5 us instead
of ~120 us of SQLAlchemy execution per small statement on this project's 2-vCPU box. On any
other connection (aiosqlite, MySQL/MariaDB, TiDB) it is `conn.execute`. Rows come back as
named tuples without result processing, so only statements whose selected columns are
strings, integers or bytes belong here. Statement events (`before_cursor_execute`) do not
see the fast path.

A statement without expanding lists (inserts, most updates) gets a plan when it is first
compiled: its SQL and, per placeholder, where the value comes from (the caller's key, or the
value bound into the statement) and its bind processor. Its parameters are then a list
comprehension per row instead of SQLAlchemy's `construct_expanded_state` (~2 us instead of
~20 us for a 19-column row; an executemany of a batch pays that per row). The plan takes
values exactly as `construct_params` does (ADR 0053; tests/integration/test_fast_sql.py).
A statement whose expanding lists carry no bind processors (id and key lists, (key, seq)
pairs) gets a list plan: its SQL in pieces around each list, joined with as many
placeholders as the call's lists have values (SQLAlchemy's expansion cost ~5 us per tuple,
~1 ms for a 1,200-id list). The plan is checked against SQLAlchemy's own expansion when it
is made; a statement it does not match, or an empty list, takes SQLAlchemy's path.
"""

from __future__ import annotations

import collections
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Table, bindparam, exc
from sqlalchemy.ext.asyncio import AsyncConnection

from nexus.platform.db.sqlite import on_loop as sqlite_on_loop


@dataclass(frozen=True)
class FastResult:
    rows: list[Any]
    rowcount: int

    def first(self) -> Any:
        return self.rows[0] if self.rows else None

    def scalar_one(self) -> Any:
        (row,) = self.rows
        return row[0]

    def __iter__(self) -> Any:
        return iter(self.rows)


#: Compiled statements kept (the hot ones are a few dozen, built once per store).
COMPILED_MAX = 256
_compiled: collections.OrderedDict[tuple[int, str], tuple[Any, Any, _Plan | _ListPlan | None]] = (
    collections.OrderedDict()
)
_row_types: dict[tuple[str, ...], Any] = {}


def row_values(table: Table, names: Sequence[str] | None = None) -> dict[str, Any]:
    """Every column of `table` (or those named) as a bind parameter of its own name: the
    `.values()` of an INSERT built once whose rows are dicts by column name. (A bare
    `insert(table)` is compiled for the keys of the rows it is given, so a row missing a
    column would compile a different statement; these always name every column, and a row
    without one of them is refused.)"""
    columns = table.c if names is None else [table.c[name] for name in names]
    return {column.name: bindparam(column.name, type_=column.type) for column in columns}


def _raw_sqlite(conn: AsyncConnection) -> Any:
    adapted = conn.sync_connection.connection.dbapi_connection  # type: ignore[union-attr]
    driver = getattr(adapted, "_connection", None)
    return driver._conn if isinstance(driver, sqlite_on_loop.Connection) else None


@dataclass(frozen=True)
class _Slot:
    """One placeholder: the caller's `key` (or `name`) gives its value, else `fixed` does
    (a literal bound into the statement); `required` binds have no fixed value."""

    key: str
    name: str
    required: bool
    fixed: Any
    process: Any


@dataclass(frozen=True)
class _Plan:
    """A compiled statement without expanding lists, ready to run: SQL and slots."""

    sql: str
    slots: tuple[_Slot, ...]
    by_key: tuple[str, ...] | None  # every slot is the caller's key, none processed

    def values(self, params: Mapping[str, Any]) -> list[Any]:
        if self.by_key is not None:
            try:
                return [params[key] for key in self.by_key]
            except KeyError:
                pass  # a missing required value: the slot loop names it
        values = []
        for slot in self.slots:
            if slot.key in params:
                value = params[slot.key]
            elif slot.name in params:
                value = params[slot.name]
            elif slot.required:
                raise exc.InvalidRequestError(
                    f"A value is required for bind parameter {slot.key!r}", code="cd3x"
                )
            else:
                value = slot.fixed
            values.append(value if slot.process is None else slot.process(value))
        return values


_MARKER = re.compile(r"__\[POSTCOMPILE_(\w+)\]")


@dataclass(frozen=True)
class _ListPlan:
    """A compiled statement with expanding lists, ready to run: `pieces` of SQL around
    the lists (`markers`: each list's key and tuple width, 0 for plain values), `order` the
    keys of the values in placeholder order (`lists` the expanding ones), `plain` the plan
    of the other values."""

    pieces: tuple[str, ...]
    markers: tuple[tuple[str, int], ...]
    order: tuple[str, ...]
    lists: dict[str, int]  # expanding key -> tuple width (0: plain values)
    plain: _Plan
    tuple_values: bool  # tuples render as `VALUES (?, ?), ...` (SQLite) instead of `(?, ?), ...`

    def render(self, params: Mapping[str, Any]) -> tuple[str, list[Any]] | None:
        """SQL and values, or None for SQLAlchemy's path (an empty list, a missing key)."""
        lists = {}
        for key in self.lists:
            value = params.get(key)
            if not value or isinstance(value, str):
                return None
            lists[key] = value
        sql = [self.pieces[0]]
        for (key, width), piece in zip(self.markers, self.pieces[1:], strict=True):
            n = len(lists[key])
            if width == 0:
                sql.append("?" + ", ?" * (n - 1))
            else:
                one = "(?" + ", ?" * (width - 1) + ")"
                sql.append(("VALUES " if self.tuple_values else "") + ", ".join([one] * n))
            sql.append(piece)
        plain = iter(self.plain.values(params))
        values: list[Any] = []
        for key in self.order:
            if key not in self.lists:
                values.append(next(plain))
            elif self.lists[key]:
                for row in lists[key]:
                    values.extend(row)
            else:
                values.extend(lists[key])
        return "".join(sql), values


def _list_plan(compiled: Any) -> _ListPlan | None:
    """The list plan of `compiled` (module docstring), or None."""
    if (
        compiled.literal_execute_params
        or compiled.escaped_bind_names
        or getattr(compiled, "_collected_params", None)
        or compiled.dialect.paramstyle != "qmark"
    ):
        return None
    binds = {name: bind for bind, name in compiled.bind_names.items()}
    expanding = {compiled.bind_names[b] for b in compiled.post_compile_params}
    widths: dict[str, int] = {}
    for name in expanding:
        bind = binds[name]
        if not bind.expanding or bind.callable is not None or bind.key != name:
            return None
        types = getattr(bind.type, "types", None)  # a tuple IN: one type per element
        for kind in types or [bind.type]:
            if kind._cached_bind_processor(compiled.dialect) is not None:
                return None
        widths[name] = len(types) if types else 0
    split = _MARKER.split(compiled.string)
    pieces, names = tuple(split[0::2]), split[1::2]
    if set(names) != expanding:
        return None
    others = [n for n in compiled.positiontup if n not in expanding]
    slots = []
    for name in others:
        bind = binds[name]
        if bind.callable is not None:
            return None
        fixed = None if bind.required else bind.value
        processor = compiled._bind_processors.get(name)
        slots.append(_Slot(bind.key, name, bind.required, fixed, processor))
    plan = _ListPlan(
        pieces=pieces,
        markers=tuple((n, widths[n]) for n in names),
        order=tuple(compiled.positiontup),
        lists=widths,
        plain=_Plan("", tuple(slots), None),
        tuple_values=bool(compiled.dialect.tuple_in_values),
    )
    return plan if _agrees(compiled, plan, binds, widths) else None


def _agrees(compiled: Any, plan: _ListPlan, binds: dict[str, Any], widths: dict[str, int]) -> bool:
    """Does `plan` render what SQLAlchemy's expansion renders? Checked once, with two
    values per list and a sample value for every other bind."""
    sample: dict[str, Any] = {}
    for name, bind in binds.items():
        if name in widths:
            width = widths[name]
            sample[name] = [tuple(range(n, n + width)) if width else n for n in (1, 5)]
        elif bind.required:
            sample[bind.key] = 7
    try:
        return plan.render(sample) == _positional(compiled, sample)
    except Exception:  # noqa: BLE001 - SQLAlchemy's path decides, not this plan
        return False


def _plan(compiled: Any) -> _Plan | _ListPlan | None:
    """The plan of `compiled`, or None when `construct_expanded_state` must build each
    execution (literal-execute binds, escaped names, callables, `.params()`, lists with
    bind processors)."""
    if not compiled.positional:
        return None
    if compiled._render_postcompile or compiled.post_compile_params:
        return _list_plan(compiled)
    if (
        compiled.literal_execute_params
        or compiled.escaped_bind_names
        or getattr(compiled, "_collected_params", None)
    ):
        return None
    if compiled.insert_prefetch or compiled.update_prefetch:
        # a column left out of the values has a Python-side default: SQLAlchemy computes it
        # per execution; a plan would send NULL instead (and differ from MariaDB's path)
        raise exc.ArgumentError("fast_sql runs no statement with Python-side column defaults")
    binds = {name: bind for bind, name in compiled.bind_names.items()}
    processors = compiled._bind_processors
    slots = []
    for name in compiled.positiontup:
        bind = binds[name]
        if bind.callable is not None:
            return None
        fixed = None if bind.required else bind.value
        slots.append(_Slot(bind.key, name, bind.required, fixed, processors.get(name)))
    plain = all(s.key == s.name and s.required and s.process is None for s in slots)
    by_key = tuple(s.key for s in slots) if plain else None
    return _Plan(compiled.string, tuple(slots), by_key)


def _compile(statement: Any, conn: AsyncConnection) -> tuple[Any, _Plan | _ListPlan | None]:
    key = (id(statement), conn.dialect.name)
    cached = _compiled.get(key)
    if cached is None or cached[0] is not statement:  # an id is only unique while alive
        compiled = statement.compile(dialect=conn.dialect)
        cached = _compiled[key] = (statement, compiled, _plan(compiled))
        if len(_compiled) > COMPILED_MAX:  # stores made per call (operator actions) come
            _compiled.popitem(last=False)  # and go: the oldest entry goes with them
    else:
        _compiled.move_to_end(key)
    return cached[1], cached[2]


def _row_type(description: Sequence[Any]) -> Any:
    names = tuple(d[0] for d in description)
    kind = _row_types.get(names)
    if kind is None:
        kind = _row_types[names] = collections.namedtuple("Row", names, rename=True)
    return kind


def _positional(compiled: Any, params: Mapping[str, Any]) -> tuple[str, list[Any]]:
    state = compiled.construct_expanded_state(params)
    values = list(state.positional_parameters)
    if state.processors:
        for index, name in enumerate(state.positiontup):
            process = state.processors.get(name)
            if process is not None:
                values[index] = process(values[index])
    return state.statement, values


async def execute(
    conn: AsyncConnection,
    statement: Any,
    params: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
) -> FastResult:
    raw = _raw_sqlite(conn)
    if raw is None:
        result = await conn.execute(statement, params)
        rows = list(result) if result.returns_rows else []
        return FastResult(rows, result.rowcount)
    compiled, plan = _compile(statement, conn)
    if isinstance(params, Sequence) and not isinstance(params, Mapping):
        if not params:
            return FastResult([], 0)
        if isinstance(plan, _Plan):
            cursor = raw.executemany(plan.sql, [plan.values(p) for p in params])
            return FastResult([], cursor.rowcount)
        many = [_positional(compiled, p) for p in params]
        cursor = raw.executemany(many[0][0], [values for _, values in many])
        return FastResult([], cursor.rowcount)
    rendered = None
    if isinstance(plan, _Plan):
        rendered = plan.sql, plan.values(params or {})
    elif plan is not None:
        rendered = plan.render(params or {})
    sql, values = rendered if rendered is not None else _positional(compiled, params or {})
    cursor = raw.execute(sql, values)
    if cursor.description is None:
        return FastResult([], cursor.rowcount)
    kind = _row_type(cursor.description)
    return FastResult([kind(*r) for r in cursor.fetchall()], cursor.rowcount)
