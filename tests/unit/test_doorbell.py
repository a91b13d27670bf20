"""The UDP doorbell between roles: a ring wakes the named action, unknown datagrams are
ignored, a flood is coalesced, and a bell nobody answers costs the sender nothing."""

from __future__ import annotations

import asyncio
import socket

import pytest

from nexus.platform.doorbell import Doorbell, listening

pytestmark = pytest.mark.asyncio


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_a_ring_wakes_its_action_and_a_stranger_is_ignored() -> None:
    port = free_udp_port()
    woke: list[str] = []
    got = asyncio.Event()

    def inbox() -> None:
        woke.append("inbox")
        got.set()

    async with listening("127.0.0.1", port, {b"inbox": inbox}, min_gap_s=0):
        bell = Doorbell(f"http://127.0.0.1:{port}")
        bell.ring(b"something else")
        bell.ring(b"inbox")
        async with asyncio.timeout(5):
            await got.wait()
        await asyncio.sleep(0.05)
        bell.close()
    assert woke == ["inbox"]


async def test_a_flood_is_coalesced_into_one_wake_per_gap() -> None:
    port = free_udp_port()
    woke = 0

    def inbox() -> None:
        nonlocal woke
        woke += 1

    async with listening("127.0.0.1", port, {b"inbox": inbox}, min_gap_s=0.2):
        bell = Doorbell(f"http://127.0.0.1:{port}")
        for _ in range(500):
            bell.ring(b"inbox")
        await asyncio.sleep(0.35)  # the first wakes at once, the rest as one after the gap
        bell.close()
    assert woke == 2


async def test_a_bell_nobody_answers_never_raises() -> None:
    bell = Doorbell(f"http://127.0.0.1:{free_udp_port()}")
    for _ in range(10):
        bell.ring(b"inbox")  # ICMP port unreachable turns into a counted failure at most
    bell.close()


async def test_a_port_already_taken_leaves_the_process_polling() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as taken:
        taken.bind(("127.0.0.1", 0))
        port = taken.getsockname()[1]
        async with listening("127.0.0.1", port, {b"inbox": lambda: None}):
            pass  # started and stopped without raising
