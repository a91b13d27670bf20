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


@asynccontextmanager
async def every(
    interval_s: float, step: Callable[[], Awaitable[None]], *, name: str
) -> AsyncIterator[None]:
    """Run `step` now and then every `interval_s` seconds while the block runs. A failing
    step is logged by its exception class (never its message: it may carry data) and tried
    again at the next tick. Leaving the block lets a running step finish (up to
    `STOP_GRACE_S`), then cancels it."""
    stop = asyncio.Event()

    async def loop() -> None:
        while not stop.is_set():
            try:
                await step()
            except Exception as exc:  # noqa: BLE001 - the next tick tries again
                unless_cancelled()
                log.warning("periodic.step_failed", step=name, error=type(exc).__name__)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), interval_s)

    task = asyncio.create_task(loop(), name=name)
    try:
        yield
    finally:
        stop.set()
        done, _ = await asyncio.wait([task], timeout=STOP_GRACE_S)
        if not done:
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
