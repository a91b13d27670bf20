"""A circuit breaker for one downstream target (e.g. Runtime's API, seen from an executor).

    closed     calls go through; `failures` consecutive "nothing reached it" failures open it
    open       no call goes (callers defer their work until `retry_in()` has passed); the
               open time doubles with each failed probe, from `open_ms` up to `open_cap_ms`
    half-open  after the open time, ONE call (the probe) goes; its success closes the
               breaker, its failure opens it again for longer

Only failures where nothing reached the target count (connection refused, connect timeout,
503): an answer of any other kind, even an error, shows the target is there and closes the
breaker. Process-local: every process learns about the outage from its own calls.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from prometheus_client import Gauge

CLOSED = "closed"
OPEN = "open"
HALF_OPEN = "half_open"

BREAKER_OPEN = Gauge(
    "nexus_circuit_open",
    "1 while the circuit breaker to a target is open or probing, else 0",
    ["target"],
)


@dataclass
class BreakerSettings:
    failures: int = 3
    open_ms: int = 1_000
    open_cap_ms: int = 30_000


class CircuitBreaker:
    def __init__(self, target: str, settings: BreakerSettings | None = None) -> None:
        self.target = target
        self.settings = settings or BreakerSettings()
        self.state = CLOSED
        self.failures = 0  # consecutive, while closed
        self.opened = 0  # how many times in a row it opened (the open time doubles)
        self._until = 0.0  # monotonic: when an open breaker lets a probe through
        self._probing = False
        self._probe_at = 0.0
        BREAKER_OPEN.labels(target).set(0)

    def allow(self) -> bool:
        """May a call go now? Closed: yes; open: no, until its time is up, then one probe."""
        if self.state == CLOSED:
            return True
        if self.state == OPEN and time.monotonic() >= self._until:
            self.state = HALF_OPEN
        now = time.monotonic()
        stale = now - self._probe_at > self.settings.open_cap_ms / 1000  # its answer got lost
        if self.state == HALF_OPEN and (not self._probing or stale):
            self._probing = True
            self._probe_at = now
            return True
        return False

    def retry_in(self) -> float:
        """Seconds until a call may go (0 when closed or a probe may go now)."""
        if self.state == CLOSED:
            return 0.0
        if self.state == HALF_OPEN:
            return self.settings.open_ms / 1000 if self._probing else 0.0
        return max(0.0, self._until - time.monotonic())

    def succeeded(self) -> None:
        """The target answered: closed again."""
        self.state = CLOSED
        self.failures = 0
        self.opened = 0
        self._probing = False
        BREAKER_OPEN.labels(self.target).set(0)

    def failed(self) -> None:
        """Nothing reached the target."""
        if self.state == CLOSED:
            self.failures += 1
            if self.failures < self.settings.failures:
                return
        self._open()

    def _open(self) -> None:
        s = self.settings
        self.opened += 1
        open_ms = min(s.open_cap_ms, s.open_ms * 2 ** min(self.opened - 1, 30))
        self.state = OPEN
        self.failures = 0
        self._probing = False
        self._until = time.monotonic() + open_ms / 1000
        BREAKER_OPEN.labels(self.target).set(1)
