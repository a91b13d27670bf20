"""Replaying failed receipts on SQLite and MariaDB: a delivery whose mapping failed is listed
with its sanitized failure, and once the route is fixed a replay routes it again with the
CURRENT route version (event + WorkItem); refused (fail closed, audited) when it is not failed,
its body is gone, its route is inactive, or it is another org's; two replays race: one wins."""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from nexus.contracts.roles import LogicalService
from nexus.integration.delivery import models as delivery_tables
from nexus.integration.ingress import models as ingress_tables
from nexus.integration.ingress.repository import store_receipts
from nexus.integration.operations import models as operations_tables
from nexus.integration.operations import receipts as rr
from nexus.integration.operations import service as ops
from nexus.integration.operations.receipts_repository import FailedReceiptsRepository
from nexus.integration.operations.reroute import (
    NOT_DEAD,
    NOT_REFUSED,
    REPLAYABLE,
    REROUTED,
    reroute_items,
)
from nexus.integration.operations.service import REFUSED, REPLAYED, Operator, Report
from nexus.integration.routing import models as routing_tables
from nexus.integration.routing.router import EXECUTOR_OWNER, ReceiptRouter, RouterSettings
from nexus.integration.routing.routes import parse_route_file
from nexus.integration.routing.service import apply_routes
from nexus.platform.db.clock import db_now_ms
from nexus.platform.db.engine import create_engine, reading
from nexus.platform.migrations import upgrade_to_head
from nexus.platform.workqueue.store import DEAD, TERMINAL, Outcome, WorkStore
from tests.conftest import Backend
from tests.support.receipts import receipt_row

pytestmark = pytest.mark.asyncio(loop_scope="module")

ORG = "00D000000000001AAA"
ADMIN = Operator(org_id=ORG, user_id="005000000000001AAA")
OTHER = Operator(org_id="00D000000000002AAA", user_id="005000000000009AAA")
SECRET_VALUE = "078-05-1120"  # in the payload: must never show in an error or listing


def route(connector: str, *, id_pointer: str = "/data/id", active: bool = True) -> dict[str, Any]:
    return {
        "connector": connector,
        "route": "people",
        "signature": {"scheme": "standard_webhooks"},
        "secrets": [f"{connector}-secret"],
        "active": active,
        "command": {
            "op": "upsert",
            "object": "Contact",
            "external_id_field": "External_Id__c",
            "fields": {"External_Id__c": id_pointer, "LastName": "/data/last_name"},
        },
    }


# the provider renamed `id` to `contact_id`: route v1 (`/data/id`) finds nothing
RENAMED = {"data": {"contact_id": "c-1", "last_name": "Lovelace", "ssn": SECRET_VALUE}}


@dataclass
class World:
    engine: AsyncEngine
    var_dir: Path
    counter: int = 0
    connectors: list[str] = field(default_factory=list)

    def connector(self) -> str:
        self.counter += 1
        return f"replay{self.counter}"

    async def apply(self, *routes: dict[str, Any]) -> None:
        await apply_routes(
            self.engine, org_id=ORG, route_file=parse_route_file({"routes": list(routes)})
        )

    async def receive(self, connector: str, body: dict[str, Any], *, as_file: bool = False) -> str:
        raw = json.dumps(body).encode()
        ref = None
        if as_file:
            sha = hashlib.sha256(raw).hexdigest()
            relative = Path("ingress") / "bodies" / sha[:2] / sha
            (self.var_dir / relative).parent.mkdir(parents=True, exist_ok=True)
            (self.var_dir / relative).write_bytes(raw)
            ref = f"var:{relative.as_posix()}"
        row = receipt_row(org_id=ORG, connector=connector, route="people", body=raw, body_ref=ref)
        async with self.engine.begin() as conn:
            [stored] = await conn.run_sync(store_receipts, [row])
        return str(stored.receipt_id)

    async def route_all(self) -> None:
        router = ReceiptRouter(
            self.engine,
            var_dir=self.var_dir,
            settings=RouterSettings(batch=16, backoff_base_ms=1),
            owner="replay-test",
        )
        while await router.step():
            pass

    async def failed(self, connector: str) -> str:
        """A delivery in the provider's new shape, failed by route v1."""
        await self.apply(route(connector))
        receipt_id = await self.receive(connector, RENAMED)
        await self.route_all()
        assert (await self.receipt(receipt_id))["router_status"] == "failed"
        return receipt_id

    async def receipt(self, receipt_id: str) -> dict[str, Any]:
        t = ingress_tables.ingress_receipt
        async with reading(self.engine) as conn:
            rows = await conn.execute(select(t).where(t.c.receipt_id == receipt_id))
            return dict(rows.mappings().one())

    async def events(self, receipt_id: str) -> list[dict[str, Any]]:
        e, links = routing_tables.connector_event, delivery_tables.event_work
        async with reading(self.engine) as conn:
            rows = await conn.execute(
                select(e, links.c.work_id)
                .outerjoin(links, links.c.event_id == e.c.event_id)
                .where(e.c.receipt_id == receipt_id)
            )
            return [dict(r) for r in rows.mappings()]

    async def audits(self, target: str) -> list[tuple[str, str, str, str | None]]:
        a = operations_tables.operator_audit
        async with reading(self.engine) as conn:
            rows = await conn.execute(
                select(a.c.actor, a.c.action, a.c.outcome, a.c.reason)
                .where(a.c.target == target)
                .order_by(a.c.at_ms)
            )
            return [tuple(r) for r in rows]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def world(backend: Backend, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[World]:
    engine = create_engine(backend.url(LogicalService.INTEGRATION), application_name="replay-test")
    await upgrade_to_head(engine, LogicalService.INTEGRATION)
    yield World(engine, tmp_path_factory.mktemp("replay-var"))
    await engine.dispose()


async def test_a_failed_delivery_is_listed_then_routed_with_the_fixed_route(world: World) -> None:
    connector = world.connector()
    receipt_id = await world.failed(connector)
    rows, cursor = await rr.failed_receipts(
        world.engine, operator=ADMIN, query=rr.FailedReceiptQuery(connector=connector)
    )
    assert cursor is None
    (row,) = rows
    assert (row.receipt_id, row.connector, row.route_key, row.router_attempts) == (
        receipt_id,
        connector,
        "people",
        1,
    )
    assert "/data/id" in row.error  # names the route's pointer ...
    assert SECRET_VALUE not in json.dumps([str(v) for v in row])  # ... never a payload value
    assert row.failed_at_ms >= row.received_at_ms
    by_delivery, _ = await rr.failed_receipts(
        world.engine,
        operator=ADMIN,
        query=rr.FailedReceiptQuery(delivery_id=row.provider_delivery_id),
    )
    assert [r.receipt_id for r in by_delivery] == [receipt_id]
    later = rr.FailedReceiptQuery(connector=connector, since_ms=row.failed_at_ms + 1)
    assert (await rr.failed_receipts(world.engine, operator=ADMIN, query=later))[0] == []

    await world.apply(route(connector, id_pointer="/data/contact_id"))  # the fix: version 2
    report = await rr.replay_receipts(
        world.engine, operator=ADMIN, var_dir=world.var_dir, receipt_ids=[receipt_id]
    )
    assert report.decisions == [ops.Decision(receipt_id, REPLAYED)]
    receipt = await world.receipt(receipt_id)
    assert (receipt["router_status"], receipt["router_attempts"], receipt["error"]) == (
        "received",
        0,
        None,
    )
    await world.route_all()
    assert (await world.receipt(receipt_id))["router_status"] == "materialized"
    (event,) = await world.events(receipt_id)
    assert (event["route_version"], event["source_object_id"]) == (2, None)
    assert event["work_id"] is not None  # a WorkItem carries its command to Runtime
    assert json.loads(event["command"])["external_id"] == "c-1"
    assert await world.audits(receipt_id) == [(ADMIN.user_id, "replay_receipt", REPLAYED, None)]


async def test_a_second_replay_is_refused_and_two_racing_replays_have_one_winner(
    world: World,
) -> None:
    connector = world.connector()
    receipt_id = await world.failed(connector)

    async def replay() -> Report:
        return await rr.replay_receipts(
            world.engine, operator=ADMIN, var_dir=world.var_dir, receipt_ids=[receipt_id]
        )

    first, second = await asyncio.gather(replay(), replay())
    outcomes = sorted(r.decisions[0].outcome for r in (first, second))
    assert outcomes == [REFUSED, REPLAYED]
    (lost,) = [r.decisions[0] for r in (first, second) if r.decisions[0].outcome == REFUSED]
    assert lost.code == rr.NOT_FAILED
    again = await replay()  # still waiting for the router: not failed
    assert again.decisions[0].code == rr.NOT_FAILED
    assert "not failed" in str(again.decisions[0].reason)
    async with world.engine.begin() as conn:  # the status change itself is a CAS on failed
        late = await FailedReceiptsRepository(conn).requeue(
            org_id=ORG, receipt_ids=[receipt_id], marker="late-operator"
        )
    assert late == set()
    assert (await world.receipt(receipt_id))["lease_token"] != "late-operator"
    actions = await world.audits(receipt_id)
    assert sorted(a[2] for a in actions) == [REFUSED, REFUSED, REPLAYED]
    assert all(a[3] is None or a[3].startswith("NOT_FAILED: ") for a in actions)
    await world.route_all()  # route v1 still: it fails again, and is failed once more
    assert (await world.receipt(receipt_id))["router_status"] == "failed"


async def test_a_receipt_whose_body_is_gone_is_refused_and_stays_failed(world: World) -> None:
    connector = world.connector()
    await world.apply(route(connector))
    receipt_id = await world.receive(connector, RENAMED, as_file=True)
    await world.route_all()
    receipt = await world.receipt(receipt_id)
    assert (receipt["router_status"], receipt["body_snapshot"]) == ("failed", None)
    await world.apply(route(connector, id_pointer="/data/contact_id"))
    (world.var_dir / str(receipt["body_ref"]).removeprefix("var:")).unlink()
    report = await rr.replay_receipts(
        world.engine, operator=ADMIN, var_dir=world.var_dir, receipt_ids=[receipt_id]
    )
    (decision,) = report.decisions
    assert (decision.outcome, decision.code) == (REFUSED, rr.BODY_GONE)
    assert (await world.receipt(receipt_id))["router_status"] == "failed"
    assert await world.audits(receipt_id) == [
        (ADMIN.user_id, "replay_receipt", REFUSED, f"BODY_GONE: {decision.reason}")
    ]


async def test_an_inactive_route_and_another_orgs_operator_are_refused(world: World) -> None:
    connector = world.connector()
    receipt_id = await world.failed(connector)
    rows, _ = await rr.failed_receipts(
        world.engine, operator=OTHER, query=rr.FailedReceiptQuery(connector=connector)
    )
    assert rows == []  # another org's operator sees nothing ...
    report = await rr.replay_receipts(
        world.engine, operator=OTHER, var_dir=world.var_dir, receipt_ids=[receipt_id]
    )
    assert report.decisions[0].code == rr.NOT_FOUND  # ... and cannot replay it
    await world.apply(route(connector, active=False))
    report = await rr.replay_receipts(
        world.engine, operator=ADMIN, var_dir=world.var_dir, receipt_ids=[receipt_id]
    )
    assert (report.decisions[0].code, report.decisions[0].reason) == (
        rr.ROUTE_INACTIVE,
        f"route {connector}/people is inactive",
    )
    assert (await world.receipt(receipt_id))["router_status"] == "failed"


async def test_replay_since_takes_every_failure_of_the_window_once(world: World) -> None:
    connector = world.connector()
    await world.apply(route(connector))
    async with reading(world.engine) as conn:
        since = int((await conn.execute(db_now_ms().select())).scalar_one())
    ids = [await world.receive(connector, RENAMED | {"n": n}) for n in range(3)]
    await world.route_all()
    await world.apply(route(connector, id_pointer="/data/contact_id"))
    report = await rr.replay_failed_since(
        world.engine,
        operator=ADMIN,
        var_dir=world.var_dir,
        query=rr.FailedReceiptQuery(connector=connector, since_ms=since),
        max_items=2,
    )
    assert report.count(REPLAYED) == 2
    assert report.next_cursor is not None  # bounded: go on with the cursor
    rest = await rr.replay_failed_since(
        world.engine,
        operator=ADMIN,
        var_dir=world.var_dir,
        query=rr.FailedReceiptQuery(connector=connector, since_ms=since, cursor=report.next_cursor),
    )
    assert report.count(REPLAYED) + rest.count(REPLAYED) == 3
    assert rest.next_cursor is None
    assert {d.target for d in report.decisions + rest.decisions} == set(ids)
    await world.route_all()
    for receipt_id in ids:
        assert (await world.receipt(receipt_id))["router_status"] == "materialized"
    summary = await world.audits(f"since:{since}")
    assert [(a[1], a[2]) for a in summary] == [("replay_receipts", "done")] * 2
    assert "replayed 2, refused 0" in str(summary[0][3])


async def park(world: World, connector: str, outcome: Outcome) -> list[str]:
    """Claim the route's items as the executor does and record `outcome` for each."""
    store, pack = WorkStore(delivery_tables.work, owner=EXECUTOR_OWNER), f"{ORG}/routes:{connector}"
    async with world.engine.begin() as conn:
        epoch = (await store.admitted_families(conn))[pack]
        claimed = await store.claim(conn, pack, "people", epoch, 500)
        await store.finish(conn, pack, epoch, claimed[0].token, [(c, outcome) for c in claimed])
    return [c.id for c in claimed]


REFUSED_BY_RUNTIME = Outcome(DEAD, TERMINAL, "Runtime answered 400 INVALID_FIELD (LastName)")


async def test_a_dead_item_refused_by_runtime_is_rerouted_from_its_receipt(world: World) -> None:
    connector = world.connector()
    await world.apply(route(connector))
    receipt_id = await world.receive(connector, {"data": {"id": "p-1", "surname": "Noether"}})
    await world.route_all()
    (dead,) = await park(world, connector, REFUSED_BY_RUNTIME)  # no LastName: Runtime refused
    fixed = route(connector)
    fixed["command"]["fields"]["LastName"] = "/data/surname"
    await world.apply(fixed)  # version 2 maps the surname: a plain replay is refused
    replay = await ops.replay_items(world.engine, operator=ADMIN, work_ids=[dead])
    assert replay.decisions[0].code == "ROUTE_CHANGED"
    assert (await rr_reroute(world, OTHER, dead)).decisions[0].code == "NOT_FOUND"

    report = await rr_reroute(world, ADMIN, dead)
    (decision,) = report.decisions
    assert decision.outcome == REROUTED, decision
    events = {e["event_id"]: e for e in await world.events(receipt_id)}
    assert set(events) == {f"{receipt_id}-0", f"{receipt_id}-1"}
    new = events[f"{receipt_id}-1"]
    assert (new["route_version"], new["ordinal"]) == (2, 1)
    assert json.loads(new["command"])["fields"]["LastName"] == "Noether"
    items = delivery_tables.work.items
    async with reading(world.engine) as conn:
        found = await conn.execute(
            select(items.c.id, items.c.state).where(items.c.id.in_([dead, new["work_id"]]))
        )
        states = {row.id: row.state for row in found}
    assert states == {dead: "cancelled", new["work_id"]: "pending"}
    assert json.loads((await world.receipt(receipt_id))["materialized_event_ids"]) == sorted(events)
    again = await rr_reroute(world, ADMIN, dead)
    assert again.decisions[0].code == NOT_DEAD
    audits = await world.audits(dead)
    assert [(a[1], a[2]) for a in audits][-3:] == [
        ("reroute", REFUSED),
        ("reroute", REROUTED),
        ("reroute", REFUSED),
    ]


async def test_reroute_is_refused_unless_runtime_definitely_refused_and_the_route_changed(
    world: World,
) -> None:
    connector = world.connector()
    await world.apply(route(connector))
    await world.receive(connector, {"data": {"id": "p-2", "last_name": "Hopper"}})
    await world.receive(connector, {"data": {"id": "p-3", "last_name": "Lamarr"}})
    await world.route_all()
    timed_out, refused = await park(world, connector, REFUSED_BY_RUNTIME)
    async with world.engine.begin() as conn:  # its last attempt timed out: outcome unknown
        items = delivery_tables.work.items
        await conn.execute(
            update(items).where(items.c.id == timed_out).values(failure_class="retryable")
        )
    report = await rr_reroute(world, ADMIN, timed_out, refused)
    assert [d.code for d in report.decisions] == [NOT_REFUSED, REPLAYABLE]  # route unchanged


async def rr_reroute(world: World, operator: Operator, *work_ids: str) -> Report:
    return await reroute_items(
        world.engine, operator=operator, var_dir=world.var_dir, work_ids=list(work_ids)
    )
