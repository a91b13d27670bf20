"""Operating the integration: dead letters, replay, skip, purge, receipt and audit search.

The use cases behind `/admin/v1/integration/...` (`admin_endpoints.py`). Each runs in one
transaction (a bulk replay: one per page of `PAGE` items), sees only the operator's org, and
writes an `operator_audit` row for every item it acted on or refused (bulk actions also one
summary row). The operator was authorized by Runtime before any of this runs.

Replay is a new attempt of the same WorkItem (`workqueue.operate.replay`): it delivers the
event's stored command again, so it is done only when the CURRENT route provably maps the
event the same way; otherwise it is refused with a reason (fail closed):
- the route (org, connector, route key) exists (`ROUTE_NOT_FOUND`) and is active
  (`ROUTE_INACTIVE`);
- the route is still at the event's `route_version`, or the `command` mapping of that version
  (from the route history, `integration_route_version`) equals the current version's
  (`ROUTE_CHANGED`; `ROUTE_HISTORY_MISSING` when the event's version is not on record);
- the event's pack: a route-file pack (`routes:<connector>`, ADR 0018) is versioned by its
  route, which the rule above covers; any other installed pack's generation cannot be verified
  by Integration yet (it holds no installed-pack generations): `PACK_UNVERIFIABLE`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from nexus.contracts.errors import BadRequest
from nexus.integration.delivery import models as delivery_tables
from nexus.integration.operations.repository import OperationsRepository, RouteState
from nexus.platform.db.clock import read_now_ms
from nexus.platform.db.engine import reading
from nexus.platform.workqueue import operate
from nexus.platform.workqueue import retention as work_retention
from nexus.platform.workqueue.keys import family_key
from nexus.platform.workqueue.stats import QueueCount, queue_stats
from nexus.platform.workqueue.store import PARKED

PAGE = 100
MAX_BULK = 5000
ROUTE_PACK_PREFIX = "routes:"

REPLAYED, SKIPPED, PURGED, REFUSED = "replayed", "skipped", "purged", "refused"

_ENGINE_REASONS = {
    operate.NOT_FOUND: "no such work item in this org",
    operate.NOT_PARKED: "the item is not dead or outcome-unknown (replayed, skipped or finished)",
    operate.NOT_HALTING: "the item is not the head of a halted source lane",
    operate.HALTS_LANE: "the item halts its source lane: skip or replay it first",
}


@dataclass(frozen=True)
class Operator:
    """Who acts, as Runtime vouched for them (never taken from the request)."""

    org_id: str
    user_id: str


def pack_family(org_id: str, pack: str | None) -> str | None:
    """The work family of `pack` in the operator's org (each org's work is its own family)."""
    if pack is None:
        return None
    try:
        return family_key(org_id, pack)
    except ValueError as exc:
        raise BadRequest(f"pack: {exc}") from None


@dataclass(frozen=True)
class DeadLetterQuery:
    pack: str | None = None
    queue_class: str | None = None
    connector: str | None = None
    route: str | None = None
    failure_class: str | None = None
    since_ms: int | None = None
    until_ms: int | None = None
    halted_only: bool = False
    cursor: tuple[int, str] | None = None
    limit: int = PAGE

    def filters(self, org_id: str) -> operate.Filters:
        return operate.Filters(
            family=pack_family(org_id, self.pack),
            queue_class=self.queue_class,
            failure_class=self.failure_class,
            since_ms=self.since_ms,
            until_ms=self.until_ms,
        )


@dataclass(frozen=True)
class Decision:
    """What one operator action did to one target: a WorkItem (replay, skip, purge, reroute)
    or a failed receipt (replay). `target` is the id the operator named, as audited."""

    target: str  # a work id, or a receipt id
    outcome: str  # replayed | skipped | purged | rerouted | refused
    code: str | None = None
    reason: str | None = None


@dataclass
class Report:
    decisions: list[Decision] = field(default_factory=list)
    next_cursor: tuple[int, str] | None = None  # a bulk action stopped at MAX_BULK items

    def count(self, outcome: str) -> int:
        return sum(1 for d in self.decisions if d.outcome == outcome)


# ---------------------------------------------------------------------- reading


async def dead_letters(
    engine: AsyncEngine, *, operator: Operator, query: DeadLetterQuery
) -> tuple[list[Any], tuple[int, str] | None]:
    """A page of parked items with their event and receipt context, and the next cursor."""
    async with reading(engine) as conn:
        rows = await OperationsRepository(conn).parked(
            org_id=operator.org_id,
            filters=query.filters(operator.org_id),
            connector=query.connector,
            route_key=query.route,
            halting_only=query.halted_only,
            cursor=query.cursor,
            limit=query.limit,
        )
    more = len(rows) == query.limit and rows
    return rows, (int(rows[-1].finished_at or 0), rows[-1].id) if more else None


async def receipts(
    engine: AsyncEngine, *, operator: Operator, delivery_id: str, connector: str | None
) -> list[dict[str, Any]]:
    async with reading(engine) as conn:
        return await OperationsRepository(conn).receipts_by_delivery(
            org_id=operator.org_id, delivery_id=delivery_id, connector=connector
        )


async def queue_counts(engine: AsyncEngine, *, operator: Operator) -> list[QueueCount]:
    """Depth per pack, queue class and open state of the operator's org (each org's work is
    its own family per pack), from indexed counts."""
    async with reading(engine) as conn:
        stats = await queue_stats(conn, delivery_tables.work, org_id=operator.org_id)
    return stats.counts


async def audit_log(
    engine: AsyncEngine, *, operator: Operator, before_ms: int | None, limit: int
) -> list[dict[str, Any]]:
    async with reading(engine) as conn:
        return await OperationsRepository(conn).audit_log(
            org_id=operator.org_id, before_ms=before_ms, limit=limit
        )


# ---------------------------------------------------------------------- replay


def refusal(row: Any, routes: dict[tuple[str, str], RouteState]) -> tuple[str, str] | None:
    """Why the current route cannot be proven to map this event as it did (None: it can)."""
    name = f"{row.connector}/{row.route_key}"
    route = routes.get((row.connector, row.route_key))
    if route is None:
        return "ROUTE_NOT_FOUND", f"route {name} no longer exists"
    if not route.active:
        return "ROUTE_INACTIVE", f"route {name} is inactive"
    if not str(row.installed_pack_id).startswith(ROUTE_PACK_PREFIX):
        return "PACK_UNVERIFIABLE", (
            f"pack {row.installed_pack_id} generation {row.pack_generation} cannot be verified"
        )
    return _mapping_refusal(row, route, name)


def _mapping_refusal(row: Any, route: RouteState, name: str) -> tuple[str, str] | None:
    if route.version == row.route_version:
        return None
    then, now = route.bodies.get(int(row.route_version)), route.bodies.get(route.version)
    if then is None or now is None:
        return "ROUTE_HISTORY_MISSING", (
            f"version {row.route_version} of route {name} is not on record, so its mapping "
            f"cannot be compared with version {route.version}"
        )
    if _mapping(then) != _mapping(now):
        return "ROUTE_CHANGED", (
            f"route {name} is at version {route.version}; its command mapping changed since "
            f"version {row.route_version}, which this event was routed by"
        )
    return None


def _mapping(body: str) -> Any:
    return json.loads(body).get("command")


async def _replay_rows(
    repo: OperationsRepository, operator: Operator, wanted: Sequence[str], rows: dict[str, Any]
) -> list[Decision]:
    """Decide and replay one batch (the caller's transaction); audit every decision."""
    decisions = [
        Decision(i, REFUSED, operate.NOT_FOUND, _ENGINE_REASONS[operate.NOT_FOUND])
        for i in wanted
        if i not in rows
    ]
    parked = {i: r for i, r in rows.items() if r.state in PARKED}
    decisions += [
        Decision(i, REFUSED, operate.NOT_PARKED, _ENGINE_REASONS[operate.NOT_PARKED])
        for i in rows
        if i not in parked
    ]
    versions: dict[tuple[str, str], set[int]] = {}
    for row in parked.values():
        versions.setdefault((row.connector, row.route_key), set()).add(int(row.route_version))
    routes = await repo.routes(org_id=operator.org_id, wanted=versions)
    compatible = []
    for work_id, row in parked.items():
        why = refusal(row, routes)
        if why is None:
            compatible.append(work_id)
        else:
            decisions.append(Decision(work_id, REFUSED, *why))
    done = await operate.replay(repo.conn, delivery_tables.work, compatible, org_id=operator.org_id)
    decisions += [Decision(i, REPLAYED) for i in done.done]
    decisions += [
        Decision(r.id, REFUSED, r.reason, _ENGINE_REASONS[r.reason]) for r in done.refused
    ]
    await _audit(repo, operator, "replay", decisions)
    return decisions


async def replay_items(
    engine: AsyncEngine, *, operator: Operator, work_ids: Sequence[str]
) -> Report:
    """Replay the named items (at most `operate.MAX_BATCH`), each checked on its own."""
    wanted = list(dict.fromkeys(work_ids))[: operate.MAX_BATCH]
    async with engine.begin() as conn:
        repo = OperationsRepository(conn)
        rows = await repo.items_with_context(org_id=operator.org_id, work_ids=wanted)
        return Report(await _replay_rows(repo, operator, wanted, rows))


async def replay_since(
    engine: AsyncEngine, *, operator: Operator, query: DeadLetterQuery, max_items: int = MAX_BULK
) -> Report:
    """Replay every parked item matching `query` that parked since `query.since_ms` (and
    before `until_ms`, by default the start of this action), page by page; stops after
    `max_items` with `next_cursor` set (call again with it to go on)."""
    report = Report()
    async with reading(engine) as conn:
        started = await read_now_ms(conn)
    until = query.until_ms if query.until_ms is not None else started
    filters = operate.Filters(
        family=pack_family(operator.org_id, query.pack),
        queue_class=query.queue_class,
        failure_class=query.failure_class,
        since_ms=query.since_ms,
        until_ms=until,
    )
    cursor = query.cursor
    while len(report.decisions) < max_items:
        async with engine.begin() as conn:
            repo = OperationsRepository(conn)
            page = await repo.parked(
                org_id=operator.org_id,
                filters=filters,
                connector=query.connector,
                route_key=query.route,
                cursor=cursor,
                limit=min(PAGE, max_items - len(report.decisions)),
            )
            if not page:
                cursor = None
                break
            rows = {r.id: r for r in page}
            report.decisions += await _replay_rows(repo, operator, list(rows), rows)
        cursor = (int(page[-1].finished_at or 0), page[-1].id)
    report.next_cursor = cursor if len(report.decisions) >= max_items else None
    async with engine.begin() as conn:
        summary = (
            f"since={query.since_ms} until={until} pack={query.pack} "
            f"route={query.connector}/{query.route} failure_class={query.failure_class}: "
            f"replayed {report.count(REPLAYED)}, refused {report.count(REFUSED)}"
        )
        await OperationsRepository(conn).audit(
            org_id=operator.org_id,
            actor=operator.user_id,
            entries=[("replay_since", f"since:{query.since_ms}", "done", summary)],
        )
    return report


# ---------------------------------------------------------------------- skip / purge


async def skip_head(engine: AsyncEngine, *, operator: Operator, work_id: str) -> Decision:
    """Skip the parked head of a halted lane (it becomes cancelled; the lane moves on)."""
    async with engine.begin() as conn:
        repo = OperationsRepository(conn)
        rows = await repo.items_with_context(org_id=operator.org_id, work_ids=[work_id])
        if work_id not in rows:
            decision = Decision(
                work_id, REFUSED, operate.NOT_FOUND, _ENGINE_REASONS[operate.NOT_FOUND]
            )
        else:
            done = await operate.skip_head(
                conn, delivery_tables.work, work_id, org_id=operator.org_id
            )
            decision = (
                Decision(work_id, SKIPPED)
                if done.done
                else Decision(
                    work_id,
                    REFUSED,
                    done.refused[0].reason,
                    _ENGINE_REASONS[done.refused[0].reason],
                )
            )
        await _audit(repo, operator, "skip", [decision])
        return decision


async def purge_items(
    engine: AsyncEngine, *, operator: Operator, work_ids: Sequence[str]
) -> Report:
    """Delete parked items for good, with their receipts and the receipts' events once no
    event of the receipt carries a work item any more (else the receipt stays, for the
    items still on it; retention takes it later)."""
    wanted = list(dict.fromkeys(work_ids))[: operate.MAX_BATCH]
    async with engine.begin() as conn:
        repo = OperationsRepository(conn)
        rows = await repo.items_with_context(org_id=operator.org_id, work_ids=wanted)
        decisions = [
            Decision(i, REFUSED, operate.NOT_FOUND, _ENGINE_REASONS[operate.NOT_FOUND])
            for i in wanted
            if i not in rows
        ]
        done = await work_retention.purge(conn, delivery_tables.work, list(rows))
        links = await repo.forget_work(work_ids=done.done)
        receipts = await repo.receipts_of(org_id=operator.org_id, event_ids=[e for _, e in links])
        await repo.prune_receipts(org_id=operator.org_id, receipt_ids=receipts)
        decisions += [Decision(i, PURGED) for i in done.done]
        decisions += [
            Decision(r.id, REFUSED, r.reason, _ENGINE_REASONS[r.reason]) for r in done.refused
        ]
        await _audit(repo, operator, "purge", decisions)
        return Report(decisions)


async def _audit(
    repo: OperationsRepository, operator: Operator, action: str, decisions: Sequence[Decision]
) -> None:
    await repo.audit(
        org_id=operator.org_id,
        actor=operator.user_id,
        entries=[
            (
                action,
                d.target,
                d.outcome,
                None if d.code is None else f"{d.code}: {d.reason}",
            )
            for d in decisions
        ],
    )
