"""`AcceptCommand`: how another service hands Runtime a command to execute later, once.

`POST /internal/v1/runtime/commands` with the caller's workload token and a deadline (no user
delegation: a command runs as the user an administrator bound to the calling workload in that
org, `runtime_workload_binding`; no binding = 403, fail closed). The message key is
(calling workload, org, message_id): the first accepted command wins, a repeat of the same
command answers 202 `duplicate`, a repeat with another command 409 `IDEMPOTENCY_CONFLICT`.

A 202 means durably accepted (the inbox row committed), not executed: runtime-worker executes
the inbox through the work engine, the record DML and the inbox completion in one transaction.

How a caller classifies an error answer (`retryable` in the body decides; when absent):
400, 403, 404, 409, 413, 422 terminal; 401 (an expired workload token), 408, 429, 5xx and
transport failures retryable.

The batch form, `POST /internal/v1/runtime/commands/batch` (`AcceptCommandBatchRequest`):
up to `MAX_BATCH_COMMANDS` commands and `MAX_BATCH_BYTES` of body, each a full
`AcceptCommandRequest` with its own message id, accepted in ONE transaction. The answer is
200 with one `CommandResult` per command, in order: `accepted` / `duplicate` (as the single
form's 202), `conflict` (its 409) or `refused` (any other refusal), the last two with the
`error` the single form would have answered (its status, code, message, fields) and
`retryable` already decided by `command_error_is_retryable`. A malformed command is refused
alone (400; 413 above the per-command limit). An error answer to the whole request (401,
403, 400 for a malformed envelope, 413, 503) applies to every command in it, classified as
above; Runtime dedupes, so a whole batch sent again never applies anything twice.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

API_NAME = r"^[A-Za-z][A-Za-z0-9_]{0,79}$"
MAX_COMMAND_FIELDS = 500
COMMANDS_PATH = "/internal/v1/runtime/commands"
COMMANDS_BATCH_PATH = "/internal/v1/runtime/commands/batch"
#: Bounds of one batch request (a sender packs below both; Runtime refuses above: 400 / 413).
MAX_BATCH_COMMANDS = 256
MAX_BATCH_BYTES = 4 * 1024 * 1024

Scalar = str | int | float | bool | None


class RecordCommand(BaseModel):
    """Upsert, update or delete one record found by an external id field."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    op: Literal["upsert", "update", "delete"]
    object: Annotated[str, Field(pattern=API_NAME)]
    external_id_field: Annotated[str, Field(pattern=API_NAME)]
    external_id: Annotated[str, Field(min_length=1, max_length=255)]
    fields: Annotated[dict[str, Scalar], Field(max_length=MAX_COMMAND_FIELDS)] = Field(
        default_factory=dict
    )


class AcceptCommandRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    org_id: Annotated[str, Field(pattern=r"^[0-9A-Za-z]{15,18}$")]
    message_id: Annotated[str, Field(min_length=1, max_length=128)]  # the idempotency key
    command: RecordCommand
    correlation: Annotated[
        dict[str, Annotated[str, Field(max_length=191)]], Field(max_length=8)
    ] = Field(default_factory=dict)  # safe ids only (event, receipt, delivery): never payloads


class AcceptCommandResponse(BaseModel):
    message_id: str
    work_id: str
    status: Literal["accepted", "duplicate"]


class AcceptCommandBatchRequest(BaseModel):
    """Each entry is validated on its own as an `AcceptCommandRequest` (a malformed one is
    refused alone), so the envelope takes any JSON value."""

    model_config = ConfigDict(extra="forbid")

    commands: Annotated[list[Any], Field(min_length=1, max_length=MAX_BATCH_COMMANDS)]


class CommandError(BaseModel):
    """What the single form would have answered for this command (status and its body)."""

    status: int
    code: str
    message: str
    fields: dict[str, str] | None = None
    retryable: bool


class CommandResult(BaseModel):
    message_id: str | None  # None when the entry carried no readable message id
    status: Literal["accepted", "duplicate", "conflict", "refused"]
    work_id: str | None = None  # accepted / duplicate
    error: CommandError | None = None  # conflict / refused


class AcceptCommandBatchResponse(BaseModel):
    results: list[CommandResult]


def command_error_is_retryable(status: int, body: dict[str, Any] | None) -> bool:
    """The caller's classification of an error answer (see the module docstring)."""
    if body is not None and isinstance(body.get("retryable"), bool):
        return bool(body["retryable"])
    return status in (401, 408, 429) or status >= 500
