"""Every statement of the receipt router: claim receipts, fence, write events, mark receipts.

A router claim is a lease on receipt rows: `lease_token` (fresh per batch), `lease_owner`,
`lease_until_ms`, and `next_attempt_at_ms` set to the lease expiry, so "claimable" is one
range of `ix_ingress_receipt_router`: `router_status = 'received' AND next_attempt_at_ms <=
db now` covers new receipts, retries that are due and leases that expired. Every later write
carries `lease_token = :token AND router_status = 'received'`.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, bindparam, literal, or_, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from nexus.integration.delivery import models as delivery_tables
from nexus.integration.ingress import models as ingress_tables
from nexus.integration.routing import models as routing_tables
from nexus.integration.routing.routes import ActiveRoute, RouteDeclaration
from nexus.platform.db import fast_sql
from nexus.platform.db.backend import insert_ignore
from nexus.platform.db.clock import db_now_ms

RECEIVED = "received"
MATERIALIZED = "materialized"
FAILED = "failed"
MAX_ERROR = 300
FIRST_EVENT = "-0"  # a receipt's first (so far only) event is `<receipt_id>-0`


@dataclass(frozen=True)
class ClaimedReceipt:
    org_id: str
    receipt_id: str
    connector: str
    route_key: str
    provider_delivery_id: str
    event_kind: str | None
    received_at_ms: int
    correlation: dict[str, str]
    body_snapshot: bytes | None
    body_ref: str | None
    payload_sha256: str
    attempts: int  # this claim included


async def receipt_orgs(conn: AsyncConnection) -> list[str]:
    """The orgs that have (or had) routes: receipts are claimed per org, along the index."""
    rows = await conn.execute(select(routing_tables.route.c.org_id).distinct())
    return sorted(str(r[0]) for r in rows)


def after_in_router_order(cursor: tuple[int, str]) -> Any:
    """Receipts after `cursor` in the router index's order `(next_attempt_at_ms, receipt_id)`:
    the keyset condition of a page that continues where the previous one stopped."""
    at, receipt_id = cursor
    t = ingress_tables.ingress_receipt
    return or_(
        t.c.next_attempt_at_ms > at,
        and_(t.c.next_attempt_at_ms == at, t.c.receipt_id > receipt_id),
    )


def _claimable() -> Any:
    t = ingress_tables.ingress_receipt
    return (t.c.router_status == RECEIVED) & (t.c.next_attempt_at_ms <= db_now_ms())


# The router's per-round statements are built once (bound parameters, expanding IN lists):
# building a statement and its cache key costs more CPU than running it on SQLite.
_ri = ingress_tables.ingress_receipt
_DUE = (
    select(_ri.c.receipt_id)
    .where(_ri.c.org_id == bindparam("org"), _claimable())
    .order_by(_ri.c.next_attempt_at_ms, _ri.c.receipt_id)
    .limit(bindparam("limit"))
)
_IN_BATCH = (_ri.c.org_id == bindparam("org")) & _ri.c.receipt_id.in_(
    bindparam("ids", expanding=True)
)
_HELD = _IN_BATCH & (_ri.c.lease_token == bindparam("token")) & (_ri.c.router_status == RECEIVED)
_CLAIM = (
    update(_ri)
    .where(_IN_BATCH, _claimable())
    .values(
        lease_token=bindparam("token"),
        lease_owner=bindparam("owner"),
        lease_until_ms=db_now_ms() + bindparam("lease_ms"),
        next_attempt_at_ms=db_now_ms() + bindparam("lease_ms"),
        router_attempts=_ri.c.router_attempts + 1,
    )
)


async def due_receipts(conn: AsyncConnection, *, org_id: str, limit: int) -> list[str]:
    """Up to `limit` claimable receipt ids, oldest due first (a read: on SQLite an idle poll
    never takes the write lock)."""
    rows = await fast_sql.execute(conn, _DUE, {"org": org_id, "limit": limit})
    return [r[0] for r in rows]


async def claim_receipts(
    conn: AsyncConnection,
    *,
    org_id: str,
    ids: Sequence[str],
    token: str,
    owner: str,
    lease_ms: int,
) -> list[ClaimedReceipt]:
    """Claim those of `ids` that are still claimable under `token` (one UPDATE, CAS on the
    claimable predicate); returns the winners' rows, oldest first."""
    batch = {"org": org_id, "ids": list(ids), "token": token}
    await fast_sql.execute(conn, _CLAIM, batch | {"owner": owner[:128], "lease_ms": lease_ms})
    rows = await fast_sql.execute(conn, _READ_CLAIMED, batch)
    claimed = [receipt_of(org_id, r) for r in rows]
    return sorted(claimed, key=lambda c: (c.received_at_ms, c.receipt_id))


#: The columns a receipt is routed from (body snapshot or reference included).
RECEIPT_READ = tuple(
    ingress_tables.ingress_receipt.c[name]
    for name in (
        "receipt_id",
        "connector",
        "route_key",
        "provider_delivery_id",
        "event_kind",
        "received_at_ms",
        "correlation",
        "body_snapshot",
        "body_ref",
        "payload_sha256",
        "router_attempts",
    )
)
_READ_CLAIMED = select(*RECEIPT_READ).where(_IN_BATCH, _ri.c.lease_token == bindparam("token"))


def receipt_of(org_id: str, r: Any) -> ClaimedReceipt:
    """A row of `RECEIPT_READ` as the router holds it."""
    return ClaimedReceipt(
        org_id=org_id,
        receipt_id=r.receipt_id,
        connector=r.connector,
        route_key=r.route_key,
        provider_delivery_id=r.provider_delivery_id,
        event_kind=r.event_kind,
        received_at_ms=int(r.received_at_ms),
        correlation=parse_correlation(r.correlation),
        body_snapshot=r.body_snapshot,
        body_ref=r.body_ref,
        payload_sha256=r.payload_sha256,
        attempts=int(r.router_attempts),
    )


def parse_correlation(raw: str | None) -> dict[str, str]:
    try:
        value = json.loads(raw or "{}")
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}


_FENCE = (
    update(_ri)
    .where(_HELD)
    .values(
        lease_until_ms=db_now_ms() + bindparam("lease_ms"),
        next_attempt_at_ms=db_now_ms() + bindparam("lease_ms"),
    )
)
_HELD_IDS = select(_ri.c.receipt_id).where(_HELD)
_ROUTES = select(routing_tables.route.c.version, routing_tables.route.c.body).where(
    routing_tables.route.c.org_id == bindparam("org"), routing_tables.route.c.active.is_(True)
)
_LINKED = select(
    delivery_tables.event_work.c.event_id, delivery_tables.event_work.c.work_type
).where(
    delivery_tables.event_work.c.org_id == bindparam("org"),
    delivery_tables.event_work.c.event_id.in_(bindparam("ids", expanding=True)),
)
_MATERIALIZE = (
    update(_ri)
    .where(_HELD)
    .values(
        router_status=MATERIALIZED,
        materialized_event_ids=literal('["') + _ri.c.receipt_id + literal(f'{FIRST_EVENT}"]'),
        lease_until_ms=None,
        error=None,
    )
)


async def fence_receipts(
    conn: AsyncConnection, *, org_id: str, token: str, ids: Sequence[str], lease_ms: int
) -> bool:
    """First statement of a materialization: renew the leases of `ids` (taking their row
    locks on MySQL until commit); False when any of them is no longer held under `token`."""
    renewed = await fast_sql.execute(
        conn, _FENCE, {"org": org_id, "ids": list(ids), "token": token, "lease_ms": lease_ms}
    )
    return renewed.rowcount == len(ids)


async def held_receipts(
    conn: AsyncConnection, *, org_id: str, token: str, ids: Sequence[str]
) -> set[str]:
    rows = await fast_sql.execute(
        conn, _HELD_IDS, {"org": org_id, "ids": list(ids), "token": token}
    )
    return {r[0] for r in rows}


async def current_routes(
    conn: AsyncConnection, *, org_id: str
) -> dict[tuple[str, str], ActiveRoute]:
    """The org's active routes by (connector, route key), read in the caller's transaction."""
    rows = await fast_sql.execute(conn, _ROUTES, {"org": org_id})
    routes = [
        ActiveRoute(
            org_id=org_id,
            version=int(r.version),
            declaration=RouteDeclaration.model_validate_json(r.body),
        )
        for r in rows
    ]
    return {route.key: route for route in routes}


@functools.cache
def _insert_events(dialect: str) -> Any:
    """The event insert-or-ignore, built once per dialect (its IGNORE is spelled per
    dialect); every column a bound value, so it runs on `fast_sql`."""
    table = routing_tables.connector_event
    return insert_ignore(table, dialect).values(fast_sql.row_values(table))


_LINK_WORK = delivery_tables.event_work.insert().values(
    fast_sql.row_values(delivery_tables.event_work)
)


async def insert_events(
    conn: AsyncConnection, rows: Sequence[dict[str, Any]], *, now_ms: int
) -> None:
    """Immutable events; an event id that exists already is left as it is. Each row names
    every column but `created_at_ms`. (`now_ms` is the database clock read by the caller:
    with only bound values the MySQL driver sends one multi-row INSERT, with a SQL
    expression among them it sends one INSERT per row.)"""
    if rows:
        statement = _insert_events(conn.dialect.name)
        await fast_sql.execute(conn, statement, [row | {"created_at_ms": now_ms} for row in rows])


async def linked_work(
    conn: AsyncConnection, *, org_id: str, event_ids: Sequence[str]
) -> set[tuple[str, str]]:
    """The (event id, work type) pairs that already have their WorkItem."""
    if not event_ids:
        return set()
    rows = await fast_sql.execute(conn, _LINKED, {"org": org_id, "ids": list(event_ids)})
    return {(r[0], r[1]) for r in rows}


async def link_work(conn: AsyncConnection, rows: Sequence[dict[str, Any]], *, now_ms: int) -> None:
    """(event id, work type) -> work id; the primary key refuses a second WorkItem."""
    if rows:
        await fast_sql.execute(conn, _LINK_WORK, [row | {"created_at_ms": now_ms} for row in rows])


async def mark_materialized(
    conn: AsyncConnection, *, org_id: str, token: str, ids: Sequence[str]
) -> None:
    """Receipts done, each into its one event `<receipt_id>-0` (the event ids are written
    by the database, so one statement serves the batch); the lease closes, the token stays
    for audit."""
    if not ids:
        return
    await fast_sql.execute(conn, _MATERIALIZE, {"org": org_id, "ids": list(ids), "token": token})


async def mark_failed(
    conn: AsyncConnection, *, org_id: str, token: str, errors: dict[str, str]
) -> None:
    """Terminal routing failures with their sanitized reason. `next_attempt_at_ms` becomes
    the failure time (db clock), so failed receipts are listed and replayed "since T" along
    the router index (docs/adr/0044)."""
    if errors:
        await conn.execute(
            _holder_update(org_id, token).values(
                router_status=FAILED,
                error=bindparam("b_error"),
                lease_until_ms=None,
                next_attempt_at_ms=db_now_ms(),
            ),
            [{"b_id": rid, "b_error": error[:MAX_ERROR]} for rid, error in errors.items()],
        )


async def mark_retry(
    conn: AsyncConnection, *, org_id: str, token: str, retries: dict[str, tuple[int, str]]
) -> None:
    """Transient failures: due again after their delay, lease given up, reason kept."""
    if not retries:
        return
    await conn.execute(
        _holder_update(org_id, token).values(
            next_attempt_at_ms=db_now_ms() + bindparam("b_delay"),
            error=bindparam("b_error"),
            lease_token=None,
            lease_owner=None,
            lease_until_ms=None,
        ),
        [
            {"b_id": rid, "b_delay": delay, "b_error": error[:MAX_ERROR]}
            for rid, (delay, error) in retries.items()
        ],
    )


def _holder_update(org_id: str, token: str) -> Any:
    t = ingress_tables.ingress_receipt
    return update(t).where(
        t.c.org_id == org_id,
        t.c.receipt_id == bindparam("b_id"),
        t.c.lease_token == token,
        t.c.router_status == RECEIVED,
    )
