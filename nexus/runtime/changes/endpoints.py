"""`records/updated`, `records/deleted`, `records/recent`: one read-only unit of work each."""

from __future__ import annotations

from fastapi import APIRouter, Request

from nexus.contracts.changes import (
    ChangesRequest,
    DeletedResponse,
    RecentRequest,
    RecentResponse,
    UpdatedResponse,
)
from nexus.runtime.changes.service import deleted_records, recent_records, updated_records
from nexus.runtime.dependencies import RecordsCaller, use_case

router = APIRouter(prefix="/internal/v1/runtime/records")


@router.post("/updated", response_model=UpdatedResponse)
async def updated(request: Request, body: ChangesRequest, caller: RecordsCaller) -> UpdatedResponse:
    async with use_case(request, caller, readonly=True) as (session, view, access):
        return await updated_records(session, view=view, access=access, request=body)


@router.post("/deleted", response_model=DeletedResponse)
async def deleted(request: Request, body: ChangesRequest, caller: RecordsCaller) -> DeletedResponse:
    async with use_case(request, caller, readonly=True) as (session, view, access):
        return await deleted_records(session, view=view, access=access, request=body)


@router.post("/recent", response_model=RecentResponse)
async def recent(request: Request, body: RecentRequest, caller: RecordsCaller) -> RecentResponse:
    async with use_case(request, caller, readonly=True) as (session, view, access):
        return await recent_records(session, view=view, access=access, request=body)
