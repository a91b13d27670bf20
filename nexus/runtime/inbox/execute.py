"""runtime-worker's inbox handler: commands that are ready together run in one transaction.

The generic `Worker` calls the handler once per claimed command, several at once. Each call
queues its command and waits; one group runner per process takes the first waiting command
and every other one that is waiting by then (up to `GROUP_MAX`: no wait beyond what gathered
while the previous group ran) and executes them in one unit of work (`group.GroupRun`):
run-as users and their access resolved once per distinct user, commands on one object
through one multi-item `mutate` with per-item results, each command's completion
(`Worker.complete_many_in`, once per group) in the same transaction as the changes
(effect once), one commit.
Only then is each waiting call answered: it returns (applied and completed) or raises its
command's refusal, which the Worker records. A group whose transaction fails (a database
error, a failed commit) applied nothing: every command in it raises a retryable failure.
See `group.py` for how one command's refusal is kept from undoing the others, and ADR 0028.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass

from prometheus_client import Histogram
from pydantic import ValidationError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from nexus.platform.db.engine import unit_of_work
from nexus.platform.failpoints import freeze_at
from nexus.platform.observability import get_logger
from nexus.platform.periodic import unless_cancelled
from nexus.platform.workqueue.store import Claimed
from nexus.platform.workqueue.worker import Retryable, Terminal, Worker
from nexus.runtime.access.service import AccessCache
from nexus.runtime.inbox.group import Command, GroupAborted, GroupRun
from nexus.runtime.inbox.queue import InboxItem
from nexus.runtime.metadata.view import MetadataCache

log = get_logger(__name__)
#: Commands executed in one transaction at most (mutate takes up to 200 items).
GROUP_MAX = 64
#: `NEXUS_FAILPOINT` value (tests): each group waits this long, its commands held, before it
#: runs, so a signal sent "mid-run" lands while commands are held however fast groups are.
FAILPOINT_SLOW_GROUPS = "inbox.slow_groups"
SLOW_GROUP_SECONDS = 0.1
#: `NEXUS_FAILPOINT` value (tests): the first group stops the process (SIGSTOP) after its
#: changes and completions are written, before its commit: a process frozen mid-transaction.
FAILPOINT_FREEZE_IN_GROUP = "inbox.freeze_in_group"

GROUP_COMMANDS = Histogram(
    "nexus_inbox_group_commands",
    "Inbox commands executed per group transaction",
    buckets=(1, 2, 4, 8, 16, 32, 64),
)


@dataclass
class GroupStats:
    """Counters the tests and the benchmark read."""

    groups: int = 0
    failed_groups: int = 0
    #: groups rolled back and run one transaction per command (see `group.GroupAborted`)
    fallbacks: int = 0
    commands: int = 0
    batches: int = 0
    largest: int = 0


@dataclass
class _Waiting:
    command: Command
    future: asyncio.Future[None]


class CommandExecutor:
    """The inbox `Worker`'s handler. `worker` is set once the Worker exists (it completes
    items inside the group's transaction); `close()` once the Worker has stopped."""

    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        *,
        group_max: int = GROUP_MAX,
        failpoint: str | None = None,
    ) -> None:
        self.sessions = sessions
        self.group_max = group_max
        self.pause_s = SLOW_GROUP_SECONDS if failpoint == FAILPOINT_SLOW_GROUPS else 0.0
        self.failpoint = failpoint
        self.metadata = MetadataCache()
        self.access = AccessCache()
        self.worker: Worker | None = None
        self.stats = GroupStats()
        self._queue: asyncio.Queue[_Waiting] = asyncio.Queue()
        self._running: list[_Waiting] = []
        self._runner: asyncio.Task[None] | None = None

    async def __call__(self, claimed: Claimed) -> None:
        if self.worker is None:  # pragma: no cover - wired before the worker runs
            raise RuntimeError("the executor has no worker")
        try:
            item = InboxItem.model_validate_json(claimed.payload)
        except ValidationError:
            raise Terminal("BAD_PAYLOAD: the inbox item cannot be read") from None
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.put_nowait(_Waiting(Command(claimed, item), future))
        if self._runner is None or self._runner.done():
            self._runner = asyncio.create_task(self._run(self.worker), name="inbox-groups")
        await future
        log.debug("inbox.executed", work_id=claimed.id, op=item.command.op)

    async def close(self) -> None:
        """Stop the group runner; a command still waiting is told to retry (its lease is
        released or expires: nothing of it was committed)."""
        if self._runner is not None:
            self._runner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._runner
        left = self._running + [self._queue.get_nowait() for _ in range(self._queue.qsize())]
        for waiting in left:
            if not waiting.future.done():
                waiting.future.set_exception(Retryable("the inbox worker is stopping"))

    async def _run(self, worker: Worker) -> None:
        """Runs while commands wait; the next call starts it again (no task left behind)."""
        while not self._queue.empty():
            self._running = await self._gather()
            if self._running:
                await self._execute(worker, self._running)
            self._running = []

    async def _one(self, worker: Worker, command: Command) -> BaseException | None:
        """A command in a transaction of its own (after its group was rolled back)."""
        try:
            async with unit_of_work(self.sessions) as session:
                return (
                    await GroupRun(session, worker, self.metadata, self.access, [command]).run()
                )[0]
        except GroupAborted as aborted:
            return aborted.final.get(0, aborted.cause)
        except Exception as exc:  # noqa: BLE001 - a database error: this command retries
            unless_cancelled()
            return exc

    async def _gather(self) -> list[_Waiting]:
        group = [await self._queue.get()]
        await asyncio.sleep(0)  # calls started with the first one queue theirs first
        while len(group) < self.group_max and not self._queue.empty():
            group.append(self._queue.get_nowait())
        # a call that is no longer waiting was cancelled (its lease lost or released)
        return [waiting for waiting in group if not waiting.future.done()]

    async def _execute(self, worker: Worker, group: list[_Waiting]) -> None:
        if self.pause_s:
            await asyncio.sleep(self.pause_s)
        commands = [waiting.command for waiting in group]
        try:
            async with unit_of_work(self.sessions) as session:
                run = GroupRun(session, worker, self.metadata, self.access, commands)
                outcomes = await run.run()
                freeze_at(self.failpoint, FAILPOINT_FREEZE_IN_GROUP)
        except GroupAborted as aborted:  # rolled back: one transaction per command
            self.stats.fallbacks += 1
            log.info("inbox.group_aborted", commands=len(group))
            outcomes = dict(aborted.final)
            for index, waiting in enumerate(group):
                if index not in outcomes and not waiting.future.done():
                    outcomes[index] = await self._one(worker, waiting.command)
        except Exception as exc:  # noqa: BLE001 - nothing of the group committed: all retry
            unless_cancelled()
            self.stats.failed_groups += 1
            log.warning("inbox.group_failed", commands=len(group), error=type(exc).__name__)
            for waiting in group:
                if not waiting.future.done():
                    waiting.future.set_exception(Retryable(f"unexpected {type(exc).__name__}"))
            return
        self.stats.groups += 1
        self.stats.commands += len(group)
        self.stats.batches += run.batches
        self.stats.largest = max(self.stats.largest, len(group))
        GROUP_COMMANDS.observe(len(group))
        for index, waiting in enumerate(group):
            if waiting.future.done():
                continue
            if index not in outcomes:  # pragma: no cover - every command gets an outcome
                waiting.future.set_exception(Retryable("the command was not executed"))
            elif (outcome := outcomes[index]) is None:
                waiting.future.set_result(None)  # applied and completed in the commit
            else:
                waiting.future.set_exception(outcome)
