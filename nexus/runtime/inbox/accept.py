"""`AcceptCommand`: a workload's command becomes a durable inbox item, once per message key.

One transaction: the run-as binding is resolved (none, an inactive user or an unknown org:
403, fail closed), a repeat of an accepted message key answers from its dedupe row (same
command: `duplicate`; another command: 409), cheap checks refuse what can never run (unknown
object 404; an external id field that is not an external-id/unique field, unknown fields or
an external id of the wrong type 400), then the dedupe row and the work item are written
together. The caller hears 202 only after that commit.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Literal

from sqlalchemy.exc import OperationalError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from nexus.contracts.commands import (
    AcceptCommandRequest,
    AcceptCommandResponse,
    RecordCommand,
)
from nexus.contracts.errors import BadRequest, Conflict, Forbidden, NotFound
from nexus.platform.db import unit_of_work
from nexus.platform.observability import get_logger
from nexus.platform.workqueue.store import NewItem, WorkStore, new_work_id
from nexus.runtime.inbox.queue import FAMILY, QUEUE_CLASS, InboxItem, lane_key
from nexus.runtime.inbox.repository import InboxRepository
from nexus.runtime.inbox.writes import WriteTurns
from nexus.runtime.metadata.view import MetadataCache, MetadataView
from nexus.runtime.records.coercion import InvalidValue, coerce

log = get_logger(__name__)
MAX_REPORTED_FIELDS = 20
DEADLOCK_ATTEMPTS = 3
MYSQL_DEADLOCK = 1213


def command_digest(command: RecordCommand) -> str:
    canonical = json.dumps(command.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def message_key(workload: str, message_id: str) -> str:
    """The dedupe key inside an org: the calling workload and its message id (<= 191)."""
    return f"{workload}:{message_id}"


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
        on_accepted: Callable[[], None] = lambda: None,
    ) -> None:
        self.store = store
        self.sessions = sessions
        self.max_body_bytes = max_body_bytes
        self.on_accepted = on_accepted  # after a commit that queued a new command
        self.turns = WriteTurns(sessions)

    async def accept(
        self,
        metadata: MetadataCache,
        *,
        workload: str,
        request: AcceptCommandRequest,
    ) -> AcceptCommandResponse:
        """Accept once; a transaction the database chose as a deadlock victim is retried
        (safe: the message key makes a second run a duplicate of the first)."""
        for attempt in range(1, DEADLOCK_ATTEMPTS + 1):
            try:
                async with self.turns.turn():
                    work_id, status = await self._accept_once(
                        metadata, workload=workload, request=request
                    )
                break
            except OperationalError as exc:
                if attempt == DEADLOCK_ATTEMPTS or not is_deadlock(exc):
                    raise
                log.info("inbox.accept_deadlock_retried", attempt=attempt)
        if status == "accepted":
            self.on_accepted()
        log.info("inbox.accepted", work_id=work_id, workload=workload, status=status)
        return AcceptCommandResponse(message_id=request.message_id, work_id=work_id, status=status)

    async def _accept_once(
        self,
        metadata: MetadataCache,
        *,
        workload: str,
        request: AcceptCommandRequest,
    ) -> tuple[str, Literal["accepted", "duplicate"]]:
        org_id, command = request.org_id, request.command
        key = message_key(workload, request.message_id)
        digest = command_digest(command)
        async with unit_of_work(self.sessions) as session:
            repo = InboxRepository(session)
            run_as = await repo.bound_user(org_id, workload)
            if run_as is None:
                raise Forbidden(
                    f"no active user is bound to workload {workload} in that org",
                    code="WORKLOAD_NOT_BOUND",
                )
            prior = await repo.message(org_id, key)
            if prior is None:
                _check(await metadata.view(session, org_id), command)
                work_id = new_work_id()
                if await repo.insert_message(
                    org_id=org_id, message_key=key, work_id=work_id, digest=digest
                ):
                    item = InboxItem(
                        org_id=org_id,
                        workload=workload,
                        message_id=request.message_id,
                        run_as=run_as.user_id,
                        command=command,
                        correlation=request.correlation,
                    )
                    await self.store.enqueue(
                        await session.connection(),
                        [
                            NewItem(
                                FAMILY,
                                QUEUE_CLASS,
                                item.model_dump_json(),
                                id=work_id,
                                lane_key=lane_key(org_id, command),
                            )
                        ],
                    )
                else:  # a concurrent accept of the same key committed first
                    prior = await repo.message(org_id, key)
            if prior is not None:
                _same_command(prior["command_sha256"], digest)
                work_id = prior["work_id"]
        # committed: only now is the command accepted
        return work_id, "accepted" if prior is None else "duplicate"


def driver_code(exc: Exception) -> int | None:
    """The driver's numeric error code (MySQL: 1213 deadlock, 1205 lock wait timeout)."""
    args: tuple[object, ...] = tuple(getattr(getattr(exc, "orig", None), "args", ()))
    return args[0] if args and isinstance(args[0], int) else None


def is_deadlock(exc: Exception) -> bool:
    """MySQL/MariaDB/TiDB error 1213: this transaction was rolled back to break a deadlock."""
    return driver_code(exc) == MYSQL_DEADLOCK


def _same_command(stored_digest: str, digest: str) -> None:
    if stored_digest != digest:
        raise Conflict(
            "this message id was accepted with a different command",
            code="IDEMPOTENCY_CONFLICT",
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
