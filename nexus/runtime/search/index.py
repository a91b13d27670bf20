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

from sqlalchemy import Column, Integer, MetaData, String, Table, Text, delete, insert, select
from sqlalchemy.ext.asyncio import AsyncSession

from nexus.runtime.metadata import models as m
from nexus.runtime.metadata.definitions import FieldDef, ObjectDef
from nexus.runtime.metadata.view import MetadataView
from nexus.runtime.schema.spec import column_name

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


def _entries(
    org_id: str, obj: ObjectDef, records: Iterable[tuple[str, Mapping[str, Any]]]
) -> list[dict[str, Any]]:
    fields = searchable_fields(obj)
    rows = []
    for record_id, values in records:
        for definition in fields:
            value = values.get(column_name(definition.api_name))
            text = "" if value is None else str(value).strip()
            if not text:
                continue
            if definition.type == "multi_picklist":
                text = text.replace(";", " ")
            rows.append(
                {
                    "org_id": org_id,
                    "object_name": obj.api_name,
                    "record_id": record_id,
                    "field_name": definition.api_name,
                    "content": text[:MAX_CONTENT],
                }
            )
    return rows


async def _write(
    session: AsyncSession,
    *,
    org_id: str,
    obj: ObjectDef,
    record_ids: Sequence[str],
    entries: list[dict[str, Any]],
    replace: bool,
) -> None:
    if session.get_bind().dialect.name == "sqlite":
        if replace:
            rowids = [
                _rowid(org_id, record_id, f.api_name)
                for record_id in record_ids
                for f in searchable_fields(obj)
            ]
            await session.execute(delete(fts_table).where(fts_table.c.rowid.in_(rowids)))
        if entries:
            rows = [
                {**e, "rowid": _rowid(org_id, e["record_id"], e["field_name"])} for e in entries
            ]
            await session.execute(insert(fts_table), rows)
        return
    table = m.search_index
    if replace:
        await session.execute(
            delete(table).where(table.c.org_id == org_id, table.c.record_id.in_(record_ids))
        )
    if entries:
        await session.execute(insert(table), entries)


async def index_changes(
    session: AsyncSession,
    *,
    org_id: str,
    obj: ObjectDef,
    changes: Sequence[tuple[str, Mapping[str, Any] | None, Mapping[str, Any]]],
) -> None:
    """Index records of one object as written in this transaction: (id, row before or None
    for a create, changed columns). Updates that touch no searchable column cost nothing;
    the others replace the record's rows from the merged row (one delete, one insert)."""
    columns = {column_name(f.api_name) for f in searchable_fields(obj)}
    created = [(i, new) for i, old, new in changes if old is None]
    updated = [
        (i, {**old, **new}) for i, old, new in changes if old is not None and columns & set(new)
    ]
    if created:
        await _write(
            session,
            org_id=org_id,
            obj=obj,
            record_ids=[i for i, _ in created],
            entries=_entries(org_id, obj, created),
            replace=False,
        )
    if updated:
        await _write(
            session,
            org_id=org_id,
            obj=obj,
            record_ids=[i for i, _ in updated],
            entries=_entries(org_id, obj, updated),
            replace=True,
        )


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
        if session.get_bind().dialect.name == "sqlite":
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
                session,
                org_id=org_id,
                obj=obj,
                record_ids=[i for i, _ in records],
                entries=_entries(org_id, obj, records),
                replace=False,
            )
            counts[obj.api_name] += len(page)
            last = records[-1][0]
    return counts


def _require(view: MetadataView, name: str) -> ObjectDef:
    obj = view.object(name)
    if obj is None:
        raise ValueError(f"no object {name!r}")
    return obj
