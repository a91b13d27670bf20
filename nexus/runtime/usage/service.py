"""API usage: requests per user per UTC day (database clock), reported in batches."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy.ext.asyncio import AsyncSession

from nexus.contracts.usage import UsageRecordResponse, UserRequests
from nexus.platform.db.clock import read_now_ms
from nexus.runtime.usage.repository import UsageRepository


async def record_usage(session: AsyncSession, counts: list[UserRequests]) -> UsageRecordResponse:
    """Add each user's requests to today's row and return today's totals."""
    now_ms = await read_now_ms(session)
    day = datetime.fromtimestamp(now_ms / 1000, tz=UTC).strftime("%Y-%m-%d")
    merged: dict[tuple[str, str], int] = {}
    for c in counts:
        merged[(c.org_id, c.user_id)] = merged.get((c.org_id, c.user_id), 0) + c.requests
    if not merged:
        return UsageRecordResponse(day=day, totals=[])
    usage = UsageRepository(session)
    await usage.add(day, merged)
    totals = [
        UserRequests(org_id=o, user_id=u, requests=n)
        for o, u, n in await usage.totals(day, list(merged))
    ]
    return UsageRecordResponse(day=day, totals=totals)
