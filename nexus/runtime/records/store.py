"""Every SQL statement on record tables (and the idempotency / auto-number / history tables).

Statements are per object and per batch, never per record: `IN (...)` reads and executemany
writes, so the count for a use case depends on the objects involved, not on the rows.

The hot ones (a command group's upserts: the unique-value lookups, the inserts, updates and
history rows) are built once per table and shape (`_built`: bound parameters, no per-call
construction or cache key) and run through `fast_sql`: straight on the sqlite3 connection
when the session's connection is an on-loop SQLite one (runtime-worker), `conn.execute`
otherwise. Only statements whose selected columns need no result processing (strings) read
that way; reads of typed columns stay on SQLAlchemy's result handling (ADR 0052).
"""

from __future__ import annotations

import collections
import json
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any

from sqlalchemy import (
    ColumnElement,
    String,
    Table,
    and_,
    bindparam,
    insert,
    select,
    true,
    update,
)
from sqlalchemy.engine import RowMapping
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from nexus.platform.db import fast_sql
from nexus.platform.db.backend import backend_of
from nexus.runtime.records import models as m

#: Built statements kept (a few per record table and shape; tables of a reloaded metadata
#: view replace the old ones, which age out).
BUILT_MAX = 512
_statements: collections.OrderedDict[tuple[Hashable, ...], Any] = collections.OrderedDict()


def _built(key: tuple[Hashable, ...], build: Callable[[], Any]) -> Any:
    """The statement `build` makes for `key` (tables are keyed by identity), built once:
    `fast_sql` compiles a statement once per identity, SQLAlchemy finds it in its cache
    without rebuilding its cache key from a fresh construction."""
    statement = _statements.get(key)
    if statement is None:
        statement = _statements[key] = build()
        if len(_statements) > BUILT_MAX:
            _statements.popitem(last=False)
    else:
        _statements.move_to_end(key)
    return statement


def _values_of(table: Table, column: str) -> Any:
    """`SELECT column, id ... WHERE org_id = :org_id AND column IN :values`."""
    return select(table.c[column], table.c.id).where(
        table.c.org_id == bindparam("org_id"),
        table.c[column].in_(bindparam("values", expanding=True)),
    )


def _insert_of(table: Table, columns: tuple[str, ...]) -> Any:
    return insert(table).values(fast_sql.row_values(table, columns))


def _update_of(table: Table, columns: tuple[str, ...]) -> Any:
    return (
        update(table)
        .where(
            table.c.org_id == bindparam("b_org_id"),
            table.c.id == bindparam("b_id"),
            table.c.row_version == bindparam("b_row_version"),
        )
        .values(
            {c: bindparam(f"v_{c}", type_=table.c[c].type) for c in columns}
            | {"row_version": table.c.row_version + 1}
        )
    )


class RecordStore:
    def __init__(self, session: AsyncSession, org_id: str) -> None:
        self.session = session
        self.org_id = org_id
        self._connection: AsyncConnection | None = None

    async def connection(self) -> AsyncConnection:
        """The session's connection (in its transaction), asked for once."""
        if self._connection is None:
            self._connection = await self.session.connection()
        return self._connection

    async def rows(
        self,
        table: Table,
        ids: Iterable[str],
        *,
        columns: Sequence[str] | None = None,
        flags: dict[str, ColumnElement[bool]] | None = None,
        include_deleted: bool = True,
    ) -> dict[str, RowMapping]:
        """Rows by id, with extra boolean flags (e.g. may_edit) computed in the same statement."""
        wanted = sorted(set(ids))
        if not wanted:
            return {}
        cols = [table.c[c] for c in columns] if columns else list(table.c)
        extra = [flag.label(name) for name, flag in (flags or {}).items()]
        stmt = select(*cols, *extra).where(table.c.org_id == self.org_id, table.c.id.in_(wanted))
        if not include_deleted:
            stmt = stmt.where(table.c.is_deleted.is_(False))
        return {row["id"]: row for row in (await self.session.execute(stmt)).mappings()}

    async def lock(self, table: Table, ids: Iterable[str]) -> None:
        """Lock these rows until the transaction ends (in id order, so two batches never
        wait on each other crosswise): a row read after this is the row the UPDATE will
        change, and nobody changes it in between. Under READ COMMITTED a plain read could
        be stale by the time the write lands. SQLite needs nothing: a writer holds the
        whole file from `BEGIN IMMEDIATE` on."""
        wanted = sorted(set(ids))
        if wanted and not backend_of(self.session).one_writer:
            stmt = (
                select(table.c.id)
                .where(table.c.org_id == self.org_id, table.c.id.in_(wanted))
                .order_by(table.c.id)
                .with_for_update()
            )
            await self.session.execute(stmt)

    async def visible_ids(
        self, table: Table, ids: Iterable[str], predicate: ColumnElement[bool]
    ) -> set[str]:
        wanted = sorted(set(ids))
        if not wanted:
            return set()
        stmt = select(table.c.id).where(
            table.c.org_id == self.org_id,
            table.c.id.in_(wanted),
            table.c.is_deleted.is_(False),
            predicate,
        )
        return {str(i) for i in (await self.session.execute(stmt)).scalars()}

    async def existing_values(
        self, table: Table, column: str, values: Iterable[Any]
    ) -> dict[Any, str]:
        """Live records holding any of these values in a unique column: value -> id."""
        wanted = [v for v in set(values) if v is not None]
        if not wanted:
            return {}
        stmt = _built(("values", table, column), lambda: _values_of(table, column))
        params = {"org_id": self.org_id, "values": wanted}
        if isinstance(table.c[column].type, String):  # strings back: no result processing
            found = await fast_sql.execute(await self.connection(), stmt, params)
            return {row[0]: str(row[1]) for row in found}
        return {row[0]: str(row[1]) for row in await self.session.execute(stmt, params)}

    async def insert(self, table: Table, rows: list[dict[str, Any]]) -> None:
        """executemany INSERT; every row gets every column any row sets (None where unset):
        an executemany takes its column list from the first row and would silently drop
        values of later rows that set more fields."""
        if rows:
            columns = tuple(sorted({c for row in rows for c in row}))
            stmt = _built(("insert", table, columns), lambda: _insert_of(table, columns))
            await fast_sql.execute(
                await self.connection(), stmt, [{c: row.get(c) for c in columns} for row in rows]
            )

    async def update_rows(
        self, table: Table, rows: list[dict[str, Any]], columns: Sequence[str]
    ) -> int:
        """executemany UPDATE of `columns` fenced by row version; returns rows changed.
        Callers `lock` the rows first, so a short count means an invariant broke."""
        if not rows:
            return 0
        shape = tuple(columns)
        stmt = _built(("update", table, shape), lambda: _update_of(table, shape))
        params = [
            {"b_org_id": self.org_id, "b_id": r["id"], "b_row_version": r["row_version"]}
            | {f"v_{c}": r[c] for c in columns}
            for r in rows
        ]
        return (await fast_sql.execute(await self.connection(), stmt, params)).rowcount

    async def set_deleted(
        self,
        table: Table,
        ids: Iterable[str],
        *,
        deleted: bool,
        where: ColumnElement[bool] | None = None,
        values: dict[str, Any] | None = None,
    ) -> None:
        wanted = sorted(set(ids))
        if not wanted:
            return
        await self.session.execute(
            update(table)
            .where(
                table.c.org_id == self.org_id,
                table.c.id.in_(wanted),
                where if where is not None else true(),
            )
            .values(is_deleted=deleted, row_version=table.c.row_version + 1, **(values or {})),
            execution_options={"synchronize_session": False},
        )

    async def referencing(
        self, table: Table, column: str, ids: Iterable[str]
    ) -> dict[str, list[str]]:
        """Live records of `table` whose `column` points at any of `ids`: parent -> children."""
        wanted = sorted(set(ids))
        if not wanted:
            return {}
        stmt = select(table.c[column], table.c.id).where(
            table.c.org_id == self.org_id,
            table.c[column].in_(wanted),
            table.c.is_deleted.is_(False),
        )
        out: dict[str, list[str]] = {}
        for parent, child in await self.session.execute(stmt):
            out.setdefault(str(parent), []).append(str(child))
        return out

    async def clear_references(
        self, table: Table, column: str, ids: Iterable[str], values: dict[str, Any]
    ) -> None:
        wanted = sorted(set(ids))
        if wanted:
            await self.session.execute(
                update(table)
                .where(table.c.org_id == self.org_id, table.c[column].in_(wanted))
                .values({column: None, "row_version": table.c.row_version + 1, **values}),
                execution_options={"synchronize_session": False},
            )

    # ------------------------------------------------------------------ side tables
    async def allocate_numbers(self, object_name: str, field_name: str, count: int) -> int:
        """Reserve `count` consecutive auto-numbers; returns the first (starts at 1)."""
        t = m.auto_number
        key = and_(
            t.c.org_id == self.org_id, t.c.object_name == object_name, t.c.field_name == field_name
        )
        result = await self.session.execute(
            update(t).where(key).values(next_value=t.c.next_value + count)
        )
        if int(result.rowcount) == 0:  # type: ignore[attr-defined]  # CursorResult
            await self.session.execute(
                insert(t).values(
                    org_id=self.org_id,
                    object_name=object_name,
                    field_name=field_name,
                    next_value=1 + count,
                )
            )
            return 1
        current = (await self.session.execute(select(t.c.next_value).where(key))).scalar_one()
        return int(current) - count

    async def idempotent_results(self, keys: Iterable[str]) -> dict[str, tuple[str, str]]:
        wanted = sorted(set(keys))
        if not wanted:
            return {}
        t = m.idempotency
        stmt = select(t.c.idem_key, t.c.request_digest, t.c.result).where(
            t.c.org_id == self.org_id, t.c.idem_key.in_(wanted)
        )
        return {row[0]: (row[1], row[2]) for row in await self.session.execute(stmt)}

    async def remember(self, entries: list[tuple[str, str, dict[str, Any]]], now_ms: int) -> None:
        if entries:
            await self.session.execute(
                insert(m.idempotency),
                [
                    {
                        "org_id": self.org_id,
                        "idem_key": k,
                        "request_digest": d,
                        "result": json.dumps(r),
                        "created_at_ms": now_ms,
                    }
                    for k, d, r in entries
                ],
            )

    async def record_history(self, rows: list[dict[str, Any]]) -> None:
        if rows:
            await self.insert(m.field_history, rows)

    async def history(self, record_id: str, limit: int = 50) -> list[RowMapping]:
        t = m.field_history
        stmt = (
            select(t)
            .where(t.c.org_id == self.org_id, t.c.record_id == record_id)
            .order_by(t.c.changed_at_ms.desc(), t.c.history_id)
            .limit(limit)
        )
        return list((await self.session.execute(stmt)).mappings())
