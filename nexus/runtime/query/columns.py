"""What a query's columns are, without running it (`/query?columns=true`, which `sf data
query` asks for): compiled exactly as the query would be, so a name the caller may not read
fails the same way, then described from the plan. Neutral names; the sfcrm dialect projects
them into Salesforce's `columnMetadata`.

A parent path is a column of its relationship with the parent's fields as `join` columns
(`Account.Name` -> Account [Name]); a relationship subquery is an `aggregate` column of its
relationship with the child's columns; an aggregate function is an `aggregate` column named
by its alias or `exprN`, displayed as written (`COUNT(Id)`).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from nexus.runtime.access.service import CallerAccess
from nexus.runtime.metadata.definitions import USER_RELATIONSHIPS, ObjectDef, relationship
from nexus.runtime.metadata.view import MetadataCache, MetadataView
from nexus.runtime.query.aggregates import compile_aggregate
from nexus.runtime.query.engine import CANONICAL, _Column, _compiler, _Plan, compile_child
from nexus.runtime.query.engine import compile_select as compile_records
from nexus.runtime.query.parser import parse_soql
from nexus.runtime.system_objects.definitions import USER, as_system, system_object

Column = dict[str, Any]


async def query_columns(
    session: AsyncSession, *, cache: MetadataCache, access: CallerAccess, soql: str
) -> dict[str, Any]:
    view = await cache.view(session, access.org_id)
    query = parse_soql(soql)
    dialect = session.get_bind().dialect.name
    compiler = _compiler(query, view, access, include_deleted=False, dialect=dialect)
    if query.aggregate:
        plan = compile_aggregate(compiler, query)
        columns = [
            _column(
                o.name,
                o.shown,
                kind=None if o.aggregate else o.kind,
                number=o.kind in ("int", "number", "currency", "percent"),
                aggregate=o.aggregate,
            )
            for o in plan.outputs
        ]
        obj = compiler.object(query.object, query.object_position)
        return _answer(obj, columns, group_by=plan.grouped, id_selected=plan.id_selected)
    obj = compiler.object(query.object, query.object_position)
    if query.count:
        return _answer(obj, [], group_by=False, id_selected=False)
    record_plan, _ = compile_records(compiler, query)
    columns = _plan_columns(view, access, record_plan)
    for child in query.children:
        _, child_plan, _ = compile_child(compiler, record_plan, child)
        joined = _plan_columns(view, access, child_plan)
        columns.append(_column(child.object, child.object, aggregate=True, join=joined))
    id_selected = not record_plan.implicit_id
    return _answer(obj, columns, group_by=False, id_selected=id_selected)


def _answer(
    obj: ObjectDef, columns: list[Column], *, group_by: bool, id_selected: bool
) -> dict[str, Any]:
    return {
        "entity_name": obj.api_name,
        "key_prefix": obj.key_prefix,
        "group_by": group_by,
        "id_selected": id_selected,
        "columns": columns,
    }


def _plan_columns(view: MetadataView, access: CallerAccess, plan: _Plan) -> list[Column]:
    columns: list[Column] = []
    shown = plan.columns[1:] if plan.implicit_id else plan.columns
    for column in shown:
        level: list[Column] = columns
        obj: ObjectDef | None = plan.obj
        for part in column.path.parts[:-1]:
            obj, fk = _parent(view, obj, part)
            found = next((c for c in level if c["name"] == part and c["join"] is not None), None)
            if found is None:
                found = _column(part, part, foreign_key=fk, join=[])
                level.append(found)
            level = found["join"]
        level.append(_field(view, access, obj, column))
    return columns


def _parent(view: MetadataView, obj: ObjectDef | None, part: str) -> tuple[ObjectDef | None, str]:
    """The object a relationship leads to and its foreign key field."""
    lowered = part.lower()
    projected = as_system(obj)
    if projected is not None:  # Profile on User -> ProfileId
        reference = projected.relationship(part)
        target = system_object(reference.reference_to) if reference is not None else None
        if reference is None or target is None:  # pragma: no cover - compiled before
            return None, part
        return target.definition, reference.api_name
    if obj is None or lowered in USER_RELATIONSHIPS:  # Owner -> OwnerId
        return USER.definition, CANONICAL.get(lowered, part) + "Id"
    lookup = relationship(obj, part)
    parent = view.object(lookup.reference_to or "") if lookup else None
    return parent, lookup.api_name if lookup else part


def _field(
    view: MetadataView, access: CallerAccess, obj: ObjectDef | None, column: _Column
) -> Column:
    name = column.path.parts[-1]
    editable = False
    insertable = False
    if obj is not None and column.definition is not None:
        rights = access.object(view, obj)
        edit = access.field(view, obj, column.definition)[1]
        editable, insertable = edit and rights.edit, edit and rights.create
    elif obj is not None and name == "OwnerId":
        editable = access.object(view, obj).edit
    return _column(
        name,
        column.shown or name,
        kind=column.kind,
        custom=name.endswith("__c"),
        insertable=insertable,
        updatable=editable,
        number=column.kind in ("number", "currency", "percent"),
    )


def _column(
    name: str,
    shown: str,
    *,
    kind: str | None = None,
    custom: bool = False,
    aggregate: bool = False,
    insertable: bool = False,
    updatable: bool = False,
    number: bool = False,
    foreign_key: str | None = None,
    join: list[Column] | None = None,
) -> Column:
    return {
        "name": name,
        "display": shown,
        "type": kind,
        "custom": custom,
        "aggregate": aggregate,
        "insertable": insertable,
        "updatable": updatable,
        "number": number,
        "foreign_key": foreign_key,
        "join": join,
    }
