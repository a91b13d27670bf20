"""The executor's handler: deliver WorkItems' commands to Runtime `AcceptCommand`, batched.

Each handler call (the generic `Worker` runs up to `integration_executor_concurrency` at
once) queues its command and waits for its own result. A sender task takes what has queued
(up to `MAX_BATCH_COMMANDS` commands and `MAX_BATCH_BYTES` of body, after at most the batch
window, or at once when its previous batch returned, like the ingest group commit) and sends
it as ONE `POST /internal/v1/runtime/commands/batch` with a fresh workload token (audience
`runtime-api`), a deadline header and a bounded timeout; each command's message id is its
work id, so Runtime's inbox dedupes every repeat. How an answer becomes each work outcome:

    per-command result       accepted / duplicate: succeeded; conflict / refused: its
                             `retryable` decides (as `command_error_is_retryable` would for
                             the single form): terminal -> dead at once, else retry
    error answer (whole)     `command_error_is_retryable` decides for every command in it
                             (the body's `retryable`, else by status), `Retry-After` honoured
    503 / no connection      deferred: nothing reached Runtime (refused, connect timeout, or
                             Runtime said it takes nothing now), so no attempt is spent;
                             `Retry-After` honoured
    timeout / broken answer  retry: the commands may have been accepted, and sending them
                             again under the same message ids cannot apply them twice

A circuit breaker (`platform.breaker`) watches Runtime: consecutive 503s, unreachables and
timeouts open it; while it is open no batch is sent (its commands are deferred until it lets a
probe through) and the worker claims nothing (`paused_for`); one probe batch answered closes it.

Stored errors say the status and Runtime's error code, never the command, the answer's text
or a header value.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections import deque
from dataclasses import dataclass
from typing import Any

import httpx
from prometheus_client import Counter, Histogram
from pydantic import ValidationError

from nexus.contracts.commands import (
    COMMANDS_BATCH_PATH,
    MAX_BATCH_BYTES,
    MAX_BATCH_COMMANDS,
    AcceptCommandBatchResponse,
    AcceptCommandRequest,
    CommandResult,
    command_error_is_retryable,
)
from nexus.contracts.roles import RUNTIME_AUDIENCE
from nexus.platform.breaker import BreakerSettings, CircuitBreaker
from nexus.platform.http_client import InternalClient, InternalUnreachable
from nexus.platform.workload import WorkloadSigner
from nexus.platform.workqueue.store import Claimed
from nexus.platform.workqueue.worker import Deferred, Retryable, Terminal, WorkFailed

MAX_ANSWER_BYTES = 64 * 1024
MAX_BATCH_ANSWER_BYTES = 1024 * 1024
MAX_RETRY_AFTER_MS = 300_000
ENVELOPE_BYTES = len(b'{"commands":[]}')
_CODE = re.compile(r"^[A-Z][A-Z0-9_]{0,63}$")

DELIVERED = Counter(
    "nexus_integration_commands_total",
    "Commands sent to Runtime AcceptCommand, by outcome (accepted|retryable|terminal)",
    ["outcome"],
)
BATCH_COMMANDS = Histogram(
    "nexus_integration_command_batch_size",
    "Commands per AcceptCommand batch request",
    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256),
)


@dataclass
class _Queued:
    payload: bytes  # the work item's AcceptCommandRequest JSON, sent as it is
    future: asyncio.Future[None]
    org: str  # the org its token is signed for: a batch holds one org's commands


@dataclass
class SenderStats:
    """What the tests and the benchmark read: requests sent and the commands in them."""

    requests: int = 0
    commands: int = 0
    largest_batch: int = 0


class CommandExecutor:
    """The `Worker` handler of `integration_work`: raises Retryable/Terminal, else succeeded."""

    def __init__(
        self,
        client: httpx.AsyncClient,
        signer: WorkloadSigner,
        *,
        timeout_seconds: float,
        window_seconds: float = 0.002,
        max_commands: int = MAX_BATCH_COMMANDS,
        max_bytes: int = MAX_BATCH_BYTES,
        max_in_flight: int = 2,
        breaker: BreakerSettings | None = None,
    ) -> None:
        # signed calls to Runtime (the client's base_url is Runtime's API)
        self.runtime = InternalClient(
            base_url="",
            signer=signer,
            audience=RUNTIME_AUDIENCE,
            client=client,
            timeout_s=timeout_seconds,
        )
        self.timeout_seconds = timeout_seconds
        self.window_seconds = window_seconds
        self.max_commands = max(1, min(max_commands, MAX_BATCH_COMMANDS))
        self.max_bytes = min(max_bytes, MAX_BATCH_BYTES)
        self.max_in_flight = max_in_flight
        self.stats = SenderStats()
        self.breaker = CircuitBreaker("runtime-api", breaker)
        self._queue: deque[_Queued] = deque()
        self._full = asyncio.Event()
        self._gathering = False  # a sender is waiting out its window
        self._senders: set[asyncio.Task[None]] = set()

    async def __call__(self, item: Claimed) -> None:
        try:
            request = AcceptCommandRequest.model_validate_json(item.payload)
        except ValueError:
            DELIVERED.labels("terminal").inc()
            raise Terminal("the work item does not hold a valid command") from None
        if request.message_id != item.id:
            DELIVERED.labels("terminal").inc()
            raise Terminal("the work item's command carries another message id")
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.append(_Queued(item.payload.encode(), future, request.org_id))
        if len(self._queue) >= self.max_commands:
            self._full.set()
        self._kick()
        await future  # raises the item's Retryable / Terminal

    async def aclose(self) -> None:
        """Stop the senders; a batch in flight and commands still queued fail as retryable."""
        for task in list(self._senders):
            task.cancel()
        for task in list(self._senders):
            with contextlib.suppress(asyncio.CancelledError):
                await task
        queued = list(self._queue)
        self._queue.clear()
        _settle(queued, [Retryable("the executor stopped before sending the command")])

    # ------------------------------------------------------------------ sending
    def _kick(self) -> None:
        """Start a sender unless one is gathering already or enough batches are in flight."""
        if self._gathering or not self._queue or len(self._senders) >= self.max_in_flight:
            return
        self._gathering = True  # from now: later calls join this sender's batch
        task = asyncio.create_task(self._send_loop(), name="command-batch-sender")
        self._senders.add(task)

    async def _send_loop(self) -> None:
        me = asyncio.current_task()
        try:
            wait = True
            while True:
                try:
                    if wait:
                        await self._window()
                    batch = self._take()
                finally:
                    self._gathering = False
                if not batch:
                    return
                self._kick()  # what is left over, or arrives meanwhile, need not wait for us
                await self._send(batch)
                if self._gathering or not self._queue:
                    return  # another sender gathers what came meanwhile
                self._gathering = True  # what gathered while this batch was out goes at once
                wait = False
        finally:
            if me is not None:
                self._senders.discard(me)

    async def _window(self) -> None:
        if self.window_seconds <= 0 or len(self._queue) >= self.max_commands:
            await asyncio.sleep(0)  # the handlers started in this loop iteration join
            return
        self._full.clear()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.window_seconds):
                await self._full.wait()

    def _take(self) -> list[_Queued]:
        """The next batch: commands of the org of the oldest one (its token is signed for
        that org), in queue order, within the count and byte bounds; the others keep their
        places for the next batch."""
        batch: list[_Queued] = []
        size = ENVELOPE_BYTES
        others: list[_Queued] = []
        while self._queue and len(batch) < self.max_commands:
            queued = self._queue[0]
            if queued.future.done():  # its handler was cancelled (drain, lost lease)
                self._queue.popleft()
                continue
            if batch and queued.org != batch[0].org:
                others.append(self._queue.popleft())
                continue
            if batch and size + len(queued.payload) + 1 > self.max_bytes:
                break
            size += len(queued.payload) + 1
            batch.append(self._queue.popleft())
        self._queue.extendleft(reversed(others))
        if len(self._queue) < self.max_commands:
            self._full.clear()
        return batch

    async def _send(self, batch: list[_Queued]) -> None:
        self.stats.requests += 1
        self.stats.commands += len(batch)
        self.stats.largest_batch = max(self.stats.largest_batch, len(batch))
        BATCH_COMMANDS.observe(len(batch))
        if not self.breaker.allow():  # Runtime is down: nothing goes until the probe says
            wait_ms = max(1, int(self.breaker.retry_in() * 1000))
            _settle(
                batch,
                [Deferred("Runtime unavailable (circuit open); nothing sent", delay_ms=wait_ms)],
            )
            return
        try:
            outcomes = await self._exchange(batch)
        except asyncio.CancelledError:
            _settle(batch, [Retryable("the executor stopped while Runtime was answering")])
            raise
        except Exception as exc:  # noqa: BLE001 - any failure fails this request's commands
            outcomes = [Retryable(f"the exchange with Runtime broke ({_cause(exc)})")]
        _settle(batch, outcomes)

    async def _exchange(self, batch: list[_Queued]) -> list[WorkFailed | None]:
        """One request; one outcome per command (None = accepted), or one for them all."""
        content = b'{"commands":[' + b",".join(q.payload for q in batch) + b"]}"
        try:
            reply = await self.runtime.exchange(
                COMMANDS_BATCH_PATH,
                content,
                answer_limit=MAX_BATCH_ANSWER_BYTES,
                error_limit=MAX_ANSWER_BYTES,
                org=batch[0].org,
            )
        except InternalUnreachable as exc:
            self.breaker.failed()
            return [self._unreachable(exc)]
        status = reply.status
        if 200 <= status < 300:
            self.breaker.succeeded()
            return _per_command(batch, reply.body)
        return [self._refused(status, _Answer.parse(reply.body, reply.retry_after))]

    def _unreachable(self, exc: InternalUnreachable) -> WorkFailed:
        if exc.nothing_sent:
            return Deferred(
                f"Runtime unreachable ({exc.cause}); nothing sent", delay_ms=self._deferral_ms()
            )
        if exc.timed_out:  # sent, maybe accepted: ask again, same ids
            return Retryable(
                f"no answer from Runtime within {self.timeout_seconds:g}s "
                f"({exc.cause}); sent again under the same message id"
            )
        return Retryable(f"the exchange with Runtime broke ({exc.cause})")

    def _refused(self, status: int, answer: _Answer) -> WorkFailed:
        """A whole-request error answer: 503 (Runtime takes nothing now: starting, draining,
        overloaded) defers; any other error shows Runtime is there and decides as usual."""
        body = answer.body
        message = _answered(status, body.get("code") if body is not None else None)
        if status == 503:
            self.breaker.failed()
            delay = max(answer.retry_after_ms or 0, self._deferral_ms() or 0)
            return Deferred(f"{message}; nothing taken", delay_ms=delay or None)
        self.breaker.succeeded()
        if command_error_is_retryable(status, body):
            return Retryable(message, delay_ms=answer.retry_after_ms)
        return Terminal(message)

    def _deferral_ms(self) -> int | None:
        """How long a deferred command waits: until the breaker lets a probe through when
        it is open, else the worker's backoff (None)."""
        wait = self.breaker.retry_in()
        return int(wait * 1000) if wait > 0 else None


def _per_command(batch: list[_Queued], raw: bytes) -> list[WorkFailed | None]:
    try:
        results = AcceptCommandBatchResponse.model_validate_json(raw).results
    except ValidationError:
        results = []
    if len(results) != len(batch):
        return [Retryable("Runtime's batch answer was not understood")]
    return [_outcome(result) for result in results]


def _outcome(result: CommandResult) -> WorkFailed | None:
    if result.status in ("accepted", "duplicate"):
        return None
    error = result.error
    if error is None:
        return Retryable("Runtime's batch answer was not understood")
    message = _answered(error.status, error.code)
    if command_error_is_retryable(error.status, error.model_dump()):
        return Retryable(message)
    return Terminal(message)


def _settle(batch: list[_Queued], outcomes: list[WorkFailed | None]) -> None:
    """Resolve each command's future: one outcome each, or one for the whole batch."""
    for index, queued in enumerate(batch):
        outcome = outcomes[index] if len(outcomes) == len(batch) else outcomes[0]
        DELIVERED.labels(
            "accepted"
            if outcome is None
            else "terminal"
            if isinstance(outcome, Terminal)
            else "retryable"
        ).inc()
        if queued.future.done():
            continue
        if outcome is None:
            queued.future.set_result(None)
        else:  # an exception of its own: each handler raises (and tracebacks) it
            queued.future.set_exception(type(outcome)(str(outcome), delay_ms=outcome.delay_ms))


def _answered(status: int, code: object) -> str:
    return f"Runtime answered {status}" + (
        f" {code}" if isinstance(code, str) and _CODE.match(code) else ""
    )


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
