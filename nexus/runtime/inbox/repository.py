"""Every SQL statement of the inbox besides the work engine's: bindings, dedupe, run-as."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Table, bindparam, delete, insert, select, update
from sqlalchemy.engine import RowMapping
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from nexus.identity.api import org_table, user_table
from nexus.platform.db import fast_sql
from nexus.platform.db.backend import insert_ignore
from nexus.platform.db.clock import db_now_ms
from nexus.runtime.inbox import models as m

#: runtime-worker asks it once per group and caller: built once, run through `fast_sql`
#: (strings and an integer back, no result processing).
_ACTIVE_USER = (
    select(user_table.c.user_id, org_table.c.security_epoch)
    .join(org_table, org_table.c.org_id == user_table.c.org_id)
    .where(
        user_table.c.org_id == bindparam("org_id"),
        user_table.c.user_id == bindparam("user_id"),
        user_table.c.is_active.is_(True),
    )
)


@dataclass(frozen=True)
class RunAs:
    user_id: str
    security_epoch: int


@dataclass(frozen=True)
class Bindings:
    run_as: dict[str, RunAs]  # org id -> the user its commands run as
    now_ms: int | None  # the database clock (None when no org is bound)


@dataclass(frozen=True)
class StoredMessage:
    work_id: str
    digest: str


@dataclass(frozen=True)
class NewMessage:
    org_id: str
    message_key: str
    work_id: str
    digest: str


@dataclass(frozen=True)
class FoundRecord:
    id: str
    is_deleted: bool


# --------------------------------------------------------------------------- accept
# Every accept runs these, so they are built once and run through `fast_sql` (straight on
# the on-loop sqlite3 connection in runtime-api, `conn.execute` elsewhere) instead of being
# built per call and executed by the ORM session: ~120 us of SQLAlchemy each (ADR 0056).
# They select strings and integers, which need no result processing. One org or key
# compares with `=`; several with an expanding IN.


def _bindings_where(org_match: Any) -> Any:
    b, u, o = m.workload_binding, user_table, org_table
    return (
        select(b.c.org_id, b.c.user_id, o.c.security_epoch, db_now_ms())
        .join(u, (u.c.org_id == b.c.org_id) & (u.c.user_id == b.c.user_id))
        .join(o, o.c.org_id == b.c.org_id)
        .where(org_match, b.c.workload == bindparam("workload"), u.c.is_active.is_(True))
    )


#: Per org, the active user bound to the workload, and the database clock.
_BINDING = _bindings_where(m.workload_binding.c.org_id == bindparam("org_id"))
_BINDINGS = _bindings_where(m.workload_binding.c.org_id.in_(bindparam("org_ids", expanding=True)))


def _messages_where(key_match: Any) -> Any:
    t = m.inbox_message
    return select(t.c.message_key, t.c.work_id, t.c.command_sha256).where(
        t.c.org_id == bindparam("org_id"), key_match
    )


#: The dedupe rows of an org's message keys.
_MESSAGE = _messages_where(m.inbox_message.c.message_key == bindparam("key"))
_MESSAGES = _messages_where(m.inbox_message.c.message_key.in_(bindparam("keys", expanding=True)))


@functools.cache
def _insert_messages(dialect: str) -> Any:
    """Insert-or-ignore of dedupe rows, every value a plain parameter (the clock too): one
    SQL text, which PyMySQL sends as one multi-row INSERT and SQLite runs in one call."""
    t = m.inbox_message
    return insert_ignore(t, dialect).values(fast_sql.row_values(t))


async def bound_users(conn: AsyncConnection, org_ids: Sequence[str], workload: str) -> Bindings:
    """Per org, the active user bound to `workload` (existing orgs only; an org missing
    from the answer fails closed), and the database clock, read in the same statement."""
    if len(org_ids) == 1:
        params: dict[str, Any] = {"org_id": org_ids[0], "workload": workload}
        rows = (await fast_sql.execute(conn, _BINDING, params)).rows
    else:
        params = {"org_ids": list(org_ids), "workload": workload}
        rows = (await fast_sql.execute(conn, _BINDINGS, params)).rows
    return Bindings(
        {str(r[0]): RunAs(str(r[1]), int(r[2])) for r in rows},
        int(rows[0][3]) if rows else None,
    )


async def stored_messages(
    conn: AsyncConnection, org_id: str, message_keys: Iterable[str]
) -> dict[str, StoredMessage]:
    """The accepted messages among `message_keys` of one org (one statement)."""
    keys = sorted(set(message_keys))
    if len(keys) == 1:
        found = await fast_sql.execute(conn, _MESSAGE, {"org_id": org_id, "key": keys[0]})
    else:
        found = await fast_sql.execute(conn, _MESSAGES, {"org_id": org_id, "keys": keys})
    return {str(r[0]): StoredMessage(str(r[1]), str(r[2])) for r in found.rows}


async def insert_messages(conn: AsyncConnection, rows: Sequence[NewMessage], *, now_ms: int) -> int:
    """Claim message keys with one insert-or-ignore of all rows (in key order, one lock
    order for concurrent accepts); returns how many were new. Keys taken by an earlier or
    concurrent accept are left as they are: read them back to see which."""
    if not rows:
        return 0
    inserted = await fast_sql.execute(
        conn,
        _insert_messages(conn.dialect.name),
        [
            {
                "org_id": row.org_id,
                "message_key": row.message_key,
                "work_id": row.work_id,
                "command_sha256": row.digest,
                "accepted_at_ms": now_ms,
            }
            for row in sorted(rows, key=lambda r: (r.org_id, r.message_key))
        ],
    )
    return inserted.rowcount


class InboxRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    # ------------------------------------------------------------------ run-as
    async def active_user(self, org_id: str, user_id: str) -> RunAs | None:
        """The run-as user of an accepted command, if still active (and the org's epoch)."""
        row = (
            await fast_sql.execute(
                await self.session.connection(),
                _ACTIVE_USER,
                {"org_id": org_id, "user_id": user_id},
            )
        ).first()
        return None if row is None else RunAs(str(row[0]), int(row[1]))

    # ------------------------------------------------------------------ records
    async def record_by_value(
        self, table: Table, column: str, value: Any, org_id: str
    ) -> FoundRecord | None:
        """The record holding `value` in a unique column (deleted ones too), if any."""
        row = (
            await self.session.execute(
                select(table.c.id, table.c.is_deleted).where(
                    table.c.org_id == org_id, table.c[column] == value
                )
            )
        ).first()
        return None if row is None else FoundRecord(str(row[0]), bool(row[1]))

    # ------------------------------------------------------------------ bindings
    async def bindings(self, org_id: str) -> list[RowMapping]:
        b, u = m.workload_binding, user_table
        result = await self.session.execute(
            select(b.c.workload, b.c.user_id, u.c.username, u.c.is_active)
            .join(u, (u.c.org_id == b.c.org_id) & (u.c.user_id == b.c.user_id))
            .where(b.c.org_id == org_id)
            .order_by(b.c.workload)
        )
        return list(result.mappings())

    async def set_binding(self, *, org_id: str, workload: str, user_id: str, now_ms: int) -> None:
        b = m.workload_binding
        key = (b.c.org_id == org_id, b.c.workload == workload)
        changed = await self.session.execute(
            update(b).where(*key).values(user_id=user_id, updated_at_ms=now_ms)
        )
        if changed.rowcount == 0:  # type: ignore[attr-defined]  # a CursorResult
            await self.session.execute(
                insert(b).values(
                    org_id=org_id, workload=workload, user_id=user_id, updated_at_ms=now_ms
                )
            )

    async def remove_binding(self, *, org_id: str, workload: str) -> bool:
        b = m.workload_binding
        removed = await self.session.execute(
            delete(b).where(b.c.org_id == org_id, b.c.workload == workload)
        )
        return bool(removed.rowcount)  # type: ignore[attr-defined]  # a CursorResult
