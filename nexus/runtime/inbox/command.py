"""One inbox command's steps: whom it runs as, the mutation it asks for, applying it, and how
a refusal is told to the work engine.

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

from sqlalchemy.ext.asyncio import AsyncSession

from nexus.contracts.commands import API_NAME, RecordCommand
from nexus.contracts.errors import NexusError
from nexus.contracts.identity import TrustedCall
from nexus.contracts.records import (
    ErrorCategory,
    MutateItem,
    MutateRequest,
    MutateResponse,
    RecordError,
)
from nexus.platform.workqueue.worker import Retryable, Terminal, WorkFailed
from nexus.runtime.access.service import CallerAccess
from nexus.runtime.inbox.queue import InboxItem
from nexus.runtime.inbox.repository import InboxRepository
from nexus.runtime.metadata.view import MetadataView
from nexus.runtime.records.coercion import InvalidValue, coerce
from nexus.runtime.records.mutate import AllOrNoneRolledBack, mutate
from nexus.runtime.schema.spec import column_name

_SAFE_NAME = re.compile(API_NAME)
RETRYABLE_CATEGORIES = frozenset({ErrorCategory.CONFLICT})
MAX_REPORTED_ERRORS = 5


async def run_as(session: AsyncSession, item: InboxItem) -> TrustedCall:
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


def upsert(command: RecordCommand) -> MutateItem:
    return MutateItem(
        op="upsert",
        object=command.object,
        external_id_field=command.external_id_field,
        external_id=command.external_id,
        fields=dict(command.fields),
    )


async def change(
    session: AsyncSession, view: MetadataView, access: CallerAccess, command: RecordCommand
) -> MutateItem | None:
    """The mutation a command asks for; None when there is nothing to do (deleting a record
    that does not exist or is deleted already)."""
    if command.op == "upsert":
        return upsert(command)
    obj = view.object(command.object)
    if obj is None or not access.object(view, obj).read:
        raise Terminal(f"NOT_FOUND: no object named {command.object}")
    ext = view.field(obj, command.external_id_field)
    if ext is None or not (ext.external_id or ext.unique):
        raise Terminal(f"INVALID_FIELD ({command.external_id_field}): not an external id field")
    try:
        value = coerce(ext, command.external_id)
    except InvalidValue as exc:
        raise refusal([exc.error]) from None
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


async def apply(
    session: AsyncSession,
    view: MetadataView,
    access: CallerAccess,
    caller: TrustedCall,
    changes: list[MutateItem],
) -> MutateResponse:
    """`changes` through the record use case, each item with its own result (not
    all-or-none: a refused item writes nothing, the others are made)."""
    try:
        return await mutate(
            session, view=view, access=access, caller=caller, request=MutateRequest(items=changes)
        )
    except AllOrNoneRolledBack as rolled_back:  # pragma: no cover - never all-or-none here
        return rolled_back.response
    except NexusError as exc:
        if exc.status >= 500:
            raise Retryable(exc.code) from None
        raise Terminal(exc.code) from None


def refusal(errors: Sequence[RecordError]) -> WorkFailed:
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
