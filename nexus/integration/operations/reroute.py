"""Re-route a dead WorkItem from its stored receipt with the CURRENT route (docs/adr/0044).

A dead item's replay re-sends the command its event recorded, so it is refused when the
route's command mapping changed since (`ROUTE_CHANGED`, `operations.py`). When Runtime
definitely refused that command — the item is `dead` with failure class `terminal` (an answer
that retrying cannot change; never a timeout or an unknown outcome, which end `retryable` or
`outcome_unknown`) — nothing of it was applied: Runtime dedupes by message id, so an earlier
attempt that was applied would have been answered with its success, not a refusal. Then the
delivery can be mapped again: in ONE transaction the dead item is cancelled (CAS on `dead`;
a halted lane moves on), the receipt's body is mapped by the current active route into a NEW
event (next ordinal) with a new WorkItem (new message id, so Runtime treats it as a new
command), and the decision is audited (`reroute`).

Refused (fail closed): `NOT_FOUND`, `NOT_DEAD` (pending, outcome unknown, finished, or
re-routed/replayed by someone else), `NOT_REFUSED` (its last failure was not a definite
refusal), `REPLAYABLE` (the current route maps it as before: replay it instead), the route
refusals of a replay (`ROUTE_NOT_FOUND`, `ROUTE_INACTIVE`, `PACK_UNVERIFIABLE`),
`BODY_GONE`, `MAPPING_FAILED` (the current route cannot map the stored body).
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from nexus.integration.delivery import models as delivery_tables
from nexus.integration.ingress.bodies import read_body
from nexus.integration.operations import reroute_repository as repo
from nexus.integration.operations.repository import OperationsRepository
from nexus.integration.operations.service import REFUSED, Decision, Operator, Report, refusal
from nexus.integration.routing.mapping import MappingFailed
from nexus.integration.routing.router import (
    EXECUTOR_OWNER,
    RouterSettings,
    enqueue_work,
    map_receipt,
)
from nexus.integration.routing.router_repository import (
    ClaimedReceipt,
    current_routes,
    insert_events,
)
from nexus.integration.routing.routes import ActiveRoute
from nexus.platform.db.clock import read_now_ms
from nexus.platform.workqueue import operate
from nexus.platform.workqueue.store import DEAD, QueuePolicy, WorkStore

REROUTED = "rerouted"
NOT_DEAD = "NOT_DEAD"
NOT_REFUSED = "NOT_REFUSED"
REPLAYABLE = "REPLAYABLE"
BODY_GONE = "BODY_GONE"
MAPPING_FAILED = "MAPPING_FAILED"
#: Only a definite refusal (the worker's class for a terminal answer) may be re-routed.
DEFINITE = "terminal"
#: Codes of a replay refusal that a re-route from the receipt resolves.
MAPPING_CHANGED = {"ROUTE_CHANGED", "ROUTE_HISTORY_MISSING"}


async def reroute_items(
    engine: AsyncEngine, *, operator: Operator, var_dir: Path, work_ids: Sequence[str]
) -> Report:
    """Re-route the named dead items (at most `operate.MAX_BATCH`), each checked on its own;
    one transaction."""
    wanted = list(dict.fromkeys(work_ids))[: operate.MAX_BATCH]
    async with engine.begin() as conn:
        ops_repo = OperationsRepository(conn)
        rows = await ops_repo.items_with_context(org_id=operator.org_id, work_ids=wanted)
        versions: dict[tuple[str, str], set[int]] = {}
        for row in rows.values():
            versions.setdefault((row.connector, row.route_key), set()).add(int(row.route_version))
        routes = await ops_repo.routes(org_id=operator.org_id, wanted=versions)
        active = await current_routes(conn, org_id=operator.org_id)
        now_ms = await read_now_ms(conn)
        decisions = []
        for work_id in wanted:
            row = rows.get(work_id)
            why = _refusal(row, routes)
            if why is None:
                why = await _Rerouter(conn, operator.org_id, var_dir, active, now_ms).one(row)
            decisions.append(
                Decision(work_id, REROUTED, None, why[1])
                if why[0] == REROUTED
                else Decision(work_id, REFUSED, *why)
            )
        await ops_repo.audit(
            org_id=operator.org_id,
            actor=operator.user_id,
            entries=[
                (
                    "reroute",
                    d.target,
                    d.outcome,
                    d.reason if d.code is None else f"{d.code}: {d.reason}",
                )
                for d in decisions
            ],
        )
    return Report(decisions)


def _refusal(row: Any, routes: dict[Any, Any]) -> tuple[str, str] | None:
    if row is None:
        return operate.NOT_FOUND, "no such work item in this org"
    if row.state != DEAD:
        return NOT_DEAD, f"the item is {row.state}, not dead"
    if row.failure_class != DEFINITE:
        return NOT_REFUSED, (
            "its last failure was not a definite refusal by Runtime, so its command may have "
            "been applied; replay it instead"
        )
    why = refusal(row, routes)
    if why is None:
        return REPLAYABLE, "the current route maps this event as before: replay it instead"
    if why[0] not in MAPPING_CHANGED:
        return why
    return None


@dataclass(frozen=True)
class _Rerouter:
    conn: AsyncConnection
    org_id: str
    var_dir: Path
    routes: dict[tuple[str, str], ActiveRoute]  # the org's active routes
    now_ms: int

    async def one(self, row: Any) -> tuple[str, str]:
        """(REROUTED, what was made) or a refusal (code, reason); writes only when it
        re-routes."""
        conn, org = self.conn, self.org_id
        receipt = await repo.stored_receipt(conn, org_id=org, receipt_id=row.receipt_id)
        body = None if receipt is None else await asyncio.to_thread(_body, self.var_dir, receipt)
        if receipt is None or body is None:
            return BODY_GONE, "the delivery's receipt or its body is no longer kept"
        route = self.routes.get((row.connector, row.route_key))
        if route is None:
            return "ROUTE_INACTIVE", f"route {row.connector}/{row.route_key} is inactive"
        ordinal = await repo.next_ordinal(conn, org_id=org, receipt_id=receipt.receipt_id)
        try:
            made = map_receipt(receipt, body, route, ordinal=ordinal)
        except MappingFailed as exc:
            return MAPPING_FAILED, f"the current route cannot map the delivery: {exc}"
        if not await _cancel(conn, row.id, org_id=org):
            return NOT_DEAD, "the item was replayed, skipped or re-routed by someone else meanwhile"
        await insert_events(conn, [made.event], now_ms=self.now_ms)
        event_id = made.event["event_id"]
        if made.item is not None:
            await enqueue_work(
                conn,
                WorkStore(delivery_tables.work, owner=EXECUTOR_OWNER),
                org,
                [(event_id, made.item)],
                now_ms=self.now_ms,
                policy=QueuePolicy(max_attempts=RouterSettings().work_max_attempts),
                known=set(),
            )
        await repo.record_event(conn, org_id=org, receipt_id=receipt.receipt_id, event_id=event_id)
        new = "no work (the route maps no command)" if made.item is None else made.item.id
        return REROUTED, f"event {event_id} (route version {route.version}), work {new}"


async def _cancel(conn: AsyncConnection, work_id: str, *, org_id: str) -> bool:
    """Cancel the dead item; when it halts its lane, the lane moves on past it."""
    skipped = await operate.skip_head(conn, delivery_tables.work, work_id, org_id=org_id)
    if skipped.done:
        return True
    if skipped.refused[0].reason != operate.NOT_HALTING:
        return False
    return await repo.cancel_dead(conn, work_id=work_id)


def _body(var_dir: Path, receipt: ClaimedReceipt) -> bytes | None:
    try:
        if receipt.body_snapshot is not None:
            body = bytes(receipt.body_snapshot)
        elif receipt.body_ref is not None:
            body = read_body(var_dir, receipt.body_ref)
        else:
            return None
    except (OSError, ValueError):
        return None
    return body if hashlib.sha256(body).hexdigest() == receipt.payload_sha256 else None
