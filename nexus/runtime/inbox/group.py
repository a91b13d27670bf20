"""A group of inbox commands executed inside one transaction (the caller's unit of work).

    callers    each distinct (org, run-as user) once: the user still active, the org's
               metadata view, the user's access
    batches    commands of one caller on one object by one external id field go through
               `mutate` together, in claim order, each item with its own result. Two commands
               that could name the same record (equal external ids once coerced and case
               folded) never share a batch: the later one starts a new batch, which runs
               after the first. (The engine claims only a source lane's head, so a group
               never holds two commands of one lane; this guards lookups by value.)
    isolation  no SAVEPOINTs (MariaDB 10.11 aborts in InnoDB's full-text code when a
               savepoint is rolled back over search-index writes: fts0fts.cc:2188). A
               refused command writes nothing (`mutate` checks before it writes), so the
               batch's other items stand; a command the batch refused, or whose record the
               batched lookup did not find live, runs again alone after the batch, so a
               refusal is always decided on the command by itself. Anything that may have
               written part of a command (an error inside `mutate`) or a completion that
               fails after its change (a lost lease) cannot be undone alone: the run raises
               `GroupAborted`, the caller rolls the whole transaction back and runs each
               command of the group in a transaction of its own.
    database   a database error is the group's: it is raised, the unit of work rolls back,
               and every command of the group is retried (nothing was applied)

`run` returns each command's outcome: None (applied and completed in this transaction) or
the exception its handler raises once the transaction has ended.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Table, select
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncSession

from nexus.contracts.identity import TrustedCall
from nexus.contracts.records import MutateItem
from nexus.platform.observability import get_logger
from nexus.platform.workqueue.store import Claimed
from nexus.platform.workqueue.worker import LeaseLost, Worker, WorkFailed
from nexus.runtime.access.service import AccessCache, CallerAccess
from nexus.runtime.inbox.command import apply, change, refusal, run_as, upsert
from nexus.runtime.inbox.queue import InboxItem
from nexus.runtime.inbox.repository import FoundRecord
from nexus.runtime.metadata.view import MetadataCache, MetadataView
from nexus.runtime.records.coercion import InvalidValue, coerce
from nexus.runtime.schema.spec import column_name

log = get_logger(__name__)


@dataclass(frozen=True)
class Command:
    claimed: Claimed
    item: InboxItem


@dataclass(frozen=True)
class _Caller:
    caller: TrustedCall
    view: MetadataView
    access: CallerAccess


class _Abort(Exception):
    """Part of a command may be written and cannot be undone alone."""


class GroupAborted(Exception):
    """The group's transaction must be rolled back. `final` holds the outcomes that stand
    anyway (a completion that failed: its command must not run again here); `cause` is what
    forced it (for a group of one, that command's outcome)."""

    def __init__(self, final: dict[int, BaseException], cause: BaseException) -> None:
        super().__init__("the group must be rolled back")
        self.final = final
        self.cause = cause


class GroupRun:
    def __init__(
        self,
        session: AsyncSession,
        worker: Worker,
        metadata: MetadataCache,
        access: AccessCache,
        commands: Sequence[Command],
    ) -> None:
        self.session = session
        self.worker = worker
        self.metadata = metadata
        self.access = access
        self.commands = commands
        self.outcomes: dict[int, BaseException | None] = {}
        self.final: dict[int, BaseException] = {}
        self.batches = 0
        self._completing: list[int] = []  # applied: completed together at the end
        self._callers: dict[tuple[str, str], _Caller | WorkFailed] = {}

    async def run(self) -> dict[int, BaseException | None]:
        ready = []
        for index, command in enumerate(self.commands):
            found = await self._caller(command.item)
            if isinstance(found, WorkFailed):
                self.outcomes[index] = found
            else:
                ready.append(index)
        try:
            for batch in self._batches(ready):
                self.batches += 1
                if len(batch) == 1:
                    await self._alone(batch[0])
                else:
                    await self._batch(batch)
            await self._complete_applied()
        except _Abort as abort:
            raise GroupAborted(self.final, abort.__cause__ or abort) from None
        return self.outcomes

    # ------------------------------------------------------------------ callers
    async def _caller(self, item: InboxItem) -> _Caller | WorkFailed:
        key = (item.org_id, item.run_as)
        if key not in self._callers:
            try:
                caller = await run_as(self.session, item)
            except WorkFailed as exc:
                self._callers[key] = exc
            else:
                view = await self.metadata.view(self.session, item.org_id)
                access = await self.access.for_caller(self.session, caller)
                self._callers[key] = _Caller(caller, view, access)
        return self._callers[key]

    def _resolved(self, index: int) -> _Caller:
        item = self.commands[index].item
        found = self._callers[(item.org_id, item.run_as)]
        if isinstance(found, WorkFailed):  # pragma: no cover - refused before batching
            raise found
        return found

    # ------------------------------------------------------------------ batches
    def _batches(self, ready: list[int]) -> list[list[int]]:
        """Claim order kept; a command whose record could be an earlier one's starts a new
        batch of its key (after the earlier one's); one that cannot be keyed runs alone."""
        batches: list[list[int]] = []
        open_: dict[tuple[str, ...], tuple[list[int], set[Any]]] = {}
        for index in ready:
            item = self.commands[index].item
            command = item.command
            ident = _record_identity(self._resolved(index).view, command.object, command)
            if ident is None:
                batches.append([index])
                continue
            key = (
                item.org_id,
                item.run_as,
                command.object.lower(),
                command.external_id_field.lower(),
            )
            current = open_.get(key)
            if current is None or ident in current[1]:
                current = open_[key] = ([], set())
                batches.append(current[0])
            current[0].append(index)
            current[1].add(ident)
        return batches

    async def _batch(self, indices: list[int]) -> None:
        who = self._resolved(indices[0])
        first = self.commands[indices[0]].item.command
        obj = who.view.object(first.object)
        ext = None if obj is None else who.view.field(obj, first.external_id_field)
        if (
            obj is None
            or ext is None
            or not (ext.external_id or ext.unique)
            or not who.access.object(who.view, obj).read
        ):
            for index in indices:  # refused alone, each with its own reason
                await self._alone(index)
            return
        alone: list[int] = []
        changes: list[tuple[int, MutateItem]] = []
        lookups = {
            index: coerce(ext, self.commands[index].item.command.external_id)
            for index in indices
            if self.commands[index].item.command.op != "upsert"
        }
        found = await _records_by_value(
            self.session,
            who.view.table(obj),
            column_name(ext.api_name),
            set(lookups.values()),
            who.view.org_id,
        )
        for index in indices:
            command = self.commands[index].item.command
            if command.op == "upsert":
                changes.append((index, upsert(command)))
                continue
            record = found.get(lookups[index])
            if record is None or record.is_deleted:
                alone.append(index)  # not found, or no-op delete: decided alone
                continue
            fields = dict(command.fields) if command.op == "update" else {}
            changes.append(
                (index, MutateItem(op=command.op, object=obj.api_name, id=record.id, fields=fields))
            )
        if changes:
            alone += await self._apply_batch(who, changes)
        for index in sorted(alone):
            await self._alone(index)

    async def _apply_batch(self, who: _Caller, changes: list[tuple[int, MutateItem]]) -> list[int]:
        """The batch through `mutate`, its applied items completed; returns the refused."""
        try:
            response = await apply(
                self.session, who.view, who.access, who.caller, [c for _, c in changes]
            )
        except DBAPIError:
            raise
        except Exception as exc:
            raise _Abort from exc
        completed: list[int] = []
        refused: list[int] = []
        for (index, _), result in zip(changes, response.results, strict=True):
            if not result.success:
                refused.append(index)  # it wrote nothing: decided alone below
                continue
            await self._complete(index)
            completed.append(index)
        for index in completed:
            self.outcomes[index] = None
        return refused

    async def _alone(self, index: int) -> None:
        """One command by itself, as it would run in a transaction of its own."""
        who = self._resolved(index)
        command = self.commands[index].item.command
        try:
            mutation = await change(self.session, who.view, who.access, command)
        except DBAPIError:
            raise
        except Exception as exc:  # noqa: BLE001 - a refusal before any write: its outcome
            self.outcomes[index] = exc
            return
        if mutation is not None:
            try:
                response = await apply(self.session, who.view, who.access, who.caller, [mutation])
            except DBAPIError:
                raise
            except Exception as exc:
                raise _Abort from exc
            result = response.results[0]
            if not result.success:
                self.outcomes[index] = refusal(result.errors)  # it wrote nothing
                return
        await self._complete(index)
        self.outcomes[index] = None

    async def _complete(self, index: int) -> None:
        self._completing.append(index)

    async def _complete_applied(self) -> None:
        """Every applied command's completion, in one engine call (statements per claim
        token, not per command). A lost lease cannot be undone alone: its change is
        written, so the group rolls back (that command's outcome stands: it lost its lease)."""
        if not self._completing:
            return
        claimed = [self.commands[index].claimed for index in self._completing]
        try:
            lost = await self.worker.complete_many_in(await self.session.connection(), claimed)
        except WorkFailed as exc:  # whose it is can only be told alone: roll back, retry alone
            if len(self.commands) == 1:
                self.final[self._completing[0]] = exc
            raise _Abort from exc
        if lost:
            for index in self._completing:
                item_id = self.commands[index].claimed.id
                if item_id in lost:
                    self.final[index] = LeaseLost(item_id)
            raise _Abort from LeaseLost(sorted(lost)[0])


def _record_identity(view: MetadataView, object_name: str, command: Any) -> Any:
    """What names the command's record within its (object, external id field) batch key:
    the coerced external id, case folded (a database may compare case-insensitively);
    None when it cannot be told (the command then runs alone and is refused there)."""
    obj = view.object(object_name)
    ext = None if obj is None else view.field(obj, command.external_id_field)
    if ext is None:
        return None
    try:
        value = coerce(ext, command.external_id)
        hash(value)
    except (InvalidValue, TypeError):
        return None
    return value.strip().casefold() if isinstance(value, str) else value


async def _records_by_value(
    session: AsyncSession, table: Table, column: str, values: set[Any], org_id: str
) -> dict[Any, FoundRecord]:
    """The records holding these values in a unique column (deleted ones too)."""
    if not values:
        return {}
    rows = await session.execute(
        select(table.c[column], table.c.id, table.c.is_deleted).where(
            table.c.org_id == org_id, table.c[column].in_(sorted(values, key=repr))
        )
    )
    return {row[0]: FoundRecord(str(row[1]), bool(row[2])) for row in rows}
