"""Failpoints: a named place where a test makes a role die as `kill -9` would.

A role reads its one failpoint from `NEXUS_FAILPOINT` (`settings.core.failpoint`, unset in
production) and passes it down; the code at each named point calls `crash_at(configured,
point)`. When they match the process exits at once with 137, without unwinding, flushing or
answering: what a crash test needs to prove that work committed before that point survives
and work after it is resumed.
"""

from __future__ import annotations

import os

from nexus.platform.observability import get_logger

log = get_logger(__name__)

#: The exit status of a process killed by SIGKILL (128 + 9).
CRASH_STATUS = 137


def crash_at(configured: str | None, point: str) -> None:
    """Exit the process now if `configured` names this `point` (tests only)."""
    if configured is not None and configured == point:
        log.warning("failpoint.crash", point=point)
        os._exit(CRASH_STATUS)
