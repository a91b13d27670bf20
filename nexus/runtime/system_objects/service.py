"""The system objects' use cases besides SOQL: describeGlobal entries, describe, a read by id,
and the refusal of every write (they are read-only projections)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from nexus.contracts.describe import FieldDescribe, ObjectDescribe, ObjectSummary
from nexus.contracts.errors import BadRequest, NotFound
from nexus.contracts.records import ErrorCategory, RecordData
from nexus.platform.ids import to_18
from nexus.runtime.access.service import CallerAccess
from nexus.runtime.metadata.view import MetadataView
from nexus.runtime.records.coercion import wire_datetime
from nexus.runtime.system_objects.definitions import (
    SYSTEM_OBJECTS,
    SystemField,
    SystemObject,
    system_object,
    system_object_by_prefix,
)
from nexus.runtime.system_objects.query import system_visible
from nexus.runtime.system_objects.sources import source

#: What Salesforce says of a write to an entity whose describe is not createable / updateable /
#: deletable: `INVALID_TYPE_FOR_OPERATION`, "entity type cannot be inserted: Organization".
READ_ONLY_CODE = "INVALID_TYPE_FOR_OPERATION"
_VERBS = {"create": "inserted", "upsert": "upserted", "update": "updated", "delete": "deleted"}
_VERBS["undelete"] = "undeleted"


class ReadOnlyEntity(BadRequest):
    default_code = READ_ONLY_CODE


class SystemRecordNotFound(NotFound):
    default_code = ErrorCategory.NOT_FOUND.value


def _visible(view: MetadataView, name: str | None) -> SystemObject | None:
    """The system object called `name`, unless the org's metadata defines that name itself."""
    if not name or view.object(name) is not None:
        return None
    return system_object(name)


def _summary(obj: SystemObject) -> ObjectSummary:
    return ObjectSummary(
        name=obj.api_name,
        label=obj.label,
        label_plural=obj.plural_label,
        key_prefix=obj.key_prefix,
        custom=False,
        createable=False,
        updateable=False,
        deletable=False,
        queryable=True,
        replicateable=False,
    )


def system_summaries(view: MetadataView) -> list[ObjectSummary]:
    """describeGlobal's entries for the system objects (every API caller may read them)."""
    return [_summary(o) for o in SYSTEM_OBJECTS.values() if _visible(view, o.api_name)]


def _field(f: SystemField) -> FieldDescribe:
    return FieldDescribe(
        name=f.api_name,
        label=f.label,
        type=f.type,
        length=f.length,
        nillable=f.nillable,
        createable=False,
        updateable=False,
        unique=f.unique,
        external_id=False,
        name_field=f.api_name == "Name",
        custom=False,
        reference_to=[f.reference_to] if f.reference_to else [],
        relationship_name=f.relationship_name,
    )


def describe_system_object(view: MetadataView, name: str) -> ObjectDescribe | None:
    """The describe of the system object `name` (every field listed, Id and dates too), or
    None when `name` is not one."""
    obj = _visible(view, name)
    if obj is None:
        return None
    return ObjectDescribe(
        summary=_summary(obj),
        sharing_model="Read",
        fields=[_field(f) for f in obj.fields],
        child_relationships=[],
    )


def system_record_target(
    view: MetadataView, object_name: str | None, record_id: str | None
) -> SystemObject | None:
    """The system object a read names, by name or (no name) by its id's key prefix."""
    if object_name:
        return _visible(view, object_name)
    if not record_id or view.object_by_prefix(record_id) is not None:
        return None
    found = system_object_by_prefix(record_id)
    return found if found is not None and _visible(view, found.api_name) else None


def _wire(f: SystemField, value: Any) -> Any:
    if value is None:
        return None
    if f.kind == "datetime":
        return wire_datetime(value)
    if f.kind == "boolean":
        return bool(value)
    return value


async def read_system_record(
    session: AsyncSession,
    *,
    view: MetadataView,
    access: CallerAccess,
    obj: SystemObject,
    record_id: str,
    fields: list[str] | None,
) -> RecordData:
    """One row of a system object of the caller's org by id; 404 when absent, of another
    org, or of another object (the same answer for each)."""
    try:
        record_id = to_18(record_id)
    except ValueError:
        raise SystemRecordNotFound("malformed record id") from None
    if record_id[:3] != obj.key_prefix:
        raise SystemRecordNotFound("no such record")
    chosen = list(obj.fields)
    if fields is not None:
        unknown = [n for n in fields if obj.field(n) is None]
        if unknown:
            raise BadRequest(
                f"no such column {unknown[0]!r} on {obj.api_name}",
                code=ErrorCategory.INVALID_FIELD.value,
                fields=dict.fromkeys(unknown, "unknown"),
            )
        wanted = {n.lower() for n in fields} | {"id"}
        chosen = [f for f in obj.fields if f.key in wanted]
    dialect = session.get_bind().dialect.name
    rows = source(obj, org_id=access.org_id, view=view, dialect=dialect).subquery("s")
    stmt = select(*[rows.c[f.key] for f in chosen]).where(
        system_visible(obj, rows, access), rows.c.id == record_id
    )
    row = (await session.execute(stmt)).first()
    if row is None:
        raise SystemRecordNotFound("no such record")
    values = {f.api_name: _wire(f, row[i]) for i, f in enumerate(chosen)}
    return RecordData(object=obj.api_name, id=record_id, row_version=0, fields=values)


def refuse_system_writes(view: MetadataView, items: Iterable[Any]) -> None:
    """A batch that would change a system object is refused as a whole (400
    INVALID_TYPE_FOR_OPERATION), before anything is written. `items` are mutate or composite
    items (`op`, `object`, `id`); a composite `read` is not a write."""
    for item in items:
        verb = _VERBS.get(item.op)
        if verb is None:
            continue
        target = _visible(view, item.object) if item.object else None
        if target is None and item.id and not item.object:
            target = system_record_target(view, None, str(item.id))
        if target is not None:
            raise ReadOnlyEntity(f"entity type cannot be {verb}: {target.api_name}")
