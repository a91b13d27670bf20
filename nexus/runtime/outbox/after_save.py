"""After-save flows inside the mutation transaction: match, evaluate, enqueue once.

For every record a mutation saved (created or updated), each active after-save flow of its
object whose trigger and entry condition match contributes one outbox item per action, its
formulas evaluated over the saved values (parent paths loaded once per object and batch).
All items of the mutation go to the outbox in one `enqueue` on the mutation's own connection:
they commit with the DML or not at all, and the statement count does not grow with rows.
When that transaction commits, the outbox's doorbell rings (`BELL`): runtime-worker's outbox
runner looks at once instead of at its idle poll (docs/adr/0055).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

from nexus.contracts.errors import BadRequest
from nexus.contracts.records import ErrorCategory
from nexus.platform.doorbell import ring_here
from nexus.platform.workqueue.store import NewItem
from nexus.runtime.formula.nodes import Context
from nexus.runtime.metadata.definitions import (
    CreateRecordAction,
    ObjectDef,
    UpdateRecordAction,
)
from nexus.runtime.metadata.view import CompiledAction, CompiledAfterSave, MetadataView
from nexus.runtime.outbox.queue import (
    BELL,
    MAX_FLOW_DEPTH,
    MAX_PAYLOAD_BYTES,
    RECORD,
    WEBHOOK,
    OutboxMessage,
    family,
    outbox_store,
)
from nexus.runtime.query.engine import load_parent_paths
from nexus.runtime.records.coercion import formula_wire
from nexus.runtime.records.read import own_formula_values


@dataclass(frozen=True)
class Saved:
    """A record as a mutation saved it (every column), and as it was before (updates)."""

    obj: ObjectDef
    row: Mapping[str, Any]
    prior: Mapping[str, Any] | None = None


class PayloadTooLarge(BadRequest):
    default_code = ErrorCategory.LIMIT_EXCEEDED.value


def has_after_save(view: MetadataView, obj: ObjectDef) -> bool:
    return bool(view.after_save_flows.get(obj.api_name.lower()))


async def enqueue_after_save(
    session: AsyncSession,
    *,
    view: MetadataView,
    user_id: str,
    now: datetime,
    saved: Sequence[Saved],
    depth: int = 0,
) -> int:
    """Enqueue the after-save actions of `saved` (a save at `depth`); returns the item count."""
    if depth >= MAX_FLOW_DEPTH:
        return 0
    groups: dict[str, list[Saved]] = {}
    for record in saved:
        if has_after_save(view, record.obj):
            groups.setdefault(record.obj.api_name.lower(), []).append(record)
    items: list[NewItem] = []
    for key, members in groups.items():
        flows = view.after_save_flows[key]
        obj = members[0].obj
        contexts = [
            Context(
                values=own_formula_values(obj, record.row),
                prior=None if record.prior is None else own_formula_values(obj, record.prior),
                is_new=record.prior is None,
                now=now,
            )
            for record in members
        ]
        paths = {p for flow in flows for f in flow.formulas for p in f.paths if "." in p}
        if paths:
            await load_parent_paths(session, view, obj, [c.values for c in contexts], paths)
        for record, context in zip(members, contexts, strict=True):
            event = "create" if record.prior is None else "update"
            for flow in flows:
                if flow.definition.trigger not in (event, "create_or_update"):
                    continue
                if flow.entry is not None and not flow.entry.evaluate(context):
                    continue
                for action in flow.actions:
                    item = _item(
                        view, flow, action, record, context, user_id=user_id, now=now, depth=depth
                    )
                    if item is not None:
                        items.append(item)
    if items:
        await outbox_store().enqueue(await session.connection(), items)
        _ring_after_commit(session)
    return len(items)


_RING_PENDING = "nexus.outbox.ring_pending"


def _ring_after_commit(session: AsyncSession) -> None:
    """Ring the outbox's bell once this session's transaction commits (a ring before the
    commit would find nothing to claim). One listener per session however many saves it
    makes; a rollback leaves it for the session's next commit, where a ring costs one read."""
    sync = session.sync_session
    if sync.info.get(_RING_PENDING):
        return
    sync.info[_RING_PENDING] = True
    event.listen(sync, "after_commit", _ring, once=True)


def _ring(sync: Session) -> None:
    sync.info.pop(_RING_PENDING, None)
    ring_here(BELL)


def _item(
    view: MetadataView,
    flow: CompiledAfterSave,
    action: CompiledAction,
    record: Saved,
    context: Context,
    *,
    user_id: str,
    now: datetime,
    depth: int,
) -> NewItem | None:
    values = {name: formula_wire(formula.evaluate(context)) for name, formula in action.values}
    common: dict[str, Any] = {
        "org_id": view.org_id,
        "flow": flow.definition.api_name,
        "flow_version": flow.version,
        "object": record.obj.api_name,
        "record_id": str(record.row["id"]),
        "user_id": user_id,
        "depth": depth + 1,
    }
    definition = action.definition
    target_key = None
    if isinstance(definition, CreateRecordAction | UpdateRecordAction):
        queue = RECORD
        target_id = None
        if isinstance(definition, UpdateRecordAction):
            target_id = context.values.get(action.lookup_column or "")
            if not target_id:
                return None  # nothing to update: the lookup is empty
            target_key = str(target_id)  # one update of a record in flight at a time
        message = OutboxMessage(
            kind=definition.kind,
            target_object=action.target.api_name if action.target else None,
            target_id=target_key,
            fields=values,
            **common,
        )
    else:
        queue = WEBHOOK
        stamp = now.isoformat(timespec="milliseconds") + "Z"  # the save, by the database clock
        message = OutboxMessage(
            kind="webhook",
            endpoint=definition.endpoint,
            body={"type": definition.event, "timestamp": stamp, "data": values},
            **common,
        )
    payload = json.dumps(message.model_dump(mode="json", exclude_none=True), default=str)
    if len(payload.encode()) > MAX_PAYLOAD_BYTES:
        raise PayloadTooLarge(
            f"after-save flow {flow.definition.api_name}: an action's values exceed "
            f"{MAX_PAYLOAD_BYTES} bytes; nothing was saved"
        )
    return NewItem(family(message.org_id), queue, payload, target_key=target_key)
