"""What a database error says, read from the driver's error (MySQL-family codes, SQLite's words)."""

from __future__ import annotations

MYSQL_DEADLOCK = 1213


def driver_code(exc: BaseException) -> int | None:
    """The driver's numeric error code (MySQL: 1213 deadlock, 1205 lock wait timeout)."""
    args: tuple[object, ...] = tuple(getattr(getattr(exc, "orig", None), "args", ()))
    return args[0] if args and isinstance(args[0], int) else None


def is_deadlock(exc: BaseException) -> bool:
    """MySQL/MariaDB/TiDB error 1213: this transaction was rolled back to break a deadlock,
    or (Galera) it lost certification at COMMIT to a conflicting one committed on another
    node. Nothing of it happened; running it again is safe."""
    return driver_code(exc) == MYSQL_DEADLOCK


#: MySQL-family codes of a transaction the server did not take in time, or of no server:
#: lock wait timeout, deadlock, too many connections, can't connect, gone away, lost.
_MYSQL_BUSY = frozenset({1205, MYSQL_DEADLOCK, 1040, 2002, 2003, 2006, 2013})
#: SQLite's words for a lock another connection holds past the busy timeout.
_SQLITE_BUSY = ("database is locked", "database table is locked", "database is busy")


def is_busy(exc: BaseException) -> bool:
    """The database did not take this transaction (a lock held past the wait, a deadlock, no
    connection): nothing of it happened, and the same request may succeed shortly. Not an
    error in the statement itself (SQLite reports a missing table the same way, by class)."""
    if driver_code(exc) in _MYSQL_BUSY:
        return True
    text = str(getattr(exc, "orig", exc)).lower()
    return any(words in text for words in _SQLITE_BUSY)
