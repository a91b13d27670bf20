"""WAL checkpoints of a serving process's SQLite files on a thread of their own (ADR 0057).

SQLite checkpoints a WAL database from inside a COMMIT: the commit that finds the WAL past
`wal_autocheckpoint` pages (1,000 by default, ~4 MB) copies the frames into the database
file and fsyncs it before it returns. On this machine that commit takes 20-30 ms instead of
~0.2 ms; for an engine whose calls run on the event loop (`sqlite_on_loop`) the whole loop
stands still meanwhile, and every request and claim in flight waits; at 500 deliveries/s it
happened a few times a second in each role, which was most of the end to end p99.

A serving process (`nexus serve`) calls `enable()` before it opens a database. From then on
each SQLite connection it opens raises its `wal_autocheckpoint` to `SAFETY_NET_PAGES` (only a
stalled checkpointer lets the WAL reach it; then commits checkpoint as before) and names its
file to one daemon thread, which runs `PRAGMA wal_checkpoint(PASSIVE)` on every named file
each `interval_s` on a connection of its own. PASSIVE never waits for a lock and never
blocks a reader or writer; a checkpoint that meets another (another process's checkpointer)
simply finds less to do. The thread sleeps and fsyncs without the GIL. It opens files
read-write only, never creating one, and forgets a file that is gone or cannot be opened.

Processes that never call `enable()` (CLI commands, tests that run an app in-process) keep
SQLite's own checkpointing.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from typing import Any
from urllib.parse import quote

from nexus.platform.observability import get_logger

log = get_logger(__name__)
#: 40 MB of WAL: where commits take the checkpoint over again if this thread falls behind.
SAFETY_NET_PAGES = 10_000
DEFAULT_INTERVAL_S = 0.5


class _Checkpointer:
    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self._files: dict[str, sqlite3.Connection | None] = {}
        self._mutex = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sqlite-checkpoints", daemon=True)
        self._thread.start()

    def watch(self, path: str) -> None:
        with self._mutex:
            self._files.setdefault(path, None)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            with self._mutex:
                paths = list(self._files)
            for path in paths:
                self._checkpoint(path)

    def _checkpoint(self, path: str) -> None:
        conn = self._files.get(path)
        if not os.path.exists(path):  # removed: let go of it (an open handle would keep it)
            self._forget(path, conn)
            return
        try:
            if conn is None:
                conn = sqlite3.connect(
                    f"file:{quote(path)}?mode=rw",
                    uri=True,
                    isolation_level=None,
                    timeout=0,
                    check_same_thread=False,  # closed by `close()` on the caller's thread
                )
                with self._mutex:
                    self._files[path] = conn
            conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        except sqlite3.Error as exc:
            self._forget(path, conn)  # a later connection to it names it again
            log.info("sqlite.checkpoint_skipped", error=type(exc).__name__)

    def _forget(self, path: str, conn: sqlite3.Connection | None) -> None:
        if conn is not None:
            conn.close()
        with self._mutex:
            self._files.pop(path, None)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        with self._mutex:
            for conn in self._files.values():
                if conn is not None:
                    conn.close()
            self._files.clear()


class _Process:
    """This process's checkpointer, when it has one."""

    def __init__(self) -> None:
        self.checkpointer: _Checkpointer | None = None
        self.mutex = threading.Lock()


_process = _Process()


def enable(interval_s: float = DEFAULT_INTERVAL_S) -> None:
    """Checkpoint this process's SQLite files on a thread from now on (idempotent; an
    interval of 0 leaves SQLite's own checkpointing in place)."""
    if interval_s <= 0:
        return
    with _process.mutex:
        if _process.checkpointer is None:
            _process.checkpointer = _Checkpointer(interval_s)


def disable() -> None:
    """Stop the thread (tests); connections opened meanwhile keep their raised limit, which
    is still a limit."""
    with _process.mutex:
        checkpointer, _process.checkpointer = _process.checkpointer, None
    if checkpointer is not None:
        checkpointer.close()


def configure(cursor: Any, path: str) -> None:
    """Called with a cursor of each new connection to the file `path` (a WAL database):
    while enabled, its commits leave checkpoints to the thread."""
    checkpointer = _process.checkpointer
    if checkpointer is None:
        return
    cursor.execute(f"PRAGMA wal_autocheckpoint={SAFETY_NET_PAGES}")
    checkpointer.watch(path)
