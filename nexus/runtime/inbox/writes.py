"""One writer at a time on SQLite, decided in this process rather than by SQLite's busy
handler (whose sleeps are unfair: under load one waiter can be starved past the busy timeout
while others keep winning). On other databases, a no-op: row locks decide there."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from nexus.platform.db.backend import backend_of


class WriteTurns:
    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        bind = sessions.kw.get("bind")
        self._lock = asyncio.Lock() if bind is not None and backend_of(bind).one_writer else None

    @asynccontextmanager
    async def turn(self) -> AsyncIterator[None]:
        if self._lock is None:
            yield
            return
        async with self._lock:
            yield
