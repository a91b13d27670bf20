"""Run several child processes as one local stack, and take all of them down together.

Children run in their own process group (so a terminal's Ctrl-C reaches only the
supervisor, which then stops them in order) and ask the kernel to SIGTERM them if the
supervisor dies without cleaning up (PR_SET_PDEATHSIG), so no child outlives it.
Their stderr is pumped, line by line, to the terminal and to `<var>/logs/<name>.log`.
"""

from __future__ import annotations

import ctypes
import os
import selectors
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # runs in the child between fork and exec
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:
        pass  # not Linux: the supervisor's own shutdown path still stops every child


@dataclass
class Child:
    name: str
    argv: Sequence[str]
    process: subprocess.Popen[bytes] | None = None
    log: IO[bytes] | None = field(default=None, repr=False)

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def exited(self) -> int | None:
        return self.process.poll() if self.process else None


class Supervisor:
    def __init__(self, *, log_dir: Path, env: dict[str, str]) -> None:
        self.log_dir = log_dir
        self.env = env
        self.children: list[Child] = []
        self._pump: threading.Thread | None = None

    def start(self, children: Sequence[Child]) -> None:
        """Spawn every child before any thread starts (fork with threads is unsafe)."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        for child in children:
            child.log = (self.log_dir / f"{child.name}.log").open("ab")
            child.process = subprocess.Popen(  # noqa: S603  (argv built by the CLI, no shell)
                list(child.argv),
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent,  # noqa: PLW1509  (no threads exist yet)
            )
            self.children.append(child)
        self._pump = threading.Thread(target=self._pump_output, name="log-pump", daemon=True)
        self._pump.start()

    def _pump_output(self) -> None:
        selector = selectors.DefaultSelector()
        streams = [(c, c.process.stdout) for c in self.children if c.process and c.process.stdout]
        for child, stream in streams:
            selector.register(stream, selectors.EVENT_READ, child)
        open_streams = len(streams)
        while open_streams:
            for key, _ in selector.select(timeout=0.5):
                child = key.data
                line = key.fileobj.readline()  # type: ignore[union-attr]  # a pipe file object
                if not line:
                    selector.unregister(key.fileobj)
                    open_streams -= 1
                    continue
                sys.stderr.buffer.write(line)
                sys.stderr.buffer.flush()
                if child.log is not None:
                    child.log.write(line)
                    child.log.flush()

    def first_exited(self) -> Child | None:
        for child in self.children:
            if child.exited() is not None:
                return child
        return None

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
        if self._pump is not None:
            self._pump.join(timeout=2)
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
