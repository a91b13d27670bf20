"""Runtime's internal HTTP API (`/internal/v1/runtime/...`): thin, one use case per call."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict, Field

from nexus.contracts.composite import CompositeRequest, CompositeResponse
from nexus.contracts.describe import ObjectDescribe, ObjectSummary
from nexus.contracts.errors import BadRequest
from nexus.contracts.identity import TrustedCall
from nexus.contracts.operators import (
    OPERATOR_CHECK_CAPABILITY,
    OperatorCheckRequest,
    OperatorCheckResponse,
)
from nexus.contracts.records import MAX_BATCH, MutateRequest, MutateResponse, RecordData
from nexus.identity.api import internal_call
from nexus.platform.db.engine import unit_of_work
from nexus.platform.service_app import ServiceState
from nexus.runtime.dependencies import RecordsCaller, require_admin, runtime_state, use_case
from nexus.runtime.describe import describe_global, describe_object
from nexus.runtime.metadata.definitions import InvalidMetadata
from nexus.runtime.metadata.service import apply_metadata
from nexus.runtime.query.columns import query_columns
from nexus.runtime.query.engine import (
    DEFAULT_PAGE,
    MIN_PAGE,
    QueryPage,
    make_locator,
    query_current,
    read_locator,
)
from nexus.runtime.query.list_views import run_list_view, to_soql
from nexus.runtime.records.composite import CompositeRolledBack, run_composite
from nexus.runtime.records.graph import HistoryEntry, RecordGraph, field_history, read_graph
from nexus.runtime.records.mutate import AllOrNoneRolledBack, mutate
from nexus.runtime.records.read import read_record, record_access
from nexus.runtime.search.engine import search_current
from nexus.runtime.system_objects.service import (
    describe_system_object,
    refuse_system_writes,
    system_summaries,
)

router = APIRouter(prefix="/internal/v1/runtime")


class MetadataApplyRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    objects: list[dict[str, Any]] = Field(default_factory=list, max_length=200)
    permission_sets: list[dict[str, Any]] = Field(default_factory=list, max_length=200)
    sharing_rules: list[dict[str, Any]] = Field(default_factory=list, max_length=200)
    layouts: list[dict[str, Any]] = Field(default_factory=list, max_length=200)
    validation_rules: list[dict[str, Any]] = Field(default_factory=list, max_length=200)
    flows: list[dict[str, Any]] = Field(default_factory=list, max_length=200)
    list_views: list[dict[str, Any]] = Field(default_factory=list, max_length=200)


class MetadataApplyResponse(BaseModel):
    apply_id: str
    state: str
    versions: list[dict[str, Any]]
    unchanged: list[str]
    schema_generation: int
    metadata_revision: int


@router.post("/operators/check", response_model=OperatorCheckResponse)
async def operators_check(
    request: Request,
    body: OperatorCheckRequest,
    caller: Annotated[TrustedCall, Depends(internal_call(OPERATOR_CHECK_CAPABILITY))],
) -> OperatorCheckResponse:
    """May the delegating user operate `area` (dead letters, replay, ...)? 200 or 403."""
    await require_admin(request, caller, what=f"operating {body.area}")
    return OperatorCheckResponse(area=body.area, org_id=caller.org_id, user_id=caller.user_id)


@router.post("/metadata/apply", response_model=MetadataApplyResponse)
async def metadata_apply(
    request: Request,
    body: MetadataApplyRequest,
    caller: Annotated[TrustedCall, Depends(internal_call("runtime.metadata.apply"))],
) -> MetadataApplyResponse:
    await require_admin(request, caller)
    service: ServiceState = request.app.state.service
    try:
        result = await apply_metadata(service.engine, org_id=caller.org_id, raw=body.model_dump())
    except InvalidMetadata as exc:
        raise BadRequest(
            "the metadata batch is invalid; nothing was applied",
            code="INVALID_METADATA",
            fields={p.path: p.message for p in exc.problems[:50]},
        ) from None
    return MetadataApplyResponse(
        apply_id=result.apply_id,
        state=result.state,
        versions=result.versions,
        unchanged=result.unchanged,
        schema_generation=result.schema_generation,
        metadata_revision=result.metadata_revision,
    )


# ---------------------------------------------------------------------------- records


class ReadRequest(BaseModel):
    """One record by id, or by an external id field of `object` (`external_id_field`)."""

    model_config = ConfigDict(extra="forbid")

    id: str | None = Field(default=None, min_length=15, max_length=18)
    object: str | None = None
    fields: list[str] | None = Field(default=None, max_length=500)
    external_id_field: str | None = Field(default=None, max_length=80)
    external_id: str | None = Field(default=None, max_length=255)


class AccessRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    ids: list[str] = Field(max_length=MAX_BATCH)


class DescribeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    object: str


@router.post("/records/mutate", response_model=MutateResponse)
async def records_mutate(
    request: Request, body: MutateRequest, caller: RecordsCaller
) -> MutateResponse:
    try:
        async with use_case(request, caller, readonly=False) as (session, view, access):
            refuse_system_writes(view, body.items)
            return await mutate(session, view=view, access=access, caller=caller, request=body)
    except AllOrNoneRolledBack as rolled_back:
        return rolled_back.response


@router.post("/records/composite", response_model=CompositeResponse)
async def records_composite(
    request: Request, body: CompositeRequest, caller: RecordsCaller
) -> CompositeResponse:
    """Ordered record operations with `@{ref.path}` references in one transaction; with
    `all_or_none` a failure rolls back every earlier item too."""
    try:
        async with use_case(request, caller, readonly=False) as (session, view, access):
            refuse_system_writes(view, body.items)
            return await run_composite(
                session, view=view, access=access, caller=caller, request=body
            )
    except CompositeRolledBack as rolled_back:
        return rolled_back.response


@router.post("/records/read", response_model=RecordData)
async def records_read(request: Request, body: ReadRequest, caller: RecordsCaller) -> RecordData:
    async with use_case(request, caller, readonly=True) as (session, view, access):
        return await read_record(
            session,
            view=view,
            access=access,
            object_name=body.object,
            record_id=body.id,
            external_id_field=body.external_id_field,
            external_id=body.external_id,
            fields=body.fields,
        )


@router.post("/records/access")
async def records_access(
    request: Request, body: AccessRequest, caller: RecordsCaller
) -> dict[str, dict[str, bool]]:
    async with use_case(request, caller, readonly=True) as (session, view, access):
        return await record_access(session, view=view, access=access, ids=body.ids)


@router.post("/describe/global", response_model=list[ObjectSummary])
async def describe_global_endpoint(request: Request, caller: RecordsCaller) -> list[ObjectSummary]:
    async with use_case(request, caller, readonly=True) as (_session, view, access):
        summaries = describe_global(view, access) + system_summaries(view)
    return sorted(summaries, key=lambda s: s.name.lower())


@router.post("/describe/object", response_model=ObjectDescribe)
async def describe_object_endpoint(
    request: Request, body: DescribeRequest, caller: RecordsCaller
) -> ObjectDescribe:
    async with use_case(request, caller, readonly=True) as (_session, view, access):
        return describe_system_object(view, body.object) or describe_object(
            view, access, body.object
        )


class GraphRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=15, max_length=18)
    object: str | None = None
    related_page: int = Field(default=5, ge=1, le=50)


@router.post("/records/graph", response_model=RecordGraph)
async def records_graph(request: Request, body: GraphRequest, caller: RecordsCaller) -> RecordGraph:
    """ReadGraph: a record page's record, parents, related lists, access and history."""
    async with use_case(request, caller, readonly=True) as (session, view, access):
        return await read_graph(
            session,
            view=view,
            access=access,
            object_name=body.object,
            record_id=body.id,
            related_page=body.related_page,
        )


class HistoryRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=15, max_length=18)
    limit: int = Field(default=50, ge=1, le=200)


@router.post("/records/history", response_model=list[HistoryEntry])
async def records_history(
    request: Request, body: HistoryRequest, caller: RecordsCaller
) -> list[HistoryEntry]:
    """Field history of one record: only tracked fields the caller may read, if it may read it."""
    async with use_case(request, caller, readonly=True) as (session, view, access):
        return await field_history(
            session, view=view, access=access, record_id=body.id, limit=body.limit
        )


# ---------------------------------------------------------------------------- query


class QueryRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    soql: str | None = Field(default=None, max_length=100_000)
    locator: str | None = Field(default=None, max_length=200_000)
    include_deleted: bool = False
    page_size: int = Field(default=DEFAULT_PAGE, ge=MIN_PAGE, le=DEFAULT_PAGE)


class QueryResponse(BaseModel):
    total_size: int
    done: bool
    records: list[dict[str, Any]]
    next_locator: str | None = None


@router.post("/query", response_model=QueryResponse)
async def query_endpoint(
    request: Request, body: QueryRequest, caller: RecordsCaller
) -> QueryResponse:
    """Query (or QueryMore with `locator`): permissions are in the SQL; pages carry a locator."""
    service, runtime = runtime_state(request)
    key: bytes = request.app.state.identity.cfg.signature_key
    if body.locator:
        state = read_locator(key, body.locator, org_id=caller.org_id, user_id=caller.user_id)
        soql, include_deleted, page_size, start = state["q"], state["d"], state["p"], state["s"]
    elif body.soql:
        soql, include_deleted, page_size, start = body.soql, body.include_deleted, body.page_size, 0
    else:
        raise BadRequest("give soql or a locator", code="MALFORMED_QUERY")
    async with unit_of_work(service.sessions, readonly=True) as session:
        access = await runtime.access.for_caller(session, caller)
        page = await query_current(
            session,
            cache=runtime.metadata,
            access=access,
            soql=soql,
            include_deleted=include_deleted,
            page_size=page_size,
            start=start,
        )
    return _page_response(
        key,
        caller,
        page,
        soql=soql,
        include_deleted=include_deleted,
        page_size=page_size,
        start=start,
    )


def _page_response(
    key: bytes,
    caller: TrustedCall,
    page: QueryPage,
    *,
    soql: str,
    include_deleted: bool,
    page_size: int,
    start: int,
) -> QueryResponse:
    """A page of results, with a locator to the next page when there is one."""
    locator = None
    if not page.done:
        locator = make_locator(
            key,
            org_id=caller.org_id,
            user_id=caller.user_id,
            soql=soql,
            include_deleted=include_deleted,
            page_size=page_size,
            start=start + len(page.records),
        )
    return QueryResponse(
        total_size=page.total_size, done=page.done, records=page.records, next_locator=locator
    )


class QueryColumnsRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    soql: str = Field(min_length=1, max_length=100_000)


class QueryColumnsResponse(BaseModel):
    entity_name: str
    key_prefix: str | None
    group_by: bool
    id_selected: bool
    columns: list[dict[str, Any]]


@router.post("/query/columns", response_model=QueryColumnsResponse)
async def query_columns_endpoint(
    request: Request, body: QueryColumnsRequest, caller: RecordsCaller
) -> QueryColumnsResponse:
    """A query's columns, compiled with the caller's access but not run (`columns=true`)."""
    service, runtime = runtime_state(request)
    async with unit_of_work(service.sessions, readonly=True) as session:
        access = await runtime.access.for_caller(session, caller)
        answer = await query_columns(session, cache=runtime.metadata, access=access, soql=body.soql)
    return QueryColumnsResponse(**answer)


class SearchRequest(BaseModel):
    """SOSL text (`search`), or the UI's plain `term` over readable objects (Id and Name)."""

    model_config = ConfigDict(extra="forbid")

    search: str | None = Field(default=None, max_length=100_000)
    term: str | None = Field(default=None, max_length=1000)
    objects: list[str] | None = Field(default=None, max_length=100)
    limit: int = Field(default=20, ge=1, le=200)


class SearchResponse(BaseModel):
    searchRecords: list[dict[str, Any]]  # the Salesforce wire name


@router.post("/search", response_model=SearchResponse)
async def search_endpoint(
    request: Request, body: SearchRequest, caller: RecordsCaller
) -> SearchResponse:
    """Global search: ranked across objects, with object, field and row access enforced."""
    if (body.search is None) == (body.term is None):
        raise BadRequest("give exactly one of search or term", code="MALFORMED_SEARCH")
    service, runtime = runtime_state(request)
    async with unit_of_work(service.sessions, readonly=True) as session:
        access = await runtime.access.for_caller(session, caller)
        records = await search_current(
            session,
            cache=runtime.metadata,
            access=access,
            sosl=body.search,
            term=body.term,
            objects=body.objects,
            limit=body.limit,
        )
    return SearchResponse(searchRecords=records)


class ListViewRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=80)
    page_size: int = Field(default=MIN_PAGE, ge=MIN_PAGE, le=DEFAULT_PAGE)


class ListViewResponse(BaseModel):
    name: str
    object: str
    label: str
    columns: list[str]
    page: QueryResponse


@router.post("/list-views/run", response_model=ListViewResponse)
async def list_view_endpoint(
    request: Request, body: ListViewRequest, caller: RecordsCaller
) -> ListViewResponse:
    """A saved list view's first page, through the query engine with the caller's access."""
    service, runtime = runtime_state(request)
    key: bytes = request.app.state.identity.cfg.signature_key
    async with unit_of_work(service.sessions, readonly=True) as session:
        access = await runtime.access.for_caller(session, caller)
        definition, page = await run_list_view(
            session,
            cache=runtime.metadata,
            access=access,
            name=body.name,
            page_size=body.page_size,
        )
    return ListViewResponse(
        name=definition.api_name,
        object=definition.object,
        label=definition.label,
        columns=list(definition.columns),
        page=_page_response(
            key,
            caller,
            page,
            soql=to_soql(definition),
            include_deleted=False,
            page_size=body.page_size,
            start=0,
        ),
    )
