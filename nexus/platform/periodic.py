"""Background steps a role runs on a timer while it serves (queue gauges, retention)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from nexus.platform.observability import get_logger

log = get_logger(__name__)


@asynccontextmanager
async def every(
    interval_s: float, step: Callable[[], Awaitable[None]], *, name: str
) -> AsyncIterator[None]:
    """Run `step` now and then every `interval_s` seconds while the block runs. A failing
    step is logged by its exception class (never its message: it may carry data) and tried
    again at the next tick; leaving the block cancels the task."""

    async def loop() -> None:
        while True:
            try:
                await step()
            except Exception as exc:  # noqa: BLE001 - the next tick tries again
                log.warning("periodic.step_failed", step=name, error=type(exc).__name__)
            await asyncio.sleep(interval_s)

    task = asyncio.create_task(loop(), name=name)
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
