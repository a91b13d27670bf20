"""The receipt router on SQLite and MariaDB: receipts become events and WorkItems exactly once."""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from nexus.contracts.commands import AcceptCommandRequest
from nexus.contracts.roles import LogicalService
from nexus.integration.delivery import models as delivery_tables
from nexus.integration.ingress import models as ingress_tables
from nexus.integration.ingress.repository import store_receipts
from nexus.integration.routing import models as routing_tables
from nexus.integration.routing.mapping import SOURCE_KIND
from nexus.integration.routing.router import (
    EXECUTOR_OWNER,
    ReceiptRouter,
    RouterSettings,
    installed_pack_id,
    work_id,
)
from nexus.integration.routing.routes import RouteFile, parse_route_file
from nexus.integration.routing.service import apply_routes
from nexus.platform.db.engine import create_engine, reading
from nexus.platform.migrations import upgrade_to_head
from nexus.platform.workqueue.store import Claimed, WorkStore
from nexus.platform.workqueue.worker import Worker, WorkerSettings
from tests.conftest import Backend
from tests.support.receipts import receipt_row

pytestmark = pytest.mark.asyncio(loop_scope="module")

ORG = "00D000000000001AAA"
COMMAND = {
    "op": "upsert",
    "object": "Contact",
    "external_id_field": "External_Id__c",
    "fields": {"External_Id__c": "/data/id", "LastName": "/data/last_name", "Age__c": "/data/age"},
}
ROUTES: dict[str, Any] = {
    "org_id": ORG,
    "routes": [
        {
            "connector": "demo",
            "route": "contacts",
            "signature": {"scheme": "standard_webhooks"},
            "secrets": ["demo"],
            "source": {"object_kind": {"pointer": "/object"}, "object_id": {"pointer": "/data/id"}},
            "target_lane": "account:{/data/account}",
            "command": COMMAND,
        },
        {
            "connector": "demo",
            "route": "orders",
            "signature": {"scheme": "standard_webhooks"},
            "secrets": ["demo"],
            "source": {"object_kind": {"header": "x-topic"}, "object_id": {"pointer": "/id"}},
            "command": COMMAND | {"fields": {"External_Id__c": "/id"}, "object": "Order__c"},
        },
        {
            "connector": "demo",
            "route": "pings",
            "signature": {"scheme": "standard_webhooks"},
            "secrets": ["demo"],
        },
        {
            "connector": "demo",
            "route": "leads",
            "signature": {"scheme": "standard_webhooks"},
            "secrets": ["demo"],
            "command": COMMAND,
        },
        {
            "connector": "demo",
            "route": "retired",
            "signature": {"scheme": "standard_webhooks"},
            "secrets": ["demo"],
            "command": COMMAND,
        },
    ],
}


@dataclass
class Stack:
    engine: AsyncEngine
    var_dir: Path

    def router(self, **settings: Any) -> ReceiptRouter:
        defaults: dict[str, Any] = {"batch": 16, "backoff_base_ms": 1}
        return ReceiptRouter(
            self.engine,
            var_dir=self.var_dir,
            settings=RouterSettings(**(defaults | settings)),
            owner="test-router",
        )

    async def receive(
        self,
        body: bytes | dict[str, Any],
        *,
        route: str = "contacts",
        correlation: dict[str, str] | None = None,
        as_file: bool = False,
    ) -> str:
        """Store a receipt as ingress does (the body in the row, or in a var-dir file)."""
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        sha = hashlib.sha256(raw).hexdigest()
        ref = None
        if as_file:
            relative = Path("ingress") / "bodies" / sha[:2] / sha
            (self.var_dir / relative).parent.mkdir(parents=True, exist_ok=True)
            (self.var_dir / relative).write_bytes(raw)
            ref = f"var:{relative.as_posix()}"
        row = receipt_row(
            org_id=ORG,
            connector="demo",
            route=route,
            body=raw,
            body_ref=ref,
            correlation=correlation,
        )
        async with self.engine.begin() as conn:
            [stored] = await conn.run_sync(store_receipts, [row])
        # Delivery order is (received time by the database clock in ms, receipt id): two
        # receipts stored within one millisecond would be ordered by their random ids, and
        # the tests expect the order they were received in.
        await asyncio.sleep(0.002)
        return stored.receipt_id

    async def drain(self, router: ReceiptRouter) -> None:
        while await router.step():
            pass

    async def receipt(self, receipt_id: str) -> dict[str, Any]:
        t = ingress_tables.ingress_receipt
        async with reading(self.engine) as conn:
            row = (await conn.execute(select(t).where(t.c.receipt_id == receipt_id))).mappings()
            return dict(row.one())

    async def events(self, receipt_ids: list[str]) -> list[dict[str, Any]]:
        t = routing_tables.connector_event
        async with reading(self.engine) as conn:
            rows = await conn.execute(
                select(t).where(t.c.receipt_id.in_(receipt_ids)).order_by(t.c.delivery_seq)
            )
            return [dict(r) for r in rows.mappings()]

    async def work_for(self, event_ids: list[str]) -> list[dict[str, Any]]:
        items, links = delivery_tables.work.items, delivery_tables.event_work
        async with reading(self.engine) as conn:
            rows = await conn.execute(
                select(items, links.c.event_id)
                .join(links, links.c.work_id == items.c.id)
                .where(links.c.event_id.in_(event_ids))
                .order_by(items.c.lane_seq, items.c.id)
            )
            return [dict(r) for r in rows.mappings()]

    async def count(self, table: Any) -> int:
        async with reading(self.engine) as conn:
            return int((await conn.execute(select(func.count()).select_from(table))).scalar_one())


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(backend: Backend, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    engine = create_engine(backend.url(LogicalService.INTEGRATION), application_name="router-test")
    await upgrade_to_head(engine, LogicalService.INTEGRATION)
    await apply_routes(engine, org_id=ORG, route_file=parse_route_file(ROUTES))
    yield Stack(engine, tmp_path_factory.mktemp("router-var"))
    await engine.dispose()


def contact(n: int, *, source: str = "c", **data: Any) -> dict[str, Any]:
    fields = {"id": f"{source}-{n}", "last_name": f"Name {n}", "account": "acme"}
    return {"object": "contact", "data": fields | data}


async def test_receipts_become_events_and_work_items_exactly_once(stack: Stack) -> None:
    ids = [await stack.receive(contact(n, age=30 + n)) for n in range(20)]
    ids.append(await stack.receive(contact(99), as_file=True))  # a large body kept as a file
    router = stack.router()
    await stack.drain(router)
    assert router.stats.materialized == 21

    events = await stack.events(ids)
    assert len(events) == 21
    work = await stack.work_for([e["event_id"] for e in events])
    assert len(work) == 21
    by_receipt = {e["receipt_id"]: e for e in events}
    for receipt_id in ids:
        receipt = await stack.receipt(receipt_id)
        event = by_receipt[receipt_id]
        assert receipt["router_status"] == "materialized"
        assert json.loads(receipt["materialized_event_ids"]) == [event["event_id"]]
        assert receipt["error"] is None
        assert event["installed_pack_id"] == installed_pack_id("demo") == "routes:demo"
        assert (event["pack_generation"], event["route_version"]) == (1, 1)
        assert event["parse_outcome"] == "parsed"
        assert event["delivery_seq"] == receipt["received_at_ms"]
        assert json.loads(event["correlation"])["receipt_id"] == receipt_id
    for item in work:
        request = AcceptCommandRequest.model_validate_json(item["payload"])
        event = next(e for e in events if e["event_id"] == item["event_id"])
        assert item["id"] == request.message_id
        assert item["id"] == work_id(
            ORG, by_receipt[event["receipt_id"]]["delivery_seq"], event["event_id"]
        )
        assert (item["family"], item["queue_class"], item["state"]) == (
            f"{ORG}/routes:demo",  # the org leads the family
            "contacts",
            "pending",
        )
        assert request.correlation["event_id"] == item["event_id"]
        assert request.command.model_dump_json() == event["command"]
    first = next(e for e in events if e["receipt_id"] == ids[3])
    command = json.loads(first["command"])
    assert command["external_id"] == "c-3"
    assert command["fields"] == {"External_Id__c": "c-3", "LastName": "Name 3", "Age__c": 33}

    # Run again: nothing is due; then pretend the materialized marks were lost (a re-run of
    # the same receipts, as after a crash): still one event and one WorkItem per receipt.
    before = [
        await stack.count(t)
        for t in (
            routing_tables.connector_event,
            delivery_tables.work.items,
            delivery_tables.event_work,
        )
    ]
    assert await router.step() == 0
    t = ingress_tables.ingress_receipt
    async with stack.engine.begin() as conn:
        await conn.execute(
            update(t)
            .where(t.c.receipt_id.in_(ids))
            .values(router_status="received", next_attempt_at_ms=0, lease_token=None)
        )
    await stack.drain(stack.router())
    after = [
        await stack.count(t)
        for t in (
            routing_tables.connector_event,
            delivery_tables.work.items,
            delivery_tables.event_work,
        )
    ]
    assert after == before
    for receipt_id in ids:
        assert (await stack.receipt(receipt_id))["router_status"] == "materialized"
    async with reading(stack.engine) as conn:
        family = delivery_tables.work.families
        owner = (
            await conn.execute(
                select(family.c.owner).where(family.c.family == f"{ORG}/routes:demo")
            )
        ).scalar_one()
    assert owner == EXECUTOR_OWNER  # the executor claims what the router enqueues


async def test_source_and_target_lane_keys_come_from_the_route(stack: Stack) -> None:
    ids = [await stack.receive(contact(n % 2, source="lane", account="hot")) for n in range(6)]
    orders = [
        await stack.receive({"id": 7000 + n}, route="orders", correlation={SOURCE_KIND: "order"})
        for n in range(2)
    ]
    await stack.drain(stack.router(batch=4))  # several batches: order across them too
    events = await stack.events(ids)
    assert [e["receipt_id"] for e in events] == ids  # delivery order
    assert [(e["source_object_kind"], e["source_object_id"]) for e in events] == [
        ("contact", f"lane-{n % 2}") for n in range(6)
    ]
    work = await stack.work_for([e["event_id"] for e in events])
    lanes: dict[str, list[str]] = {}
    for item in work:
        assert item["target_key"] == "account:hot"
        lanes.setdefault(item["lane_key"], []).append(item["event_id"])
    by_event = {e["event_id"]: e["receipt_id"] for e in events}
    for n in range(2):
        # each source lane holds its receipts in delivery order (lane_seq ascending)
        assert [by_event[e] for e in lanes[f"contact:lane-{n}"]] == ids[n::2]
    order_events = await stack.events(orders)
    order_work = await stack.work_for([e["event_id"] for e in order_events])
    assert sorted(w["lane_key"] for w in order_work) == ["order:7000", "order:7001"]
    assert all(w["target_key"] is None for w in order_work)


async def test_unroutable_receipts_fail_with_a_sanitized_reason(stack: Stack) -> None:
    secret_body = b'{"object": "contact", "data": {"id": "c-1", "token": "sk_live_XYZ"'
    broken = await stack.receive(secret_body)
    no_key = await stack.receive({"data": {"last_name": "sk_live_XYZ"}}, route="leads")
    no_key_file = await stack.receive({"object": "contact", "data": {}}, as_file=True)
    retired = await stack.receive(contact(1), route="retired")
    ping = await stack.receive(b"not json at all", route="pings")
    retire = parse_route_file(ROUTES).routes[4].model_copy(update={"active": False})
    await apply_routes(stack.engine, org_id=ORG, route_file=RouteFile(org_id=ORG, routes=[retire]))
    await stack.drain(stack.router())

    reasons = {}
    for receipt_id in (broken, no_key, no_key_file, retired):
        row = await stack.receipt(receipt_id)
        assert row["router_status"] == "failed", receipt_id
        assert row["materialized_event_ids"] is None
        assert "sk_live" not in row["error"]
        reasons[receipt_id] = row["error"]
    assert reasons[broken].startswith("the body is not valid JSON")
    assert "external id (External_Id__c) has no text or integer at /data/id" in reasons[no_key]
    assert "source.object_id" in reasons[no_key_file]  # the source is checked first
    assert reasons[retired] == "the route demo/retired is no longer active"
    assert await stack.events([broken, no_key, no_key_file, retired]) == []

    # A route that maps nothing records the event without reading the body, and no work.
    [event] = await stack.events([ping])
    assert (event["parse_outcome"], event["command"]) == ("no_command", None)
    assert await stack.work_for([event["event_id"]]) == []
    assert (await stack.receipt(ping))["router_status"] == "materialized"


async def test_a_transient_failure_retries_with_backoff_then_fails(stack: Stack) -> None:
    receipt_id = await stack.receive(contact(5, source="gone"), as_file=True)
    [file] = [
        p for p in (stack.var_dir / "ingress").rglob("*") if p.is_file() and _holds(p, "gone-5")
    ]
    file.unlink()  # the stored body is unreadable for now
    router = stack.router(max_attempts=2, backoff_base_ms=60_000)
    await stack.drain(router)
    row = await stack.receipt(receipt_id)
    assert row["router_status"] == "received"
    assert row["router_attempts"] == 1
    assert row["error"] == "the stored body is unreadable (No such file or directory)"
    assert row["lease_token"] is None
    assert row["next_attempt_at_ms"] > row["received_at_ms"]  # backoff, from the db clock
    assert await router.step() == 0  # not due yet

    t = ingress_tables.ingress_receipt
    async with stack.engine.begin() as conn:
        await conn.execute(
            update(t).where(t.c.receipt_id == receipt_id).values(next_attempt_at_ms=0)
        )
    await stack.drain(router)
    row = await stack.receipt(receipt_id)
    assert row["router_status"] == "failed"
    assert row["error"] == (
        "gave up after 2 attempts: the stored body is unreadable (No such file or directory)"
    )


def _holds(path: Path, text: str) -> bool:
    return text.encode() in path.read_bytes()


async def test_a_stale_router_cannot_record_after_its_lease_expired(stack: Stack) -> None:
    ids = [await stack.receive(contact(n, source="stale")) for n in range(3)]
    stale = stack.router(lease_ms=500)
    batch = await stale.claim(ORG)  # ... and then the process stalls (GC pause, SIGSTOP)
    assert batch is not None
    assert {r.receipt_id for r in batch.receipts} >= set(ids)
    fresh = stack.router()
    assert await fresh.step() == 0  # the lease is live: nobody else takes them
    await asyncio.sleep(0.7)
    await stack.drain(fresh)  # the lease expired: reclaimed and materialized
    assert fresh.stats.materialized >= 3

    await stale.materialize(batch)  # the stale holder wakes up: fenced, records nothing
    assert stale.stats.lost == len(batch.receipts)
    assert stale.stats.materialized == 0
    events = await stack.events(ids)
    assert len(events) == 3
    assert len(await stack.work_for([e["event_id"] for e in events])) == 3
    for receipt_id in ids:
        row = await stack.receipt(receipt_id)
        assert row["router_status"] == "materialized"
        assert row["router_attempts"] == 2  # claimed twice, materialized once


async def test_a_row_the_database_refuses_does_not_hold_back_its_batch(stack: Stack) -> None:
    ids = [await stack.receive(contact(n, source="poison")) for n in range(4)]
    async with reading(stack.engine) as conn:
        t = ingress_tables.ingress_receipt
        received = (
            await conn.execute(select(t.c.received_at_ms).where(t.c.receipt_id == ids[2]))
        ).scalar_one()
    # A WorkItem already holds the id the router will derive for the third receipt (without
    # its event link): inserting it again violates the primary key.
    clash = work_id(ORG, received, f"{ids[2]}-0")
    items = delivery_tables.work.items
    async with stack.engine.begin() as conn:
        await conn.execute(
            items.insert().values(
                id=clash,
                family="elsewhere",
                queue_class="x",
                state="succeeded",
                run_after=0,
                attempt=1,
                max_attempts=1,
                reclaims=0,
                payload="{}",
                created_at=0,
            )
        )
    router = stack.router(backoff_base_ms=60_000)
    await stack.drain(router)
    for n in (0, 1, 3):
        assert (await stack.receipt(ids[n]))["router_status"] == "materialized"
    poisoned = await stack.receipt(ids[2])
    assert poisoned["router_status"] == "received"  # retried later, with backoff
    assert poisoned["error"] == "routing failed (IntegrityError)"
    assert await stack.events([ids[2]]) == []  # its transaction rolled back whole
    assert len(await stack.events(ids)) == 3


async def test_the_executor_claims_new_work_items_in_the_routers_transaction(
    stack: Stack,
) -> None:
    """With this process's executor at hand, the router claims the WorkItems it writes in
    its own transaction (ADR 0059): they are held the moment it commits, and they run
    although the router no longer wakes the poller (whose idle poll is a minute); what it
    cannot claim (a queue the executor has not read yet) the woken poller claims."""
    ran: list[str] = []

    async def handler(item: Claimed) -> None:
        ran.append(item.id)

    settings = WorkerSettings(idle_poll_ms=60_000, queue_refresh_ms=0)
    worker = Worker(
        stack.engine, WorkStore(delivery_tables.work, owner=EXECUTOR_OWNER), handler, settings
    )
    router = stack.router()
    router.executor = worker
    task = asyncio.create_task(worker.run())
    try:
        await stack.drain(router)  # what earlier tests left
        await stack.receive(contact(1, source="along"), route="leads")
        await stack.drain(router)
        async with asyncio.timeout(30):  # (it also runs whatever earlier tests left)
            while not ran:  # noqa: ASYNC110 - the worker's own progress
                await asyncio.sleep(0.01)
        before = len(ran)
        ids = [await stack.receive(contact(n, source="along"), route="leads") for n in range(2, 7)]
        assert await router.step() == 5
        work = await stack.work_for([e["event_id"] for e in await stack.events(ids)])
        assert len(work) == 5
        assert {w["state"] for w in work} <= {"processing", "succeeded"}  # held at commit
        assert {w["lease_owner"] for w in work} == {EXECUTOR_OWNER}
        mine = {w["id"] for w in work}  # (the worker also runs what earlier tests left)
        async with asyncio.timeout(30):
            while not mine <= set(ran):  # noqa: ASYNC110 - the worker's own progress
                await asyncio.sleep(0.01)
        assert sorted(i for i in ran[before:] if i in mine) == sorted(mine)  # each once
    finally:
        worker.stop()
        await task
