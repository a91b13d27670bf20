"""Reads: `ReadSelectedRecord`, `RecordAccess` and field history, authorized in the statement."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from nexus.contracts.errors import BadRequest, Conflict, NotFound
from nexus.contracts.records import ErrorCategory, RecordData
from nexus.platform.ids import to_18
from nexus.platform.observability import get_logger
from nexus.runtime.access.service import CallerAccess
from nexus.runtime.formula.nodes import Context
from nexus.runtime.metadata.definitions import FORMULA_SYSTEM_FIELDS, ObjectDef
from nexus.runtime.metadata.view import MetadataView
from nexus.runtime.query.engine import load_parent_paths
from nexus.runtime.records.coercion import (
    InvalidValue,
    coerce,
    formula_wire,
    to_wire,
    wire_datetime,
)
from nexus.runtime.records.store import RecordStore
from nexus.runtime.schema.spec import column_name
from nexus.runtime.system_objects.service import read_system_record, system_record_target

log = get_logger(__name__)
SYSTEM = {
    "OwnerId": "owner_id",
    "CreatedById": "created_by_id",
    "CreatedDate": "created_date",
    "LastModifiedById": "last_modified_by_id",
    "LastModifiedDate": "last_modified_date",
    "SystemModstamp": "system_modstamp",
    "IsDeleted": "is_deleted",
}


class RecordNotFound(NotFound):
    default_code = ErrorCategory.NOT_FOUND.value


def project(
    view: MetadataView,
    access: CallerAccess,
    obj: ObjectDef,
    row: Any,
    fields: list[str] | None,
    *,
    formula_values: dict[str, Any] | None = None,
) -> RecordData:
    """A stored row as the caller may see it: unreadable fields are absent, never empty.
    `formula_values` is what formula fields read (see `formula_values`)."""
    readable = {f.api_name.lower(): f for f in access.readable_fields(view, obj)}
    chosen = (
        [readable[n.lower()] for n in fields if n.lower() in readable]
        if fields is not None
        else list(readable.values())
    )
    out: dict[str, Any] = {"Id": row["id"]}
    for name, column in SYSTEM.items():
        if fields is None or name in fields:
            value = row[column]
            if name == "IsDeleted":
                value = bool(value)
            elif isinstance(value, datetime):
                value = wire_datetime(value)
            out[name] = value
    formulas = view.formula_fields.get(obj.api_name.lower(), {})
    context = None
    for definition in chosen:
        if definition.type == "formula":
            if context is None:
                context = Context(values=formula_values or own_formula_values(obj, row))
            out[definition.api_name] = formula_wire(formulas[definition.api_name].evaluate(context))
            continue
        out[definition.api_name] = to_wire(definition, row[column_name(definition.api_name)])
    return RecordData(
        object=obj.api_name, id=row["id"], row_version=int(row["row_version"]), fields=out
    )


async def formula_values(
    session: AsyncSession,
    view: MetadataView,
    obj: ObjectDef,
    row: Any,
    fields: list[str] | None = None,
) -> dict[str, Any]:
    """What the formula fields of `obj` (those in `fields`, or all) read for one stored row,
    parent paths included: a read that shows no parent-path formula costs no extra query."""
    values = own_formula_values(obj, row)
    wanted = None if fields is None else {n.lower() for n in fields}
    formulas = [
        formula
        for name, formula in view.formula_fields.get(obj.api_name.lower(), {}).items()
        if wanted is None or name.lower() in wanted
    ]
    paths = {p for formula in formulas for p in formula.paths if "." in p}
    if paths:
        await load_parent_paths(session, view, obj, [values], paths)
    return values


def own_formula_values(obj: ObjectDef, row: Any) -> dict[str, Any]:
    """What formulas read of a stored row itself: its stored fields and system fields."""
    values = {
        f.api_name.lower(): row[column_name(f.api_name)]
        for f in obj.all_fields()
        if f.type != "formula"
    }
    values.update({path: row[column] for path, (column, _) in FORMULA_SYSTEM_FIELDS.items()})
    return values


def resolve_object(
    view: MetadataView, access: CallerAccess, object_name: str | None, record_id: str
) -> ObjectDef:
    obj = view.object(object_name) if object_name else view.object_by_prefix(record_id)
    if obj is None or obj.key_prefix != record_id[:3] or not access.object(view, obj).read:
        raise RecordNotFound("no such record")
    return obj


async def read_selected(
    session: AsyncSession,
    *,
    view: MetadataView,
    access: CallerAccess,
    object_name: str | None,
    record_id: str,
    fields: list[str] | None = None,
) -> RecordData:
    try:
        record_id = to_18(record_id)
    except ValueError:
        raise RecordNotFound("malformed record id") from None
    obj = resolve_object(view, access, object_name, record_id)
    if fields is not None:
        known = (
            {f.api_name.lower() for f in access.readable_fields(view, obj)}
            | {n.lower() for n in SYSTEM}
            | {"id"}
        )
        unknown = [n for n in fields if n.lower() not in known]
        if unknown:
            raise BadRequest(
                f"no such column {unknown[0]!r} on {obj.api_name}",
                code=ErrorCategory.INVALID_FIELD.value,
                fields=dict.fromkeys(unknown, "unknown"),
            )
    table = view.table(obj)
    stmt = select(table).where(
        table.c.org_id == access.org_id,
        table.c.id == record_id,
        table.c.is_deleted.is_(False),
        access.row_predicate(view, obj, "read"),
    )
    row = (await session.execute(stmt)).mappings().first()
    if row is None:
        log.info("records.not_visible_or_absent", object=obj.api_name, record_id=record_id)
        raise RecordNotFound("no such record")
    values = await formula_values(session, view, obj, row, fields)
    return project(view, access, obj, row, fields, formula_values=values)


async def record_access(
    session: AsyncSession, *, view: MetadataView, access: CallerAccess, ids: list[str]
) -> dict[str, dict[str, bool]]:
    """Read / Edit / Delete / Locked decisions for a batch of ids (one statement per object)."""
    normalized: dict[str, str] = {}
    for raw in ids:
        try:
            normalized[raw] = to_18(raw)
        except ValueError:
            normalized[raw] = ""
    by_object: dict[str, list[str]] = defaultdict(list)
    for record_id in set(normalized.values()):
        obj = view.object_by_prefix(record_id) if record_id else None
        if obj is not None:
            by_object[obj.api_name.lower()].append(record_id)
    decisions: dict[str, dict[str, bool]] = {}
    store = RecordStore(session, access.org_id)
    for object_key, object_ids in by_object.items():
        obj = view.objects[object_key]
        permissions = access.object(view, obj)
        rows = await store.rows(
            view.table(obj),
            object_ids,
            columns=["id", "is_deleted"],
            flags={
                "r": access.row_predicate(view, obj, "read"),
                "e": access.row_predicate(view, obj, "edit"),
                "d": access.row_predicate(view, obj, "delete"),
            },
        )
        for record_id, row in rows.items():
            readable = bool(row["r"]) and not row["is_deleted"]
            decisions[record_id] = {
                "read": readable,
                "edit": readable and permissions.edit and bool(row["e"]),
                "delete": readable and permissions.delete and bool(row["d"]),
                "locked": False,
            }
    none = {"read": False, "edit": False, "delete": False, "locked": False}
    return {raw: decisions.get(record_id, none) for raw, record_id in normalized.items()}


MAX_EXTERNAL_MATCHES = 10


async def read_by_external_id(
    session: AsyncSession,
    *,
    view: MetadataView,
    access: CallerAccess,
    object_name: str,
    field_name: str,
    value: str,
    fields: list[str] | None = None,
) -> RecordData:
    """`ReadSelectedRecord` by an external id (or unique) field the caller may read: 404 when
    no visible record has the value, 409 `MULTIPLE_RECORDS` (naming them) when several do."""
    obj = view.object(object_name)
    if obj is None or not access.object(view, obj).read:
        raise RecordNotFound("no such record")
    definition = view.field(obj, field_name)
    if (
        definition is None
        or not (definition.external_id or definition.unique)
        or not access.field(view, obj, definition)[0]
    ):
        raise BadRequest(
            f"{field_name!r} is not an external id field of {obj.api_name}",
            code=ErrorCategory.INVALID_FIELD.value,
            fields={field_name: "not an external id"},
        )
    try:
        wanted = coerce(definition, value)
    except InvalidValue:
        raise RecordNotFound("no such record") from None
    table = view.table(obj)
    stmt = (
        select(table.c.id)
        .where(
            table.c.org_id == access.org_id,
            table.c[column_name(definition.api_name)] == wanted,
            table.c.is_deleted.is_(False),
            access.row_predicate(view, obj, "read"),
        )
        .order_by(table.c.id)
        .limit(MAX_EXTERNAL_MATCHES)
    )
    ids = list((await session.execute(stmt)).scalars())
    if not ids:
        raise RecordNotFound("no such record")
    if len(ids) > 1:
        raise Conflict(
            f"{len(ids)} records of {obj.api_name} have this {definition.api_name}",
            code="MULTIPLE_RECORDS",
            fields=dict.fromkeys(ids, obj.api_name),
        )
    return await read_selected(
        session, view=view, access=access, object_name=obj.api_name, record_id=ids[0], fields=fields
    )


async def read_record(
    session: AsyncSession,
    *,
    view: MetadataView,
    access: CallerAccess,
    object_name: str | None,
    record_id: str | None,
    external_id_field: str | None = None,
    external_id: str | None = None,
    fields: list[str] | None = None,
) -> RecordData:
    """`ReadSelectedRecord` by id, or by an external id field of `object_name` (400 when the
    request names neither, or mixes the two)."""
    if external_id_field is not None:
        if object_name is None or external_id is None or record_id is not None:
            raise BadRequest("an external id read names object, field and value, no id")
        return await read_by_external_id(
            session,
            view=view,
            access=access,
            object_name=object_name,
            field_name=external_id_field,
            value=external_id,
            fields=fields,
        )
    if record_id is None:
        raise BadRequest("give id, or external_id_field and external_id")
    system = system_record_target(view, object_name, record_id)
    if system is not None:  # User, Organization, ... (read-only projections, ADR 0074)
        return await read_system_record(
            session, view=view, access=access, obj=system, record_id=record_id, fields=fields
        )
    return await read_selected(
        session,
        view=view,
        access=access,
        object_name=object_name,
        record_id=record_id,
        fields=fields,
    )
