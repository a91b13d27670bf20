"""The background loops of a role, supervised one way.

- `SideTasks`: the helper tasks of one owner loop (a `Worker`'s completer and heartbeat),
  after procrastinate's `_start_side_tasks` / `_monitor_side_tasks`. They start and stop
  together; one that ends by itself while its owner runs is logged loudly
  (`loops.side_task_died`) and stops the owner (`on_death`), `guard()` stops waiting on
  something only a dead helper would have finished, and leaving the block raises
  `SideTaskDied`. No owner runs on (or waits forever at shutdown) behind a dead helper.
- `RestartingLoop`: one long-running loop of a role with the one restart-and-readiness
  policy. It runs `body()` until `stop()`; when the body raises, or returns without being
  asked to, the failure is logged by its class (`loops.loop_failed`; never its message:
  it may carry data), `/readyz` says `restarting after <class>`, and the body runs again
  after `restart_s` (a stop during the pause ends it at once). `stop()` asks the body to
  drain (`on_stop`), waits up to its timeout, then cancels.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Coroutine
from types import TracebackType
from typing import Any, TypeVar

from nexus.contracts.ops import CheckResult
from nexus.platform.observability import get_logger
from nexus.platform.periodic import unless_cancelled

log = get_logger(__name__)
T = TypeVar("T")

#: How long a failed loop waits before it runs again.
RESTART_SECONDS = 5.0


class SideTaskDied(RuntimeError):
    """A side task ended while its owner still needed it."""

    def __init__(self, owner: str, name: str, error: BaseException | None) -> None:
        why = f" ({type(error).__name__})" if error is not None else ""
        super().__init__(f"{owner}: side task {name} ended by itself{why}")
        self.task_name = name


class SideTasks:
    """`async with SideTasks(owner, on_death=...) as side: side.start(name, coroutine)`."""

    def __init__(self, owner: str, *, on_death: Callable[[], None] | None = None) -> None:
        self.owner = owner
        self._on_death = on_death
        self._tasks: list[asyncio.Task[Any]] = []
        self._expected: set[asyncio.Task[Any]] = set()
        self._closing = False
        self._dead = asyncio.Event()
        self.died: SideTaskDied | None = None

    def start(self, name: str, coroutine: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.create_task(coroutine, name=name)
        task.add_done_callback(self._ended)
        self._tasks.append(task)
        return task

    def _ended(self, task: asyncio.Task[Any]) -> None:
        error = None if task.cancelled() else task.exception()  # retrieved: never "unhandled"
        if self._closing or task in self._expected or self.died is not None:
            return
        self.died = SideTaskDied(self.owner, task.get_name(), error)
        log.error(
            "loops.side_task_died",
            owner=self.owner,
            task=task.get_name(),
            error=type(error).__name__ if error is not None else None,
        )
        self._dead.set()
        if self._on_death is not None:
            self._on_death()

    async def cancel(self, task: asyncio.Task[Any]) -> None:
        """End one side task on purpose (it is not a death)."""
        self._expected.add(task)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task

    async def guard(self, awaitable: Awaitable[T]) -> T:
        """Await `awaitable`, unless a side task dies first: then SideTaskDied."""
        if self.died is not None:
            if asyncio.iscoroutine(awaitable):
                awaitable.close()  # never started: no "was never awaited" warning
            raise self.died
        inner = asyncio.ensure_future(awaitable)
        death = asyncio.ensure_future(self._dead.wait())
        try:
            await asyncio.wait([inner, death], return_when=asyncio.FIRST_COMPLETED)
        finally:
            death.cancel()
        if inner.done():
            return inner.result()
        inner.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await inner
        assert self.died is not None  # noqa: S101 - the death event is set only with it
        raise self.died

    async def __aenter__(self) -> SideTasks:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._closing = True
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self.died is not None and exc_type is None:
            raise self.died


class RestartingLoop:
    """One background loop with the restart-and-readiness policy (module docstring)."""

    def __init__(
        self,
        name: str,
        body: Callable[[], Awaitable[None]],
        *,
        on_stop: Callable[[], None] | None = None,
        restart_s: float = RESTART_SECONDS,
    ) -> None:
        self.name = name
        self._body = body
        self._on_stop = on_stop
        self.restart_s = restart_s
        self.state = "starting"
        self.failures = 0
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=self.name)

    async def pause(self, seconds: float) -> None:
        """Sleep, but wake at once on stop() (for the body's own waits, too)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), timeout=seconds)

    async def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                self.state = "running"
                await self._body()
                if self._stopping.is_set():
                    break
                raise RuntimeError(f"{self.name} stopped by itself")
            except Exception as exc:  # noqa: BLE001 - say so on /readyz, then start over
                unless_cancelled()
                if self._stopping.is_set():  # failing while it drains: nothing to restart
                    log.warning(
                        "loops.failed_while_stopping", loop=self.name, error=type(exc).__name__
                    )
                    break
                self.failures += 1
                self.state = f"restarting after {type(exc).__name__}"
                log.error("loops.loop_failed", loop=self.name, error=type(exc).__name__)
                await self.pause(self.restart_s)
        self.state = "stopped"

    async def stop(self, timeout_s: float) -> None:
        """Ask the body to drain (`on_stop`), wait up to `timeout_s`, then cancel it."""
        self._stopping.set()
        if self._on_stop is not None:
            self._on_stop()
        task = self._task
        if task is None:
            self.state = "stopped"
            return
        done, _ = await asyncio.wait([task], timeout=timeout_s)
        if not done:
            if timeout_s > 0:
                log.warning("loops.drain_timed_out", loop=self.name)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self.state = "stopped"

    async def ready(self) -> CheckResult:
        """Not ready while the loop is restarting after a failure, or once it stopped."""
        failed = self.state.startswith("restarting") or self.state == "stopped"
        return CheckResult(name=self.name, ok=not failed, detail=self.state)
