"""One way to supervise background loops: side tasks stop their owner loudly, loops restart
and say so on readiness."""

from __future__ import annotations

import asyncio

import pytest

from nexus.platform.loops import RestartingLoop, SideTaskDied, SideTasks

pytestmark = pytest.mark.asyncio


async def test_a_side_task_that_dies_stops_its_owner_and_the_block_says_which() -> None:
    stopped = asyncio.Event()

    async def helper() -> None:
        await asyncio.sleep(0.01)
        raise KeyError("boom")

    async def owner() -> None:
        async with SideTasks("owner", on_death=stopped.set) as side:
            side.start("helper", helper())
            await asyncio.wait_for(stopped.wait(), 5)  # the owner's loop is told to stop

    with pytest.raises(SideTaskDied, match=r"owner: side task helper ended by itself \(KeyError\)"):
        await owner()


async def test_guard_stops_waiting_for_what_only_a_dead_helper_would_finish() -> None:
    never = asyncio.Event()

    async def helper() -> None:
        raise RuntimeError

    async with SideTasks("owner") as side:
        side.start("helper", helper())
        with pytest.raises(SideTaskDied):
            await asyncio.wait_for(side.guard(never.wait()), 5)  # not a hang
        with pytest.raises(SideTaskDied):  # dead already: at once, nothing left unawaited
            await side.guard(never.wait())
        side.died = None  # handled: leaving the block does not raise again


async def test_helpers_cancelled_on_purpose_or_at_the_end_are_not_deaths() -> None:
    deaths: list[int] = []

    async with SideTasks("owner", on_death=lambda: deaths.append(1)) as side:
        beat = side.start("beat", asyncio.sleep(3600))
        side.start("flush", asyncio.sleep(3600))
        await side.cancel(beat)
        assert await side.guard(asyncio.sleep(0, result="done")) == "done"
    assert deaths == []


async def test_a_failing_loop_restarts_and_is_not_ready_meanwhile() -> None:
    runs = 0
    release = asyncio.Event()

    async def body() -> None:
        nonlocal runs
        runs += 1
        if runs < 3:
            raise ValueError("a bug")
        await release.wait()

    loop = RestartingLoop("demo", body, on_stop=release.set, restart_s=0.05)
    loop.start()
    await asyncio.sleep(0.01)
    check = await loop.ready()
    assert (check.ok, check.detail) == (False, "restarting after ValueError")
    for _ in range(200):
        if runs == 3:
            break
        await asyncio.sleep(0.01)
    assert runs == 3
    assert loop.failures == 2
    assert (await loop.ready()).ok
    await loop.stop(5)
    assert (await loop.ready()).detail == "stopped"


async def test_a_loop_that_returns_by_itself_is_a_failure_and_stop_cancels_a_stuck_one() -> None:
    runs = 0

    async def body() -> None:
        nonlocal runs
        runs += 1
        if runs == 1:
            return  # ended without being asked to
        await asyncio.sleep(3600)  # ignores on_stop: stop() cancels it after its timeout

    loop = RestartingLoop("demo", body, restart_s=0.01)
    loop.start()
    for _ in range(200):
        if runs == 2:
            break
        await asyncio.sleep(0.01)
    assert loop.failures == 1
    await asyncio.wait_for(loop.stop(0.05), 5)
    assert loop.state == "stopped"
