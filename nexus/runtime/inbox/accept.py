"""`AcceptCommand`: a workload's commands become durable inbox items, once per message key.

A batch (a single command is a batch of one) is one transaction: the run-as bindings of its
orgs are resolved in one read (none, an inactive user or an unknown org: 403 for that
command, fail closed), the dedupe rows of all its message keys in one read per org; a repeat
of an accepted key answers from its dedupe row (same command: `duplicate`; another command:
409), and so does a repeat inside the batch, from the first command that took the key. Cheap
checks refuse what can never run (unknown object 404; an external id field that is not an
external-id/unique field, unknown fields or an external id of the wrong type 400). Then one
multi-row insert-or-ignore of the new dedupe rows and one enqueue of their work items. A key
a concurrent accept took first (the insert ignored it) is read back and answered from the
winner's row. The caller hears its answer only after that commit.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence

from sqlalchemy.exc import OperationalError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession, async_sessionmaker

from nexus.contracts.commands import (
    AcceptCommandRequest,
    AcceptCommandResponse,
    RecordCommand,
)
from nexus.contracts.errors import BadRequest, Conflict, Forbidden, NexusError, NotFound
from nexus.platform.db.engine import unit_of_work
from nexus.platform.db.errors import is_deadlock
from nexus.platform.failpoints import crash_at
from nexus.platform.json_text import canonical_json
from nexus.platform.observability import get_logger
from nexus.platform.workqueue.store import NewItem, WorkStore, new_work_id
from nexus.runtime.inbox.queue import QUEUE_CLASS, InboxItem, family, lane_key
from nexus.runtime.inbox.repository import (
    NewMessage,
    RunAs,
    StoredMessage,
    bound_users,
    insert_messages,
    stored_messages,
)
from nexus.runtime.metadata.view import MetadataCache, MetadataView
from nexus.runtime.records.coercion import InvalidValue, coerce

log = get_logger(__name__)
MAX_REPORTED_FIELDS = 20
DEADLOCK_ATTEMPTS = 3
#: `NEXUS_FAILPOINT` value (tests): runtime-api exits after an accept commits, before answering.
FAILPOINT_AFTER_COMMIT = "inbox.after_accept_commit"


def command_digest(command: RecordCommand) -> str:
    canonical = canonical_json(command.model_dump(mode="json"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def message_key(workload: str, message_id: str) -> str:
    """The dedupe key inside an org: the calling workload and its message id (<= 191)."""
    return f"{workload}:{message_id}"


#: One command's answer: accepted (or a duplicate of an accepted one), or what refused it.
Outcome = AcceptCommandResponse | NexusError


class CommandInbox:
    """What runtime-api holds to accept commands: the inbox queue, the database, the body
    limit. (The queue's policy is runtime-worker's to set; an enqueue creates a missing
    queue.)"""

    def __init__(
        self,
        store: WorkStore,
        sessions: async_sessionmaker[AsyncSession],
        *,
        max_body_bytes: int,
        failpoint: str | None = None,
        on_accepted: Callable[[], None] = lambda: None,
    ) -> None:
        self.store = store
        self.sessions = sessions
        self.max_body_bytes = max_body_bytes
        self.failpoint = failpoint
        self.on_accepted = on_accepted  # after a commit that queued a new command

    async def accept(
        self,
        metadata: MetadataCache,
        *,
        workload: str,
        request: AcceptCommandRequest,
    ) -> AcceptCommandResponse:
        """Accept one command (a batch of one); raises what refused it."""
        (outcome,) = await self.accept_batch(metadata, workload=workload, requests=[request])
        if isinstance(outcome, NexusError):
            raise outcome
        return outcome

    async def accept_batch(
        self,
        metadata: MetadataCache,
        *,
        workload: str,
        requests: Sequence[AcceptCommandRequest],
    ) -> list[Outcome]:
        """Accept every command of the batch in one transaction; one outcome per request, in
        order. A transaction the database chose as a deadlock victim is retried (safe: the
        message keys make a second run a duplicate of the first)."""
        for attempt in range(1, DEADLOCK_ATTEMPTS + 1):
            try:
                outcomes = await self._accept_once(metadata, workload=workload, requests=requests)
                break
            except OperationalError as exc:
                if attempt == DEADLOCK_ATTEMPTS or not is_deadlock(exc):
                    raise
                log.info("inbox.accept_deadlock_retried", attempt=attempt)
        crash_at(self.failpoint, FAILPOINT_AFTER_COMMIT)  # committed, never answered
        accepted = sum(_status(o) == "accepted" for o in outcomes)
        if accepted:
            self.on_accepted()
        log.info("inbox.accepted", workload=workload, commands=len(requests), accepted=accepted)
        return outcomes

    async def _accept_once(
        self,
        metadata: MetadataCache,
        *,
        workload: str,
        requests: Sequence[AcceptCommandRequest],
    ) -> list[Outcome]:
        outcomes: list[Outcome | None] = [None] * len(requests)
        # computed before the write turn: the file's other writers wait while it is held
        keys = [message_key(workload, r.message_id) for r in requests]
        digests = [command_digest(r.command) for r in requests]
        async with unit_of_work(self.sessions) as session:
            conn = await session.connection()  # one for every statement of the accept
            bindings = await bound_users(conn, sorted({r.org_id for r in requests}), workload)
            run_as = bindings.run_as
            prior: dict[tuple[str, str], StoredMessage] = {}
            for org_id in sorted(run_as):
                found = await stored_messages(
                    conn,
                    org_id,
                    (k for r, k in zip(requests, keys, strict=True) if r.org_id == org_id),
                )
                prior.update({(org_id, k): stored for k, stored in found.items()})
            views: dict[str, MetadataView] = {}
            new: dict[tuple[str, str], int] = {}  # message key -> the request that takes it
            for index, request in enumerate(requests):
                org_id = request.org_id
                if org_id not in run_as:
                    outcomes[index] = Forbidden(
                        f"no active user is bound to workload {workload} in that org",
                        code="WORKLOAD_NOT_BOUND",
                    )
                    continue
                key = (org_id, keys[index])
                taken = prior.get(key)
                if taken is None and key in new:  # a repeat inside this batch
                    first = new[key]
                    taken = StoredMessage(str(_work_id(outcomes[first])), digests[first])
                if taken is not None:
                    outcomes[index] = _answer(request, taken, digests[index])
                    continue
                if org_id not in views:
                    views[org_id] = await metadata.view(session, org_id)
                try:
                    _check(views[org_id], request.command)
                except NexusError as exc:
                    outcomes[index] = exc
                    continue
                new[key] = index
                outcomes[index] = AcceptCommandResponse(
                    message_id=request.message_id, work_id=new_work_id(), status="accepted"
                )
            rows = [
                NewMessage(org_id, key, str(_work_id(outcomes[i])), digests[i])
                for (org_id, key), i in new.items()
            ]
            now_ms = bindings.now_ms or 0  # set whenever a command was bound (rows exist)
            if await insert_messages(conn, rows, now_ms=now_ms) < len(rows):
                await self._lost_races(
                    conn,
                    requests=requests,
                    keys=keys,
                    digests=digests,
                    new=new,
                    outcomes=outcomes,
                )
            enqueued = [i for i in new.values() if _status(outcomes[i]) == "accepted"]
            if enqueued:
                await self.store.enqueue(
                    conn,
                    [self._new_item(requests[i], workload, run_as, outcomes[i]) for i in enqueued],
                )
        # committed: only now are the commands accepted
        return [o for o in outcomes if o is not None]

    async def _lost_races(
        self,
        conn: AsyncConnection,
        *,
        requests: Sequence[AcceptCommandRequest],
        keys: list[str],
        digests: list[str],
        new: dict[tuple[str, str], int],
        outcomes: list[Outcome | None],
    ) -> None:
        """Some keys were taken by a concurrent accept that committed first: those commands
        (and their repeats in this batch) answer from the winner's row instead."""
        winners: dict[tuple[str, str], StoredMessage] = {}
        for org_id in sorted({org for org, _ in new}):
            found = await stored_messages(conn, org_id, (k for org, k in new if org == org_id))
            winners.update({(org_id, k): stored for k, stored in found.items()})
        for key, first in new.items():
            winner = winners.get(key)
            if winner is None or winner.work_id == _work_id(outcomes[first]):
                continue
            for index in range(first, len(requests)):  # the taker and its repeats
                if (requests[index].org_id, keys[index]) == key:
                    outcomes[index] = _answer(requests[index], winner, digests[index])

    def _new_item(
        self,
        request: AcceptCommandRequest,
        workload: str,
        run_as: dict[str, RunAs],
        outcome: Outcome | None,
    ) -> NewItem:
        item = InboxItem(
            org_id=request.org_id,
            workload=workload,
            message_id=request.message_id,
            run_as=run_as[request.org_id].user_id,
            command=request.command,
            correlation=request.correlation,
        )
        return NewItem(
            family(request.org_id),
            QUEUE_CLASS,
            item.model_dump_json(),
            id=_work_id(outcome),
            lane_key=lane_key(request.org_id, request.command),
        )


def _work_id(outcome: Outcome | None) -> str | None:
    return outcome.work_id if isinstance(outcome, AcceptCommandResponse) else None


def _status(outcome: Outcome | None) -> str | None:
    return outcome.status if isinstance(outcome, AcceptCommandResponse) else None


def _answer(request: AcceptCommandRequest, taken: StoredMessage, digest: str) -> Outcome:
    """A repeat of an accepted message key: the same command is a duplicate, another one a
    conflict."""
    if taken.digest != digest:
        return Conflict(
            "this message id was accepted with a different command",
            code="IDEMPOTENCY_CONFLICT",
        )
    return AcceptCommandResponse(
        message_id=request.message_id, work_id=taken.work_id, status="duplicate"
    )


def _check(view: MetadataView, command: RecordCommand) -> None:
    """What can be refused before execution, from metadata alone (authorization is the
    worker's, as the run-as user, when the command runs)."""
    obj = view.object(command.object)
    if obj is None:
        raise NotFound(f"no object named {command.object}", code="NOT_FOUND")
    ext = view.field(obj, command.external_id_field)
    if ext is None or not (ext.external_id or ext.unique):
        raise BadRequest(
            f"{command.external_id_field} is not an external id or unique field of {obj.api_name}",
            code="INVALID_FIELD",
            fields={command.external_id_field: "not an external id or unique field"},
        )
    try:
        coerce(ext, command.external_id)
    except InvalidValue as exc:
        raise BadRequest(
            f"the external id is not a valid {ext.type} value",
            code=exc.error.category.value,
            fields={ext.api_name: "invalid value"},
        ) from None
    if command.op == "delete":
        return  # a delete's fields are not used
    unknown = [name for name in command.fields if view.field(obj, name) is None]
    if unknown:
        raise BadRequest(
            f"{len(unknown)} field(s) do not exist on {obj.api_name}",
            code="INVALID_FIELD",
            fields={name[:80]: "no such field" for name in unknown[:MAX_REPORTED_FIELDS]},
        )
