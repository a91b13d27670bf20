"""Run several child processes as one local stack: restart one that dies, stop all together.

Children run in their own session (so a terminal's Ctrl-C reaches only the supervisor,
which then stops them in order). Each child learns the supervisor's pid from
`NEXUS_SUPERVISOR_PID` and asks the kernel to SIGTERM it when the supervisor dies without
cleaning up (`die_with_supervisor`, PR_SET_PDEATHSIG), so no child outlives it. Their
output is pumped, line by line, to the terminal and to `<var>/logs/<name>.log`.

A child that exits while the stack runs is restarted after a backoff that doubles with
each fast failure in a row (an exit within `FAST_FAILURE_SECONDS` of its start); after
`MAX_FAST_FAILURES` of those the supervisor gives up. Each restart tells the new process
how many came before it (`NEXUS_SUPERVISOR_RESTARTS`), which the role shows on /metrics.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

SUPERVISOR_PID_ENV = "NEXUS_SUPERVISOR_PID"
RESTARTS_ENV = "NEXUS_SUPERVISOR_RESTARTS"
#: An exit this soon after a start counts as a fast failure.
FAST_FAILURE_SECONDS = 10.0
#: Fast failures in a row after which a child is not restarted again.
MAX_FAST_FAILURES = 5
FIRST_BACKOFF_SECONDS = 0.5
MAX_BACKOFF_SECONDS = 5.0

_PR_SET_PDEATHSIG = 1


def die_with_supervisor() -> None:
    """In a child of `nexus up`: get SIGTERM when the supervisor dies; exit if it already did."""
    supervisor = os.environ.get(SUPERVISOR_PID_ENV)
    if not supervisor:
        return
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:
        return  # not Linux: the supervisor's own shutdown path still stops every child
    if os.getppid() != int(supervisor):  # it died before the request above took effect
        raise SystemExit(1)


def restarts_from_env() -> int:
    """How many times the supervisor restarted this process's role (0 outside `nexus up`)."""
    try:
        return max(0, int(os.environ.get(RESTARTS_ENV, "0")))
    except ValueError:
        return 0


class GaveUp(Exception):
    """A child kept failing right after each start; the stack should stop."""


@dataclass
class Child:
    name: str
    argv: Sequence[str]
    process: subprocess.Popen[bytes] | None = None
    log: IO[bytes] | None = field(default=None, repr=False)
    started_at: float = 0.0
    restarts: int = 0
    fast_failures: int = 0
    #: When the pending restart is due (monotonic), while the child is down.
    restart_due: float | None = None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def exited(self) -> int | None:
        return self.process.poll() if self.process else None


@dataclass(frozen=True)
class Restart:
    """What `Supervisor.watch` did about one child that exited."""

    child: Child
    exit_code: int
    #: Seconds until the new process starts (0 once it has started).
    delay: float
    started: bool


class Supervisor:
    def __init__(self, *, log_dir: Path, env: dict[str, str]) -> None:
        self.log_dir = log_dir
        self.env = {**env, SUPERVISOR_PID_ENV: str(os.getpid())}
        self.children: list[Child] = []
        self._pumps: list[threading.Thread] = []
        self._write_lock = threading.Lock()

    def start(self, children: Sequence[Child]) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        for child in children:
            child.log = (self.log_dir / f"{child.name}.log").open("ab")
            self._spawn(child)
            self.children.append(child)

    def _spawn(self, child: Child) -> None:
        env = {**self.env, RESTARTS_ENV: str(child.restarts)}
        child.process = subprocess.Popen(  # noqa: S603  (argv built by the CLI, no shell)
            list(child.argv),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        child.started_at = time.monotonic()
        child.restart_due = None
        pump = threading.Thread(
            target=self._pump_output, args=(child, child.process), name=f"log-{child.name}"
        )
        pump.daemon = True
        pump.start()
        self._pumps.append(pump)

    def _pump_output(self, child: Child, process: subprocess.Popen[bytes]) -> None:
        if process.stdout is None:
            return
        for line in iter(process.stdout.readline, b""):
            with self._write_lock:
                sys.stderr.buffer.write(line)
                sys.stderr.buffer.flush()
                if child.log is not None and not child.log.closed:
                    child.log.write(line)
                    child.log.flush()
        process.stdout.close()

    def first_exited(self) -> Child | None:
        for child in self.children:
            if child.exited() is not None:
                return child
        return None

    def watch(self) -> list[Restart]:
        """Restart children that exited (once their backoff is over); what happened to each.

        Raises GaveUp when a child failed `MAX_FAST_FAILURES` times in a row right after
        starting."""
        now = time.monotonic()
        events: list[Restart] = []
        for child in self.children:
            code = child.exited()
            if code is None:
                continue
            if child.restart_due is None:
                if now - child.started_at < FAST_FAILURE_SECONDS:
                    child.fast_failures += 1
                else:
                    child.fast_failures = 0
                if child.fast_failures >= MAX_FAST_FAILURES:
                    raise GaveUp(
                        f"role {child.name} exited {child.fast_failures} times in a row within "
                        f"{FAST_FAILURE_SECONDS:g}s of starting (last exit code {code}); "
                        f"giving up (see {self.log_dir / (child.name + '.log')})"
                    )
                doublings = max(0, child.fast_failures - 1)
                delay = min(MAX_BACKOFF_SECONDS, FIRST_BACKOFF_SECONDS * 2**doublings)
                child.restart_due = now + delay
                events.append(Restart(child, code, delay, started=False))
            elif now >= child.restart_due:
                child.restarts += 1
                self._spawn(child)
                events.append(Restart(child, code, 0.0, started=True))
        return events

    def stop(self, *, grace_seconds: float, order: Callable[[Child], int] | None = None) -> None:
        """SIGTERM every child (in `order`), wait up to the grace period, then SIGKILL."""
        ordered = sorted(self.children, key=order) if order else list(self.children)
        for child in ordered:
            if child.process and child.process.poll() is None:
                child.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace_seconds
        for child in ordered:
            if child.process is None:
                continue
            try:
                child.process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                child.process.kill()
                child.process.wait()
        for pump in self._pumps:
            pump.join(timeout=2)
        with self._write_lock:
            for child in self.children:
                if child.log is not None:
                    child.log.close()


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
