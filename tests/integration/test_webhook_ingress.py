"""Webhook ingress over real HTTP, on both backends: verify, store durably, then acknowledge."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import logging
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio
import structlog
from prometheus_client import REGISTRY
from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncEngine

from nexus.contracts.roles import LogicalService
from nexus.gateway.app import create_app as gateway_app
from nexus.integration.app import create_app
from nexus.integration.ingress import models as ingress_tables
from nexus.integration.ingress.repository import ReceiptRow, store_receipts
from nexus.integration.ingress.sender import signed_headers
from nexus.integration.routing import models as routing_tables
from nexus.integration.routing.routes import parse_route_file
from nexus.integration.routing.service import apply_routes
from nexus.platform.db.engine import create_engine
from nexus.platform.migrations import upgrade_to_head
from nexus.platform.observability import configure_logging
from nexus.platform.secrets import write_webhook_secret
from nexus.platform.settings import load_settings
from tests.conftest import Backend
from tests.support.servers import serving

pytestmark = pytest.mark.asyncio(loop_scope="module")

ORG = "00D000000000001AAA"
SECRET = "whsec_" + base64.b64encode(b"ingress-test-key-0123456789abcdef").decode()
PLAIN_SECRET = "plain-shared-hmac-key-for-tests"
SNAPSHOT_BYTES = 512
ROUTES: dict[str, Any] = {
    "org_id": ORG,
    "routes": [
        {
            "connector": "demo",
            "route": "contacts",
            "signature": {"scheme": "standard_webhooks"},
            "secrets": ["demo-contacts"],
            "max_body_bytes": 4096,
            "event_kind": {"pointer": "/type"},
            "source": {
                "object_kind": {"pointer": "/object"},
                "object_id": {"pointer": "/data/id"},
            },
            "target_lane": "contact:{/data/email}",
            "command": {
                "op": "upsert",
                "object": "Contact",
                "external_id_field": "External_Id__c",
                "fields": {"External_Id__c": "/data/id", "LastName": "/data/last_name"},
            },
        },
        {
            "connector": "demo",
            "route": "plain",
            "signature": {"scheme": "hmac", "header": "x-signature"},
            "secrets": ["demo-plain"],
            "delivery_id": {"pointer": "/id"},
            "event_kind": {"header": "x-event"},
        },
    ],
}


@dataclass
class Ingress:
    url: str
    app: Any
    engine: AsyncEngine
    var_dir: Path


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def ingress(
    backend: Backend, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Ingress]:
    var_dir = tmp_path_factory.mktemp("ingress-var")
    write_webhook_secret(var_dir, "demo-contacts", SECRET)
    write_webhook_secret(var_dir, "demo-plain", PLAIN_SECRET)
    url = backend.url(LogicalService.INTEGRATION)
    engine = create_engine(url, application_name="nexus-test")
    await upgrade_to_head(engine, LogicalService.INTEGRATION)
    await apply_routes(engine, org_id=ORG, route_file=parse_route_file(ROUTES))
    settings = load_settings(
        var_dir=var_dir,
        integration_database_url=url,
        integration_org_id=ORG,
        ingress_body_snapshot_bytes=SNAPSHOT_BYTES,
    )
    app = create_app(settings, loops="none")  # ingress only: the router would route them
    try:
        async with serving(app) as base:
            yield Ingress(url=base, app=app, engine=engine, var_dir=var_dir)
    finally:
        await engine.dispose()


def contact_event(n: int | str, **extra: Any) -> bytes:
    payload = {"type": "contact.created", "object": "contact", "data": {"id": f"c-{n}"}}
    return json.dumps(payload | extra).encode()


def signed(
    body: bytes, *, delivery_id: str, secret: str = SECRET, now: float | None = None
) -> dict[str, str]:
    route = parse_route_file(ROUTES).routes[0]
    return signed_headers(route, secret, body=body, url="", delivery_id=delivery_id, now=now)


async def receipts(engine: AsyncEngine, **where: str) -> list[Any]:
    t = ingress_tables.ingress_receipt
    query = select(t).where(*(t.c[k] == v for k, v in where.items()))
    async with engine.connect() as conn:
        return list((await conn.execute(query)).mappings())


async def post(ingress: Ingress, path: str, body: bytes, headers: dict[str, str]) -> httpx.Response:
    async with httpx.AsyncClient(base_url=ingress.url, timeout=10) as client:
        return await client.post(path, content=body, headers=headers)


async def test_a_signed_delivery_is_stored_before_it_is_acknowledged(ingress: Ingress) -> None:
    body = contact_event(1)
    reply = await post(ingress, "/hooks/demo/contacts", body, signed(body, delivery_id="msg-1"))
    assert reply.status_code == 200, reply.text
    answer = reply.json()
    assert answer["duplicate"] is False
    [row] = await receipts(ingress.engine, provider_delivery_id="msg-1")  # already committed
    assert row["receipt_id"] == answer["receipt_id"]
    assert row["org_id"] == ORG
    assert (row["connector"], row["route_key"], row["route_version"]) == ("demo", "contacts", 1)
    assert row["event_kind"] == "contact.created"
    assert row["delivery_id_source"] == "scheme"
    assert row["body_snapshot"] == body
    assert row["body_ref"] is None
    assert row["payload_sha256"] == hashlib.sha256(body).hexdigest()
    assert row["signature_scheme"] == "standard_webhooks"
    assert row["signature_verdict"] == "verified"
    assert row["router_status"] == "received"
    assert (row["router_attempts"], row["deliveries"]) == (0, 1)
    assert row["next_attempt_at_ms"] == row["received_at_ms"]
    assert abs(row["received_at_ms"] - time.time() * 1000) < 60_000
    assert row["lease_token"] is None
    assert json.loads(row["correlation"])["delivery_id"] == "msg-1"
    assert json.loads(row["correlation"])["request_id"] == reply.headers["x-request-id"]


@pytest.mark.parametrize(
    "tamper",
    ["bad_signature", "missing_signature", "stale_timestamp", "wrong_secret"],
)
async def test_an_unauthenticated_delivery_is_refused_and_stored_nowhere(
    ingress: Ingress, tamper: str
) -> None:
    body = contact_event(tamper)
    delivery_id = f"msg-{tamper}"
    headers = signed(body, delivery_id=delivery_id)
    if tamper == "bad_signature":
        body = body.replace(b"contact.created", b"contact.deleted")
    elif tamper == "missing_signature":
        del headers["webhook-signature"]
    elif tamper == "stale_timestamp":
        headers = signed(body, delivery_id=delivery_id, now=time.time() - 301)
    else:
        headers = signed(body, delivery_id=delivery_id, secret="whsec_" + "A" * 44)
    reply = await post(ingress, "/hooks/demo/contacts", body, headers)
    assert reply.status_code == 401
    assert reply.json()["code"] == "UNAUTHORIZED"
    assert reply.json()["message"] == "the webhook could not be authenticated"  # no reason
    assert await receipts(ingress.engine, provider_delivery_id=delivery_id) == []


async def test_a_body_over_the_route_limit_is_413_and_not_stored(ingress: Ingress) -> None:
    body = contact_event("big", padding="x" * 5000)
    reply = await post(ingress, "/hooks/demo/contacts", body, signed(body, delivery_id="big"))
    assert reply.status_code == 413
    assert await receipts(ingress.engine, provider_delivery_id="big") == []


async def test_a_streamed_body_over_the_limit_is_cut_off(ingress: Ingress) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(10):
            yield b"x" * 1000

    async with httpx.AsyncClient(base_url=ingress.url, timeout=10) as client:
        reply = await client.post("/hooks/demo/contacts", content=chunks())
    assert reply.status_code == 413


@pytest.mark.parametrize("path", ["/hooks/demo/nope", "/hooks/other/contacts"])
async def test_an_unknown_route_is_404(ingress: Ingress, path: str) -> None:
    body = contact_event("x")
    reply = await post(ingress, path, body, signed(body, delivery_id="unknown-route"))
    assert reply.status_code == 404
    assert reply.json()["code"] == "NOT_FOUND"


async def test_a_redelivery_returns_the_same_receipt(ingress: Ingress) -> None:
    body = contact_event(2)
    first = await post(ingress, "/hooks/demo/contacts", body, signed(body, delivery_id="msg-2"))
    again = await post(ingress, "/hooks/demo/contacts", body, signed(body, delivery_id="msg-2"))
    assert first.status_code == again.status_code == 200
    assert again.json() == {"receipt_id": first.json()["receipt_id"], "duplicate": True}
    [row] = await receipts(ingress.engine, provider_delivery_id="msg-2")
    assert row["deliveries"] == 2
    assert row["last_delivery_at_ms"] >= row["received_at_ms"]


async def test_a_redelivery_with_another_body_is_recorded_not_taken_for_the_same(
    ingress: Ingress,
) -> None:
    first_body, other_body = contact_event("digest-1"), contact_event("digest-1", extra="x")
    first = await post(
        ingress, "/hooks/demo/contacts", first_body, signed(first_body, delivery_id="msg-digest")
    )
    same = await post(
        ingress, "/hooks/demo/contacts", first_body, signed(first_body, delivery_id="msg-digest")
    )
    other = await post(
        ingress, "/hooks/demo/contacts", other_body, signed(other_body, delivery_id="msg-digest")
    )
    receipt_id = first.json()["receipt_id"]
    assert same.json() == {"receipt_id": receipt_id, "duplicate": True}
    assert other.json() == {"receipt_id": receipt_id, "duplicate": True, "digest_mismatch": True}
    [row] = await receipts(ingress.engine, provider_delivery_id="msg-digest")
    assert (row["deliveries"], row["digest_mismatches"]) == (3, 1)
    assert row["body_snapshot"] == first_body  # the first body stays the receipt's
    metric = REGISTRY.get_sample_value(
        "nexus_ingress_receipts_total", {"connector": "demo", "outcome": "digest_mismatch"}
    )
    assert metric is not None
    assert metric >= 1


async def test_one_delivery_id_on_two_routes_of_a_connector_is_two_deliveries(
    ingress: Ingress,
) -> None:
    contact = contact_event("shared-1")
    on_contacts = await post(
        ingress, "/hooks/demo/contacts", contact, signed(contact, delivery_id="evt-shared")
    )
    plain_route = parse_route_file(ROUTES).routes[1]
    plain = json.dumps({"id": "evt-shared"}).encode()
    on_plain = await post(
        ingress,
        "/hooks/demo/plain",
        plain,
        signed_headers(plain_route, PLAIN_SECRET, body=plain, url="", event_kind="x"),
    )
    assert [on_contacts.json()["duplicate"], on_plain.json()["duplicate"]] == [False, False]
    rows = await receipts(ingress.engine, provider_delivery_id="evt-shared")
    assert sorted(r["route_key"] for r in rows) == ["contacts", "plain"]


async def test_delivery_ids_that_differ_only_in_case_are_two_deliveries(ingress: Ingress) -> None:
    # MariaDB's default collation took "Msg-Case" for a redelivery of "msg-case": lost data
    bodies = [contact_event("case-1"), contact_event("case-2")]
    answers = [
        await post(ingress, "/hooks/demo/contacts", body, signed(body, delivery_id=delivery))
        for body, delivery in zip(bodies, ["msg-case", "Msg-Case"], strict=True)
    ]
    assert [a.json()["duplicate"] for a in answers] == [False, False]
    assert answers[0].json()["receipt_id"] != answers[1].json()["receipt_id"]
    [lower] = await receipts(ingress.engine, provider_delivery_id="msg-case")
    [upper] = await receipts(ingress.engine, provider_delivery_id="Msg-Case")
    assert (lower["deliveries"], upper["deliveries"]) == (1, 1)


async def test_delivery_id_from_a_body_pointer_and_kind_from_a_header(ingress: Ingress) -> None:
    route = parse_route_file(ROUTES).routes[1]
    body = json.dumps({"id": "evt-77", "n": 1}).encode()
    headers = signed_headers(route, PLAIN_SECRET, body=body, url="", event_kind="deal.won")
    first = await post(ingress, "/hooks/demo/plain", body, headers)
    again = await post(ingress, "/hooks/demo/plain", body, headers)
    assert first.status_code == 200, first.text
    assert again.json()["duplicate"] is True
    [row] = await receipts(ingress.engine, provider_delivery_id="evt-77")
    assert (row["delivery_id_source"], row["event_kind"]) == ("pointer", "deal.won")


async def test_without_a_delivery_id_each_delivery_gets_its_own_receipt(ingress: Ingress) -> None:
    route = parse_route_file(ROUTES).routes[1]
    body = json.dumps({"n": "no id here"}).encode()
    headers = signed_headers(route, PLAIN_SECRET, body=body, url="")
    first = await post(ingress, "/hooks/demo/plain", body, headers)
    again = await post(ingress, "/hooks/demo/plain", body, headers)
    assert first.status_code == again.status_code == 200
    assert first.json()["receipt_id"] != again.json()["receipt_id"]
    rows = await receipts(ingress.engine, delivery_id_source="generated")
    assert len(rows) == 2


async def test_a_large_body_is_kept_by_reference_and_hash(ingress: Ingress) -> None:
    body = contact_event(3, padding="y" * (SNAPSHOT_BYTES + 100))
    reply = await post(ingress, "/hooks/demo/contacts", body, signed(body, delivery_id="msg-3"))
    assert reply.status_code == 200, reply.text
    [row] = await receipts(ingress.engine, provider_delivery_id="msg-3")
    assert row["body_snapshot"] is None
    assert row["body_bytes"] == len(body)
    assert row["body_ref"].startswith("var:ingress/bodies/")
    assert (ingress.var_dir / row["body_ref"].removeprefix("var:")).read_bytes() == body


async def test_concurrent_deliveries_share_transactions(ingress: Ingress) -> None:
    stats = ingress.app.state.ingress.writer.stats
    before = stats.transactions
    bodies = [contact_event(f"burst-{n}") for n in range(50)]
    async with httpx.AsyncClient(
        base_url=ingress.url, timeout=10, limits=httpx.Limits(max_connections=50)
    ) as client:
        replies = await asyncio.gather(
            *(
                client.post(
                    "/hooks/demo/contacts",
                    content=body,
                    headers=signed(body, delivery_id=f"burst-{n}"),
                )
                for n, body in enumerate(bodies)
            )
        )
    assert [r.status_code for r in replies] == [200] * 50
    assert len({r.json()["receipt_id"] for r in replies}) == 50
    t = ingress_tables.ingress_receipt
    async with ingress.engine.connect() as conn:
        stored = (
            await conn.execute(
                select(t.c.receipt_id).where(t.c.provider_delivery_id.like("burst-%"))
            )
        ).scalars()
        assert set(stored) == {r.json()["receipt_id"] for r in replies}
    transactions = stats.transactions - before
    assert 1 <= transactions < 50, transactions
    assert stats.largest_batch > 1


async def test_through_the_gateway_at_the_public_path(ingress: Ingress, tmp_path: Path) -> None:
    settings = load_settings(var_dir=tmp_path, integration_url=ingress.url)
    async with serving(gateway_app(settings)) as gateway:
        body = contact_event(4)
        async with httpx.AsyncClient(base_url=gateway, timeout=10) as client:
            reply = await client.post(
                "/webhooks/demo/contacts", content=body, headers=signed(body, delivery_id="gw-4")
            )
    assert reply.status_code == 200, reply.text
    [row] = await receipts(ingress.engine, provider_delivery_id="gw-4")
    assert row["receipt_id"] == reply.json()["receipt_id"]


async def test_when_the_database_fails_no_delivery_is_acknowledged(
    ingress: Ingress, backend: Backend
) -> None:
    renamed = "integration_ingress_receipt_away"
    sql = "ALTER TABLE {} RENAME TO {}"
    async with ingress.engine.begin() as conn:
        await conn.execute(text(sql.format(ingress_tables.ingress_receipt.name, renamed)))
    try:
        bodies = [contact_event(f"down-{n}") for n in range(10)]
        async with httpx.AsyncClient(base_url=ingress.url, timeout=10) as client:
            replies = await asyncio.gather(
                *(
                    client.post(
                        "/hooks/demo/contacts",
                        content=body,
                        headers=signed(body, delivery_id=f"down-{n}"),
                    )
                    for n, body in enumerate(bodies)
                )
            )
        assert [r.status_code for r in replies] == [503] * 10
        assert {r.json()["code"] for r in replies} == {"SERVICE_UNAVAILABLE"}
    finally:
        async with ingress.engine.begin() as conn:
            await conn.execute(text(sql.format(renamed, ingress_tables.ingress_receipt.name)))
    body = contact_event("after")
    reply = await post(ingress, "/hooks/demo/contacts", body, signed(body, delivery_id="after"))
    assert reply.status_code == 200  # recovers without a restart
    assert await receipts(ingress.engine, provider_delivery_id="down-0") == []


@pytest.mark.mariadb_only
async def test_a_dropped_writer_connection_costs_no_delivery(
    ingress: Ingress, backend: Backend
) -> None:
    first = contact_event("drop-1")
    reply = await post(ingress, "/hooks/demo/contacts", first, signed(first, delivery_id="drop-1"))
    assert reply.status_code == 200  # the writer now keeps a connection
    async with ingress.engine.connect() as conn:
        database = (await conn.execute(text("SELECT DATABASE()"))).scalar_one()
        ids = (
            await conn.execute(
                text(
                    "SELECT id FROM information_schema.processlist"
                    " WHERE db = :db AND id <> CONNECTION_ID()"
                ),
                {"db": database},
            )
        ).scalars()
        for connection_id in list(ids):  # as a server restart would: every other session
            await conn.execute(text(f"KILL CONNECTION {int(connection_id)}"))
    body = contact_event("drop-2")
    reply = await post(ingress, "/hooks/demo/contacts", body, signed(body, delivery_id="drop-2"))
    assert reply.status_code == 200, reply.text
    [row] = await receipts(ingress.engine, provider_delivery_id="drop-2")
    assert row["receipt_id"] == reply.json()["receipt_id"]


@pytest.fixture
def json_logs(capsys: pytest.CaptureFixture[str]) -> Iterator[pytest.CaptureFixture[str]]:
    configure_logging(role="integration", level="debug", fmt="json")
    yield capsys
    logging.getLogger().handlers.clear()
    structlog.reset_defaults()


async def test_logs_carry_neither_the_body_nor_the_secret(ingress: Ingress, json_logs) -> None:
    marker = "PAYLOAD-MARKER-93c1"
    body = contact_event(5, note=marker)
    ok = await post(ingress, "/hooks/demo/contacts", body, signed(body, delivery_id="log-5"))
    tampered = body.replace(b"93c1", b"0000")
    bad = await post(ingress, "/hooks/demo/contacts", tampered, signed(body, delivery_id="log-6"))
    assert (ok.status_code, bad.status_code) == (200, 401)
    logs = json_logs.readouterr().err
    assert "bad_signature" in logs  # the reason code is logged ...
    assert "ingress.signature_rejected" in logs
    for leaked in (marker, "PAYLOAD-MARKER", SECRET, SECRET.removeprefix("whsec_")):
        assert leaked not in logs  # ... the payload and the secret are not
    assert signed(body, delivery_id="log-5")["webhook-signature"] not in logs


async def test_route_versions_grow_only_when_a_route_changes(ingress: Ingress) -> None:
    same = await apply_routes(ingress.engine, org_id=ORG, route_file=parse_route_file(ROUTES))
    assert [(r.version, r.changed) for r in same] == [(1, False), (1, False)]
    changed = json.loads(json.dumps(ROUTES))
    changed["routes"][1]["max_body_bytes"] = 2048
    again = await apply_routes(ingress.engine, org_id=ORG, route_file=parse_route_file(changed))
    assert [(r.version, r.changed) for r in again] == [(1, False), (2, True)]
    t = routing_tables.route
    async with ingress.engine.connect() as conn:
        bodies = (await conn.execute(select(t.c.body))).scalars().all()
    assert all(SECRET not in b and PLAIN_SECRET not in b for b in bodies)


def receipt_row(delivery_id: str, receipt_id: str) -> ReceiptRow:
    return ReceiptRow(
        org_id=ORG,
        receipt_id=receipt_id,
        connector="demo",
        route_key="contacts",
        route_version=1,
        provider_delivery_id=delivery_id,
        delivery_id_source="scheme",
        method="POST",
        content_type="application/json",
        event_kind="contact.created",
        correlation={"delivery_id": delivery_id},
        body_bytes=2,
        body_snapshot=b"{}",
        body_ref=None,
        payload_sha256="0" * 64,
        signature_scheme="standard_webhooks",
        signature_key_index=0,
    )


async def test_a_batch_larger_than_one_statement_is_stored_once(ingress: Ingress) -> None:
    # 2,500 rows: three multi-row statements on SQLite; the first and last delivery repeat.
    rows = [receipt_row(f"big-{n}", f"big{n:029d}") for n in range(2500)]
    rows.append(receipt_row("big-0", "bigrepeat" + "0" * 23))
    async with ingress.engine.begin() as conn:
        stored = await conn.run_sync(store_receipts, rows)
    assert [s.duplicate for s in stored] == [False] * 2500 + [True]
    assert stored[-1].receipt_id == rows[0].receipt_id
    again = [receipt_row(f"big-{n}", f"again{n:027d}") for n in (7, 2499)]
    async with ingress.engine.begin() as conn:
        repeated = await conn.run_sync(store_receipts, again)
    assert [(s.receipt_id, s.duplicate) for s in repeated] == [
        (rows[7].receipt_id, True),
        (rows[2499].receipt_id, True),
    ]
    t = ingress_tables.ingress_receipt
    async with ingress.engine.connect() as conn:
        counted = await conn.execute(
            select(t.c.provider_delivery_id, t.c.deliveries, t.c.received_at_ms).where(
                t.c.provider_delivery_id.like("big-%")
            )
        )
        found = {r.provider_delivery_id: (r.deliveries, r.received_at_ms) for r in counted}
    assert len(found) == 2500
    assert [found[key][0] for key in ("big-0", "big-7", "big-2499", "big-1")] == [2, 2, 2, 1]
    assert all(at > 1_700_000_000_000 for _, at in found.values())  # the database clock, ms
