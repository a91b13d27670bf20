"""API usage: requests per user per UTC day (database clock), reported in batches by the dialect
AppServices (`POST /internal/v1/runtime/usage/record`, a workload call: the counts belong to
many users, none of whom is calling). See docs/adr/0030."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Depends, Request
from sqlalchemy import select, tuple_
from sqlalchemy.ext.asyncio import AsyncSession

from nexus.contracts.usage import (
    USAGE_CAPABILITY,
    UsageRecordRequest,
    UsageRecordResponse,
    UserRequests,
)
from nexus.identity.api import WorkloadCall, workload_call
from nexus.platform.db import read_db_now_ms, unit_of_work, upsert
from nexus.runtime.usage.models import api_usage

router = APIRouter(prefix="/internal/v1/runtime")


async def record_usage(session: AsyncSession, counts: list[UserRequests]) -> UsageRecordResponse:
    """Add each user's requests to today's row and return today's totals."""
    now_ms = await read_db_now_ms(session)
    day = datetime.fromtimestamp(now_ms / 1000, tz=UTC).strftime("%Y-%m-%d")
    merged: dict[tuple[str, str], int] = {}
    for c in counts:
        merged[(c.org_id, c.user_id)] = merged.get((c.org_id, c.user_id), 0) + c.requests
    if not merged:
        return UsageRecordResponse(day=day, totals=[])
    rows = [{"org_id": o, "user_id": u, "day": day, "requests": n} for (o, u), n in merged.items()]
    key = [api_usage.c.org_id, api_usage.c.user_id, api_usage.c.day]
    await session.execute(
        upsert(
            api_usage,
            session.get_bind().dialect.name,
            key,
            lambda incoming: {"requests": api_usage.c.requests + incoming.requests},
        ),
        rows,
    )
    found = await session.execute(
        select(api_usage.c.org_id, api_usage.c.user_id, api_usage.c.requests).where(
            api_usage.c.day == day,
            tuple_(api_usage.c.org_id, api_usage.c.user_id).in_(list(merged)),
        )
    )
    totals = [UserRequests(org_id=o, user_id=u, requests=int(n)) for o, u, n in found]
    return UsageRecordResponse(day=day, totals=totals)


@router.post("/usage/record", response_model=UsageRecordResponse)
async def usage_record(
    request: Request,
    body: UsageRecordRequest,
    call: Annotated[WorkloadCall, Depends(workload_call(USAGE_CAPABILITY))],
) -> UsageRecordResponse:
    del call  # which workload reported is not recorded: the counts are per user
    async with unit_of_work(request.app.state.service.sessions) as session:
        return await record_usage(session, body.counts)
