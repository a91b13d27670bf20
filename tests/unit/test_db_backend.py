"""Callers ask the backend what it can do; one answer per dialect, whatever they hold."""

from __future__ import annotations

import pytest
from sqlalchemy import create_engine
from sqlalchemy.dialects import mysql, postgresql
from sqlalchemy.orm import Session

from nexus.platform.db.backend import MYSQL, SQLITE, backend_of


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
