"""Record actions of after-save flows: create or update a record in system context.

The DML runs through `mutate` (so before-save flows, required fields, validation rules,
references and uniqueness all apply) with `CallerAccess.system` (every object, field and row
of the org) and attributed to the user whose save triggered the flow (owner, created and
modified by). The DML and the item's completion commit in one transaction (effect once); a
refused save is dead with its error categories and field names, never values.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession, async_sessionmaker

from nexus.contracts.identity import TrustedCall
from nexus.contracts.records import ErrorCategory, MutateItem, MutateRequest, RecordError
from nexus.platform.db.engine import unit_of_work
from nexus.platform.workqueue.store import Claimed
from nexus.platform.workqueue.worker import Retryable, Terminal, WorkFailed
from nexus.runtime.access.service import CallerAccess
from nexus.runtime.metadata.view import MetadataCache
from nexus.runtime.outbox.queue import OutboxMessage
from nexus.runtime.records.mutate import mutate

CompleteIn = Callable[[AsyncConnection, Claimed], Awaitable[None]]


@dataclass(frozen=True)
class RecordActions:
    """`writers` bounds the record transactions of this process: on SQLite (one writer per
    database) 1, so executors queue here instead of in SQLite's sleeping busy handler."""

    sessions: async_sessionmaker[AsyncSession]
    metadata: MetadataCache
    complete_in: CompleteIn
    writers: asyncio.Semaphore

    async def __call__(self, message: OutboxMessage, claimed: Claimed) -> None:
        caller = TrustedCall(
            org_id=message.org_id,
            user_id=message.user_id,
            session_id="",
            client_id=None,
            scopes=frozenset(),
            security_epoch=0,
            via="delegation",
            workload="runtime-worker",
        )
        if message.kind == "create_record":
            item = MutateItem(op="create", object=message.target_object, fields=message.fields)
        else:
            item = MutateItem(op="update", id=message.target_id, fields=message.fields)
        async with self.writers, unit_of_work(self.sessions) as session:
            view = await self.metadata.view(session, message.org_id)
            result = (
                await mutate(
                    session,
                    view=view,
                    access=CallerAccess.system(message.org_id),
                    caller=caller,
                    request=MutateRequest(items=[item]),
                    flow_depth=message.depth,
                )
            ).results[0]
            if not result.success:
                raise _refused(message, result.errors)
            await self.complete_in(await session.connection(), claimed)


def _refused(message: OutboxMessage, errors: list[RecordError]) -> WorkFailed:
    """Categories and field names only: record error messages may quote values."""
    summary = "; ".join(
        e.category.value + (f" ({', '.join(e.fields)})" if e.fields else "") for e in errors
    )
    text = f"{message.kind} {message.target_object or ''}: {summary}"
    if all(e.category == ErrorCategory.CONFLICT for e in errors):
        return Retryable(text)  # a concurrent change of the same record: try again
    return Terminal(text)
