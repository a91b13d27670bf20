"""API usage: requests per user per UTC day (database clock), reported in batches by the dialect
AppServices (`POST /internal/v1/runtime/usage/record`, a workload call: the counts belong to
many users, none of whom is calling). See docs/adr/0030."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request

from nexus.contracts.usage import (
    USAGE_CAPABILITY,
    UsageRecordRequest,
    UsageRecordResponse,
)
from nexus.identity.api import WorkloadCall, workload_call
from nexus.platform.db.engine import unit_of_work
from nexus.runtime.usage.service import record_usage

router = APIRouter(prefix="/internal/v1/runtime")


@router.post("/usage/record", response_model=UsageRecordResponse)
async def usage_record(
    request: Request,
    body: UsageRecordRequest,
    call: Annotated[WorkloadCall, Depends(workload_call(USAGE_CAPABILITY))],
) -> UsageRecordResponse:
    del call  # which workload reported is not recorded: the counts are per user
    async with unit_of_work(request.app.state.service.sessions) as session:
        return await record_usage(session, body.counts)
