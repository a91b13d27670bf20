"""Failpoints: a named place where a test makes a role die as `kill -9` would, or freeze as
a paused VM or cgroup would.

A role reads its one failpoint from `NEXUS_FAILPOINT` (`settings.core.failpoint`, unset in
production) and passes it down; the code at each named point calls `crash_at(configured,
point)` or `freeze_at(...)`. When they match, `crash_at` exits at once with 137, without
unwinding, flushing or answering: what a crash test needs to prove that work committed before
that point survives and work after it is resumed. `freeze_at` stops the process (SIGSTOP)
there, the first time only, so a test can prove that a process frozen at that point (say,
inside a transaction) stalls nobody else beyond a bound.
"""

from __future__ import annotations

import os
import signal

from nexus.platform.observability import get_logger

log = get_logger(__name__)

#: The exit status of a process killed by SIGKILL (128 + 9).
CRASH_STATUS = 137


def crash_at(configured: str | None, point: str) -> None:
    """Exit the process now if `configured` names this `point` (tests only)."""
    if configured is not None and configured == point:
        log.warning("failpoint.crash", point=point)
        os._exit(CRASH_STATUS)


_frozen: set[str] = set()


def freeze_at(configured: str | None, point: str) -> None:
    """Stop the process here (SIGSTOP), once per process, if `configured` names this `point`
    (tests only); it goes on from here when it gets SIGCONT."""
    if configured is not None and configured == point and point not in _frozen:
        _frozen.add(point)
        log.warning("failpoint.freeze", point=point)
        os.kill(os.getpid(), signal.SIGSTOP)
