"""The search index: one row per (record, searchable field) with the field's text.

Rows are written in the transaction that writes the record (`index_changes`, called once per
object group by create and update), so a committed record is findable at once. A soft
delete leaves the rows in place: searches join the record table, whose `is_deleted` filter
(the same one SOQL uses) hides deleted records and shows them again on undelete.

One row per field, not per record, so field-level security and `IN NAME FIELDS` are a
`field_name IN (...)` filter at search time, and a term found only in a field the caller may
not read finds nothing.

SQLite stores the rows in an FTS5 virtual table, which has no indexes of its own: each row's
rowid is derived from (org, record, field) (`_rowid`), so replacing a record's rows is a
rowid lookup, not a scan. MariaDB/MySQL/TiDB use an ordinary table keyed by
(org_id, record_id, field_name).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy import (
    Column,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    bindparam,
    delete,
    insert,
    select,
    tuple_,
)
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from nexus.platform.db import fast_sql
from nexus.platform.db.backend import backend_of
from nexus.runtime.metadata.definitions import FieldDef, ObjectDef
from nexus.runtime.metadata.view import MetadataView
from nexus.runtime.schema.spec import column_name
from nexus.runtime.search import models as m

SEARCHABLE_TYPES = frozenset(
    {
        "text",
        "textarea",
        "long_text",
        "email",
        "phone",
        "url",
        "picklist",
        "multi_picklist",
        "auto_number",
    }
)
MAX_CONTENT = 32_000  # characters of one field kept in the index
REBUILD_PAGE = 1000

#: The SQLite shape of `runtime_search_index`: the FTS5 columns plus the rowid.
fts_table = Table(
    "runtime_search_index",
    MetaData(),
    Column("rowid", Integer),
    Column("org_id", String(18)),
    Column("object_name", String(80)),
    Column("record_id", String(18)),
    Column("field_name", String(80)),
    Column("content", Text),
)


def searchable_fields(obj: ObjectDef) -> list[FieldDef]:
    return [f for f in obj.all_fields() if f.type in SEARCHABLE_TYPES]


def _rowid(org_id: str, record_id: str, field_name: str) -> int:
    """A positive 63-bit id for one (org, record, field) row on SQLite (a collision would
    fail the insert loudly, never merge two rows; at 2^-63 per pair it is not a concern)."""
    digest = hashlib.sha256(f"{org_id}/{record_id}/{field_name.lower()}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1 or 1


def _content(definition: FieldDef, value: Any) -> str:
    """The text a field's value is indexed with; "" means no row."""
    text = "" if value is None else str(value).strip()
    if definition.type == "multi_picklist":
        text = text.replace(";", " ")
    return text[:MAX_CONTENT]


def _entry(org_id: str, obj: ObjectDef, record_id: str, field: str, text: str) -> dict[str, Any]:
    return {
        "org_id": org_id,
        "object_name": obj.api_name,
        "record_id": record_id,
        "field_name": field,
        "content": text,
    }


def _entries(
    org_id: str, obj: ObjectDef, records: Iterable[tuple[str, Mapping[str, Any]]]
) -> list[dict[str, Any]]:
    fields = [(f, column_name(f.api_name)) for f in searchable_fields(obj)]
    rows = []
    for record_id, values in records:
        for definition, column in fields:
            text = _content(definition, values.get(column))
            if text:
                rows.append(_entry(org_id, obj, record_id, definition.api_name, text))
    return rows


#: The index writes of a command group, built once (bound parameters; `fast_sql` runs them
#: straight on runtime-worker's on-loop sqlite3 connection, `conn.execute` elsewhere).
_ENTRY_COLUMNS = ("org_id", "object_name", "record_id", "field_name", "content")
_FTS_INSERT = insert(fts_table).values(
    {c: bindparam(c, type_=fts_table.c[c].type) for c in ("rowid", *_ENTRY_COLUMNS)}
)
_FTS_DELETE = delete(fts_table).where(fts_table.c.rowid == bindparam("rowid"))
#: One statement (an executemany of DELETEs is a round trip per row on PyMySQL); the
#: record ids narrow it to the primary key's range, the pairs pick the fields.
_INDEX_DELETE = delete(m.search_index).where(
    m.search_index.c.org_id == bindparam("org_id"),
    m.search_index.c.record_id.in_(bindparam("record_ids", expanding=True)),
    tuple_(m.search_index.c.record_id, m.search_index.c.field_name).in_(
        bindparam("keys", expanding=True)
    ),
)
#: MariaDB/MySQL/TiDB inserts as driver SQL with positional rows (every value a string, so
#: nothing for SQLAlchemy to process: its per-row parameter handling of the 1,200 index rows
#: of a 200-Contact batch cost more than the driver's own work on them).
_INDEX_INSERT_SQL = (
    "INSERT INTO runtime_search_index (org_id, object_name, record_id, field_name, content) "
    "VALUES (%s, %s, %s, %s, %s)"
)


async def _write(
    conn: AsyncConnection,
    *,
    org_id: str,
    stale: Sequence[tuple[str, str]],
    entries: list[dict[str, Any]],
) -> None:
    """Remove the rows of `stale` (record id, field name) pairs, then add `entries`.

    FTS5 rows go in rowid order: FTS5 flushes its pending terms to a new index segment
    whenever a write's rowid is below the previous one, so rows in hash order made a segment
    for about every other row (and merge work after them); in order, one per call."""
    if backend_of(conn).full_text == "fts5":
        if stale:
            rowids = sorted(_rowid(org_id, record, field) for record, field in stale)
            await fast_sql.execute(conn, _FTS_DELETE, [{"rowid": r} for r in rowids])
        if entries:
            keyed = sorted(
                ((_rowid(org_id, e["record_id"], e["field_name"]), e) for e in entries),
                key=lambda pair: pair[0],
            )
            await fast_sql.execute(conn, _FTS_INSERT, [{**e, "rowid": r} for r, e in keyed])
        return
    if stale:
        await fast_sql.execute(
            conn,
            _INDEX_DELETE,
            {
                "org_id": org_id,
                "record_ids": sorted({record for record, _ in stale}),
                "keys": sorted(set(stale)),
            },
        )
    if entries:
        rows = [tuple(e[c] for c in _ENTRY_COLUMNS) for e in entries]
        await conn.exec_driver_sql(_INDEX_INSERT_SQL, rows)


def _changed_entries(
    org_id: str,
    obj: ObjectDef,
    changes: Iterable[tuple[str, Mapping[str, Any], Mapping[str, Any]]],
) -> tuple[list[tuple[str, str]], list[dict[str, Any]]]:
    """For updates (id, row before, changed columns): the (record, field) rows whose text
    changed, and their new entries (none for a field now empty). A field whose text is
    unchanged keeps its row: it holds that text already."""
    fields = [(f, column_name(f.api_name)) for f in searchable_fields(obj)]
    stale: list[tuple[str, str]] = []
    entries: list[dict[str, Any]] = []
    for record_id, old, new in changes:
        for definition, column in fields:
            if column not in new:
                continue
            text = _content(definition, new[column])
            if text == _content(definition, old.get(column)):
                continue
            stale.append((record_id, definition.api_name))
            if text:
                entries.append(_entry(org_id, obj, record_id, definition.api_name, text))
    return stale, entries


async def index_changes(
    conn: AsyncConnection,
    *,
    org_id: str,
    obj: ObjectDef,
    changes: Sequence[tuple[str, Mapping[str, Any] | None, Mapping[str, Any]]],
) -> None:
    """Index records of one object as written in this transaction (`conn` is its
    connection): (id, row before or None for a create, changed columns). A create adds a
    row per non-empty searchable field; an update replaces the rows of the searchable fields
    whose text it changed (one delete, one insert per group: an upsert that re-sends an
    unchanged value costs nothing)."""
    created = [(i, new) for i, old, new in changes if old is None]
    stale, entries = _changed_entries(
        org_id, obj, ((i, old, new) for i, old, new in changes if old is not None)
    )
    entries = _entries(org_id, obj, created) + entries
    if stale or entries:
        await _write(conn, org_id=org_id, stale=stale, entries=entries)


async def rebuild_index(
    session: AsyncSession, *, view: MetadataView, objects: Iterable[str] | None = None
) -> dict[str, int]:
    """Rebuild the index rows of an org's objects (all by default) from the record tables:
    for records written before the index existed, or to repair it. Returns records indexed
    per object. Runs in the caller's unit of work; large orgs can rebuild object by object."""
    org_id = view.org_id
    chosen = (
        list(view.objects.values())
        if objects is None
        else [_require(view, name) for name in objects]
    )
    counts: dict[str, int] = {}
    for obj in chosen:
        fields = searchable_fields(obj)
        if backend_of(session).full_text == "fts5":
            await session.execute(
                delete(fts_table).where(
                    fts_table.c.org_id == org_id, fts_table.c.object_name == obj.api_name
                )
            )
        else:
            await session.execute(
                delete(m.search_index).where(
                    m.search_index.c.org_id == org_id,
                    m.search_index.c.object_name == obj.api_name,
                )
            )
        table = view.table(obj)
        names = [column_name(f.api_name) for f in fields]
        last = ""
        counts[obj.api_name] = 0
        while fields:
            page = list(
                (
                    await session.execute(
                        select(table.c.id, *[table.c[n] for n in names])
                        .where(table.c.org_id == org_id, table.c.id > last)
                        .order_by(table.c.id)
                        .limit(REBUILD_PAGE)
                    )
                ).mappings()
            )
            if not page:
                break
            records = [(str(row["id"]), dict(row)) for row in page]
            await _write(
                await session.connection(),
                org_id=org_id,
                stale=(),
                entries=_entries(org_id, obj, records),
            )
            counts[obj.api_name] += len(page)
            last = records[-1][0]
    return counts


def _require(view: MetadataView, name: str) -> ObjectDef:
    obj = view.object(name)
    if obj is None:
        raise ValueError(f"no object {name!r}")
    return obj
