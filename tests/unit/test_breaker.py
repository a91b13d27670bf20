"""The circuit breaker's states on a controlled clock: opens after consecutive failures, one
probe at a time, open time doubling up to the cap, closed by any answer."""

from __future__ import annotations

import pytest

from nexus.platform import breaker as breaker_module
from nexus.platform.breaker import CLOSED, HALF_OPEN, OPEN, BreakerSettings, CircuitBreaker


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(breaker_module.time, "monotonic", clock)
    return clock


def test_it_opens_after_consecutive_failures_only(clock: Clock) -> None:
    b = CircuitBreaker("t1", BreakerSettings(failures=3, open_ms=1000, open_cap_ms=4000))
    b.failed()
    b.failed()
    b.succeeded()  # an answer in between: the count starts again
    b.failed()
    b.failed()
    assert (b.state, b.allow()) == (CLOSED, True)
    b.failed()
    assert (b.state, b.allow(), b.retry_in()) == (OPEN, False, 1.0)


def test_one_probe_at_a_time_and_the_open_time_doubles_to_the_cap(clock: Clock) -> None:
    b = CircuitBreaker("t2", BreakerSettings(failures=1, open_ms=1000, open_cap_ms=4000))
    opened = []
    for _ in range(4):
        b.failed()
        opened.append(b.retry_in())
        clock.now += b.retry_in()
        assert b.allow()  # the probe
        assert b.state == HALF_OPEN
        assert not b.allow()  # only one
    assert opened == [1.0, 2.0, 4.0, 4.0]
    b.succeeded()
    assert (b.state, b.allow(), b.retry_in()) == (CLOSED, True, 0.0)
    b.failed()
    assert b.retry_in() == 1.0  # closed again: the doubling starts over


def test_a_probe_whose_answer_never_came_does_not_hold_it_open_forever(clock: Clock) -> None:
    b = CircuitBreaker("t3", BreakerSettings(failures=1, open_ms=1000, open_cap_ms=4000))
    b.failed()
    clock.now += 1.0
    assert b.allow()
    clock.now += 3.0
    assert not b.allow()
    clock.now += 1.5  # longer than the cap since the probe went
    assert b.allow()
