"""`Composite`: ordered record operations with references, in the caller's one unit of work.

Every item is authorized as it would be alone (a mutation is a one-item `mutate`, a read is
`read_selected` / `read_by_external_id`, both with the caller's access). With `all_or_none`,
the first failure raises `CompositeRolledBack` inside the unit of work, which rolls back
everything the earlier items wrote (see ADR 0036).
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError
from sqlalchemy.ext.asyncio import AsyncSession

from nexus.contracts.composite import (
    CompositeError,
    CompositeItem,
    CompositeOutcome,
    CompositeRequest,
    CompositeResponse,
    UnresolvedReference,
    resolve_references,
)
from nexus.contracts.errors import NexusError
from nexus.contracts.identity import TrustedCall
from nexus.contracts.records import MutateItem, MutateRequest, RecordData
from nexus.runtime.access.service import CallerAccess
from nexus.runtime.metadata.view import MetadataView
from nexus.runtime.records.mutate import mutate
from nexus.runtime.records.read import read_record


class CompositeRolledBack(Exception):
    """Raised inside the unit of work so it rolls back; carries the per-item outcomes."""

    def __init__(self, response: CompositeResponse) -> None:
        super().__init__("all-or-none composite rolled back")
        self.response = response


async def run_composite(
    session: AsyncSession,
    *,
    view: MetadataView,
    access: CallerAccess,
    caller: TrustedCall,
    request: CompositeRequest,
) -> CompositeResponse:
    known: dict[str, Any] = {}  # ref -> what that item returned, for later references
    outcomes: list[CompositeOutcome] = []
    failed = False
    for item in request.items:
        if failed and request.all_or_none:
            outcomes.append(CompositeOutcome(ref=item.ref, state="halted"))
            continue
        try:
            resolved = _resolved(item, known)
        except UnresolvedReference as missing:
            error = CompositeError(
                status=400,
                code="INVALID_REFERENCE",
                message=f"no value for {missing}",
                fields={"reference": str(missing)},
            )
            outcome = CompositeOutcome(ref=item.ref, state="unresolved", error=error)
        except ValidationError:
            error = CompositeError(
                status=400, code="BAD_REQUEST", message="a reference gave a value of the wrong type"
            )
            outcome = CompositeOutcome(ref=item.ref, state="failed", error=error)
        else:
            outcome = await _run(session, view, access, caller, resolved)
        outcomes.append(outcome)
        if outcome.state != "done":
            failed = True
        elif item.ref:
            known[item.ref] = _returned(outcome)
    if failed and request.all_or_none:
        undone = [
            o.model_copy(update={"state": "rolled_back"}) if o.state == "done" else o
            for o in outcomes
        ]
        raise CompositeRolledBack(CompositeResponse(outcomes=undone, rolled_back=True))
    return CompositeResponse(outcomes=outcomes)


def _resolved(item: CompositeItem, known: dict[str, Any]) -> CompositeItem:
    update: dict[str, Any] = {}
    for name in ("id", "external_id", "fields", "select"):
        value = getattr(item, name)
        if value:
            update[name] = resolve_references(value, known)
    if isinstance(update.get("id"), int | float):
        update["id"] = str(update["id"])
    return CompositeItem.model_validate(item.model_dump() | update)


async def _run(
    session: AsyncSession,
    view: MetadataView,
    access: CallerAccess,
    caller: TrustedCall,
    item: CompositeItem,
) -> CompositeOutcome:
    try:
        if item.op == "read":
            record = await _read(session, view, access, item)
            return CompositeOutcome(ref=item.ref, state="done", record=record)
        one = MutateItem(
            op=item.op,
            object=item.object,
            id=item.id,
            fields=item.fields,
            external_id_field=item.external_id_field,
            external_id=item.external_id,
        )
        answer = await mutate(
            session,
            view=view,
            access=access,
            caller=caller,
            request=MutateRequest(items=[one]),
        )
    except NexusError as exc:
        error = CompositeError(
            status=exc.status, code=exc.code, message=exc.message, fields=exc.fields
        )
        return CompositeOutcome(ref=item.ref, state="failed", error=error)
    result = answer.results[0]
    return CompositeOutcome(
        ref=item.ref, state="done" if result.success else "failed", result=result
    )


async def _read(
    session: AsyncSession, view: MetadataView, access: CallerAccess, item: CompositeItem
) -> RecordData:
    return await read_record(
        session,
        view=view,
        access=access,
        object_name=item.object,
        record_id=item.id,
        external_id_field=item.external_id_field,
        external_id=None if item.external_id is None else str(item.external_id),
        fields=item.select,
    )


def _returned(outcome: CompositeOutcome) -> dict[str, Any]:
    """What later items may reference: a save result, or the record read."""
    if outcome.record is not None:
        return {"id": outcome.record.id, "Id": outcome.record.id, **outcome.record.fields}
    result = outcome.result
    if result is None:  # pragma: no cover - a done item has one or the other
        return {}
    return {"id": result.id, "success": result.success, "created": result.created}
