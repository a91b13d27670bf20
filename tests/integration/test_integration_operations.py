"""Operating the integration on SQLite and MariaDB: the dead-letter list with its context,
replay checked against the current route, skip, purge, retention, receipts and the audit.
Rows are what the receipt router writes; items are parked through the engine's claim/finish."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
import pytest_asyncio
from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from nexus.contracts.roles import LogicalService
from nexus.integration.delivery import models as delivery_tables
from nexus.integration.ingress import models as ingress_tables
from nexus.integration.operations import models as operations_tables
from nexus.integration.operations import service as ops
from nexus.integration.operations.retention import DAY_MS, prune_once
from nexus.integration.routing import models as routing_tables
from nexus.integration.routing.routes import parse_route_file
from nexus.integration.routing.service import apply_routes
from nexus.platform.db.clock import db_now_ms
from nexus.platform.db.engine import create_engine, reading
from nexus.platform.migrations import upgrade_to_head
from nexus.platform.workqueue.store import DEAD, PENDING, SUCCEEDED, SUCCESS, Claimed, WorkStore
from nexus.platform.workqueue.worker import Worker, WorkerSettings
from tests.conftest import Backend
from tests.support.integration_rows import DIE, EXECUTOR, Routed, execute, route_delivery

pytestmark = pytest.mark.asyncio(loop_scope="module")

ORG = "00D000000000001AAA"
OTHER_ORG = "00D000000000002AAA"
ADMIN = ops.Operator(org_id=ORG, user_id="005000000000001AAA")
HOUR_MS = 3_600_000


def route(connector: str, *, fields: dict[str, str] | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "connector": connector,
        "route": "contacts",
        "signature": {"scheme": "standard_webhooks"},
        "secrets": [f"{connector}-secret"],
        "command": {
            "op": "upsert",
            "object": "Contact",
            "external_id_field": "External_Id__c",
            "fields": fields or {"External_Id__c": "/data/id", "LastName": "/data/last_name"},
        },
        **extra,
    }


@dataclass
class World:
    engine: AsyncEngine
    counter: int = 0

    def connector(self) -> str:
        self.counter += 1
        return f"crm{self.counter}"

    async def apply(self, *routes: dict[str, Any]) -> None:
        await apply_routes(
            self.engine, org_id=ORG, route_file=parse_route_file({"routes": list(routes)})
        )

    async def deliver(self, connector: str, version: int = 1, **kwargs: Any) -> Routed:
        return await route_delivery(
            self.engine,
            org_id=ORG,
            connector=connector,
            route="contacts",
            route_version=version,
            **kwargs,
        )

    async def item(self, work_id: str) -> dict[str, Any] | None:
        items = delivery_tables.work.items
        async with reading(self.engine) as conn:
            row = (await conn.execute(select(items).where(items.c.id == work_id))).mappings()
            found = row.first()
        return None if found is None else dict(found)

    async def count(self, table: Any, **where: str) -> int:
        async with reading(self.engine) as conn:
            query = select(func.count()).select_from(table)
            for column, value in where.items():
                query = query.where(table.c[column] == value)
            return int((await conn.execute(query)).scalar_one())

    async def audits(self, target: str) -> list[tuple[str, str, str, str | None]]:
        a = operations_tables.operator_audit
        async with reading(self.engine) as conn:
            rows = await conn.execute(
                select(a.c.actor, a.c.action, a.c.outcome, a.c.reason)
                .where(a.c.target == target)
                .order_by(a.c.at_ms)
            )
            return [tuple(r) for r in rows]  # type: ignore[misc]

    async def age(self, work_ids: list[str], receipts: list[str], *, ago_ms: int) -> None:
        """Move items' finish and receipts' arrival into the past, by the database clock."""
        items, rc = delivery_tables.work.items, ingress_tables.ingress_receipt
        then = db_now_ms() - ago_ms
        async with self.engine.begin() as conn:
            await conn.execute(
                update(items)
                .where(items.c.id.in_(work_ids))
                .values(finished_at=then, run_after=then)
            )
            await conn.execute(
                update(rc)
                .where(rc.c.receipt_id.in_(receipts))
                .values(received_at_ms=then, next_attempt_at_ms=then)
            )


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def world(backend: Backend) -> AsyncIterator[World]:
    engine = create_engine(backend.url(LogicalService.INTEGRATION), application_name="ops-test")
    await upgrade_to_head(engine, LogicalService.INTEGRATION)
    yield World(engine)
    await engine.dispose()


async def test_a_dead_letter_is_listed_with_its_event_and_receipt_and_no_payload(
    world: World,
) -> None:
    connector = world.connector()
    await world.apply(route(connector))
    routed = await world.deliver(connector, payload={"data": {"id": "7", "ssn": "078-05-1120"}})
    await execute(world.engine, f"routes:{connector}", DIE, org_id=ORG)
    rows, cursor = await ops.dead_letters(
        world.engine, operator=ADMIN, query=ops.DeadLetterQuery(connector=connector)
    )
    assert cursor is None
    (row,) = rows
    assert (row.id, row.state, row.failure_class) == (routed.work_id, DEAD, "terminal")
    assert row.last_error == "Runtime refused the command: INVALID_FIELD (LastName)"
    assert (row.event_id, row.receipt_id) == (routed.event_id, routed.receipt_id)
    assert (row.connector, row.route_key, row.route_version) == (connector, "contacts", 1)
    assert row.provider_delivery_id == routed.delivery_id
    assert "078-05-1120" not in json.dumps([str(v) for v in row])  # never the payload
    other = ops.Operator(org_id=OTHER_ORG, user_id="005000000000009AAA")
    rows, _ = await ops.dead_letters(
        world.engine, operator=other, query=ops.DeadLetterQuery(connector=connector)
    )
    assert rows == []  # another org's operator sees nothing
    rows, _ = await ops.dead_letters(
        world.engine,
        operator=ADMIN,
        query=ops.DeadLetterQuery(connector=connector, failure_class="retryable"),
    )
    assert rows == []


async def test_a_replayed_dead_item_runs_again_and_succeeds_and_is_audited(
    world: World,
) -> None:
    connector = world.connector()
    pack = f"routes:{connector}"
    await world.apply(route(connector))
    routed = await world.deliver(connector)
    await execute(world.engine, pack, DIE, org_id=ORG)
    report = await ops.replay_items(world.engine, operator=ADMIN, work_ids=[routed.work_id])
    assert report.decisions == [ops.Decision(routed.work_id, ops.REPLAYED)]
    item = await world.item(routed.work_id)
    assert item is not None
    assert (item["state"], item["attempt"]) == (PENDING, 1)

    ran: list[int] = []

    async def handler(claimed: Claimed) -> None:
        ran.append(claimed.attempt)

    worker = Worker(
        world.engine,
        WorkStore(delivery_tables.work, owner=EXECUTOR),
        handler,
        WorkerSettings(idle_poll_ms=10),
    )
    task = asyncio.create_task(worker.run())
    try:
        async with asyncio.timeout(30):
            while (await world.item(routed.work_id) or {}).get("state") != SUCCEEDED:  # noqa: ASYNC110
                await asyncio.sleep(0.02)
    finally:
        worker.stop()
        await task
    assert ran == [2]
    assert await world.audits(routed.work_id) == [(ADMIN.user_id, "replay", "replayed", None)]


async def test_replay_is_refused_with_the_reason_when_the_route_changed_its_mapping(
    world: World,
) -> None:
    connector = world.connector()
    await world.apply(route(connector))
    routed = await world.deliver(connector)
    await execute(world.engine, f"routes:{connector}", DIE, org_id=ORG)
    changed = {"External_Id__c": "/data/id", "LastName": "/data/surname"}
    await world.apply(route(connector, fields=changed))  # version 2: another mapping
    report = await ops.replay_items(world.engine, operator=ADMIN, work_ids=[routed.work_id])
    (decision,) = report.decisions
    assert (decision.outcome, decision.code) == (ops.REFUSED, "ROUTE_CHANGED")
    assert decision.reason == (
        f"route {connector}/contacts is at version 2; its command mapping changed since "
        "version 1, which this event was routed by"
    )
    assert (await world.item(routed.work_id) or {})["state"] == DEAD  # untouched
    ((actor, action, outcome, reason),) = await world.audits(routed.work_id)
    assert (actor, action, outcome) == (ADMIN.user_id, "replay", "refused")
    assert reason == f"ROUTE_CHANGED: {decision.reason}"


async def test_replay_goes_ahead_when_the_route_changed_but_not_its_mapping(
    world: World,
) -> None:
    connector = world.connector()
    await world.apply(route(connector))
    routed = await world.deliver(connector)
    await execute(world.engine, f"routes:{connector}", DIE, org_id=ORG)
    await world.apply(route(connector, max_body_bytes=2048))  # version 2: same mapping
    report = await ops.replay_items(world.engine, operator=ADMIN, work_ids=[routed.work_id])
    assert report.decisions == [ops.Decision(routed.work_id, ops.REPLAYED)]


async def test_replay_fails_closed_when_the_route_is_gone_inactive_or_its_pack_unknown(
    world: World,
) -> None:
    live, inactive = world.connector(), world.connector()
    await world.apply(route(live), route(inactive))
    gone = await world.deliver("never-applied")
    paused = await world.deliver(inactive)
    foreign = await world.deliver(live, pack="catalog-pack-1")
    for pack in ("routes:never-applied", f"routes:{inactive}", "catalog-pack-1"):
        await execute(world.engine, pack, DIE, org_id=ORG)
    await world.apply(route(inactive, active=False))
    report = await ops.replay_items(
        world.engine,
        operator=ADMIN,
        work_ids=[gone.work_id, paused.work_id, foreign.work_id, "no-such-item"],
    )
    codes = {d.target: d.code for d in report.decisions}
    assert codes == {
        gone.work_id: "ROUTE_NOT_FOUND",
        paused.work_id: "ROUTE_INACTIVE",
        foreign.work_id: "PACK_UNVERIFIABLE",
        "no-such-item": "NOT_FOUND",
    }
    assert all(d.outcome == ops.REFUSED for d in report.decisions)


async def test_skip_advances_a_halted_lane_and_is_audited(world: World) -> None:
    connector = world.connector()
    pack = f"routes:{connector}"
    await world.apply(route(connector))
    first, second = [await world.deliver(connector, lane_key="contact:42") for _ in range(2)]
    assert await execute(world.engine, pack, DIE, org_id=ORG) == [first.work_id]
    assert (
        await execute(world.engine, pack, SUCCESS, org_id=ORG) == []
    )  # halted behind its dead head
    halted, _ = await ops.dead_letters(
        world.engine, operator=ADMIN, query=ops.DeadLetterQuery(pack=pack, halted_only=True)
    )
    assert [(r.id, r.halted_by) for r in halted] == [(first.work_id, first.work_id)]
    refused = await ops.skip_head(world.engine, operator=ADMIN, work_id=second.work_id)
    assert refused.code == "NOT_PARKED"
    decision = await ops.skip_head(world.engine, operator=ADMIN, work_id=first.work_id)
    assert decision == ops.Decision(first.work_id, ops.SKIPPED)
    assert await execute(world.engine, pack, SUCCESS, org_id=ORG) == [second.work_id]
    assert await world.audits(first.work_id) == [(ADMIN.user_id, "skip", "skipped", None)]
    assert await world.audits(second.work_id) == [
        (
            ADMIN.user_id,
            "skip",
            "refused",
            "NOT_PARKED: the item is not dead or outcome-unknown (replayed, skipped or finished)",
        )
    ]


async def test_replay_since_t_picks_exactly_the_items_parked_after_t(world: World) -> None:
    connector = world.connector()
    pack = f"routes:{connector}"
    await world.apply(route(connector))
    routed = [await world.deliver(connector) for _ in range(5)]
    await execute(world.engine, pack, DIE, org_id=ORG)
    for hours, one in zip((5, 4, 3, 2, 1), routed, strict=True):
        await world.age([one.work_id], [], ago_ms=hours * HOUR_MS)
    async with reading(world.engine) as conn:
        now = int((await conn.execute(db_now_ms().select())).scalar_one())
    query = ops.DeadLetterQuery(pack=pack, since_ms=now - 3 * HOUR_MS + 60_000)
    report = await ops.replay_since(world.engine, operator=ADMIN, query=query, max_items=1)
    assert [d.target for d in report.decisions] == [routed[3].work_id]  # the 2h one
    assert report.next_cursor is not None  # stopped at max_items: go on from here
    query = ops.DeadLetterQuery(
        pack=pack, since_ms=query.since_ms, cursor=report.next_cursor, until_ms=now
    )
    report = await ops.replay_since(world.engine, operator=ADMIN, query=query)
    assert [d.target for d in report.decisions] == [routed[4].work_id]
    assert report.next_cursor is None
    states = [(await world.item(r.work_id) or {})["state"] for r in routed]
    assert states == [DEAD, DEAD, DEAD, PENDING, PENDING]
    a = operations_tables.operator_audit
    async with reading(world.engine) as conn:
        summaries = list(
            await conn.execute(
                select(a.c.outcome, a.c.reason).where(
                    a.c.action == "replay_since", a.c.reason.like(f"%pack={pack} %")
                )
            )
        )
    assert len(summaries) == 2
    assert all("replayed 1, refused 0" in (reason or "") for _, reason in summaries)


async def test_purge_deletes_a_dead_item_with_its_event_and_receipt(world: World) -> None:
    connector = world.connector()
    await world.apply(route(connector))
    routed = await world.deliver(connector)
    await execute(world.engine, f"routes:{connector}", DIE, org_id=ORG)
    report = await ops.purge_items(world.engine, operator=ADMIN, work_ids=[routed.work_id])
    assert report.decisions == [ops.Decision(routed.work_id, ops.PURGED)]
    assert await world.item(routed.work_id) is None
    assert await world.count(routing_tables.connector_event, event_id=routed.event_id) == 0
    assert await world.count(ingress_tables.ingress_receipt, receipt_id=routed.receipt_id) == 0
    assert await world.audits(routed.work_id) == [(ADMIN.user_id, "purge", "purged", None)]


async def test_retention_prunes_old_successes_and_keeps_dead_items_with_their_context(
    world: World,
) -> None:
    connector = world.connector()
    pack = f"routes:{connector}"
    await world.apply(route(connector))
    old_ok, new_ok, old_dead = [await world.deliver(connector) for _ in range(3)]
    await execute(world.engine, pack, SUCCESS, org_id=ORG)  # all three succeed ...
    items = delivery_tables.work.items
    async with world.engine.begin() as conn:  # ... except one, which died
        await conn.execute(update(items).where(items.c.id == old_dead.work_id).values(state=DEAD))
    await world.age(
        [old_ok.work_id, old_dead.work_id],
        [old_ok.receipt_id, old_dead.receipt_id],
        ago_ms=10 * DAY_MS,
    )
    pruned = await prune_once(world.engine, retention_ms=7 * DAY_MS, batch=1)
    assert (pruned.work_items, pruned.receipts) == (1, 1)
    assert await world.item(old_ok.work_id) is None
    assert await world.count(routing_tables.connector_event, event_id=old_ok.event_id) == 0
    assert await world.count(ingress_tables.ingress_receipt, receipt_id=old_ok.receipt_id) == 0
    assert await world.count(delivery_tables.event_work, work_id=old_ok.work_id) == 0
    assert (await world.item(new_ok.work_id) or {})["state"] == SUCCEEDED  # too young
    assert await world.count(ingress_tables.ingress_receipt, receipt_id=new_ok.receipt_id) == 1
    assert (await world.item(old_dead.work_id) or {})["state"] == DEAD  # kept, with context
    assert await world.count(routing_tables.connector_event, event_id=old_dead.event_id) == 1
    assert await world.count(ingress_tables.ingress_receipt, receipt_id=old_dead.receipt_id) == 1
    again = await prune_once(world.engine, retention_ms=7 * DAY_MS, batch=500)
    assert (again.work_items, again.receipts) == (0, 0)


async def test_a_delivery_id_finds_its_receipt_events_and_work(world: World) -> None:
    connector = world.connector()
    await world.apply(route(connector))
    routed = await world.deliver(connector)
    await execute(world.engine, f"routes:{connector}", DIE, org_id=ORG)
    (receipt,) = await ops.receipts(
        world.engine, operator=ADMIN, delivery_id=routed.delivery_id, connector=None
    )
    assert (receipt["receipt_id"], receipt["router_status"]) == (routed.receipt_id, "materialized")
    (event,) = receipt["events"]
    assert (event["event_id"], event["work_id"], event["state"]) == (
        routed.event_id,
        routed.work_id,
        DEAD,
    )
    assert "body_snapshot" not in receipt
    assert "command" not in event
