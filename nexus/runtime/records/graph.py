"""`ReadGraph`: everything a record page needs, in a fixed number of statements.

The record (authorized in its statement), the names of its lookup parents (one UNION ALL over
the parent objects), the first page of every related list (one UNION ALL over the child
objects), the caller's access decisions and the tracked-field history. The statement count
does not grow with fields, lookups or related lists.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field
from sqlalchemy import Select, literal, select, union_all
from sqlalchemy.ext.asyncio import AsyncSession

from nexus.contracts.records import RecordData
from nexus.runtime.access.service import CallerAccess
from nexus.runtime.metadata.definitions import FieldDef, ObjectDef
from nexus.runtime.metadata.view import MetadataView
from nexus.runtime.records.read import read_selected, record_access, resolve_object
from nexus.runtime.records.store import RecordStore
from nexus.runtime.schema.spec import column_name

RELATED_PAGE = 5


class RelatedRecord(BaseModel):
    id: str
    name: str | None


class RelatedList(BaseModel):
    object: str
    field: str
    relationship_name: str | None
    records: list[RelatedRecord]
    has_more: bool


class HistoryEntry(BaseModel):
    field: str
    old_value: str | None
    new_value: str | None
    changed_by_id: str
    changed_at_ms: int


class GraphSection(BaseModel):
    label: str
    columns: int
    fields: list[str]


class RecordGraph(BaseModel):
    record: RecordData
    field_order: list[str]
    sections: list[GraphSection] = Field(default_factory=list)
    parent_names: dict[str, str | None] = Field(default_factory=dict)  # lookup field -> name
    related: list[RelatedList] = Field(default_factory=list)
    access: dict[str, bool]
    history: list[HistoryEntry] = Field(default_factory=list)


async def read_graph(
    session: AsyncSession,
    *,
    view: MetadataView,
    access: CallerAccess,
    object_name: str | None,
    record_id: str,
    related_page: int = RELATED_PAGE,
) -> RecordGraph:
    record = await read_selected(
        session, view=view, access=access, object_name=object_name, record_id=record_id
    )
    obj = resolve_object(view, access, object_name, record.id)
    readable = access.readable_fields(view, obj)
    decisions = (await record_access(session, view=view, access=access, ids=[record.id]))[record.id]
    parents = await _parent_names(session, view, access, record=record, readable=readable)
    related = await _related(session, view, access, obj=obj, record_id=record.id, page=related_page)
    history = await _history(session, access, record.id, readable, limit=20)
    sections = _sections(view, obj, {f.api_name for f in readable})
    return RecordGraph(
        record=record,
        field_order=[name for section in sections for name in section.fields],
        sections=sections,
        parent_names=parents,
        related=related,
        access=decisions,
        history=history,
    )


async def field_history(
    session: AsyncSession,
    *,
    view: MetadataView,
    access: CallerAccess,
    record_id: str,
    limit: int = 50,
) -> list[HistoryEntry]:
    """Tracked-field history of a record the caller may read (NOT_FOUND otherwise)."""
    record = await read_selected(
        session, view=view, access=access, object_name=None, record_id=record_id, fields=["Id"]
    )
    obj = resolve_object(view, access, None, record.id)
    return await _history(
        session, access, record.id, access.readable_fields(view, obj), limit=limit
    )


async def _history(
    session: AsyncSession,
    access: CallerAccess,
    record_id: str,
    readable: list[FieldDef],
    *,
    limit: int,
) -> list[HistoryEntry]:
    tracked = {f.api_name for f in readable if f.track_history}
    if not tracked:
        return []
    return [
        HistoryEntry(
            field=row["field_name"],
            old_value=row["old_value"],
            new_value=row["new_value"],
            changed_by_id=row["changed_by_id"],
            changed_at_ms=int(row["changed_at_ms"]),
        )
        for row in await RecordStore(session, access.org_id).history(record_id, limit=limit)
        if row["field_name"] in tracked
    ]


def _sections(view: MetadataView, obj: ObjectDef, readable: set[str]) -> list[GraphSection]:
    """The object's layout with unreadable fields removed; one section of every readable
    field (in definition order) when the object has no layout."""
    layout = view.layouts.get(obj.api_name.lower())
    if layout is None:
        names = [f.api_name for f in obj.all_fields() if f.api_name in readable]
        return [GraphSection(label="Details", columns=2, fields=names)]
    by_lower = {name.lower(): name for name in readable}
    sections = [
        GraphSection(
            label=section.label,
            columns=section.columns,
            fields=[by_lower[n.lower()] for n in section.fields if n.lower() in by_lower],
        )
        for section in layout.sections
    ]
    return [section for section in sections if section.fields]


async def _parent_names(
    session: AsyncSession,
    view: MetadataView,
    access: CallerAccess,
    *,
    record: RecordData,
    readable: list[FieldDef],
) -> dict[str, str | None]:
    lookups = [
        (f, view.object(f.reference_to or ""))
        for f in readable
        if f.type in ("lookup", "master_detail") and record.fields.get(f.api_name)
    ]
    selects: list[Select[Any]] = []
    for f, parent in lookups:
        if parent is None or not access.object(view, parent).read:
            continue
        table = view.table(parent)
        selects.append(
            select(literal(f.api_name).label("field"), table.c.name.label("name")).where(
                table.c.org_id == access.org_id,
                table.c.id == record.fields[f.api_name],
                table.c.is_deleted.is_(False),
                access.row_predicate(view, parent, "read"),
            )
        )
    names: dict[str, str | None] = {f.api_name: None for f, _ in lookups}
    if selects:
        for row in await session.execute(union_all(*selects)):
            names[str(row.field)] = row.name
    return names


async def _related(
    session: AsyncSession,
    view: MetadataView,
    access: CallerAccess,
    *,
    obj: ObjectDef,
    record_id: str,
    page: int,
) -> list[RelatedList]:
    lists: list[tuple[ObjectDef, FieldDef]] = [
        (child, f)
        for child, f in view.children(obj)
        if access.object(view, child).read and access.field(view, child, f)[0]
    ]
    layout = view.layouts.get(obj.api_name.lower())
    if layout is not None:
        order = [name.lower() for name in layout.related_lists]
        lists = sorted(
            (entry for entry in lists if entry[0].api_name.lower() in order),
            key=lambda entry: order.index(entry[0].api_name.lower()),
        )
    selects = []
    for position, (child, f) in enumerate(lists):
        table = view.table(child)
        inner = (
            select(
                literal(position).label("list"),
                table.c.id.label("id"),
                table.c.name.label("name"),
                table.c.created_date.label("created"),
            )
            .where(
                table.c.org_id == access.org_id,
                table.c[column_name(f.api_name)] == record_id,
                table.c.is_deleted.is_(False),
                access.row_predicate(view, child, "read"),
            )
            .order_by(table.c.created_date.desc(), table.c.id)
            .limit(page + 1)
        ).subquery()
        selects.append(select(inner))
    grouped: dict[int, list[RelatedRecord]] = {i: [] for i in range(len(lists))}
    if selects:
        for row in await session.execute(union_all(*selects)):
            grouped[int(row.list)].append(RelatedRecord(id=row.id, name=row.name))
    return [
        RelatedList(
            object=child.api_name,
            field=f.api_name,
            relationship_name=f.child_relationship_name,
            records=grouped[i][:page],
            has_more=len(grouped[i]) > page,
        )
        for i, (child, f) in enumerate(lists)
    ]
