"""runtime-worker's inbox handler: one accepted command, one transaction, effect once.

In one unit of work: the run-as user's access (their permission sets and sharing decide:
authorization stays in Runtime), the record found by its external id, the change made by the
record mutation use case (validation rules, before-save flows, field history, search index),
and the inbox item's completion (`Worker.complete_in`). A failure anywhere before the commit
rolls all of it back; the engine then retries or parks the item.

How an outcome is classified:
    business refusal (validation rule, access, unknown field, duplicate value, bad value,
    no such record)                            -> Terminal (dead at once; replay is manual)
    a concurrent change (CONFLICT)             -> Retryable
    database and other unexpected errors       -> retryable (the engine stores the class)
Stored messages carry error codes and field names, never values.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from pydantic import ValidationError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from nexus.contracts.commands import API_NAME, RecordCommand
from nexus.contracts.errors import NexusError
from nexus.contracts.identity import TrustedCall
from nexus.contracts.records import (
    ErrorCategory,
    MutateItem,
    MutateRequest,
    RecordError,
)
from nexus.platform.db import unit_of_work
from nexus.platform.observability import get_logger
from nexus.platform.workqueue.store import Claimed
from nexus.platform.workqueue.worker import Retryable, Terminal, Worker, WorkFailed
from nexus.runtime.access import AccessCache, CallerAccess
from nexus.runtime.inbox.queue import InboxItem
from nexus.runtime.inbox.repository import InboxRepository
from nexus.runtime.inbox.writes import WriteTurns
from nexus.runtime.metadata.view import MetadataCache, MetadataView
from nexus.runtime.records.coercion import InvalidValue, coerce
from nexus.runtime.records.mutate import AllOrNoneRolledBack, mutate
from nexus.runtime.schema.spec import column_name

log = get_logger(__name__)
_SAFE_NAME = re.compile(API_NAME)
RETRYABLE_CATEGORIES = frozenset({ErrorCategory.CONFLICT})
MAX_REPORTED_ERRORS = 5


class CommandExecutor:
    """The inbox `Worker`'s handler. `worker` is set once the Worker exists (it completes
    items inside this handler's transaction)."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        self.sessions = sessions
        self.turns = WriteTurns(sessions)
        self.metadata = MetadataCache()
        self.access = AccessCache()
        self.worker: Worker | None = None

    async def __call__(self, claimed: Claimed) -> None:
        if self.worker is None:  # pragma: no cover - wired before the worker runs
            raise RuntimeError("the executor has no worker")
        try:
            item = InboxItem.model_validate_json(claimed.payload)
        except ValidationError:
            raise Terminal("BAD_PAYLOAD: the inbox item cannot be read") from None
        async with self.turns.turn(), unit_of_work(self.sessions) as session:
            caller = await _run_as(session, item)
            view = await self.metadata.view(session, item.org_id)
            access = await self.access.for_caller(session, caller)
            change = await _change(session, view, access, item.command)
            if change is not None:
                await _apply(session, view, access, caller, change)
            await self.worker.complete_in(await session.connection(), claimed)
        log.debug("inbox.executed", work_id=claimed.id, op=item.command.op, applied=bool(change))


async def _run_as(session: AsyncSession, item: InboxItem) -> TrustedCall:
    """The user the command was accepted to run as, if still active (fail closed)."""
    user = await InboxRepository(session).active_user(item.org_id, item.run_as)
    if user is None:
        raise Terminal("RUN_AS_INACTIVE: the run-as user is inactive or gone")
    return TrustedCall(
        org_id=item.org_id,
        user_id=user.user_id,
        session_id="",
        client_id=None,
        scopes=frozenset({"api"}),
        security_epoch=user.security_epoch,
        via="workload_binding",
        workload=item.workload,
    )


async def _change(
    session: AsyncSession, view: MetadataView, access: CallerAccess, command: RecordCommand
) -> MutateItem | None:
    """The mutation a command asks for; None when there is nothing to do (deleting a record
    that does not exist or is deleted already)."""
    if command.op == "upsert":
        return MutateItem(
            op="upsert",
            object=command.object,
            external_id_field=command.external_id_field,
            external_id=command.external_id,
            fields=dict(command.fields),
        )
    obj = view.object(command.object)
    if obj is None or not access.object(view, obj).read:
        raise Terminal(f"NOT_FOUND: no object named {command.object}")
    ext = view.field(obj, command.external_id_field)
    if ext is None or not (ext.external_id or ext.unique):
        raise Terminal(f"INVALID_FIELD ({command.external_id_field}): not an external id field")
    try:
        value = coerce(ext, command.external_id)
    except InvalidValue as exc:
        raise _refusal([exc.error]) from None
    found = await InboxRepository(session).record_by_value(
        view.table(obj), column_name(ext.api_name), value, view.org_id
    )
    if command.op == "delete":
        if found is None or found.is_deleted:
            return None
        return MutateItem(op="delete", object=obj.api_name, id=found.id)
    if found is None:
        raise Terminal(f"NOT_FOUND: no {obj.api_name} record with that external id")
    return MutateItem(op="update", object=obj.api_name, id=found.id, fields=dict(command.fields))


async def _apply(
    session: AsyncSession,
    view: MetadataView,
    access: CallerAccess,
    caller: TrustedCall,
    change: MutateItem,
) -> None:
    try:
        response = await mutate(
            session, view=view, access=access, caller=caller, request=MutateRequest(items=[change])
        )
    except AllOrNoneRolledBack as rolled_back:  # pragma: no cover - one item, not all-or-none
        response = rolled_back.response
    except NexusError as exc:
        if exc.status >= 500:
            raise Retryable(exc.code) from None
        raise Terminal(exc.code) from None
    result = response.results[0]
    if not result.success:
        raise _refusal(result.errors)


def _refusal(errors: Sequence[RecordError]) -> WorkFailed:
    """A sanitized summary: categories and field names (never a value, never a message that
    could quote one)."""
    parts = []
    for error in errors[:MAX_REPORTED_ERRORS]:
        names = [f for f in error.fields if _SAFE_NAME.fullmatch(f)]
        code = error.category.value
        parts.append(f"{code} ({', '.join(names)})" if names else code)
    summary = "; ".join(parts) or "refused"
    if errors and all(e.category in RETRYABLE_CATEGORIES for e in errors):
        return Retryable(summary)
    return Terminal(summary)
