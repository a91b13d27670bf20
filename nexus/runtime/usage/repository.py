"""Every SQL statement of API usage counts."""

from __future__ import annotations

from sqlalchemy import select, tuple_
from sqlalchemy.ext.asyncio import AsyncSession

from nexus.platform.db.backend import upsert
from nexus.runtime.usage.models import api_usage


class UsageRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def add(self, day: str, counts: dict[tuple[str, str], int]) -> None:
        """Add requests to each (org, user)'s row of `day`, in one statement."""
        rows = [
            {"org_id": o, "user_id": u, "day": day, "requests": n} for (o, u), n in counts.items()
        ]
        key = [api_usage.c.org_id, api_usage.c.user_id, api_usage.c.day]
        await self.session.execute(
            upsert(
                api_usage,
                self.session.get_bind().dialect.name,
                key,
                lambda incoming: {"requests": api_usage.c.requests + incoming.requests},
            ),
            rows,
        )

    async def totals(self, day: str, users: list[tuple[str, str]]) -> list[tuple[str, str, int]]:
        """(org, user, requests) of `day` for these (org, user) pairs."""
        found = await self.session.execute(
            select(api_usage.c.org_id, api_usage.c.user_id, api_usage.c.requests).where(
                api_usage.c.day == day,
                tuple_(api_usage.c.org_id, api_usage.c.user_id).in_(users),
            )
        )
        return [(str(o), str(u), int(n)) for o, u, n in found]
