"""Background steps a role runs on a timer while it serves (queue gauges, retention), and
the rule every background loop that catches `Exception` follows to stay stoppable."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from nexus.platform.observability import get_logger

log = get_logger(__name__)
STOP_GRACE_S = 5.0


def unless_cancelled() -> None:
    """Call first in an `except Exception` of a background loop: re-raises a cancellation
    that a driver turned into another error (SQLAlchemy raises, for example,
    `PendingRollbackError` when a task is cancelled inside a statement). Without it the loop
    logs the error, carries on, and whoever awaits the cancelled task waits forever."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


class Ticker:
    """The handle `every` yields: `now()` runs the step at once instead of at the next tick
    (callable from any thread; several calls before the step runs make one run)."""

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._due = asyncio.Event()
        self._stopped = False

    def now(self) -> None:
        self._loop.call_soon_threadsafe(self._due.set)

    async def wait(self, timeout_s: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._due.wait(), timeout_s)
        self._due.clear()

    def stop(self) -> None:
        self._stopped = True
        self._due.set()

    @property
    def stopped(self) -> bool:
        return self._stopped


@asynccontextmanager
async def every(
    interval_s: float, step: Callable[[], Awaitable[None]], *, name: str
) -> AsyncIterator[Ticker]:
    """Run `step` now and then every `interval_s` seconds (or at once on `Ticker.now()`)
    while the block runs. A failing step is logged by its exception class (never its
    message: it may carry data) and tried again at the next tick. Leaving the block lets a
    running step finish (up to `STOP_GRACE_S`), then cancels it."""
    ticker = Ticker()

    async def loop() -> None:
        while not ticker.stopped:
            try:
                await step()
            except Exception as exc:  # noqa: BLE001 - the next tick tries again
                unless_cancelled()
                log.warning("periodic.step_failed", step=name, error=type(exc).__name__)
            await ticker.wait(interval_s)

    task = asyncio.create_task(loop(), name=name)
    try:
        yield ticker
    finally:
        ticker.stop()
        done, _ = await asyncio.wait([task], timeout=STOP_GRACE_S)
        if not done:
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
