"""`records/tree` and `records/related`: one unit of work each, authorized in Runtime."""

from __future__ import annotations

from fastapi import APIRouter, Request

from nexus.contracts.trees import (
    RelatedPage,
    RelatedRequest,
    RelatedResponse,
    TreeRequest,
    TreeResponse,
)
from nexus.platform.db.engine import unit_of_work
from nexus.runtime.dependencies import RecordsCaller, runtime_state, use_case
from nexus.runtime.query.engine import DEFAULT_PAGE, make_locator, query_current
from nexus.runtime.records.read import RecordNotFound, read_selected
from nexus.runtime.trees.service import (
    TreeRolledBack,
    child_relationship,
    create_tree,
    parent_relationship,
    readable_object,
    record_id_18,
    related_parent,
    selectable,
)

router = APIRouter(prefix="/internal/v1/runtime/records")


@router.post("/tree", response_model=TreeResponse)
async def tree(request: Request, body: TreeRequest, caller: RecordsCaller) -> TreeResponse:
    """Every record created, or none (`failures` names the records that failed)."""
    try:
        async with use_case(request, caller, readonly=False) as (session, view, access):
            return await create_tree(session, view=view, access=access, caller=caller, request=body)
    except TreeRolledBack as rolled_back:
        return rolled_back.response


@router.post("/related", response_model=RelatedResponse)
async def related(request: Request, body: RelatedRequest, caller: RecordsCaller) -> RelatedResponse:
    """A parent relationship: the parent record. A child relationship: the first page of the
    children the caller may see (a query, with a locator for the next page)."""
    record_id = record_id_18(body.id)
    service, runtime = runtime_state(request)
    async with unit_of_work(service.sessions, readonly=True) as session:
        view = await runtime.metadata.view(session, caller.org_id)
        access = await runtime.access.for_caller(session, caller)
        obj = readable_object(view, access, body.object)
        lookup = parent_relationship(view, access, obj, body.relationship)
        if lookup is not None:
            record = await related_parent(
                session,
                view=view,
                access=access,
                obj=obj,
                record_id=record_id,
                lookup=lookup,
                fields=body.fields,
            )
            return RelatedResponse(record=record)
        found = child_relationship(view, access, obj, body.relationship)
        if found is None:
            raise RecordNotFound(f"no relationship {body.relationship!r} on {obj.api_name}")
        child, field = found
        # the record itself must be visible (404 otherwise), as for a read
        await read_selected(
            session,
            view=view,
            access=access,
            object_name=obj.api_name,
            record_id=record_id,
            fields=["Id"],
        )
        select = body.fields or selectable(view, access, child)
        columns = ", ".join(dict.fromkeys(select))
        # SOQL for Runtime's own parser (never SQL): names are metadata or checked by it
        soql = f"SELECT {columns} FROM {child.api_name} WHERE {field.api_name} = '{record_id}'"  # noqa: S608
        page = await query_current(
            session, cache=runtime.metadata, access=access, soql=soql, page_size=DEFAULT_PAGE
        )
    locator = None
    if not page.done:
        key: bytes = request.app.state.identity.cfg.signature_key
        locator = make_locator(
            key,
            org_id=caller.org_id,
            user_id=caller.user_id,
            soql=soql,
            include_deleted=False,
            page_size=DEFAULT_PAGE,
            start=len(page.records),
        )
    return RelatedResponse(
        page=RelatedPage(
            total_size=page.total_size, done=page.done, records=page.records, next_locator=locator
        )
    )
