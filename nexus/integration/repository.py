"""Every SQL statement of the integration context."""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, select, update
from sqlalchemy.dialects.sqlite import dialect as sqlite_dialect
from sqlalchemy.ext.asyncio import AsyncSession

from nexus.integration import models as m
from nexus.integration.routes import ActiveRoute, RouteDeclaration
from nexus.platform.db import db_now_ms, insert_ignore, read_db_now_ms

# ---------------------------------------------------------------- routes


@dataclass(frozen=True)
class AppliedRoute:
    connector: str
    route: str
    version: int
    changed: bool
    active: bool


class RouteRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def apply(self, *, org_id: str, declaration: RouteDeclaration) -> AppliedRoute:
        """Store a declaration; its version grows by one when its content changed."""
        t = m.route
        key = (
            (t.c.org_id == org_id)
            & (t.c.connector == declaration.connector)
            & (t.c.route_key == declaration.route)
        )
        current = (await self.session.execute(select(t.c.version, t.c.digest).where(key))).first()
        digest = declaration.digest()
        now = await read_db_now_ms(self.session)
        values = {
            "body": declaration.canonical(),
            "digest": digest,
            "active": declaration.active,
            "updated_at_ms": now,
        }
        if current is None:
            await self.session.execute(
                t.insert().values(
                    org_id=org_id,
                    connector=declaration.connector,
                    route_key=declaration.route,
                    version=1,
                    **values,
                )
            )
            version, changed = 1, True
        elif current.digest == digest:
            version, changed = int(current.version), False
        else:
            version, changed = int(current.version) + 1, True
            result = await self.session.execute(
                update(t)
                .where(key & (t.c.version == current.version))
                .values(version=version, **values)
            )
            # a concurrent apply moved it: let the caller retry
            if result.rowcount != 1:  # type: ignore[attr-defined]  # CursorResult
                raise RuntimeError("route changed concurrently; apply again")
        return AppliedRoute(
            declaration.connector, declaration.route, version, changed, declaration.active
        )

    async def active_routes(self, *, org_id: str | None) -> list[ActiveRoute]:
        t = m.route
        query = select(t.c.org_id, t.c.version, t.c.body).where(t.c.active.is_(True))
        if org_id is not None:
            query = query.where(t.c.org_id == org_id)
        rows = (await self.session.execute(query)).all()
        return [
            ActiveRoute(
                org_id=row.org_id,
                version=row.version,
                declaration=RouteDeclaration.model_validate_json(row.body),
            )
            for row in rows
        ]

    async def route(self, *, org_id: str | None, connector: str, route: str) -> ActiveRoute | None:
        for found in await self.active_routes(org_id=org_id):
            if found.key == (connector, route):
                return found
        return None


# ---------------------------------------------------------------- receipts


@dataclass
class ReceiptRow:
    """One verified delivery on its way into `integration_ingress_receipt`."""

    org_id: str
    receipt_id: str
    connector: str
    route_key: str
    route_version: int
    provider_delivery_id: str
    delivery_id_source: str
    method: str
    content_type: str | None
    event_kind: str | None
    correlation: dict[str, str]
    body_bytes: int
    body_snapshot: bytes | None
    body_ref: str | None
    payload_sha256: str
    signature_scheme: str
    signature_key_index: int | None

    def values(self) -> dict[str, Any]:
        return {
            "org_id": self.org_id,
            "receipt_id": self.receipt_id,
            "connector": self.connector,
            "route_key": self.route_key,
            "route_version": self.route_version,
            "provider_delivery_id": self.provider_delivery_id,
            "delivery_id_source": self.delivery_id_source,
            "method": self.method,
            "content_type": self.content_type,
            "event_kind": self.event_kind,
            "deliveries": 1,
            "correlation": json.dumps(self.correlation, separators=(",", ":")),
            "body_bytes": self.body_bytes,
            "body_snapshot": self.body_snapshot,
            "body_ref": self.body_ref,
            "payload_sha256": self.payload_sha256,
            "signature_scheme": self.signature_scheme,
            "signature_verdict": "verified",
            "signature_key_index": self.signature_key_index,
            "router_status": "received",
            "router_attempts": 0,
        }

    @property
    def delivery_key(self) -> tuple[str, str, str]:
        return (self.org_id, self.connector, self.provider_delivery_id)


@dataclass(frozen=True)
class Stored:
    receipt_id: str
    duplicate: bool


#: Rows per multi-row INSERT on SQLite (x 22 parameters, well under its 32,766 limit).
SQLITE_ROWS_PER_STATEMENT = 1000


def _clock() -> dict[str, Any]:
    # The database clock is part of the statement; every other column is a bound parameter.
    now = db_now_ms()
    return {"received_at_ms": now, "last_delivery_at_ms": now, "next_attempt_at_ms": now}


def _insert(conn: Connection, params: list[dict[str, Any]]) -> int:
    """INSERT-or-ignore `params`; returns how many rows were inserted.

    On SQLite, one multi-row statement per 1,000 rows: `executemany` steps SQLite once per
    row, and every step gives up and retakes the GIL, which in a busy process is a wait
    each time. Elsewhere `executemany` (the MySQL driver already sends multi-row INSERTs,
    split to fit the server's packet limit).
    """
    t = m.ingress_receipt
    dialect = conn.dialect.name
    if dialect != "sqlite":
        return int(conn.execute(insert_ignore(t, dialect).values(**_clock()), params).rowcount)
    inserted = 0
    for at in range(0, len(params), SQLITE_ROWS_PER_STATEMENT):
        chunk = params[at : at + SQLITE_ROWS_PER_STATEMENT]
        sql, keys = _sqlite_multirow_insert(tuple(chunk[0]), len(chunk))
        flat = tuple(row[key] for row in chunk for key in keys)
        inserted += int(conn.exec_driver_sql(sql, flat).rowcount)
    return inserted


@functools.lru_cache(maxsize=4)
def _sqlite_row_template(keys: tuple[str, ...]) -> tuple[str, str, tuple[str, ...]]:
    """The one-row INSERT as SQLAlchemy compiles it: (head, VALUES group, parameter order)."""
    statement = insert_ignore(m.ingress_receipt, "sqlite").values(**_clock())
    compiled = statement.compile(dialect=sqlite_dialect(), column_keys=list(keys))
    head, group = str(compiled).split(" VALUES ", 1)
    return head, group, tuple(compiled.positiontup or ())


@functools.lru_cache(maxsize=256)
def _sqlite_multirow_insert(keys: tuple[str, ...], rows: int) -> tuple[str, tuple[str, ...]]:
    head, group, order = _sqlite_row_template(keys)
    return f"{head} VALUES {', '.join([group] * rows)}", order


def store_receipts(conn: Connection, rows: Sequence[ReceiptRow]) -> list[Stored]:
    """Insert a batch in the caller's transaction; a known delivery resolves to its receipt.

    Synchronous, so a writer can run a whole transaction on a driver thread in one hop (or
    through `AsyncConnection.run_sync`). Statements: one INSERT-or-ignore for the whole
    batch (`_insert`); only when it inserted fewer rows than it was given, one SELECT to read the
    existing ids back and one UPDATE per duplicate to count the redelivery. Within one batch
    the first row of a delivery wins.
    """
    t = m.ingress_receipt
    inserted = _insert(conn, [row.values() for row in rows])
    if inserted == len(rows):
        return [Stored(row.receipt_id, False) for row in rows]
    wanted = {row.provider_delivery_id for row in rows}
    orgs = {row.org_id for row in rows}
    found = conn.execute(
        select(t.c.org_id, t.c.connector, t.c.provider_delivery_id, t.c.receipt_id).where(
            t.c.org_id.in_(orgs), t.c.provider_delivery_id.in_(wanted)
        )
    )
    owner = {(r.org_id, r.connector, r.provider_delivery_id): r.receipt_id for r in found}
    stored: list[Stored] = []
    redelivered: dict[tuple[str, str], int] = {}
    for row in rows:
        receipt_id = owner.get(row.delivery_key)
        if receipt_id is None:  # neither inserted nor present: the driver lied about rowcount
            raise RuntimeError("receipt batch: a row was neither inserted nor found")
        duplicate = receipt_id != row.receipt_id
        stored.append(Stored(receipt_id, duplicate))
        if duplicate:
            key = (row.org_id, receipt_id)
            redelivered[key] = redelivered.get(key, 0) + 1
    for (org_id, receipt_id), count in redelivered.items():
        conn.execute(
            update(t)
            .where(t.c.org_id == org_id, t.c.receipt_id == receipt_id)
            .values(deliveries=t.c.deliveries + count, last_delivery_at_ms=db_now_ms())
        )
    return stored
