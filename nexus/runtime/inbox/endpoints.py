"""AcceptCommand, single (`POST /internal/v1/runtime/commands`) and batch
(`.../commands/batch`): workload-authenticated, no user; both go through
`CommandInbox.accept_batch` (the single form is a batch of one)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from pydantic import ValidationError
from sqlalchemy.exc import InterfaceError, OperationalError

from nexus.contracts.commands import (
    MAX_BATCH_BYTES,
    AcceptCommandBatchRequest,
    AcceptCommandBatchResponse,
    AcceptCommandRequest,
    AcceptCommandResponse,
    CommandError,
    CommandResult,
    command_error_is_retryable,
)
from nexus.contracts.errors import (
    BadRequest,
    Forbidden,
    NexusError,
    PayloadTooLarge,
    ServiceUnavailable,
    Unauthorized,
)
from nexus.identity.api import WorkloadCall, workload_call
from nexus.platform.db.errors import driver_code
from nexus.platform.json_text import compact_json
from nexus.platform.observability import get_logger
from nexus.runtime.inbox.accept import CommandInbox, Outcome

log = get_logger(__name__)
router = APIRouter(prefix="/internal/v1/runtime")
MAX_REPORTED_PROBLEMS = 20


async def bounded_body(request: Request, limit: int) -> bytes:
    """The request body, refused with 413 as soon as it passes `limit` bytes."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(f"a command body is at most {limit} bytes")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise PayloadTooLarge(f"a command body is at most {limit} bytes")
    return bytes(body)


def invalid(exc: ValidationError, message: str) -> BadRequest:
    return BadRequest(
        message,
        fields={
            ".".join(str(p) for p in err["loc"]) or "body": str(err["msg"])
            for err in exc.errors()[:MAX_REPORTED_PROBLEMS]
        },
    )


@router.post("/commands", status_code=202, response_model=AcceptCommandResponse)
async def accept_command(
    request: Request,
    call: Annotated[WorkloadCall, Depends(workload_call("runtime.commands"))],
) -> AcceptCommandResponse:
    inbox: CommandInbox = request.app.state.inbox
    try:
        body = await bounded_body(request, inbox.max_body_bytes)
        command = AcceptCommandRequest.model_validate_json(body)
    except ValidationError as exc:
        raise invalid(exc, "the command is not valid") from None
    (outcome,) = await _accept(request, call, [command])
    if isinstance(outcome, NexusError):
        raise outcome
    return outcome


@router.post("/commands/batch", response_model=AcceptCommandBatchResponse)
async def accept_command_batch(
    request: Request,
    call: Annotated[WorkloadCall, Depends(workload_call("runtime.commands"))],
) -> AcceptCommandBatchResponse:
    inbox: CommandInbox = request.app.state.inbox
    try:
        body = await bounded_body(request, MAX_BATCH_BYTES)
        batch = AcceptCommandBatchRequest.model_validate_json(body)
    except ValidationError as exc:
        raise invalid(exc, "the command batch is not valid") from None
    results: list[CommandResult | None] = [None] * len(batch.commands)
    valid: list[tuple[int, AcceptCommandRequest]] = []
    for index, raw in enumerate(batch.commands):
        message_id = raw.get("message_id") if isinstance(raw, dict) else None
        message_id = message_id if isinstance(message_id, str) else None
        try:
            if len(compact_json(raw).encode()) > inbox.max_body_bytes:
                raise PayloadTooLarge(f"a command body is at most {inbox.max_body_bytes} bytes")
            valid.append((index, AcceptCommandRequest.model_validate(raw)))
        except ValidationError as exc:
            results[index] = _result(message_id, invalid(exc, "the command is not valid"))
        except NexusError as exc:
            results[index] = _result(message_id, exc)
    if valid:
        outcomes = await _accept(request, call, [command for _, command in valid])
        for (index, command), outcome in zip(valid, outcomes, strict=True):
            results[index] = _result(command.message_id, outcome)
    return AcceptCommandBatchResponse(results=[r for r in results if r is not None])


def _org_refusal(call: WorkloadCall, command: AcceptCommandRequest) -> NexusError | None:
    """A command is accepted only in the org its workload token was signed for: the body's
    `org_id` must say the same (it is never the authority). A token without an org is from a
    sender that predates this rule: refused as retryable (401), so its work waits for the
    sender's upgrade instead of dying."""
    if call.org is None:
        return Unauthorized(
            "the workload token names no org; AcceptCommand takes the org from it",
            code="WORKLOAD_ORG_MISSING",
        )
    if command.org_id != call.org:
        return Forbidden(
            "the command names another org than its workload token", code="ORG_MISMATCH"
        )
    return None


async def _accept(
    request: Request, call: WorkloadCall, commands: list[AcceptCommandRequest]
) -> list[Outcome]:
    inbox: CommandInbox = request.app.state.inbox
    outcomes: list[Outcome | None] = [_org_refusal(call, command) for command in commands]
    taken = [command for command, refused in zip(commands, outcomes, strict=True) if not refused]
    if not taken:
        return [o for o in outcomes if o is not None]
    try:
        accepted = iter(
            await inbox.accept_batch(
                request.app.state.runtime.metadata, workload=call.workload, requests=taken
            )
        )
    except (OperationalError, InterfaceError) as exc:  # down, busy: the caller tries again
        log.warning("inbox.accept_failed", error=type(exc).__name__, code=driver_code(exc))
        raise ServiceUnavailable(
            f"the command was not accepted ({type(exc).__name__}); retry with the same id",
            code="DATABASE_UNAVAILABLE",
        ) from None
    return [refused if refused is not None else next(accepted) for refused in outcomes]


def _result(message_id: str | None, outcome: Outcome) -> CommandResult:
    if isinstance(outcome, AcceptCommandResponse):
        return CommandResult(message_id=message_id, status=outcome.status, work_id=outcome.work_id)
    body: dict[str, Any] = outcome.body()
    return CommandResult(
        message_id=message_id,
        status="conflict" if outcome.code == "IDEMPOTENCY_CONFLICT" else "refused",
        error=CommandError(
            status=outcome.status,
            code=outcome.code,
            message=outcome.message,
            fields=outcome.fields,
            retryable=command_error_is_retryable(outcome.status, body),
        ),
    )
