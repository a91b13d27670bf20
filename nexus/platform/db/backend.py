"""What differs between the backends (SQLite, MySQL/MariaDB/TiDB), in one place.

`Backend` names what a database can do (capabilities), so callers ask `backend_of(x).single_writer`
instead of comparing dialect names; the statement helpers below build the one portable form
of an insert-or-ignore, an upsert and a byte-compared key for each dialect.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import String, insert
from sqlalchemy.dialects import mysql
from sqlalchemy.dialects.mysql import insert as mysql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.selectable import Join
from sqlalchemy.types import TypeEngine


def insert_ignore(table: Any, dialect: str) -> Any:
    """INSERT that skips rows whose key already exists (SQLite `OR IGNORE`, MySQL `IGNORE`)."""
    return insert(table).prefix_with("OR IGNORE" if dialect == "sqlite" else "IGNORE")


def upsert(
    table: Any,
    dialect: str,
    key: list[Any],
    changes: Callable[[Any], dict[str, Any] | list[tuple[str, Any]]],
) -> Any:
    """INSERT, or on a duplicate `key` UPDATE with `changes(incoming)` (`incoming` names
    the row the INSERT would have written: SQLite's `excluded`, MySQL's `inserted`).
    One statement that takes the row's exclusive lock: an INSERT IGNORE followed by an
    UPDATE takes a shared lock first on InnoDB, and two such transactions on one row
    deadlock when both upgrade. MySQL applies the assignments left to right, each seeing
    the ones before it (SQLite: all see the old row); when that matters, give `changes` as
    a list of (column, value) pairs in the order to apply."""
    if dialect == "sqlite":
        lite = sqlite_insert(table)
        return lite.on_conflict_do_update(index_elements=key, set_=dict(changes(lite.excluded)))
    my = mysql_insert(table)
    return my.on_duplicate_key_update(changes(my.inserted))


class _OrderedJoin(Join):
    inherit_cache = True


@compiles(_OrderedJoin, "sqlite")
def _sqlite_cross_join(join: _OrderedJoin, compiler: Any, **kw: Any) -> str:
    # SQLite never reorders the two sides of a CROSS JOIN (its documented way to pick the
    # outer loop); the ON clause applies as to an inner join
    return str(compiler.visit_join(join, **kw)).replace(" JOIN ", " CROSS JOIN ", 1)


@compiles(_OrderedJoin, "mysql")
def _mysql_straight_join(join: _OrderedJoin, compiler: Any, **kw: Any) -> str:
    return str(compiler.visit_join(join, **kw)).replace(" INNER JOIN ", " STRAIGHT_JOIN ", 1)


def ordered_join(outer: Any, inner: Any, onclause: Any) -> Any:
    """An inner join whose `outer` table drives the loop on every backend (SQLite CROSS
    JOIN, MySQL STRAIGHT_JOIN): for a join the planner gets backwards without statistics,
    e.g. a few lane rows by primary key, then one index probe each into a deep table.
    `outer` must be a table, not a join (its first JOIN keyword is the one replaced)."""
    return _OrderedJoin(outer, inner, onclause)


def exact_key(length: int) -> TypeEngine[str]:
    """A string key compared byte for byte on every backend. MySQL/MariaDB's default utf8mb4
    collation is case- and accent-insensitive ('Acct-1' = 'acct-1'), which would merge keys
    that differ only in case: two lanes into one, a second delivery id into a "redelivery"
    of the first. SQLite (and TiDB's default) already compare bytes."""
    return String(length).with_variant(
        mysql.VARCHAR(length, charset="utf8mb4", collation="utf8mb4_bin"), "mysql"
    )


@dataclass(frozen=True)
class Backend:
    """What one kind of database can do; ask these instead of comparing dialect names."""

    dialect: str  # SQLAlchemy's dialect name: the key of the statement helpers below
    #: Write transactions run one at a time per database (SQLite: `BEGIN IMMEDIATE` holds the
    #: whole file). Then nothing needs row locks, a claim round can carry the outcomes of the
    #: last one in its own transaction, and a second concurrent writer only waits.
    one_writer: bool
    #: How text search is indexed: "fts5" (SQLite's FTS5 virtual table, kept in step by the
    #: indexer) or "fulltext" (an InnoDB FULLTEXT index queried with MATCH ... AGAINST).
    full_text: str
    #: String keys need a binary collation to compare byte for byte (MySQL/MariaDB's default
    #: utf8mb4 collation is case- and accent-insensitive; see `exact_key`).
    keys_need_binary_collation: bool
    #: `UPDATE ... RETURNING` (SQLite 3.35+; not MariaDB, MySQL or TiDB): one statement
    #: writes rows and reads what it wrote.
    update_returning: bool


SQLITE = Backend(
    "sqlite",
    one_writer=True,
    full_text="fts5",
    keys_need_binary_collation=False,
    update_returning=sqlite3.sqlite_version_info >= (3, 35),
)
MYSQL = Backend(
    "mysql",
    one_writer=False,
    full_text="fulltext",
    keys_need_binary_collation=True,
    update_returning=False,
)
_BY_DIALECT = {b.dialect: b for b in (SQLITE, MYSQL)}


def _dialect_of(bind: Any) -> Any:
    dialect = getattr(bind, "dialect", None)
    if dialect is None and hasattr(bind, "get_bind"):
        dialect = bind.get_bind().dialect
    return dialect or bind


def backend_of(bind: Any) -> Backend:
    """The backend of an engine, connection or session (sync or async), or of a dialect."""
    name = getattr(_dialect_of(bind), "name", None)
    try:
        return _BY_DIALECT[str(name)]
    except KeyError:
        raise ValueError(f"unsupported database dialect {name!r}") from None


def skips_locked(bind: Any) -> bool:
    """Whether the server honours `SELECT ... FOR UPDATE SKIP LOCKED` (MariaDB 10.6+,
    MySQL 8): it passes over rows another open transaction holds. TiDB parses and ignores
    it (it would wait), older servers refuse it, SQLite has one writer (nothing to skip).
    Never the way work is claimed (claims are compare-and-set on the row); only so a sweep
    does not queue behind a holder that may be frozen with its row locks."""
    dialect = _dialect_of(bind)
    if backend_of(dialect).one_writer:
        return False
    info = tuple(dialect.server_version_info or ())
    if "tidb" in " ".join(str(part) for part in info).lower():
        return False
    numbers = tuple(part for part in info[:2] if isinstance(part, int))
    return numbers >= ((10, 6) if getattr(dialect, "is_mariadb", False) else (8, 0))
