"""What a database error says, read from the driver's error (MySQL-family codes)."""

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
