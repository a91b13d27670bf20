"""The browser's use cases (`/internal/v1/runtime/ui/...`): one coarse call per screen.

Navigation, an object's info (describe + list views + layout), several record pages at once
(ReadGraph per record plus the describes of their objects) and a list view page with per-row
access. Every decision is made here with the caller's access; the AppService only projects.
"""

from __future__ import annotations

from datetime import date, datetime
from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy.ext.asyncio import AsyncSession

from nexus.contracts.errors import BadRequest
from nexus.contracts.ui import (
    LayoutInfo,
    ListColumn,
    ListFilter,
    ListResult,
    ListRow,
    ListSort,
    ListViewRef,
    NavItem,
    ObjectInfo,
)
from nexus.runtime.access.service import CallerAccess
from nexus.runtime.dependencies import RecordsCaller, use_case
from nexus.runtime.describe import ObjectNotFound, describe_global, describe_object
from nexus.runtime.metadata.definitions import (
    ListViewDef,
    ListViewFilter,
    ListViewSort,
    ObjectDef,
    relationship,
)
from nexus.runtime.metadata.repository import MetadataRepository
from nexus.runtime.metadata.view import MetadataView
from nexus.runtime.query.engine import run_query
from nexus.runtime.query.list_views import to_soql
from nexus.runtime.query.user_filters import MAX_FILTERS, UserFilter, to_list_filter
from nexus.runtime.records.graph import RecordGraph, read_graph
from nexus.runtime.records.read import record_access

router = APIRouter(prefix="/internal/v1/runtime/ui")

RECENT = "__Recent"
MAX_RECORD_PAGES = 10
MAX_LIST_PAGE = 200
SYSTEM_COLUMNS = {
    "id": ("Record ID", "id"),
    "createddate": ("Created Date", "datetime"),
    "lastmodifieddate": ("Last Modified Date", "datetime"),
    "ownerid": ("Owner ID", "reference"),
}


async def _list_views(session: AsyncSession, org_id: str) -> list[ListViewDef]:
    rows = await MetadataRepository(session).active_definitions(org_id, "list_view")
    return [ListViewDef.model_validate_json(r["body"]) for r in rows]


def _refs(views: list[ListViewDef], obj: ObjectDef) -> list[ListViewRef]:
    return [
        ListViewRef(api_name=v.api_name, label=v.label)
        for v in views
        if v.object.lower() == obj.api_name.lower()
    ]


@router.post("/nav", response_model=list[NavItem])
async def nav(request: Request, caller: RecordsCaller) -> list[NavItem]:
    """The objects the caller may read, in the order the org defined them, with list views."""
    async with use_case(request, caller, readonly=True) as (session, view, access):
        views = await _list_views(session, access.org_id)
        by_name = {s.name.lower(): s for s in describe_global(view, access)}
        return [
            NavItem(summary=by_name[key], list_views=_refs(views, obj))
            for key, obj in view.objects.items()
            if key in by_name
        ]


class ObjectRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    object: str = Field(min_length=1, max_length=80)


def _layout(view: MetadataView, access: CallerAccess, obj: ObjectDef) -> LayoutInfo:
    readable = {f.api_name.lower(): f.api_name for f in access.readable_fields(view, obj)}
    children = {
        child.api_name.lower()
        for child, f in view.children(obj)
        if access.object(view, child).read and access.field(view, child, f)[0]
    }
    layout = view.layouts.get(obj.api_name.lower())
    if layout is None:
        fields = [f.api_name for f in obj.all_fields() if f.api_name.lower() in readable]
        sections = [{"label": "Details", "columns": 2, "fields": fields}]
        return LayoutInfo(sections=sections, related_lists=sorted(children))
    sections = [
        {
            "label": s.label,
            "columns": s.columns,
            "fields": [readable[n.lower()] for n in s.fields if n.lower() in readable],
        }
        for s in layout.sections
    ]
    return LayoutInfo(
        sections=[s for s in sections if s["fields"]],
        related_lists=[name for name in layout.related_lists if name.lower() in children],
    )


@router.post("/object", response_model=ObjectInfo)
async def object_info(request: Request, body: ObjectRequest, caller: RecordsCaller) -> ObjectInfo:
    async with use_case(request, caller, readonly=True) as (session, view, access):
        described = describe_object(view, access, body.object)  # 404 unless readable
        obj = view.object(body.object)
        if obj is None:  # pragma: no cover - describe_object answered for it
            raise ObjectNotFound(f"no object named {body.object!r}")
        return ObjectInfo(
            describe=described,
            list_views=_refs(await _list_views(session, access.org_id), obj),
            layout=_layout(view, access, obj),
        )


class RecordPagesRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    ids: list[str] = Field(min_length=1, max_length=MAX_RECORD_PAGES)
    related_page: int = Field(default=5, ge=1, le=50)


class RecordPages(BaseModel):
    graphs: list[RecordGraph]
    objects: dict[str, ObjectInfo]


@router.post("/records", response_model=RecordPages)
async def record_pages(
    request: Request, body: RecordPagesRequest, caller: RecordsCaller
) -> RecordPages:
    """ReadGraph for each id (any one missing or not shared: 404) and its object's info."""
    async with use_case(request, caller, readonly=True) as (session, view, access):
        graphs = [
            await read_graph(
                session,
                view=view,
                access=access,
                object_name=None,
                record_id=record_id,
                related_page=body.related_page,
            )
            for record_id in body.ids
        ]
        views = await _list_views(session, access.org_id) if graphs else []
        objects: dict[str, ObjectInfo] = {}
        for graph in graphs:
            name = graph.record.object
            obj = view.object(name)
            if name in objects or obj is None:
                continue
            objects[name] = ObjectInfo(
                describe=describe_object(view, access, name),
                list_views=_refs(views, obj),
                layout=_layout(view, access, obj),
            )
        return RecordPages(graphs=graphs, objects=objects)


class ListRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    object: str = Field(min_length=1, max_length=80)
    list_view: str = Field(min_length=1, max_length=80)
    page_size: int = Field(default=50, ge=1, le=MAX_LIST_PAGE)
    start: int = Field(default=0, ge=0, le=100_000)
    sort_by: str | None = Field(default=None, max_length=200)
    q: str | None = Field(default=None, max_length=100)
    #: The user's own filters, ANDed with the list view's (unknown, unreadable -> 400).
    filters: list[UserFilter] = Field(default_factory=list, max_length=MAX_FILTERS)


def _column(view: MetadataView, obj: ObjectDef, path: str) -> ListColumn:
    """A column's label and type; a parent path (Account.Name) is labelled by its lookup
    (`Account Name`), or by lookup and field (`Account Industry`)."""
    parts = path.split(".")
    current, labels = obj, []
    for part in parts[:-1]:
        lookup = relationship(current, part)
        parent = view.object(lookup.reference_to or "") if lookup is not None else None
        if lookup is None or parent is None:
            return ListColumn(path=path, label=path, type="text", sortable=False)
        labels.append(lookup.label.removesuffix(" Name").removesuffix(" ID"))
        current = parent
    f = view.field(current, parts[-1])
    label: str
    kind: str
    if f is not None:
        label, kind = f.label, f.type
    else:
        label, kind = SYSTEM_COLUMNS.get(parts[-1].lower(), (parts[-1], "text"))
    if labels and parts[-1].lower() == "name":
        label = "Name"
    return ListColumn(path=path, label=" ".join([*labels, label]), type=kind)


def _operand(value: Any) -> str:
    """A filter's value as the user wrote it (dates ISO 8601, true/false)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%dT%H:%M:%SZ")
    if isinstance(value, date):
        return value.isoformat()
    return str(value)


def _value(record: dict[str, Any], path: str) -> Any:
    """A column's value in a query record (parent paths are nested records)."""
    current: Any = record
    for part in path.split("."):
        if not isinstance(current, dict):
            return None
        current = next((v for k, v in current.items() if k.lower() == part.lower()), None)
    return current


def _relationship_path(view: MetadataView, obj: ObjectDef, path: str) -> str:
    """`AccountId.Name` (through the lookup field, as some list views write it) as the SOQL
    relationship path `Account.Name`; other paths unchanged."""
    parts, current = path.split("."), obj
    for i, part in enumerate(parts[:-1]):
        f = view.field(current, part)
        parent = view.object(f.reference_to or "") if f is not None else None
        if f is None or parent is None or not f.relationship_name:
            return path
        parts[i], current = f.relationship_name, parent
    return ".".join(parts)


def _normalized(view: MetadataView, obj: ObjectDef, definition: ListViewDef) -> ListViewDef:
    def path(p: str) -> str:
        return _relationship_path(view, obj, p)

    return definition.model_copy(
        update={
            "columns": tuple(path(c) for c in definition.columns),
            "filters": tuple(
                f.model_copy(update={"field": path(f.field)}) for f in definition.filters
            ),
            "sort": tuple(s.model_copy(update={"field": path(s.field)}) for s in definition.sort),
        }
    )


def _definition(
    view: MetadataView,
    views: list[ListViewDef],
    obj: ObjectDef,
    name: str,
    *,
    sort_by: str | None,
    q: str | None,
    added: tuple[ListViewFilter, ...] = (),
) -> ListViewDef:
    if name == RECENT:
        definition = ListViewDef(
            api_name=RECENT,
            object=obj.api_name,
            label=f"Recently Created {obj.plural_label}",
            columns=("Name",),
            sort=(ListViewSort(field="CreatedDate", descending=True),),
        )
    else:
        found = next((v for v in views if v.api_name.lower() == name.lower()), None)
        if found is None or found.object.lower() != obj.api_name.lower():
            raise ObjectNotFound(f"no list view named {name!r} on {obj.api_name}")
        definition = _normalized(view, obj, found)
    update: dict[str, Any] = {}
    if sort_by:
        field = sort_by.removeprefix("-")
        try:
            sort = ListViewSort(
                field=_relationship_path(view, obj, field), descending=sort_by.startswith("-")
            )
        except ValueError:
            raise BadRequest(f"cannot sort by {field!r}", code="INVALID_FIELD") from None
        update["sort"] = (sort,)
    if q:
        added = (*added, ListViewFilter(field="Name", operator="contains", value=q))
    if added:
        update["filters"] = (*definition.filters, *added)
    return definition.model_copy(update=update) if update else definition


async def _resolve(
    session: AsyncSession, view: MetadataView, access: CallerAccess, body: ListRequest
) -> tuple[ObjectDef, ListViewDef, ListViewDef]:
    """The object, the list view as asked (sort, name filter) and the same with `Id` first
    and an `Id` tie-breaker in its sort (stable pages)."""
    obj = view.object(body.object)
    if obj is None or not access.object(view, obj).read:
        raise ObjectNotFound(f"no object named {body.object!r}")
    definition = _definition(
        view,
        await _list_views(session, access.org_id),
        obj,
        body.list_view,
        sort_by=body.sort_by,
        q=body.q,
        added=tuple(to_list_filter(view, obj, access, f) for f in body.filters),
    )
    shown = definition
    if not any(c.lower() == "id" for c in definition.columns):
        shown = definition.model_copy(update={"columns": ("Id", *definition.columns)})
    return (
        obj,
        definition,
        shown.model_copy(update={"sort": (*shown.sort, ListViewSort(field="Id"))}),
    )


@router.post("/list", response_model=ListResult)
async def list_page(request: Request, body: ListRequest, caller: RecordsCaller) -> ListResult:
    """One page of a list view (sorted as asked, optionally filtered by name) with its total,
    column labels and each row's Edit/Delete decision."""
    async with use_case(request, caller, readonly=True) as (session, view, access):
        obj, definition, paged = await _resolve(session, view, access, body)
        unsorted = to_soql(definition.model_copy(update={"sort": ()}))
        # SOQL (parsed and authorized by the engine) from the validated list view
        count = "SELECT COUNT() " + unsorted[unsorted.index(" FROM ") + 1 :]  # noqa: S608
        total = (await run_query(session, view=view, access=access, soql=count)).total_size
        soql = to_soql(paged, limit=body.page_size) + f" OFFSET {body.start}"
        page = await run_query(session, view=view, access=access, soql=soql)
        ids = [str(r["Id"]) for r in page.records]
        decisions = await record_access(session, view=view, access=access, ids=ids)
        summary = access.object(view, obj)
        return ListResult(
            object=obj.api_name,
            list_view=definition.api_name,
            label=definition.label,
            createable=summary.create,
            columns=[_column(view, obj, c) for c in definition.columns],
            filters=[
                ListFilter(
                    field=f.field,
                    operator=f.operator,
                    values=[
                        _operand(v) for v in (f.value if isinstance(f.value, tuple) else [f.value])
                    ],
                )
                for f in definition.filters
            ],
            sort=[ListSort(field=s.field, descending=s.descending) for s in definition.sort],
            total_size=total,
            start=body.start,
            page_size=body.page_size,
            rows=[
                ListRow(
                    id=record_id,
                    values={c: _value(r, c) for c in definition.columns},
                    editable=decisions[record_id]["edit"],
                    deletable=decisions[record_id]["delete"],
                )
                for record_id, r in zip(ids, page.records, strict=True)
            ],
        )


MAX_EXPORT = 10_000
EXPORT_PAGE = 2_000


class ListExport(BaseModel):
    label: str
    columns: list[ListColumn]
    rows: list[list[Any]]  # one value per column
    truncated: bool  # more than MAX_EXPORT records matched


@router.post("/export", response_model=ListExport)
async def export(request: Request, body: ListRequest, caller: RecordsCaller) -> ListExport:
    """Every record of a list view the caller may see (at most `MAX_EXPORT`), for a CSV."""
    async with use_case(request, caller, readonly=True) as (session, view, access):
        obj, definition, paged = await _resolve(session, view, access, body)
        soql = to_soql(paged, limit=MAX_EXPORT + 1)
        records: list[dict[str, Any]] = []
        while True:
            page = await run_query(
                session,
                view=view,
                access=access,
                soql=soql,
                page_size=EXPORT_PAGE,
                start=len(records),
            )
            records += page.records
            if page.done or not page.records:
                break
        return ListExport(
            label=definition.label,
            columns=[_column(view, obj, c) for c in definition.columns],
            rows=[[_value(r, c) for c in definition.columns] for r in records[:MAX_EXPORT]],
            truncated=len(records) > MAX_EXPORT,
        )
