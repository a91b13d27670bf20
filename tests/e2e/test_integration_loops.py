"""`nexus serve --role=integration` as separate real processes, on SQLite and MariaDB: an
ingress-only process (`--loops=none`) takes webhooks, their bodies kept as files (so the
router claims, reads the files, then materializes: two transactions); a loops process killed
inside its materialization transaction leaves nothing behind but its leases; a fresh loops
process (`--loops=all`) reclaims the receipts after the lease, drains them into events and
WorkItems exactly once, delivers every command to a Runtime stand-in, and drains on SIGTERM."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio
from joserfc.jwk import ECKey
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from nexus.contracts.roles import LogicalService
from nexus.integration.delivery import models as delivery_tables
from nexus.integration.ingress import models as ingress_tables
from nexus.integration.ingress.sender import signed_headers
from nexus.integration.routing import models as routing_tables
from nexus.integration.routing.router import FAILPOINT_BEFORE_COMMIT
from nexus.integration.routing.routes import parse_route_file
from nexus.integration.routing.service import apply_routes
from nexus.platform.db.engine import create_engine, reading
from nexus.platform.migrations import upgrade_to_head
from nexus.platform.secrets import ensure_local_secrets, secrets_dir, write_webhook_secret
from tests.conftest import Backend
from tests.e2e.test_stack import clean_env
from tests.support.runtime_stand_in import StandIn
from tests.support.servers import serving

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="module")]

ORG = "00D000000000001AAA"
SECRET = "e2e-loops-shared-secret"
DELIVERIES = 30
LEASE_MS = 1500
ROUTES: dict[str, Any] = {
    "org_id": ORG,
    "routes": [
        {
            "connector": "demo",
            "route": "contacts",
            "signature": {"scheme": "hmac", "header": "x-signature"},
            "secrets": ["demo"],
            "delivery_id": {"pointer": "/id"},
            "source": {"object_kind": {"pointer": "/object"}, "object_id": {"pointer": "/data/id"}},
            "target_lane": "account:{/data/account}",
            "command": {
                "op": "upsert",
                "object": "Contact",
                "external_id_field": "External_Id__c",
                "fields": {"External_Id__c": "/data/id", "LastName": "/data/name"},
            },
        }
    ],
}


@dataclass
class World:
    tmp: Path
    backend: Backend
    engine: AsyncEngine
    runtime: StandIn

    def env(self, **extra: str) -> dict[str, str]:
        return clean_env(
            self.tmp,
            NEXUS_INTEGRATION_DATABASE_URL=self.backend.url(LogicalService.INTEGRATION),
            NEXUS_INTEGRATION_ORG_ID=ORG,
            NEXUS_RUNTIME_API_URL=self.runtime.url,
            NEXUS_INTEGRATION_ROUTER_LEASE_MS=str(LEASE_MS),
            NEXUS_INTEGRATION_ROUTER_IDLE_POLL_MS="50",
            NEXUS_SHUTDOWN_GRACE_SECONDS="5",
            **extra,
        )

    async def count(self, table: Any, *where: Any) -> int:
        async with reading(self.engine) as conn:
            query = select(func.count()).select_from(table).where(*where)
            return int((await conn.execute(query)).scalar_one())


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def world(backend: Backend, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[World]:
    tmp = tmp_path_factory.mktemp("loops-e2e")
    var_dir = tmp / "var"
    write_webhook_secret(var_dir, "demo", SECRET)
    ensure_local_secrets(var_dir, ["integration"])
    public = (secrets_dir(var_dir) / "workload" / "integration.pub").read_bytes()
    runtime = StandIn(public_key=ECKey.import_key(public))
    engine = create_engine(backend.url(LogicalService.INTEGRATION), application_name="e2e")
    await upgrade_to_head(engine, LogicalService.INTEGRATION)
    await apply_routes(engine, org_id=ORG, route_file=parse_route_file(ROUTES))
    async with serving(runtime.app()) as url:
        runtime.url = url
        yield World(tmp, backend, engine, runtime)
    await engine.dispose()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@asynccontextmanager
async def role(
    world: World, loops: str, **env: str
) -> AsyncIterator[tuple[subprocess.Popen[str], str]]:
    """`nexus serve --role=integration --loops=...` until the block ends (then SIGTERM)."""
    port = free_port()
    argv = [sys.executable, "-m", "nexus", "serve", "--role=integration", f"--loops={loops}"]
    log = (world.tmp / f"integration-{port}.log").open("w")
    proc = subprocess.Popen(  # noqa: ASYNC220 - starting it is quick; waiting is async below
        [*argv, f"--port={port}"], env=world.env(**env), stdout=log, stderr=log, text=True
    )
    base = f"http://127.0.0.1:{port}"
    try:
        yield proc, base
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        await wait_exit(proc, 20)
        log.close()


async def wait_exit(proc: subprocess.Popen[str], seconds: float) -> int:
    deadline = time.monotonic() + seconds
    while proc.poll() is None:
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError("the process did not exit in time")
        await asyncio.sleep(0.05)
    return int(proc.returncode)


async def until(check: Callable[[], Any], seconds: float = 60) -> None:
    async with asyncio.timeout(seconds):
        while not await check():  # noqa: ASYNC110 - polling the database, the truth
            await asyncio.sleep(0.05)


async def ready(base: str) -> None:
    async def answers() -> bool:
        try:
            async with httpx.AsyncClient(timeout=2) as client:
                return (await client.get(f"{base}/readyz")).status_code == 200
        except httpx.TransportError:
            return False

    await until(answers, 30)


def deliveries() -> Iterator[tuple[bytes, dict[str, str]]]:
    route = parse_route_file(ROUTES).routes[0]
    for n in range(DELIVERIES):
        delivery = f"e2e-{n}"
        body = json.dumps(
            {
                "id": delivery,
                "object": "contact",
                "data": {"id": f"ok-{n % 10}", "name": f"Name {n}", "account": f"a{n % 3}"},
            }
        ).encode()
        yield body, signed_headers(route, SECRET, body=body, url="", delivery_id=delivery)


async def test_separate_processes_drain_receipts_into_commands_exactly_once(world: World) -> None:
    receipts = ingress_tables.ingress_receipt
    async with role(world, "none", NEXUS_INGRESS_BODY_SNAPSHOT_BYTES="0") as (proc, base):
        await ready(base)
        async with httpx.AsyncClient(base_url=base, timeout=10) as client:
            for body, headers in deliveries():
                reply = await client.post("/hooks/demo/contacts", content=body, headers=headers)
                assert reply.status_code == 200, reply.text
        await asyncio.sleep(0.3)
        assert await world.count(receipts, receipts.c.router_status == "received") == DELIVERIES
    assert proc.returncode == 0

    # A loops process that dies inside its first materialization transaction.
    async with role(world, "all", NEXUS_FAILPOINT=FAILPOINT_BEFORE_COMMIT) as (crashed, _):
        assert await wait_exit(crashed, 30) == 137
    assert await world.count(routing_tables.connector_event) == 0
    assert await world.count(delivery_tables.work.items) == 0
    assert await world.count(receipts, receipts.c.lease_token.isnot(None)) > 0  # leased
    assert await world.count(receipts, receipts.c.router_status == "received") == DELIVERIES

    started = time.monotonic()
    async with role(world, "all") as (proc, base):
        await ready(base)

        async def drained() -> bool:
            items = delivery_tables.work.items
            return (
                await world.count(items, items.c.state == "succeeded") == DELIVERIES
                and await world.count(receipts, receipts.c.router_status == "materialized")
                == DELIVERIES
            )

        ready_in = time.monotonic() - started
        await until(drained)
        drained_in = time.monotonic() - started
    assert proc.returncode == 0  # SIGTERM: drained and stopped cleanly

    assert await world.count(routing_tables.connector_event) == DELIVERIES
    assert await world.count(delivery_tables.work.items) == DELIVERIES
    assert await world.count(delivery_tables.event_work) == DELIVERIES
    async with reading(world.engine) as conn:
        attempts = {r[0] for r in await conn.execute(select(receipts.c.router_attempts).distinct())}
        work_ids = {r[0] for r in await conn.execute(select(delivery_tables.work.items.c.id))}
    assert attempts == {2}  # claimed by the crashed process, then by the fresh one
    assert set(world.runtime.accepted) == work_ids  # every command, under its work id
    unauthorized = [c for c in world.runtime.calls if c["headers"].get("x-nexus-workload") is None]
    assert unauthorized == []
    print(f"loops process: ready in {ready_in:.1f} s, {DELIVERIES} drained in {drained_in:.1f} s")
