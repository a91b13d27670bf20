"""Fencing a frozen writer of a SQLite file: the one way another process can end its turn.

SQLite cannot take a lock away from its holder. A process stopped inside a write transaction
(SIGSTOP, a frozen cgroup such as `podman pause`) keeps the file's write turn (`writes.py`)
and SQLite's WAL write lock for as long as it is stopped, and every writer of the file waits
until it resumes: a lease on the turn would change nothing, since the stopped holder still
holds the lock the lease is about. So a waiter that has waited for the turn asks the kernel
who holds it (`/proc/locks`: the `flock` of the turn and the POSIX lock SQLite takes on the
WAL index's write byte), and a holder that stays stopped for `STOPPED_BOUND_S` is killed
(SIGKILL). The kernel then drops its locks, the next writer goes on, and the killed
transaction is gone as in any crash: nothing of it committed, its claimed work runs out its
lease and another worker takes it over (what a crash at any point already guarantees).

Only a holder that is *stopped* is fenced, never a slow one: a long transaction of a running
process (an import chunk, a migration) is waited for as before. A process stopped by a
debugger (ptrace, state `t`) is left alone; so are processes this one cannot see (another pid
namespace: `/proc/locks` shows no pid) or may not signal. Linux only: elsewhere nothing is
fenced and writers wait as before.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from nexus.platform.observability import get_logger

log = get_logger(__name__)

#: How long a holder of the write turn must be seen stopped before it is killed: far above
#: any job-control blip, far below the busy timeout a writer waits before it gives up.
STOPPED_BOUND_S = 0.5
#: SQLite's WAL index (`-shm`) write lock: byte 120 (`WALINDEX_LOCK_OFFSET`, lock 0).
WAL_WRITE_LOCK_BYTE = 120
PROC_LOCKS = Path("/proc/locks")


@dataclass(frozen=True)
class _Holder:
    pid: int
    started: int  # the process's start time (clock ticks since boot): a reused pid differs


#: (database, holder) -> monotonic time it was first seen stopped (shared by the process's
#: waiters)
_stopped_since: dict[tuple[str, _Holder], float] = {}


def turn_lock_path(database: str) -> str:
    """The file whose `flock` is the write turn of `database` (`writes._FileLock`)."""
    return f"{database}-writers.lock"


def _file_id(path: str) -> tuple[str, int] | None:
    """`/proc/locks`' name of a file: `MAJ:MIN` (hex, two digits at least) and inode."""
    try:
        st = os.stat(path)  # never open: closing a descriptor drops this process's POSIX locks
    except OSError:
        return None
    return f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}", st.st_ino


def _holders(lock_file: str, shm_file: str) -> set[int]:
    """Pids holding the turn's `flock` or SQLite's WAL write byte (waiters are not holders)."""
    turn, shm = _file_id(lock_file), _file_id(shm_file)
    try:
        lines = PROC_LOCKS.read_text().splitlines()
    except OSError:
        return set()
    pids: set[int] = set()
    for line in lines:
        fields = line.split()
        if len(fields) < 8 or fields[1] == "->":  # a blocked request, not a lock
            continue
        kind, mode, pid, file_field, start = fields[1], fields[3], fields[4], fields[5], fields[6]
        if mode != "WRITE" or not pid.isdigit() or int(pid) == 0:
            continue
        device, _, inode = file_field.rpartition(":")
        if not inode.isdigit():
            continue
        where = (device, int(inode))
        if (kind == "FLOCK" and where == turn) or (
            kind in ("POSIX", "OFDLCK") and where == shm and start == str(WAL_WRITE_LOCK_BYTE)
        ):
            pids.add(int(pid))
    pids.discard(os.getpid())
    return pids


def _stopped(pid: int) -> _Holder | None:
    """The holder if `pid` is stopped by a signal or sits in a frozen cgroup, else None."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rpartition(")")[2].split()  # after the command name, which may hold spaces
    if len(fields) < 20:
        return None
    holder = _Holder(pid, int(fields[19]))
    if fields[0] == "T" or _cgroup_frozen(pid):
        return holder
    return None


def _cgroup_frozen(pid: int) -> bool:
    try:
        groups = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return False
    for line in groups:
        if line.startswith("0::"):  # cgroup v2
            events = Path("/sys/fs/cgroup") / line[3:].lstrip("/") / "cgroup.events"
            try:
                return "frozen 1" in events.read_text().splitlines()
            except OSError:
                return False
    return False


def fence_stopped_holders(database: str) -> None:
    """Kill each process that holds the write turn of `database` and has been seen stopped
    for `STOPPED_BOUND_S`; called by a writer that has waited for its turn."""
    now = time.monotonic()
    seen: set[_Holder] = set()
    for pid in _holders(turn_lock_path(database), f"{database}-shm"):
        holder = _stopped(pid)
        if holder is None:
            continue
        seen.add(holder)
        since = _stopped_since.setdefault((database, holder), now)
        if now - since < STOPPED_BOUND_S or _stopped(pid) != holder:  # still that process
            continue
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError as exc:  # gone meanwhile, or not ours to signal
            log.warning("sqlite.fence_failed", pid=pid, error=type(exc).__name__)
            continue
        log.error(
            "sqlite.writer_fenced",
            pid=pid,
            stopped_ms=round((now - since) * 1000),
            database=os.path.basename(database),
        )
    for key in list(_stopped_since):
        if key[0] == database and key[1] not in seen:  # running again, or gone
            del _stopped_since[key]
