"""`POST /internal/v1/runtime/commands` (AcceptCommand): workload-authenticated, no user."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request
from pydantic import ValidationError
from sqlalchemy.exc import InterfaceError, OperationalError

from nexus.contracts.commands import AcceptCommandRequest, AcceptCommandResponse
from nexus.contracts.errors import BadRequest, PayloadTooLarge, ServiceUnavailable
from nexus.identity.endpoints import WorkloadCall, workload_call
from nexus.platform.observability import get_logger
from nexus.runtime.inbox.accept import CommandInbox, driver_code

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
        raise BadRequest(
            "the command is not valid",
            fields={
                ".".join(str(p) for p in err["loc"]) or "body": str(err["msg"])
                for err in exc.errors()[:MAX_REPORTED_PROBLEMS]
            },
        ) from None
    try:
        return await inbox.accept(
            request.app.state.runtime.metadata,
            workload=call.workload,
            request=command,
        )
    except (OperationalError, InterfaceError) as exc:  # down, busy: the caller tries again
        log.warning("inbox.accept_failed", error=type(exc).__name__, code=driver_code(exc))
        raise ServiceUnavailable(
            f"the command was not accepted ({type(exc).__name__}); retry with the same id",
            code="DATABASE_UNAVAILABLE",
        ) from None
