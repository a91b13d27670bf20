"""Background loops stay stoppable when a driver turns their cancellation into another error
(SQLAlchemy raises `PendingRollbackError` for a task cancelled inside a statement)."""

from __future__ import annotations

import asyncio

import pytest

from nexus.platform.periodic import every, unless_cancelled

pytestmark = pytest.mark.asyncio


class DriverError(Exception):
    pass


async def swallowing_step() -> None:
    """Turns a cancellation into a driver error, as SQLAlchemy can."""
    try:
        await asyncio.sleep(3600)
    except asyncio.CancelledError:
        raise DriverError from None


async def test_a_step_is_run_at_once_and_then_on_every_tick() -> None:
    calls = 0

    async def step() -> None:
        nonlocal calls
        calls += 1

    async with every(0.01, step, name="t"):
        await asyncio.sleep(0.2)
    assert 5 <= calls <= 25
    after = calls
    await asyncio.sleep(0.05)
    assert calls == after  # stopped with the block


async def test_now_runs_the_step_at_once_and_calls_before_it_runs_make_one_run() -> None:
    calls = 0

    async def step() -> None:
        nonlocal calls
        calls += 1

    async with every(3600, step, name="t") as ticker:
        await asyncio.sleep(0.05)
        assert calls == 1  # at start; the next tick is an hour away
        ticker.now()
        ticker.now()
        await asyncio.sleep(0.05)
        assert calls == 2
        ticker.now()
        await asyncio.sleep(0.05)
    assert calls == 3


async def test_leaving_the_block_ends_a_loop_whose_step_swallows_the_cancellation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("nexus.platform.periodic.STOP_GRACE_S", 0.05)
    async with asyncio.timeout(5):  # before the fix this waited forever
        async with every(0.01, swallowing_step, name="t"):
            await asyncio.sleep(0.02)


async def test_a_loop_that_catches_exception_still_ends_on_cancel() -> None:
    rounds = 0

    async def loop() -> None:
        nonlocal rounds
        while True:
            rounds += 1
            try:
                await swallowing_step()
            except Exception:  # noqa: BLE001 - the pattern under test
                unless_cancelled()

    task = asyncio.create_task(loop())
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        async with asyncio.timeout(5):
            await task
    assert rounds == 1
