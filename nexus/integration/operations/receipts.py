"""Failed receipts: list them and replay them through the CURRENT route (docs/adr/0044).

A receipt whose routing failed for good (`router_status = 'failed'`: the route's pointer found
nothing, a value did not fit, the body is not JSON, ...) materialized nothing: no event, no
WorkItem, nothing reached Runtime. So once an operator has fixed the route, the receipt can be
routed again as if it had just arrived: replay puts it back to `received` (attempts reset,
due now, error cleared) and the receipt router maps it with the route's current active
version. That is unlike a dead WorkItem's replay (`operations.py`), which re-sends a command
already mapped and is refused when the mapping changed.

Refused, with a code and reason (fail closed), when the receipt
- is not this org's or does not exist (`NOT_FOUND`);
- is not failed (`NOT_FAILED`: waiting for the router, already materialized, or another
  operator replayed it first — the status change is a CAS on `failed`);
- has an event after all (`ALREADY_ROUTED`; never written by the router, checked anyway);
- has no body any more (`BODY_GONE`: no row snapshot and its var-dir file is missing or not
  the size it had);
- names a route that no longer exists (`ROUTE_NOT_FOUND`) or is inactive (`ROUTE_INACTIVE`).
Every decision is audited (`replay_receipt`, target = receipt id); a bulk replay also writes
one summary row (`replay_receipts`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from nexus.integration.ingress.bodies import SCHEME
from nexus.integration.operations.receipts_repository import (
    FailedFilter,
    FailedReceiptsRepository,
    ReplayCandidate,
)
from nexus.integration.operations.repository import OperationsRepository
from nexus.integration.operations.service import (
    MAX_BULK,
    PAGE,
    REFUSED,
    REPLAYED,
    Decision,
    Operator,
    Report,
)
from nexus.integration.routing.router_repository import FAILED
from nexus.platform.db.clock import read_now_ms
from nexus.platform.db.engine import reading
from nexus.platform.workqueue.operate import MAX_BATCH
from nexus.platform.workqueue.store import new_token

NOT_FOUND = "NOT_FOUND"
NOT_FAILED = "NOT_FAILED"
ALREADY_ROUTED = "ALREADY_ROUTED"
BODY_GONE = "BODY_GONE"
ROUTE_NOT_FOUND = "ROUTE_NOT_FOUND"
ROUTE_INACTIVE = "ROUTE_INACTIVE"

AUDIT_ONE = "replay_receipt"
AUDIT_BULK = "replay_receipts"


@dataclass(frozen=True)
class FailedReceiptQuery:
    connector: str | None = None
    route: str | None = None
    delivery_id: str | None = None
    since_ms: int | None = None
    until_ms: int | None = None
    cursor: tuple[int, str] | None = None
    limit: int = PAGE

    def where(self, *, until_ms: int | None = None) -> FailedFilter:
        return FailedFilter(
            connector=self.connector,
            route_key=self.route,
            delivery_id=self.delivery_id,
            since_ms=self.since_ms,
            until_ms=self.until_ms if until_ms is None else until_ms,
        )


async def failed_receipts(
    engine: AsyncEngine, *, operator: Operator, query: FailedReceiptQuery
) -> tuple[list[Any], tuple[int, str] | None]:
    """A page of the org's failed receipts (oldest failure first) and the next cursor."""
    async with reading(engine) as conn:
        rows = await FailedReceiptsRepository(conn).page(
            org_id=operator.org_id, where=query.where(), cursor=query.cursor, limit=query.limit
        )
    more = len(rows) == query.limit and rows
    return rows, (int(rows[-1].failed_at_ms), rows[-1].receipt_id) if more else None


def _body_kept(var_dir: Path, receipt: ReplayCandidate) -> bool:
    """The body the router will need is still there (row snapshot, or its var-dir file at
    the size it was received with)."""
    if receipt.has_snapshot:
        return True
    if receipt.body_ref is None or not receipt.body_ref.startswith(SCHEME):
        return False
    root = var_dir.resolve()
    path = (root / receipt.body_ref.removeprefix(SCHEME)).resolve()
    try:
        return path.is_relative_to(root) and path.stat().st_size == receipt.body_bytes
    except OSError:
        return False


async def _replay(
    repo: FailedReceiptsRepository,
    operator: Operator,
    var_dir: Path,
    wanted: Sequence[str],
) -> list[Decision]:
    """Decide and requeue one batch in the caller's transaction; audit every decision."""
    org = operator.org_id
    found = await repo.candidates(org_id=org, receipt_ids=wanted)
    decisions: list[Decision] = []

    def refuse(receipt_id: str, code: str, reason: str) -> None:
        decisions.append(Decision(receipt_id, REFUSED, code, reason))

    failed: list[ReplayCandidate] = []
    for receipt_id in wanted:
        receipt = found.get(receipt_id)
        if receipt is None:
            refuse(receipt_id, NOT_FOUND, "no such receipt in this org")
        elif receipt.router_status != FAILED:
            refuse(receipt_id, NOT_FAILED, _not_failed(receipt.router_status))
        else:
            failed.append(receipt)
    routed = await repo.with_events(org_id=org, receipt_ids=[r.receipt_id for r in failed])
    routes = await repo.active_routes(org_id=org, keys={(r.connector, r.route_key) for r in failed})
    kept = await asyncio.to_thread(lambda: {r.receipt_id: _body_kept(var_dir, r) for r in failed})
    ready: list[str] = []
    for receipt in failed:
        why = _refusal(receipt, routed, kept, routes)
        if why is None:
            ready.append(receipt.receipt_id)
        else:
            refuse(receipt.receipt_id, *why)
    won = await repo.requeue(org_id=org, receipt_ids=ready, marker=new_token())
    for receipt_id in ready:
        if receipt_id in won:
            decisions.append(Decision(receipt_id, REPLAYED))
        else:  # another operator's replay got there first
            refuse(receipt_id, NOT_FAILED, _not_failed("replayed"))
    await OperationsRepository(repo.conn).audit(
        org_id=org,
        actor=operator.user_id,
        entries=[
            (
                AUDIT_ONE,
                d.target,
                d.outcome,
                None if d.code is None else f"{d.code}: {d.reason}",
            )
            for d in decisions
        ],
    )
    return decisions


def _refusal(
    receipt: ReplayCandidate,
    routed: set[str],
    kept: dict[str, bool],
    routes: dict[tuple[str, str], bool],
) -> tuple[str, str] | None:
    """Why a failed receipt cannot be routed again now (None: it can)."""
    name = f"{receipt.connector}/{receipt.route_key}"
    active = routes.get((receipt.connector, receipt.route_key))
    if receipt.receipt_id in routed:
        return ALREADY_ROUTED, "the receipt already has an event"
    if not kept[receipt.receipt_id]:
        return BODY_GONE, "the receipt's body is no longer kept"
    if active is None:
        return ROUTE_NOT_FOUND, f"route {name} no longer exists"
    if not active:
        return ROUTE_INACTIVE, f"route {name} is inactive"
    return None


def _not_failed(status: str) -> str:
    return {
        "received": "the receipt is waiting for the router (not failed)",
        "materialized": "the receipt was already routed into an event (not failed)",
        "replayed": "the receipt was replayed by someone else meanwhile (not failed)",
    }.get(status, f"the receipt is {status}, not failed")


async def replay_receipts(
    engine: AsyncEngine, *, operator: Operator, var_dir: Path, receipt_ids: Sequence[str]
) -> Report:
    """Replay the named failed receipts (at most `MAX_BATCH`), each checked on its own."""
    wanted = list(dict.fromkeys(receipt_ids))[:MAX_BATCH]
    async with engine.begin() as conn:
        decisions = await _replay(FailedReceiptsRepository(conn), operator, var_dir, wanted)
    return Report(decisions)


async def replay_failed_since(
    engine: AsyncEngine,
    *,
    operator: Operator,
    var_dir: Path,
    query: FailedReceiptQuery,
    max_items: int = MAX_BULK,
) -> Report:
    """Replay every receipt matching `query` that failed since `query.since_ms` (and before
    `until_ms`, by default the start of this call, so a receipt that fails again meanwhile is
    not taken twice), page by page, each page its own transaction; stops after `max_items`
    with `next_cursor` set."""
    report = Report()
    async with reading(engine) as conn:
        started = await read_now_ms(conn)
    until = query.until_ms if query.until_ms is not None else started
    where = query.where(until_ms=until)
    cursor = query.cursor
    while len(report.decisions) < max_items:
        async with engine.begin() as conn:
            repo = FailedReceiptsRepository(conn)
            page = await repo.page(
                org_id=operator.org_id,
                where=where,
                cursor=cursor,
                limit=min(PAGE, max_items - len(report.decisions)),
            )
            if not page:
                cursor = None
                break
            report.decisions += await _replay(repo, operator, var_dir, [r.receipt_id for r in page])
        cursor = (int(page[-1].failed_at_ms), page[-1].receipt_id)
    report.next_cursor = cursor if len(report.decisions) >= max_items else None
    async with engine.begin() as conn:
        summary = (
            f"since={query.since_ms} until={until} route={query.connector}/{query.route} "
            f"delivery={query.delivery_id}: replayed {report.count(REPLAYED)}, "
            f"refused {report.count(REFUSED)}"
        )
        await OperationsRepository(conn).audit(
            org_id=operator.org_id,
            actor=operator.user_id,
            entries=[(AUDIT_BULK, f"since:{query.since_ms}", "done", summary)],
        )
    return report
