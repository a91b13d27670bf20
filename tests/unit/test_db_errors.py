"""Which database errors are "busy" (a 503 with Retry-After) and which are faults (a 500)."""

from __future__ import annotations

import sqlite3

import pytest
from sqlalchemy.exc import OperationalError

from nexus.platform.db.errors import is_busy


class _MySQLError(Exception):
    """What aiomysql raises: the server's code first."""


@pytest.mark.parametrize(
    ("orig", "busy"),
    [
        (sqlite3.OperationalError("database is locked"), True),
        (sqlite3.OperationalError("database table is locked"), True),
        (sqlite3.OperationalError("no such table: identity_user"), False),
        (sqlite3.OperationalError('near "SELEC": syntax error'), False),
        (_MySQLError(1205, "Lock wait timeout exceeded"), True),
        (_MySQLError(1213, "Deadlock found"), True),
        (_MySQLError(2003, "Can't connect to MySQL server"), True),
        (_MySQLError(1054, "Unknown column 'x'"), False),
    ],
)
def test_busy_is_a_lock_or_no_connection_never_a_fault_in_the_statement(
    orig: Exception, busy: bool
) -> None:
    assert is_busy(OperationalError("statement", {}, orig)) is busy
