"""The UDP doorbell between roles: a ring wakes the named action, unknown datagrams are
ignored, a flood is coalesced, and a bell nobody answers costs the sender nothing; within a
process, `answering` loops are woken by `ring_here` and by the listener, and `forwarding`
sends a ring on to another process without ever sending a datagram it received back."""

from __future__ import annotations

import asyncio
import socket

import pytest

from nexus.platform.doorbell import Doorbell, answering, forwarding, listening, ring_here

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


async def test_a_ring_here_wakes_every_loop_answering_it_while_it_answers() -> None:
    woke: list[str] = []
    ring_here(b"outbox")  # nobody answers: nothing happens
    with answering(b"outbox", lambda: woke.append("a")):
        with answering(b"outbox", lambda: woke.append("b")):
            ring_here(b"outbox")
            ring_here(b"imports")
        ring_here(b"outbox")
    ring_here(b"outbox")
    assert woke == ["a", "b", "a"]


async def test_the_listener_wakes_loops_answering_a_bell_it_was_not_given() -> None:
    port = free_udp_port()
    got = asyncio.Event()
    with answering(b"outbox", got.set):
        async with listening("127.0.0.1", port, {b"inbox": lambda: None}, min_gap_s=0):
            bell = Doorbell(f"http://127.0.0.1:{port}")
            bell.ring(b"outbox")
            async with asyncio.timeout(5):
                await got.wait()
            bell.close()


async def test_a_forwarded_ring_reaches_the_other_process_and_is_not_sent_back() -> None:
    """Both ends in one process (as the UI test stack runs runtime-api and runtime-worker):
    the listener wakes the answering loop and never forwards what it received, so one ring
    is one datagram, not a loop of them."""
    port = free_udp_port()
    woke = 0

    def outbox() -> None:
        nonlocal woke
        woke += 1

    bell = Doorbell(f"http://127.0.0.1:{port}")
    sent = 0
    real_ring = bell.ring

    def counting_ring(name: bytes) -> None:
        nonlocal sent
        sent += 1
        real_ring(name)

    bell.ring = counting_ring  # type: ignore[method-assign]
    with forwarding([b"outbox"], bell), answering(b"outbox", outbox):
        async with listening("127.0.0.1", port, {}, min_gap_s=0):
            ring_here(b"outbox")  # the local loop at once, and one datagram
            await asyncio.sleep(0.2)
    ring_here(b"outbox")  # no longer forwarded
    bell.close()
    assert (sent, woke) == (1, 2)
