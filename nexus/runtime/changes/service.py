"""GetUpdated, GetDeleted and RecentRecords, authorized in the statement that reads them.

A delete in Nexus is soft (`is_deleted`, with SystemModstamp set to the moment of the
delete), and deleted rows are never purged, so every delete of the replication window is
still there: `earliest_available_ms` is the window's own start. Windows are checked against
the database clock. A record's SystemModstamp is the moment its transaction started, so a
slow transaction may commit a stamp a little in the past: `latest_covered_ms` stays
`SETTLE_MS` behind the database clock, and a client that starts its next window there sees
such a record then (ids already seen may repeat; none are missed).

Nexus keeps no "last viewed" per user; the recent records are the caller's own most
recent changes (LastModifiedById is the caller) among the records it may still read.
"""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import ColumnElement, Table, select
from sqlalchemy.ext.asyncio import AsyncSession

from nexus.contracts.changes import (
    MAX_CHANGED_IDS,
    REPLICATION_DAYS,
    ChangesRequest,
    DeletedRecord,
    DeletedResponse,
    RecentRecord,
    RecentRequest,
    RecentResponse,
    UpdatedResponse,
)
from nexus.contracts.errors import BadRequest
from nexus.platform.db.clock import read_now_ms
from nexus.runtime.access.service import CallerAccess
from nexus.runtime.describe import ObjectNotFound, describe_object
from nexus.runtime.metadata.definitions import ObjectDef
from nexus.runtime.metadata.view import MetadataView
from nexus.runtime.system_objects.service import describe_system_object

DAY_MS = 86_400_000
MINUTE_MS = 60_000
#: How far behind the database clock a window is reported covered (see the module docstring).
SETTLE_MS = 60_000
INVALID_DATE = "INVALID_REPLICATION_DATE"


def _moment(ms: int) -> datetime:
    """Epoch milliseconds as the naive UTC datetime the record tables store."""
    return datetime.fromtimestamp(ms / 1000, tz=UTC).replace(tzinfo=None)


def _ms(moment: datetime) -> int:
    return int(moment.replace(tzinfo=UTC).timestamp() * 1000)


def _readable(view: MetadataView, access: CallerAccess, name: str) -> ObjectDef:
    obj = view.object(name)
    if obj is None or not access.object(view, obj).read:
        raise ObjectNotFound(f"no object named {name!r}")
    return obj


class ReplicationWindow:
    """A checked replication window: [start, end] truncated to the minute, as Salesforce."""

    def __init__(self, request: ChangesRequest, now_ms: int) -> None:
        start = request.start_ms - request.start_ms % MINUTE_MS
        end = request.end_ms - request.end_ms % MINUTE_MS
        if start >= end:
            raise BadRequest("startDate must chronologically precede endDate", code=INVALID_DATE)
        self.earliest = now_ms - REPLICATION_DAYS * DAY_MS
        self.earliest -= self.earliest % MINUTE_MS
        if start < self.earliest:
            raise BadRequest(
                f"startDate cannot be more than {REPLICATION_DAYS} days ago", code=INVALID_DATE
            )
        self.start = start
        self.end = min(end, now_ms)
        covered = min(end, now_ms - SETTLE_MS)
        self.covered = max(start, covered - covered % MINUTE_MS)

    def condition(self, table: Table) -> ColumnElement[bool]:
        return table.c.system_modstamp.between(_moment(self.start), _moment(self.end))


async def _changed(
    session: AsyncSession,
    view: MetadataView,
    access: CallerAccess,
    request: ChangesRequest,
    *,
    deleted: bool,
) -> tuple[ReplicationWindow, list[tuple[str, datetime]]]:
    obj = _readable(view, access, request.object)
    window = ReplicationWindow(request, await read_now_ms(session))
    table = view.table(obj)
    stmt = (
        select(table.c.id, table.c.system_modstamp)
        .where(
            table.c.org_id == access.org_id,
            table.c.is_deleted.is_(deleted),
            window.condition(table),
            access.row_predicate(view, obj, "read"),
        )
        .order_by(table.c.system_modstamp, table.c.id)
        .limit(MAX_CHANGED_IDS + 1)
    )
    rows = [(str(i), stamp) for i, stamp in await session.execute(stmt)]
    if len(rows) > MAX_CHANGED_IDS:
        raise BadRequest(
            f"more than {MAX_CHANGED_IDS} ids; choose start and end dates closer together",
            code="EXCEEDED_ID_LIMIT",
        )
    return window, rows


async def updated_records(
    session: AsyncSession, *, view: MetadataView, access: CallerAccess, request: ChangesRequest
) -> UpdatedResponse:
    window, rows = await _changed(session, view, access, request, deleted=False)
    return UpdatedResponse(ids=[i for i, _ in rows], latest_covered_ms=window.covered)


async def deleted_records(
    session: AsyncSession, *, view: MetadataView, access: CallerAccess, request: ChangesRequest
) -> DeletedResponse:
    window, rows = await _changed(session, view, access, request, deleted=True)
    return DeletedResponse(
        deleted=[DeletedRecord(id=i, deleted_ms=_ms(stamp)) for i, stamp in rows],
        earliest_available_ms=window.earliest,
        latest_covered_ms=window.covered,
    )


async def recent_records(
    session: AsyncSession, *, view: MetadataView, access: CallerAccess, request: RecentRequest
) -> RecentResponse:
    """One statement per object the caller may read (one object when named). A system
    object (User, Organization, ...) has no recent records: it is a read-only projection
    (ADR 0074), and Nexus records no "last viewed"."""
    summary = None
    if request.object is not None:
        system = describe_system_object(view, request.object)
        if system is not None:
            return RecentResponse(summary=system.summary, records=[])
        summary = describe_object(view, access, request.object).summary
        objects = [_readable(view, access, request.object)]
    else:
        objects = [o for o in view.objects.values() if access.object(view, o).read]
    found: list[tuple[datetime, RecentRecord]] = []
    for obj in sorted(objects, key=lambda o: o.api_name.lower()):
        table = view.table(obj)
        with_name = access.field(view, obj, obj.name_field)[0]
        name = table.c.name if with_name else table.c.id
        stmt = (
            select(table.c.id, name.label("name"), table.c.last_modified_date)
            .where(
                table.c.org_id == access.org_id,
                table.c.is_deleted.is_(False),
                table.c.last_modified_by_id == access.user_id,
                access.row_predicate(view, obj, "read"),
            )
            .order_by(table.c.last_modified_date.desc(), table.c.id)
            .limit(request.limit)
        )
        for record_id, value, stamp in await session.execute(stmt):
            record = RecentRecord(
                object=obj.api_name, id=str(record_id), name=str(value) if with_name else None
            )
            found.append((stamp, record))
    found.sort(key=lambda f: f[0], reverse=True)
    return RecentResponse(summary=summary, records=[r for _, r in found[: request.limit]])
