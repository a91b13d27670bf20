"""`/internal/v1/runtime/imports/...`: accept a CSV import, its progress, its row errors."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field

from nexus.platform.doorbell import ring_here
from nexus.runtime.dependencies import RecordsCaller, use_case
from nexus.runtime.imports import jobs

router = APIRouter(prefix="/internal/v1/runtime/imports")
MAX_CSV_CHARS = 8 * 1024 * 1024


class ImportRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    object: str = Field(min_length=1, max_length=80)
    mode: Literal["insert", "upsert"] = "insert"
    external_id_field: str | None = Field(default=None, max_length=80)
    mapping: dict[str, str] | None = Field(default=None, max_length=500)
    csv: str = Field(min_length=1, max_length=MAX_CSV_CHARS)


class JobRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1, max_length=32)


@router.post("/create")
async def create(request: Request, body: ImportRequest, caller: RecordsCaller) -> dict[str, Any]:
    """Store the job and its rows (nothing is saved yet); the runner takes it from here
    (rung once the job is committed, so it starts now rather than at its idle poll)."""
    upload = jobs.Upload(
        object=body.object,
        mode=body.mode,
        external_id_field=body.external_id_field,
        mapping=body.mapping,
        csv_text=body.csv,
    )
    async with use_case(request, caller, readonly=False) as (session, view, access):
        accepted = await jobs.accept(
            session, view=view, access=access, caller=caller, upload=upload
        )
    ring_here(jobs.BELL)
    return accepted


@router.post("/status")
async def status(request: Request, body: JobRequest, caller: RecordsCaller) -> dict[str, Any]:
    async with use_case(request, caller, readonly=True) as (session, _view, _access):
        return await jobs.status(session, caller, body.id)


@router.post("/errors")
async def errors(request: Request, body: JobRequest, caller: RecordsCaller) -> dict[str, Any]:
    async with use_case(request, caller, readonly=True) as (session, _view, _access):
        rows = await jobs.error_rows(session, caller, body.id)
    return {"errors": [{"row": n, "error": e} for n, e in rows]}
