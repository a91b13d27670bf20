"""Callers ask the backend what it can do; one answer per dialect, whatever they hold."""

from __future__ import annotations

import pytest
from sqlalchemy import create_engine
from sqlalchemy.dialects import mysql, postgresql
from sqlalchemy.orm import Session

from nexus.platform.db.backend import MYSQL, SQLITE, backend_of, skips_locked


def test_sqlite_is_one_writer_with_fts5_and_byte_keys() -> None:
    engine = create_engine("sqlite://")
    with engine.connect() as conn, Session(engine) as session:
        assert backend_of(engine) is backend_of(conn) is backend_of(session) is SQLITE
    assert (SQLITE.one_writer, SQLITE.full_text, SQLITE.keys_need_binary_collation) == (
        True,
        "fts5",
        False,
    )


def test_the_mysql_family_has_row_locks_fulltext_and_needs_binary_keys() -> None:
    assert backend_of(mysql.dialect()) is MYSQL
    assert (MYSQL.one_writer, MYSQL.full_text, MYSQL.keys_need_binary_collation) == (
        False,
        "fulltext",
        True,
    )


def test_an_unsupported_database_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="unsupported database dialect 'postgresql'"):
        backend_of(postgresql.dialect())


@pytest.mark.parametrize(
    ("version", "mariadb", "skips"),
    [
        ((10, 11, 6, "MariaDB"), True, True),
        ((10, 6, 0, "MariaDB"), True, True),
        ((10, 5, 22, "MariaDB"), True, False),  # SKIP LOCKED came in 10.6
        ((8, 0, 36), False, True),
        ((5, 7, 44), False, False),
        ((8, 0, 11, "TiDB", "v7", 5, 1), False, False),  # parsed, ignored: it would wait
    ],
)
def test_skip_locked_is_used_only_where_the_server_honours_it(
    version: tuple[object, ...], mariadb: bool, skips: bool
) -> None:
    dialect = mysql.dialect()
    dialect.server_version_info = version
    dialect.is_mariadb = mariadb
    assert skips_locked(dialect) is skips
    assert skips_locked(create_engine("sqlite://")) is False  # one writer: nothing to skip
