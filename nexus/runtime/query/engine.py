"""SOQL -> SQLAlchemy Core, with object, field and row permissions inside the SQL.

One statement for the rows (parent paths become LEFT OUTER JOINs whose ON clause carries the
parent's read predicate, so an invisible parent reads as null), one for `totalSize` only when
the page is full, and one per child subquery level (`fk IN (page ids)`), never per row.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any

from sqlalchemy import ColumnElement, and_, func, not_, null, or_, select, true
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.sql import Select as SqlSelect

from nexus.platform.ids import to_18
from nexus.runtime.access.service import CallerAccess
from nexus.runtime.formula.compiler import Formula
from nexus.runtime.formula.nodes import Context
from nexus.runtime.metadata import models as m
from nexus.runtime.metadata.definitions import (
    FORMULA_SYSTEM_FIELDS,
    MAX_RELATIONSHIP_DEPTH,
    USER_RELATIONSHIPS,
    FieldDef,
    ObjectDef,
    relationship,
)
from nexus.runtime.metadata.view import MetadataCache, MetadataView
from nexus.runtime.query.functions import expand_fields, field_scale, format_display, to_label
from nexus.runtime.query.parser import (
    Call,
    Condition,
    Literal,
    Path,
    Select,
    SelectItem,
    SoqlError,
    parse_soql,
)
from nexus.runtime.records.coercion import WIRE_AS_STORED, formula_wire, to_wire, wire_datetime
from nexus.runtime.schema.spec import column_name
from nexus.runtime.system_objects.definitions import USER, as_system, system_object
from nexus.runtime.system_objects.query import (
    queryable_system_object,
    system_alias,
    system_visible,
)

DEFAULT_PAGE = 2000
MIN_PAGE = 200
MAX_DEPTH = MAX_RELATIONSHIP_DEPTH
LOCATOR_TTL_SECONDS = 15 * 60
CANONICAL = {
    "id": "Id",
    "ownerid": "OwnerId",
    "createdbyid": "CreatedById",
    "createddate": "CreatedDate",
    "lastmodifiedbyid": "LastModifiedById",
    "lastmodifieddate": "LastModifiedDate",
    "systemmodstamp": "SystemModstamp",
    "isdeleted": "IsDeleted",
    "owner": "Owner",
    "createdby": "CreatedBy",
    "lastmodifiedby": "LastModifiedBy",
    "name": "Name",
    "username": "Username",
    "email": "Email",
}
SYSTEM = {
    "id": ("id", "id"),
    "ownerid": ("owner_id", "reference"),
    "createdbyid": ("created_by_id", "reference"),
    "createddate": ("created_date", "datetime"),
    "lastmodifiedbyid": ("last_modified_by_id", "reference"),
    "lastmodifieddate": ("last_modified_date", "datetime"),
    "systemmodstamp": ("system_modstamp", "datetime"),
    "isdeleted": ("is_deleted", "boolean"),
}


def _invalid_field(path: Path, detail: str = "") -> SoqlError:
    return SoqlError(
        f"No such column '{path.text}' (line {path.line}, column {path.column}){detail}",
        code="INVALID_FIELD",
    )


@dataclass
class QueryPage:
    total_size: int
    done: bool
    records: list[dict[str, Any]]
    next_locator: str | None = None
    revision: int | None = None  # the org's metadata revision read by the same statement


@dataclass
class _Column:
    key: str  # result label
    path: Path
    kind: str  # field type, or system kinds; a formula's return type
    definition: FieldDef | None
    expr: Any  # None for a formula field: computed from its inputs, or compiled on demand
    formula: Formula | None = None
    base: tuple[str, ...] = ()  # the relationship path a formula's own paths start from
    inputs: list[tuple[str, int]] = field(default_factory=list)  # formula path -> row index
    #: toLabel() / FORMAT(): the stored value -> what the caller sees, instead of its wire form
    display: Callable[[Any], Any] | None = None
    shown: str = ""  # the select-list text of a function column (its display name)
    reference_to: str | None = None  # what a system object's reference field points at


@dataclass
class _Plan:
    obj: ObjectDef
    table: Any
    joins: list[tuple[Any, ColumnElement[bool]]] = field(default_factory=list)
    aliases: dict[tuple[Any, ...], tuple[Any, ObjectDef | None, str]] = field(default_factory=dict)
    columns: list[_Column] = field(default_factory=list)
    hidden: list[_Column] = field(default_factory=list)  # formula inputs, after the columns
    pages: dict[tuple[int, int], Any] = field(default_factory=dict)  # (offset, limit) -> stmt
    implicit_id: bool = False  # Id was added to the columns, not selected


class Compiler:
    def __init__(
        self, view: MetadataView, access: CallerAccess, *, include_deleted: bool, dialect: str
    ) -> None:
        self.view = view
        self.access = access
        self.include_deleted = include_deleted
        self.counter = 0
        self.dialect = dialect

    def text_expr(self, plan: _Plan, column: _Column) -> Any:
        """SOQL compares text case-insensitively: MariaDB's collation already does; SQLite
        needs NOCASE."""
        expr = self.sql_expr(plan, column)
        textual = column.kind not in _CONVERTERS
        if textual and self.dialect == "sqlite":
            return expr.collate("NOCASE")
        return expr

    def sql_expr(self, plan: _Plan, column: _Column) -> Any:
        """A column's SQL; a formula field's compiled from the formula, or refused."""
        if column.formula is None:
            return column.expr
        formula, path = column.formula, column.path
        if formula.sql is None:
            raise SoqlError(
                f"formula field '{path.text}' cannot be filtered or sorted on "
                f"(line {path.line}, column {path.column}): the database cannot compute "
                f"{', '.join(formula.not_in_sql)}; select it instead",
                code="INVALID_FIELD",
            )
        return formula.sql(lambda p: self.resolve(plan, self.input_path(column, p), True).expr)

    @staticmethod
    def input_path(column: _Column, formula_path: str) -> Path:
        return Path((*column.base, *formula_path.split(".")), column.path.line, column.path.column)

    def object(self, name: str, position: tuple[int, int]) -> ObjectDef:
        """The object a FROM names: the org's, or a system object (User, Organization, ...)
        that the org's metadata does not define, which every API caller reads (ADR 0074)."""
        obj = self.view.object(name)
        if obj is None:
            found = queryable_system_object(self.view, name)
            if found is not None:
                return found.definition
        if obj is None or not self.access.object(self.view, obj).read:
            raise SoqlError(
                f"sObject type '{name}' is not supported "
                f"(line {position[0]}, column {position[1]})",
                code="INVALID_TYPE",
            )
        return obj

    def alias(self, obj: ObjectDef) -> Any:
        self.counter += 1
        found = as_system(obj)
        if found is not None:  # a derived table of the caller's org
            return system_alias(
                found,
                view=self.view,
                access=self.access,
                dialect=self.dialect,
                name=f"t{self.counter}",
            )
        return self.view.table(obj).alias(f"t{self.counter}")

    def visible(self, alias: Any, obj: ObjectDef, *, system: bool = False) -> ColumnElement[bool]:
        found = as_system(obj)
        if found is not None:
            return system_visible(found, alias, self.access, system=system)
        conditions = [alias.c.org_id == self.access.org_id]
        if not system:
            predicate = self.access.row_predicate(self.view, obj, "read")
            conditions.append(_rebind(predicate, self.view.table(obj), alias))
        if not self.include_deleted:
            conditions.append(alias.c.is_deleted.is_(False))
        return and_(*conditions)

    def resolve(self, plan: _Plan, path: Path, system: bool = False) -> _Column:
        """A field path's column, joining parents on the way. `system` resolves a formula's
        inputs: formulas see their fields and parents whatever the caller's access, as the
        formula field itself was checked."""
        if len(path.parts) > MAX_DEPTH + 1:
            raise _invalid_field(path, f": at most {MAX_DEPTH} relationship levels")
        current_alias: Any = plan.table
        current_obj: ObjectDef = plan.obj
        canonical: list[str] = []
        for depth, part in enumerate(path.parts[:-1]):
            key = (system, *(p.lower() for p in path.parts[: depth + 1]))
            if key not in plan.aliases:
                self.join_parent(
                    plan,
                    key,
                    path=path,
                    alias=current_alias,
                    obj=current_obj,
                    part=part,
                    system=system,
                )
            current_alias, parent, name = plan.aliases[key]
            if parent is None:  # pragma: no cover - every join records its object
                raise _invalid_field(path)
            current_obj = parent
            canonical.append(name)
        last = path.parts[-1].lower()

        def made(name: str, kind: str, definition: FieldDef | None, expr: Any) -> _Column:
            shown = Path((*canonical, name), path.line, path.column)
            return _Column(shown.text, shown, kind, definition, expr)

        current = as_system(current_obj)
        if current is not None:
            found = current.field(last)
            if found is None:
                raise _invalid_field(path)
            picked = made(found.api_name, found.kind, None, current_alias.c[found.key])
            picked.reference_to = found.reference_to
            return picked
        if last in SYSTEM:
            column, kind = SYSTEM[last]
            return made(CANONICAL[last], kind, None, current_alias.c[column])
        definition = self.view.field(current_obj, last)
        if definition is None or not (
            system or self.access.field(self.view, current_obj, definition)[0]
        ):
            raise _invalid_field(path)
        if definition.type == "formula":
            computed = made(definition.api_name, definition.return_type or "text", definition, None)
            computed.formula = self.view.formula_fields[current_obj.api_name.lower()][
                definition.api_name
            ]
            computed.base = path.parts[:-1]
            return computed
        return made(
            definition.api_name,
            definition.type,
            definition,
            current_alias.c[column_name(definition.api_name)],
        )

    def join_parent(
        self,
        plan: _Plan,
        key: tuple[Any, ...],
        *,
        path: Path,
        alias: Any,
        obj: ObjectDef,
        part: str,
        system: bool,
    ) -> None:
        """Join the parent that relationship `part` of `obj` leads to: a lookup's object
        (its read predicate in the ON clause, so an invisible parent reads as null), the User
        system object behind Owner / CreatedBy / LastModifiedBy, or a system object's
        reference (`Profile` on User)."""
        current = as_system(obj)
        lowered = part.lower()
        parent: ObjectDef | None
        if current is not None:
            lookup = current.relationship(part)
            target = system_object(lookup.reference_to) if lookup is not None else None
            if lookup is None or target is None:
                raise _invalid_field(path, f": no relationship '{part}' on {current.api_name}")
            parent, foreign_key = target.definition, alias.c[lookup.key]
            name = lookup.relationship_name or part
        elif lowered in USER_RELATIONSHIPS:
            parent, foreign_key = USER.definition, alias.c[USER_RELATIONSHIPS[lowered]]
            name = CANONICAL[lowered]
        else:
            field_lookup = relationship(obj, part)
            if field_lookup is None or not (
                system or self.access.field(self.view, obj, field_lookup)[0]
            ):
                raise _invalid_field(path, f": no relationship '{part}' on {obj.api_name}")
            target_name = field_lookup.reference_to or ""
            parent = self.view.object(target_name)
            if parent is None:
                found = queryable_system_object(self.view, target_name)
                parent = found.definition if found is not None else None
            elif not (system or self.access.object(self.view, parent).read):
                parent = None
            if parent is None:
                raise _invalid_field(path)
            foreign_key = alias.c[column_name(field_lookup.api_name)]
            name = field_lookup.relationship_name or part
        parent_alias = self.alias(parent)
        on = and_(
            parent_alias.c.id == foreign_key, self.visible(parent_alias, parent, system=system)
        )
        plan.joins.append((parent_alias, on))
        plan.aliases[key] = (parent_alias, parent, name)

    # ---------------------------------------------------------------- conditions
    def condition(
        self,
        plan: _Plan,
        cond: Condition,
        negated: bool = False,
        operand: Callable[[Condition], _Column] | None = None,
    ) -> ColumnElement[bool]:
        """SOQL comparisons are two-valued (a null field never matches `= x`, and `NOT`
        of that keeps it): under a NOT the SQL spells the null cases out; elsewhere SQL's
        unknown already excludes the row, so the plainer (index-friendly) form is used.
        `operand` resolves a comparison's left side (HAVING's aggregates); by default a
        field path of the plan."""
        if cond.op in ("and", "or"):
            parts = [self.condition(plan, c, negated, operand) for c in cond.children]
            return parts[0] if len(parts) == 1 else (and_ if cond.op == "and" else or_)(*parts)
        if cond.op == "not":
            return not_(self.condition(plan, cond.children[0], not negated, operand))
        if operand is not None:
            column = operand(cond)
        elif cond.path is None:  # the parser refuses functions in WHERE
            raise SoqlError("functions cannot be used in WHERE")
        else:
            column = self.resolve(plan, cond.path)
        if cond.op in ("in_select", "not_in_select"):
            joined: ColumnElement[bool] = semi_join(self, plan, column, cond)
            return joined
        return self.comparison(plan, cond, column, negated)

    def comparison(
        self, plan: _Plan, cond: Condition, column: _Column, negated: bool
    ) -> ColumnElement[bool]:
        expr = self.text_expr(plan, column)
        values = [self.literal(column, v) for v in cond.values]
        negative = negated != (cond.op == "not_in")  # NOT IN is a negation too
        guard = expr.isnot(None) if negative else true()
        if cond.op == "compare":
            return _compare(expr, cond.operator, values[0], column, guard)
        if cond.op == "like":
            if not isinstance(values[0], str):
                raise SoqlError(
                    f"LIKE needs a string (line {column.path.line})", code="MALFORMED_QUERY"
                )
            return and_(guard, expr.like(values[0], escape="\\"))
        if cond.op in ("in", "not_in"):
            present = [v for v in values if v is not None]
            inside = and_(guard, expr.in_(present)) if present else false_clause()
            if any(v is None for v in values):
                inside = or_(inside, expr.is_(None))
            return inside if cond.op == "in" else not_(inside)
        if cond.op in ("includes", "excludes"):
            if column.kind in _CONVERTERS:  # a number, date, checkbox or id has no values
                raise SoqlError(
                    f"{cond.op.upper()} applies to multi-select picklists, not "
                    f"'{column.path.text}' (line {column.path.line}, column {column.path.column})",
                    code="INVALID_FIELD",
                )
            clauses = [_has_value(expr, str(v)) for v in values if v is not None]
            match = or_(*clauses) if clauses else false_clause()
            return match if cond.op == "includes" else or_(not_(match), expr.is_(None))
        raise SoqlError(f"unsupported operator {cond.op}")  # pragma: no cover - the grammar's

    def object_of(self, plan: _Plan, column: _Column, written: Path) -> str | None:
        """The object an Id or reference column (resolved from the path as `written`)
        identifies: `Id` of the plan's object, `Account.Id`, `AccountId`, `OwnerId` -> User,
        `ProfileId` on User -> Profile; None for any other column."""
        if column.reference_to is not None:
            return column.reference_to
        if column.kind == "id":
            prefix = tuple(p.lower() for p in written.parts[:-1])
            if not prefix:
                return plan.obj.api_name
            _, obj, _ = plan.aliases[(False, *prefix)]
            return "User" if obj is None else obj.api_name
        if column.definition is not None and column.definition.reference_to:
            return column.definition.reference_to
        if column.definition is None and column.path.parts[-1].lower() in _USER_REFERENCES:
            return "User"
        return None

    def literal(self, column: _Column, literal: Literal) -> Any:
        if literal.kind == "null":
            return None
        convert = _CONVERTERS.get(column.kind, _text_value)
        try:
            return convert(literal)
        except (ValueError, InvalidOperation):
            raise SoqlError(
                f"value of type {literal.kind} does not fit {column.path.text} ({column.kind}) "
                f"(line {column.path.line}, column {column.path.column})",
                code="INVALID_FIELD",
            ) from None


#: the system fields that reference a user (OwnerId, CreatedById, LastModifiedById)
_USER_REFERENCES = frozenset(key for key, (_, kind) in SYSTEM.items() if kind == "reference")


def semi_join(compiler: Compiler, plan: _Plan, outer: _Column, cond: Condition) -> Any:
    """`field [NOT] IN (SELECT ref FROM Obj WHERE ...)` as `field [NOT] IN (subquery)`. The
    sub-select is compiled like any FROM object of this caller: object read access (else
    INVALID_TYPE), field-level security on its field and WHERE, and the row predicate with
    the deleted filter, so a record the caller cannot see never decides the outer match."""
    inner_query = cond.query
    if inner_query is None or cond.path is None:  # pragma: no cover - the grammar's
        raise SoqlError("malformed semi-join")
    target = compiler.object_of(plan, outer, cond.path)
    if target is None:
        raise SoqlError(
            f"semi-join or anti-join needs an Id or reference field on the left, not "
            f"'{cond.path.text}' (line {cond.path.line}, column {cond.path.column})",
            code="INVALID_FIELD",
        )
    obj = compiler.object(inner_query.object, inner_query.object_position)
    inner = _Plan(obj=obj, table=compiler.alias(obj))
    written = inner_query.fields[0]
    selected = compiler.resolve(inner, written)
    if compiler.object_of(inner, selected, written) != target:
        raise SoqlError(
            f"The selected field '{written.text}' in the subquery and the left operand field "
            f"in the where expression in the outer query '{cond.path.text}' should point to "
            f"the same object type (line {written.line}, column {written.column})",
            code="INVALID_FIELD",
        )
    where = [compiler.visible(inner.table, obj), selected.expr.isnot(None)]
    if inner_query.where is not None:
        where.append(compiler.condition(inner, inner_query.where))
    sub = select(selected.expr).select_from(_source(inner)).where(*where).correlate(None)
    inside = outer.expr.in_(sub)
    if cond.op == "in_select":
        return inside
    if outer.kind == "id":
        return not_(inside)
    # an anti-join keeps the records whose field is empty, as NOT IN (values) does
    return or_(outer.expr.is_(None), not_(inside))


def _require(literal: Literal, *kinds: str) -> None:
    if literal.kind not in kinds:
        raise ValueError(literal.kind)


def _number_value(literal: Literal) -> Decimal:
    _require(literal, "number")
    return Decimal(literal.value)


def _bool_value(literal: Literal) -> bool:
    _require(literal, "boolean")
    return bool(literal.value)


def _date_value(literal: Literal) -> Any:
    _require(literal, "date", "date_literal")
    if literal.kind == "date_literal":
        return _date_range(literal.value, datetime.now(UTC).date())
    return date.fromisoformat(literal.value)


def _datetime_value(literal: Literal) -> Any:
    _require(literal, "datetime", "date_literal")
    if literal.kind == "date_literal":
        start, end = _date_range(literal.value, datetime.now(UTC).date())
        return (
            datetime.combine(start, datetime.min.time()),
            datetime.combine(end, datetime.min.time()),
        )
    text = literal.value.replace("Z", "+00:00")
    if len(text) > 5 and text[-5] in "+-" and ":" not in text[-5:]:
        text = text[:-2] + ":" + text[-2:]
    return datetime.fromisoformat(text).astimezone(UTC).replace(tzinfo=None)


def _reference_value(literal: Literal) -> str:
    _require(literal, "string")
    try:
        return to_18(literal.value)
    except ValueError:
        return str(literal.value)


def _text_value(literal: Literal) -> str:
    _require(literal, "string")
    return str(literal.value)


_CONVERTERS = {
    "number": _number_value,
    "currency": _number_value,
    "percent": _number_value,
    "checkbox": _bool_value,
    "boolean": _bool_value,
    "date": _date_value,
    "datetime": _datetime_value,
    "id": _reference_value,
    "reference": _reference_value,
    "lookup": _reference_value,
    "master_detail": _reference_value,
}


def false_clause() -> ColumnElement[bool]:
    return true().is_(False)


def _has_value(expr: Any, value: str) -> ColumnElement[bool]:
    return or_(
        expr == value, expr.like(f"{value};%"), expr.like(f"%;{value}"), expr.like(f"%;{value};%")
    )


def _compare(expr: Any, op: str, value: Any, column: _Column, present: Any) -> ColumnElement[bool]:
    if isinstance(value, tuple):  # a date literal: a [start, end) range
        start, end = value
        ranges = {
            "=": and_(expr >= start, expr < end),
            "!=": or_(expr < start, expr >= end),
            "<>": or_(expr < start, expr >= end),
            "<": expr < start,
            "<=": expr < end,
            ">": expr >= end,
            ">=": expr >= start,
        }
        return ranges[op]  # type: ignore[no-any-return]
    if value is None:
        if op in ("=",):
            return expr.is_(None)  # type: ignore[no-any-return]
        if op in ("!=", "<>"):
            return expr.isnot(None)  # type: ignore[no-any-return]
        raise SoqlError(f"null can only be compared with = or != ({column.path.text})")
    if op == "=":
        return and_(present, expr == value)
    if op in ("!=", "<>"):
        return or_(expr != value, expr.is_(None))
    if isinstance(value, bool):  # SQLAlchemy refuses `<` etc. with a boolean
        raise SoqlError(f"true/false can only be compared with = or != ({column.path.text})")
    operators = {
        "<": lambda: expr < value,
        "<=": lambda: expr <= value,
        ">": lambda: expr > value,
        ">=": lambda: expr >= value,
    }
    return and_(present, operators[op]())


def _date_range(literal: str, today: date) -> tuple[date, date]:
    """A date literal as a half-open [start, end) range of days."""
    if literal.startswith(("LAST_N_DAYS:", "NEXT_N_DAYS:")):
        return _n_days(literal, today)
    one = timedelta(days=1)
    if literal in ("TODAY", "YESTERDAY", "TOMORROW"):
        day = today + {"TODAY": 0, "YESTERDAY": -1, "TOMORROW": 1}[literal] * one
        return day, day + one
    if literal.endswith("_WEEK"):
        start = today - timedelta(days=(today.weekday() + 1) % 7)
        shift = {"THIS": 0, "LAST": -7, "NEXT": 7}[literal.split("_", maxsplit=1)[0]]
        start += timedelta(days=shift)
        return start, start + timedelta(days=7)
    if literal.endswith("_MONTH"):
        index = (
            today.year * 12
            + today.month
            - 1
            + {"THIS": 0, "LAST": -1, "NEXT": 1}[literal.split("_", maxsplit=1)[0]]
        )
        start = date(index // 12, index % 12 + 1, 1)
        following = index + 1
        return start, date(following // 12, following % 12 + 1, 1)
    year = today.year + {"THIS": 0, "LAST": -1, "NEXT": 1}[literal.split("_", maxsplit=1)[0]]
    return date(year, 1, 1), date(year + 1, 1, 1)


def _n_days(literal: str, today: date) -> tuple[date, date]:
    """`LAST_N_DAYS:n` / `NEXT_N_DAYS:n`; an n whose range leaves the calendar (years 1 to
    9999) is the caller's error, not an overflow."""
    name, _, raw = literal.partition(":")
    last = name == "LAST_N_DAYS"
    most = (today - date.min).days if last else (date.max - today).days - 1
    digits = raw.lstrip("0") or "0"
    if len(digits) > len(str(most)) or int(digits) > most:  # no int() of 5,000 digits
        raise SoqlError(f"{name} is at most {most} today", code="NUMBER_OUTSIDE_VALID_RANGE")
    n = timedelta(days=int(digits))
    if last:
        return today - n, today + timedelta(days=1)
    return today, today + n + timedelta(days=1)


def _rebind(predicate: ColumnElement[bool], table: Any, alias: Any) -> ColumnElement[bool]:
    from sqlalchemy.sql.util import ClauseAdapter  # noqa: PLC0415

    return ClauseAdapter(alias).traverse(predicate)


# -------------------------------------------------------------------- execution


def compile_select(compiler: Compiler, query: Select) -> tuple[_Plan, SqlSelect[Any]]:
    """A record query (not an aggregate one: `aggregates.compile_aggregate`) as its plan and
    statement, every access check made on the way."""
    obj = compiler.object(query.object, query.object_position)
    alias = compiler.alias(obj)
    plan = _Plan(obj=obj, table=alias)
    if query.count and (query.fields or query.items or query.children):
        raise SoqlError("COUNT() cannot be combined with fields")
    if query.aggregate:
        raise SoqlError("an aggregate query cannot be used here")
    seen: set[str] = set()
    for column in _select_columns(compiler, plan, query):
        key = column.key.lower()
        if key not in seen:
            seen.add(key)
            plan.columns.append(column)
        elif column.display is not None or any(
            c.display is not None for c in plan.columns if c.key.lower() == key
        ):
            raise SoqlError(
                f"duplicate column '{column.key}' (line {column.path.line}, column "
                f"{column.path.column}): give {column.shown or column.key} an alias",
            )
    if not any(c.key.lower() == "id" for c in plan.columns):
        plan.columns.insert(0, compiler.resolve(plan, Path(("Id",))))
        plan.implicit_id = True
    for column in plan.columns:  # a selected formula is computed from its inputs after the read
        for formula_path in sorted(column.formula.paths if column.formula else ()):
            hidden = compiler.resolve(plan, compiler.input_path(column, formula_path), True)
            column.inputs.append((formula_path, len(plan.columns) + len(plan.hidden)))
            plan.hidden.append(hidden)
    where = [compiler.visible(alias, obj)]
    if query.where is not None:
        where.append(compiler.condition(plan, query.where))
    order: list[Any] = []
    for item in query.order:
        column = compiler.resolve(plan, item.path)
        expr = compiler.sql_expr(plan, column)
        nulls_last = item.nulls_last if item.nulls_last is not None else item.descending
        if nulls_last != item.descending:
            # SQLite and MariaDB sort NULLs first ascending and last descending, which is
            # SOQL's default; only a contrary NULLS clause needs an extra (index-defeating) key
            order.append(expr.is_(None) if nulls_last else expr.isnot(None))
        order.append(expr.desc() if item.descending else expr.asc())
    order.append(alias.c.id)
    source = _source(plan)
    revision = (
        select(m.org_state.c.metadata_revision)
        .where(m.org_state.c.org_id == compiler.access.org_id)
        .scalar_subquery()
    )
    stmt = (
        select(
            *[(null() if c.formula else c.expr).label(f"c{i}") for i, c in enumerate(plan.columns)],
            *[c.expr.label(f"h{i}") for i, c in enumerate(plan.hidden)],
            revision.label("rev"),
        )
        .select_from(source)
        .where(*where)
        .order_by(*order)
    )
    return plan, stmt


def _select_columns(compiler: Compiler, plan: _Plan, query: Select) -> Iterable[_Column]:
    """The select list's columns in order: fields, FIELDS() expanded to the fields the caller
    may read, toLabel() and FORMAT() of a field (under its alias, or the field's name)."""
    items = query.items or tuple(SelectItem(p) for p in query.fields)
    if not items:
        yield compiler.resolve(plan, Path(("Id",)))
    for item in items:
        expr = item.expr
        if isinstance(expr, Path):
            yield compiler.resolve(plan, expr)
        elif expr.name == "FIELDS":
            for path in expand_fields(compiler.view, compiler.access, plan.obj, expr):
                yield compiler.resolve(plan, path)
        elif expr.name in ("TOLABEL", "FORMAT") and isinstance(expr.args[0], Path):
            yield _displayed(compiler, plan, expr, expr.args[0], item.alias)
        else:
            raise SoqlError(
                f"{expr.text} needs an aggregate query (line {expr.line}, column {expr.column})"
            )


def _displayed(
    compiler: Compiler, plan: _Plan, call: Call, path: Path, alias: str | None
) -> _Column:
    column = compiler.resolve(plan, path)
    if column.formula is not None:
        raise SoqlError(
            f"{call.text}: a formula field cannot be labelled or formatted "
            f"(line {call.line}, column {call.column})",
            code="INVALID_FIELD",
        )
    if call.name == "TOLABEL":
        column.display = to_label(column.definition, path)
    else:
        column.display = format_display(column.kind, field_scale(column.definition))
        if column.display is None:  # shown unchanged, in its wire form
            column.display = _converter(column) or (lambda value: value)
    column.shown = call.text
    if alias:
        column.path = Path((alias,), path.line, path.column)
        column.key = alias
    return column


def _source(plan: _Plan) -> Any:
    source: Any = plan.table
    for joined, on in plan.joins:
        source = source.outerjoin(joined, on)
    return source


#: the formula path holding the user id behind each user relationship (`owner` -> `ownerid`)
_USER_KEYS = {
    relation: path
    for relation, column in USER_RELATIONSHIPS.items()
    for path, (stored, _) in FORMULA_SYSTEM_FIELDS.items()
    if stored == column
}


async def load_parent_paths(
    session: AsyncSession,
    view: MetadataView,
    obj: ObjectDef,
    records: list[dict[str, Any]],
    paths: Iterable[str],
) -> None:
    """Add to each record's formula values the parent paths (`account.owner.name`) the
    formulas read, from the lookup values the records hold (so unsaved records work too): one
    statement per first relationship for the whole batch. Formulas see parents whatever the
    caller's sharing, like the formula field itself."""
    groups: dict[str, list[str]] = {}
    for path in sorted(paths):
        first, _, rest = path.partition(".")
        if rest:
            groups.setdefault(first, []).append(rest)
    dialect = session.get_bind().dialect.name
    compiler = Compiler(
        view, CallerAccess.system(view.org_id), include_deleted=False, dialect=dialect
    )
    for first, rests in groups.items():
        parent: ObjectDef | None
        if first in _USER_KEYS:  # the User system object (ADR 0074), as SOQL reads it
            key, parent = _USER_KEYS[first], USER.definition
        else:
            lookup = relationship(obj, first)
            parent = view.object(lookup.reference_to or "") if lookup else None
            if lookup is None or parent is None:  # pragma: no cover - checked at save time
                raise SoqlError(f"no relationship {first!r} on {obj.api_name}")
            key = column_name(lookup.api_name)
        plan = _Plan(obj=parent, table=compiler.alias(parent))
        columns = [compiler.resolve(plan, Path(tuple(r.split("."))), True) for r in rests]
        stmt = select(plan.table.c.id, *[c.expr for c in columns]).select_from(_source(plan))
        stmt = stmt.where(compiler.visible(plan.table, parent, system=True))
        id_column = plan.table.c.id
        ids = sorted({str(r[key]) for r in records if r.get(key)})
        found = (
            {row[0]: row[1:] for row in await session.execute(stmt.where(id_column.in_(ids)))}
            if ids
            else {}
        )
        for record in records:
            row = found.get(record.get(key))
            for i, rest in enumerate(rests):
                record[f"{first}.{rest}"] = row[i] if row is not None else None


#: Compiled statements by (query, metadata revision, caller access, day): a caller's access
#: object changes with the SecurityEpoch, a view with the metadata revision.
_PLANS: dict[tuple[Any, ...], tuple[CallerAccess, Compiler, _Plan, SqlSelect[Any]]] = {}


_Projector = Callable[[Any], dict[str, Any]]


def _converter(column: _Column) -> Callable[[Any], Any] | None:
    """How a non-null stored value of this column becomes its wire value (None: as is)."""
    if column.display is not None:
        return column.display
    if column.definition is not None:
        definition = column.definition
        if definition.type in WIRE_AS_STORED:
            return None
        return lambda value: to_wire(definition, value)
    if column.kind == "datetime":
        return wire_datetime
    if column.kind == "boolean":
        return bool
    return None


@dataclass
class _Shape:
    """One level of a result record: its fields, its formulas and its parent records."""

    type: str
    fields: list[tuple[int, str, Callable[[Any], Any] | None]] = field(default_factory=list)
    formulas: list[tuple[str, Formula, list[tuple[str, int]]]] = field(default_factory=list)
    parents: dict[str, _Shape] = field(default_factory=dict)
    root: bool = False  # the queried record itself: never null

    def build(self, row: Any) -> dict[str, Any] | None:
        """This level's record; None for a parent whose every value is null (absent, or
        invisible to the caller)."""
        record: dict[str, Any] = {"attributes": {"type": self.type}}
        present = False
        for i, name, convert in self.fields:
            value = row[i]
            if value is not None:
                present = True
                if convert is not None:
                    value = convert(value)
            record[name] = value
        for name, formula, inputs in self.formulas:
            context = Context(values={path: row[index] for path, index in inputs})
            value = record[name] = formula_wire(formula.evaluate(context))
            present = present or value is not None
        for name, parent in self.parents.items():
            value = record[name] = parent.build(row)
            present = present or value is not None
        return record if present or self.root else None


def projector(plan: _Plan) -> _Projector:
    """The row -> record function for one plan, every per-column decision made once."""
    types = {
        tuple(key[1:]): (obj.api_name if obj is not None else "User")
        for key, (_, obj, _) in plan.aliases.items()
        if key[0] is False
    }
    root = _Shape(plan.obj.api_name, root=True)
    for i, column in enumerate(plan.columns):
        parts = column.path.parts
        level = root
        for depth, part in enumerate(parts[:-1], start=1):
            kind = types.get(tuple(p.lower() for p in parts[:depth]), part)
            level = level.parents.setdefault(part, _Shape(kind))
        if column.formula is not None:
            level.formulas.append((parts[-1], column.formula, column.inputs))
        else:
            level.fields.append((i, parts[-1], _converter(column)))
    flat = root.fields if not root.formulas and not root.parents else None
    name = root.type

    def project(row: Any) -> dict[str, Any]:
        if flat is None:
            return root.build(row)  # type: ignore[return-value]  # the root is never None
        record: dict[str, Any] = {"attributes": {"type": name}}
        for i, key, convert in flat:
            value = row[i]
            record[key] = value if convert is None or value is None else convert(value)
        return record

    return project


def _compiler(
    query: Select, view: MetadataView, access: CallerAccess, *, include_deleted: bool, dialect: str
) -> Compiler:
    """The compiler for `query` (one for records and system objects alike, ADR 0074)."""
    return Compiler(view, access, include_deleted=include_deleted, dialect=dialect)


async def run_query(
    session: AsyncSession,
    *,
    view: MetadataView,
    access: CallerAccess,
    soql: str,
    include_deleted: bool = False,
    page_size: int = DEFAULT_PAGE,
    start: int = 0,
) -> QueryPage:
    page_size = max(MIN_PAGE, min(page_size, DEFAULT_PAGE))
    query = parse_soql(soql)
    dialect = session.get_bind().dialect.name
    if query.aggregate:
        # aggregates build on this module's compiler, so they are imported when first used
        from nexus.runtime.query.aggregates import run_aggregate  # noqa: PLC0415

        compiler = _compiler(query, view, access, include_deleted=include_deleted, dialect=dialect)
        return await run_aggregate(
            session, compiler=compiler, query=query, page_size=page_size, start=start
        )
    key = (soql, include_deleted, dialect, view.org_id, view.revision, id(access), date.today())
    cached = _PLANS.get(key)
    if cached is None or cached[0] is not access:
        compiler = _compiler(query, view, access, include_deleted=include_deleted, dialect=dialect)
        plan, stmt = compile_select(compiler, query)
        if len(_PLANS) > 512:
            _PLANS.clear()
        _PLANS[key] = (access, compiler, plan, stmt)
    else:
        _, compiler, plan, stmt = cached
    if query.count:
        counted = select(func.count()).select_from(
            stmt.with_only_columns(plan.table.c.id).order_by(None).subquery()
        )
        total = int((await session.execute(counted)).scalar_one())
        return QueryPage(total_size=total, done=True, records=[])
    offset = (query.offset or 0) + start
    remaining = None if query.limit is None else max(query.limit - start, 0)
    fetch = page_size + 1 if remaining is None else min(page_size + 1, remaining)
    paged = plan.pages.get((offset, fetch))
    if paged is None:  # built once per plan and page: building and cache-keying cost
        paged = plan.pages[(offset, fetch)] = stmt.offset(offset).limit(fetch)
        if len(plan.pages) > 64:
            plan.pages.clear()
    rows = list(await session.execute(paged)) if fetch else []
    more = len(rows) > page_size
    rows = rows[:page_size]
    if more:
        bounded = stmt.order_by(None).with_only_columns(plan.table.c.id)
        if query.limit is not None:
            bounded = bounded.limit(query.limit)
        if query.offset:
            bounded = bounded.offset(query.offset)
        total = int(
            (
                await session.execute(select(func.count()).select_from(bounded.subquery()))
            ).scalar_one()
        )
    else:
        total = start + len(rows)
    project = projector(plan)
    records = [project(row) for row in rows]
    observed = int(rows[0][-1]) if rows and rows[0][-1] is not None else None
    for child in query.children:
        await _attach_children(session, compiler, plan, child, records)
    return QueryPage(total_size=total, done=not more, records=records, revision=observed)


def compile_child(
    compiler: Compiler, plan: _Plan, child: Select
) -> tuple[FieldDef, _Plan, SqlSelect[Any]]:
    """A relationship subquery (`SELECT ... FROM Contacts`) as the child object's foreign key
    to the parent, and the child's plan and statement (every access check made)."""
    relationship = child.object.lower()
    match = next(
        (
            (obj, f)
            for obj, f in compiler.view.children(plan.obj)
            if (f.child_relationship_name or "").lower() in (relationship, relationship + "__r")
        ),
        None,
    )
    if match is None or not compiler.access.object(compiler.view, match[0]).read:
        raise SoqlError(
            f"Didn't understand relationship '{child.object}' in FROM part of query",
            code="INVALID_TYPE",
        )
    child_obj, fk = match
    sub = Select(
        fields=child.fields,
        children=(),
        count=False,
        object=child_obj.api_name,
        object_position=child.object_position,
        where=child.where,
        order=child.order,
        items=child.items,
    )
    child_plan, stmt = compile_select(compiler, sub)
    return fk, child_plan, stmt


async def _attach_children(
    session: AsyncSession,
    compiler: Compiler,
    plan: _Plan,
    child: Select,
    records: list[dict[str, Any]],
) -> None:
    fk, child_plan, stmt = compile_child(compiler, plan, child)
    fk_column = child_plan.table.c[column_name(fk.api_name)]
    ids = [r["Id"] for r in records]
    stmt = stmt.add_columns(fk_column.label("parent_fk"))
    stmt = stmt.where(fk_column.in_(ids)) if ids else stmt.where(false_clause())
    grouped: dict[str, list[dict[str, Any]]] = {}
    project = projector(child_plan)
    for row in await session.execute(stmt):
        grouped.setdefault(row[-1], []).append(project(row))
    limit = child.limit
    for record in records:
        items = grouped.get(record["Id"], [])
        if limit is not None:
            items = items[:limit]
        record[child.object] = (
            {"totalSize": len(items), "done": True, "records": items} if items else None
        )


# -------------------------------------------------------------------- cursors


def make_locator(
    key: bytes,
    *,
    org_id: str,
    user_id: str,
    soql: str,
    include_deleted: bool,
    page_size: int,
    start: int,
) -> str:
    payload = json.dumps(
        {
            "o": org_id,
            "u": user_id,
            "q": soql,
            "d": include_deleted,
            "p": page_size,
            "s": start,
            "e": int(time.time()) + LOCATOR_TTL_SECONDS,
        },
        separators=(",", ":"),
    ).encode()
    mac = hmac.new(key, payload, hashlib.sha256).digest()[:16]
    return base64.urlsafe_b64encode(payload + mac).decode().rstrip("=")


def read_locator(key: bytes, locator: str, *, org_id: str, user_id: str) -> dict[str, Any]:
    """The locator's query state; refused when forged, expired or someone else's."""
    try:
        raw = base64.urlsafe_b64decode(locator + "=" * (-len(locator) % 4))
        payload, mac = raw[:-16], raw[-16:]
        valid = hmac.compare_digest(mac, hmac.new(key, payload, hashlib.sha256).digest()[:16])
        state = json.loads(payload) if valid else None
    except (ValueError, json.JSONDecodeError):
        state = None
    if not state or state["o"] != org_id or state["u"] != user_id or state["e"] < time.time():
        raise SoqlError(
            "invalid query locator (expired or not yours)", code="INVALID_QUERY_LOCATOR"
        )
    return state  # type: ignore[no-any-return]


async def query_current(
    session: AsyncSession,
    *,
    cache: MetadataCache,
    access: CallerAccess,
    soql: str,
    **options: Any,
) -> QueryPage:
    """Run a query on the org's current metadata with no separate revision round trip in the
    common case: the statement itself reads the revision; a moved revision (or an empty page,
    which reads none) costs one check and, if needed, one re-run."""
    view = cache.peek(access.org_id)
    verified = view is None
    if view is None:
        view = await cache.view(session, access.org_id)
    try:
        page = await run_query(session, view=view, access=access, soql=soql, **options)
    except SoqlError:
        if verified:
            raise
        # maybe a name that only the current metadata knows: check, then answer from it
        return await run_query(
            session,
            view=await cache.view(session, access.org_id),
            access=access,
            soql=soql,
            **options,
        )
    if page.revision == view.revision:
        return page
    if page.revision is None and verified:
        return page
    fresh = await cache.view(session, access.org_id)
    if fresh.revision == view.revision:
        return page
    return await run_query(session, view=fresh, access=access, soql=soql, **options)
