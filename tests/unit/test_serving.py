"""The one-write transport under uvicorn: what it sends, and when."""

from __future__ import annotations

import asyncio

import pytest

from nexus.platform.serving import DIRECT_WRITE_BYTES, _GatheringTransport


class RecordingTransport:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False
        self.aborted = False

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def is_closing(self) -> bool:
        return self.closed or self.aborted

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.aborted = True

    def get_extra_info(self, name: str) -> str:
        return f"info:{name}"


async def gathering() -> tuple[_GatheringTransport, RecordingTransport]:
    real = RecordingTransport()
    return _GatheringTransport(real, asyncio.get_running_loop()), real  # type: ignore[arg-type]


@pytest.mark.asyncio
async def test_a_response_head_and_body_leave_in_one_write() -> None:
    proxy, real = await gathering()
    proxy.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n")
    proxy.write(b"{}")
    assert real.writes == []  # nothing before the loop iteration ends
    await asyncio.sleep(0)
    assert real.writes == [b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}"]
    proxy.write(b"next")  # the next response starts a new gathering
    await asyncio.sleep(0)
    assert real.writes[1:] == [b"next"]


@pytest.mark.asyncio
async def test_large_writes_are_not_held_back() -> None:
    proxy, real = await gathering()
    big = b"x" * DIRECT_WRITE_BYTES
    proxy.write(big)
    assert real.writes == [big]  # straight through: the real transport's flow control applies
    proxy.write(b"head")
    proxy.write(big)  # pending writes past the limit leave at once, in order
    assert real.writes == [big, b"head" + big]


@pytest.mark.asyncio
async def test_close_sends_what_is_pending_and_abort_drops_it() -> None:
    proxy, real = await gathering()
    proxy.write(b"last words")
    proxy.close()
    assert (real.writes, real.closed) == ([b"last words"], True)
    proxy, real = await gathering()
    proxy.write(b"never sent")
    proxy.abort()
    await asyncio.sleep(0)
    assert (real.writes, real.aborted) == ([], True)
    assert proxy.get_extra_info("peername") == "info:peername"  # the rest is the real one's
