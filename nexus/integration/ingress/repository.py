"""The SQL of storing webhook receipts: one insert with dedupe per delivery id, and the
SQLite fast lane's DB-API form of it."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, bindparam, select, update

from nexus.integration.ingress import models as ingress_tables
from nexus.platform.db.backend import insert_ignore
from nexus.platform.db.clock import db_now_ms
from nexus.platform.json_text import compact_json


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
            "digest_mismatches": 0,
            "correlation": compact_json(self.correlation),
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
    def delivery_key(self) -> tuple[str, str, str, str]:
        """What makes a delivery one: the same provider delivery id on one route of one
        connector of one org (another route of the connector is another delivery)."""
        return (self.org_id, self.connector, self.route_key, self.provider_delivery_id)


@dataclass(frozen=True)
class Stored:
    receipt_id: str
    duplicate: bool
    #: a redelivery whose body digest differs from the stored receipt's: the provider sent
    #: something else under a delivery id it had used (counted on the receipt and a metric)
    digest_mismatch: bool = False


#: Rows per multi-row INSERT: x 21 parameters stays under SQLite's 32,766 limit.
ROWS_PER_STATEMENT = 1000
#: Body bytes per multi-row INSERT: hex-encoded for MySQL (8 MiB) under its 16 MiB packet.
BODY_BYTES_PER_STATEMENT = 4 * 1024 * 1024


def _insert(conn: Connection, params: list[dict[str, Any]]) -> int:
    """INSERT-or-ignore `params` as multi-row statements; returns how many were inserted.

    Not `executemany`: on SQLite it steps the statement once per row, giving up and retaking
    the GIL each time (a wait, in a busy process), and PyMySQL only folds an executemany
    into one multi-row INSERT when every value is a bare placeholder (ours carry the
    database clock and `UNHEX()`), so MariaDB got one round trip per row.
    """
    return _insert_rows(
        conn.dialect, params, lambda sql, flat: int(conn.exec_driver_sql(sql, flat).rowcount)
    )


def _insert_rows(
    dialect: Any, params: list[dict[str, Any]], run: Callable[[str, tuple[Any, ...]], int]
) -> int:
    """`_insert`'s statements for `dialect`, each handed to `run(sql, parameters)`, which
    returns how many rows it inserted."""
    template = _row_template(dialect, tuple(params[0]))
    inserted = 0
    for chunk in _chunks(params):
        flat = tuple(
            process(row[key]) if process else row[key]
            for row in chunk
            for key, process in template.order
        )
        inserted += run(template.sql(len(chunk)), flat)
    return inserted


def _chunks(params: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    chunks: list[list[dict[str, Any]]] = [[]]
    size = 0
    for row in params:
        body = len(row["body_snapshot"] or b"")
        full = len(chunks[-1]) >= ROWS_PER_STATEMENT or size + body > BODY_BYTES_PER_STATEMENT
        if chunks[-1] and full:
            chunks.append([])
            size = 0
        chunks[-1].append(row)
        size += body
    return chunks


@dataclass(frozen=True)
class _RowTemplate:
    head: str  # INSERT ... (columns)
    group: str  # one row's (placeholders and the database clock)
    order: tuple[tuple[str, Any], ...]  # (parameter, its bind processor or None)
    _sql: dict[int, str] = field(default_factory=dict, compare=False)

    def sql(self, rows: int) -> str:
        """The INSERT of `rows` rows (kept per row count: batches repeat their sizes)."""
        text = self._sql.get(rows)
        if text is None:
            text = f"{self.head} VALUES {', '.join([self.group] * rows)}"
            if len(self._sql) < 64:
                self._sql[rows] = text
        return text


@functools.lru_cache(maxsize=8)
def _row_template(dialect: Any, keys: tuple[str, ...]) -> _RowTemplate:
    """The one-row INSERT as SQLAlchemy compiles it for `dialect`, cut for repetition."""
    t = ingress_tables.ingress_receipt
    now = db_now_ms()  # the database clock is part of the statement
    statement = insert_ignore(t, dialect.name).values(
        received_at_ms=now, last_delivery_at_ms=now, next_attempt_at_ms=now
    )
    compiled = statement.compile(dialect=dialect, column_keys=list(keys))
    if not compiled.positional:  # both drivers take positional parameters
        raise RuntimeError(f"{dialect.name}: expected a positional paramstyle")
    head, group = str(compiled).split(" VALUES ", 1)
    order = tuple(
        (key, t.c[key].type.dialect_impl(dialect).bind_processor(dialect))
        for key in compiled.positiontup or ()
    )
    return _RowTemplate(head, group, order)


def store_receipts(conn: Connection, rows: Sequence[ReceiptRow]) -> list[Stored]:
    """Insert a batch in the caller's transaction; a known delivery resolves to its receipt.

    Synchronous, so a writer can run a whole transaction on a driver thread in one hop (or
    through `AsyncConnection.run_sync`). Statements: one INSERT-or-ignore for the whole
    batch (`_insert`); only when it inserted fewer rows than it was given, one SELECT to read the
    existing ids back and one UPDATE per duplicate to count the redelivery. Within one batch
    the first row of a delivery wins.
    """
    t = ingress_tables.ingress_receipt
    inserted = _insert(conn, [row.values() for row in rows])
    if inserted == len(rows):
        return [Stored(row.receipt_id, False) for row in rows]
    wanted = {row.provider_delivery_id for row in rows}
    orgs = {row.org_id for row in rows}
    found = conn.execute(
        select(
            t.c.org_id,
            t.c.connector,
            t.c.route_key,
            t.c.provider_delivery_id,
            t.c.receipt_id,
            t.c.payload_sha256,
        ).where(t.c.org_id.in_(orgs), t.c.provider_delivery_id.in_(wanted))
    )
    owner = {
        (r.org_id, r.connector, r.route_key, r.provider_delivery_id): (
            r.receipt_id,
            r.payload_sha256,
        )
        for r in found
    }
    stored, redelivered = _resolve(rows, owner)
    for (org_id, receipt_id), (count, mismatched) in redelivered.items():
        conn.execute(
            update(t)
            .where(t.c.org_id == org_id, t.c.receipt_id == receipt_id)
            .values(
                deliveries=t.c.deliveries + count,
                digest_mismatches=t.c.digest_mismatches + mismatched,
                last_delivery_at_ms=db_now_ms(),
            )
        )
    return stored


def _resolve(
    rows: Sequence[ReceiptRow], owner: dict[tuple[str, str, str, str], tuple[str, str]]
) -> tuple[list[Stored], dict[tuple[str, str], tuple[int, int]]]:
    """Each row's receipt (its own, or the one already holding its delivery: `owner` maps a
    delivery key to that receipt's id and body digest) and, per (org, receipt) delivered
    again, how many times and how many of those carried another body."""
    stored: list[Stored] = []
    redelivered: dict[tuple[str, str], tuple[int, int]] = {}
    for row in rows:
        found = owner.get(row.delivery_key)
        if found is None:  # neither inserted nor present: the driver lied about rowcount
            raise RuntimeError("receipt batch: a row was neither inserted nor found")
        receipt_id, digest = found
        duplicate = receipt_id != row.receipt_id
        mismatch = duplicate and digest != row.payload_sha256
        stored.append(Stored(receipt_id, duplicate, mismatch))
        if duplicate:
            key = (row.org_id, receipt_id)
            times, mismatched = redelivered.get(key, (0, 0))
            redelivered[key] = (times + 1, mismatched + int(mismatch))
    return stored, redelivered


def store_receipts_sqlite(dbapi: Any, dialect: Any, rows: Sequence[ReceiptRow]) -> list[Stored]:
    """`store_receipts` straight on a sqlite3 connection (in the caller's `BEGIN IMMEDIATE`
    ... `COMMIT`), with the same statements' SQL built once: SQLAlchemy's execution and its
    transaction events were a third of the ingest writer's time per batch.

    The redelivery path reads each delivery key back through the table's unique index (a
    local call per key, not a round trip) and counts it with the same UPDATE."""
    inserted = _insert_rows(
        dialect, [row.values() for row in rows], lambda sql, flat: dbapi.execute(sql, flat).rowcount
    )
    if inserted == len(rows):
        return [Stored(row.receipt_id, False) for row in rows]
    lookup, count = _redelivery_sql(dialect)
    owner: dict[tuple[str, str, str, str], tuple[str, str]] = {}
    for key in dict.fromkeys(row.delivery_key for row in rows):
        found = dbapi.execute(lookup, key).fetchone()
        if found is not None:
            owner[key] = (found[0], found[1])
    stored, redelivered = _resolve(rows, owner)
    for (org_id, receipt_id), (times, mismatched) in redelivered.items():
        dbapi.execute(count, (times, mismatched, org_id, receipt_id))
    return stored


@functools.lru_cache(maxsize=4)
def _redelivery_sql(dialect: Any) -> tuple[str, str]:
    """(SELECT a delivery's receipt and body digest by (org, connector, route, delivery id);
    UPDATE a receipt's delivery and digest-mismatch counts by (count, mismatches, org,
    receipt id)), compiled for `dialect` (positional)."""
    t = ingress_tables.ingress_receipt
    lookup = select(t.c.receipt_id, t.c.payload_sha256).where(
        t.c.org_id == bindparam("org_id"),
        t.c.connector == bindparam("connector"),
        t.c.route_key == bindparam("route_key"),
        t.c.provider_delivery_id == bindparam("delivery_id"),
    )
    count = (
        update(t)
        .where(t.c.org_id == bindparam("org_id"), t.c.receipt_id == bindparam("receipt_id"))
        .values(
            deliveries=t.c.deliveries + bindparam("times"),
            digest_mismatches=t.c.digest_mismatches + bindparam("mismatched"),
            last_delivery_at_ms=db_now_ms(),
        )
    )
    compiled = [statement.compile(dialect=dialect) for statement in (lookup, count)]
    expected = [
        ("org_id", "connector", "route_key", "delivery_id"),
        ("times", "mismatched", "org_id", "receipt_id"),
    ]
    if [tuple(c.positiontup or ()) for c in compiled] != expected:
        raise RuntimeError(f"{dialect.name}: unexpected parameter order")
    return str(compiled[0]), str(compiled[1])
