"""The executor's handler: deliver one WorkItem's command to Runtime `AcceptCommand`.

`POST /internal/v1/runtime/commands` with a fresh workload token (audience `runtime-api`), a
deadline header and a bounded timeout; the message id is the work id, so Runtime's inbox
dedupes every repeat. How an answer becomes a work outcome:

    2xx                      accepted (or a duplicate of an accepted one): succeeded
    error answer             `command_error_is_retryable` decides (the body's `retryable`,
                             else by status): terminal -> dead at once, else retry with
                             backoff (or after `Retry-After`)
    no connection            retry
    timeout / broken answer  retry: the command may have been accepted, and sending it
                             again under the same message id cannot apply it twice

Stored errors say the status and Runtime's error code, never the command, the answer's text
or a header value.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from typing import Any

import httpx
from prometheus_client import Counter

from nexus.contracts.commands import AcceptCommandRequest, command_error_is_retryable
from nexus.platform.workload import WorkloadSigner
from nexus.platform.workqueue.store import Claimed
from nexus.platform.workqueue.worker import Retryable, Terminal

COMMANDS_PATH = "/internal/v1/runtime/commands"
RUNTIME_AUDIENCE = "runtime-api"
MAX_ANSWER_BYTES = 64 * 1024
MAX_RETRY_AFTER_MS = 300_000
_CODE = re.compile(r"^[A-Z][A-Z0-9_]{0,63}$")

DELIVERED = Counter(
    "nexus_integration_commands_total",
    "Commands sent to Runtime AcceptCommand, by outcome (accepted|retryable|terminal)",
    ["outcome"],
)


class CommandExecutor:
    """The `Worker` handler of `integration_work`: raises Retryable/Terminal, else succeeded."""

    def __init__(
        self, client: httpx.AsyncClient, signer: WorkloadSigner, *, timeout_seconds: float
    ) -> None:
        self.client = client  # base_url = Runtime's API
        self.signer = signer
        self.timeout_seconds = timeout_seconds

    async def __call__(self, item: Claimed) -> None:
        try:
            request = AcceptCommandRequest.model_validate_json(item.payload)
        except ValueError:
            DELIVERED.labels("terminal").inc()
            raise Terminal("the work item does not hold a valid command") from None
        if request.message_id != item.id:
            DELIVERED.labels("terminal").inc()
            raise Terminal("the work item's command carries another message id")
        try:
            status, answer = await self._post(request)
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:  # nothing was sent
            DELIVERED.labels("retryable").inc()
            raise Retryable(f"Runtime unreachable ({_cause(exc)})") from None
        except httpx.TimeoutException as exc:  # sent, maybe accepted: ask again, same id
            DELIVERED.labels("retryable").inc()
            raise Retryable(
                f"no answer from Runtime within {self.timeout_seconds:g}s "
                f"({_cause(exc)}); sent again under the same message id"
            ) from None
        except httpx.TransportError as exc:
            DELIVERED.labels("retryable").inc()
            raise Retryable(f"the exchange with Runtime broke ({_cause(exc)})") from None
        if 200 <= status < 300:
            DELIVERED.labels("accepted").inc()
            return
        body = answer.body
        code = body.get("code") if body is not None else None
        message = f"Runtime answered {status}" + (
            f" {code}" if isinstance(code, str) and _CODE.match(code) else ""
        )
        if command_error_is_retryable(status, body):
            DELIVERED.labels("retryable").inc()
            raise Retryable(message, delay_ms=answer.retry_after_ms)
        DELIVERED.labels("terminal").inc()
        raise Terminal(message)

    async def _post(self, request: AcceptCommandRequest) -> tuple[int, _Answer]:
        timeout_ms = int(self.timeout_seconds * 1000)
        headers = self.signer.headers(
            RUNTIME_AUDIENCE, deadline_ms=int(time.time() * 1000) + timeout_ms
        )
        headers["content-type"] = "application/json"
        async with self.client.stream(
            "POST",
            COMMANDS_PATH,
            content=request.model_dump_json().encode(),
            headers=headers,
            timeout=self.timeout_seconds,
        ) as response:
            status = response.status_code
            if 200 <= status < 300:
                return status, _Answer()
            raw = b""
            async for chunk in response.aiter_bytes():
                raw += chunk
                if len(raw) > MAX_ANSWER_BYTES:
                    break
            return status, _Answer.parse(raw, response.headers.get("retry-after"))


def _cause(exc: BaseException) -> str:
    """The class name of the original failure (the transport wraps its own exceptions)."""
    while exc.__cause__ is not None:
        exc = exc.__cause__
    return type(exc).__name__


@dataclass(frozen=True)
class _Answer:
    """What an error answer tells the executor: its JSON object body, its Retry-After."""

    body: dict[str, Any] | None = None
    retry_after_ms: int | None = None

    @classmethod
    def parse(cls, raw: bytes, retry_after: str | None) -> _Answer:
        body = None
        if len(raw) <= MAX_ANSWER_BYTES:
            try:
                parsed = json.loads(raw)
            except ValueError:
                parsed = None
            body = parsed if isinstance(parsed, dict) else None
        delay = None
        if retry_after is not None and retry_after.strip().isdigit():
            delay = min(int(retry_after.strip()) * 1000, MAX_RETRY_AFTER_MS)
        return cls(body, delay)
