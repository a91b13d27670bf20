"""A doorbell between processes: "new work may be waiting", so a worker claims it at once
instead of at its next idle poll (docs/adr/0032).

The bell is one UDP datagram naming what to look at (`b"inbox"`), sent to the same host and
port number as the receiving role's HTTP server (UDP and TCP ports are separate spaces, so no
new address to configure). It is a hint and may be lost: correctness never depends on it,
because the worker still polls (less often). It carries no data and nothing to trust: the
worst a stranger can do is make the worker look sooner, and rings closer together than
`min_gap_s` are coalesced into one, so a flood costs at most one cheap read per gap.

Within a process, a loop that waits for some work says so with `answering(name, wake)`:
`ring_here(name)` (the producer, after its commit) then wakes it directly, and the process's
UDP listener answers a datagram `name` the same way, whatever `listening` was given. A
process whose producers write work another process runs forwards the name to that process
with `forwarding(names, doorbell)` (docs/adr/0055).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import socket
import time
from collections.abc import AsyncIterator, Callable, Collection, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from urllib.parse import urlsplit

from nexus.platform.observability import get_logger

log = get_logger(__name__)
MIN_GAP_S = 0.002
RESOLVE_RETRY_S = 30.0
#: Who answers each bell in this process (`answering`), and the bells it sends on to another
#: process (`forwarding`). The listener wakes only the first: a datagram is never sent on, so
#: two processes (or two apps in one) never ring each other in a circle.
_ANSWERING: dict[bytes, list[Callable[[], None]]] = {}
_FORWARDING: dict[bytes, list[Callable[[], None]]] = {}


@contextmanager
def _registered(
    table: dict[bytes, list[Callable[[], None]]], name: bytes, call: Callable[[], None]
) -> Iterator[None]:
    table.setdefault(name, []).append(call)
    try:
        yield
    finally:
        table[name].remove(call)
        if not table[name]:
            del table[name]


def answering(name: bytes, wake: Callable[[], None]) -> contextlib.AbstractContextManager[None]:
    """While the block runs, a ring of `name` in this process (or a datagram to its
    listener) calls `wake` (on the loop's thread; it must be quick and never raise)."""
    return _registered(_ANSWERING, name, wake)


@contextmanager
def forwarding(names: Collection[bytes], doorbell: Doorbell) -> Iterator[None]:
    """While the block runs, a ring of one of `names` in this process also rings `doorbell`
    (the process that runs that work)."""
    with contextlib.ExitStack() as stack:
        for name in names:
            ring = functools.partial(doorbell.ring, name)
            stack.enter_context(_registered(_FORWARDING, name, ring))
        yield


def ring_here(name: bytes) -> None:
    """New work for `name` may be waiting (call it after the commit that wrote it): wake
    whoever answers it in this process and ring the process it is forwarded to. Nobody:
    nothing happens, their poll finds it."""
    _wake(name)
    for ring in list(_FORWARDING.get(name, ())):
        ring()


def _wake(name: bytes) -> None:
    for wake in list(_ANSWERING.get(name, ())):
        wake()


class _Listener(asyncio.DatagramProtocol):
    def __init__(self, rings: Mapping[bytes, Callable[[], None]], min_gap_s: float) -> None:
        self.rings = rings
        self.min_gap_s = min_gap_s
        self.rung_at: dict[bytes, float] = {}
        self.pending: set[bytes] = set()

    def datagram_received(self, data: bytes, addr: object) -> None:
        if (data not in self.rings and data not in _ANSWERING) or data in self.pending:
            return  # unknown bells are ignored; one already scheduled covers this one
        wait = self.rung_at.get(data, float("-inf")) + self.min_gap_s - time.monotonic()
        if wait <= 0:
            self._ring(data)
        else:
            self.pending.add(data)
            asyncio.get_running_loop().call_later(wait, self._ring, data)

    def _ring(self, name: bytes) -> None:
        self.pending.discard(name)
        self.rung_at[name] = time.monotonic()
        wake = self.rings.get(name)
        if wake is not None:
            wake()
        _wake(name)


@asynccontextmanager
async def listening(
    host: str,
    port: int,
    rings: Mapping[bytes, Callable[[], None]],
    *,
    min_gap_s: float = MIN_GAP_S,
) -> AsyncIterator[None]:
    """Answer bells on UDP `host:port` while the block runs. A port that cannot be bound
    leaves the process polling only (logged), never failing its start."""
    loop = asyncio.get_running_loop()
    try:
        transport, _ = await loop.create_datagram_endpoint(
            lambda: _Listener(rings, min_gap_s), local_addr=(host, port)
        )
    except OSError as exc:
        log.warning("doorbell.unavailable", port=port, error=type(exc).__name__)
        yield
        return
    try:
        yield
    finally:
        transport.close()


class Doorbell:
    """Rings the doorbell of the role served at `url` (its HTTP base URL). Never blocks and
    never raises: a bell that cannot be sent is a poll interval of delay, nothing more."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self._host = parts.hostname or "127.0.0.1"
        self._port = parts.port or (443 if parts.scheme == "https" else 80)
        self._target: tuple[socket.socket, tuple[str, int]] | None = None
        self._resolved_at = float("-inf")
        self.failures = 0

    def ring(self, name: bytes) -> None:
        target = self._target or self._open()
        if target is None:
            return
        sock, address = target
        try:
            sock.sendto(name, address)
        except OSError:  # nobody listening, buffer full: the worker's poll finds the work
            self.failures += 1

    def _open(self) -> tuple[socket.socket, tuple[str, int]] | None:
        now = time.monotonic()
        if now - self._resolved_at < RESOLVE_RETRY_S:
            return None
        self._resolved_at = now
        try:  # numeric hosts resolve without a lookup; a name is looked up once
            family, _, _, _, address = socket.getaddrinfo(
                self._host, self._port, type=socket.SOCK_DGRAM
            )[0]
        except OSError as exc:
            log.warning("doorbell.unresolved", error=type(exc).__name__)
            return None
        try:  # out of descriptors: no bell (a ring runs after commits, it must not raise)
            sock = socket.socket(family, socket.SOCK_DGRAM)
        except OSError as exc:
            log.warning("doorbell.no_socket", error=type(exc).__name__)
            return None
        sock.setblocking(False)
        self._target = (sock, (str(address[0]), int(address[1])))
        return self._target

    def close(self) -> None:
        if self._target is not None:
            self._target[0].close()
            self._target = None
