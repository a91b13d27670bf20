"""The webhook pipeline on a 3-node Galera cluster with role writers on every node, started as
operators start them: runtime-api on node 1, a runtime-worker on nodes 2 and 3, and an
integration process (`--loops=all`) on each node, every role's databases reached through its
own node. 2,000 signed deliveries (400 source objects x 5 updates, 20 target lanes) are sent
to the three integration processes in turn, as a load balancer would.

So every table the pipeline writes (receipts, events, WorkItems and their lanes, inbox
commands, records) is written on all three nodes at once, and two nodes' transactions on one
row are certified at COMMIT, the loser getting a deadlock error the engine and the writers
retry. Checked as in the single-server e2e (tests/e2e/test_two_integrations.py): every 2xx
is one WorkItem succeeded and one inbox command applied once (each Contact's row version is
its 5 updates), each source lane finished in its order and its record holds the lane's last
value, no role's loop crashed.
"""

from __future__ import annotations

import asyncio
import re
import signal
import time
from collections.abc import AsyncIterator

import httpx
import pytest
import pytest_asyncio

from nexus.contracts.roles import LogicalService
from nexus.integration.routing.routes import parse_route_file
from nexus.integration.routing.service import apply_routes
from nexus.platform.db.engine import create_engine
from nexus.platform.migrations import upgrade_to_head
from nexus.platform.secrets import ensure_local_secrets, write_webhook_secret
from tests.conftest import Backend
from tests.e2e.test_pipeline_reliability import Role, Stack, role_env, until
from tests.e2e.test_two_integrations import (
    OBJECTS,
    ROUTES,
    SECRET,
    UPDATES,
    delivery,
    lanes_ran_in_order,
)
from tests.support.commands import free_port, prepare_runtime
from tests.support.galera import Galera

pytestmark = pytest.mark.asyncio(loop_scope="module")

NODES = 3


@pytest.fixture(scope="module")
def nodes(request: pytest.FixtureRequest, galera: Galera) -> list[Backend]:
    """The module's databases, one per logical service, as seen through each node."""
    module = re.sub(r"\W", "_", request.module.__name__.rsplit(".", 1)[-1])[:30]
    per_node = [Backend(name="mariadb") for _ in range(NODES)]
    for service in LogicalService:
        for backend, url in zip(
            per_node, galera.create_database(f"g_{module}_{service.value}"), strict=True
        ):
            backend.urls[service] = url
    return per_node


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(
    nodes: list[Backend], tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Stack]:
    tmp = tmp_path_factory.mktemp("galera-pipeline")
    var_dir = tmp / "var"
    runtime = await prepare_runtime(nodes[0], var_dir)
    ensure_local_secrets(var_dir, ["runtime-api", "runtime-worker", "integration"])
    write_webhook_secret(var_dir, "crm-demo-contacts", SECRET)
    integration = create_engine(
        nodes[1].url(LogicalService.INTEGRATION), application_name="galera-e2e"
    )
    await upgrade_to_head(integration, LogicalService.INTEGRATION)
    routes = parse_route_file(ROUTES)
    await apply_routes(integration, org_id=runtime.org_id, route_file=routes)
    api_port = free_port()

    def env(node: int) -> dict[str, str]:
        return role_env(tmp, nodes[node], api_port, runtime.org_id) | {
            "NEXUS_INTEGRATION_EXECUTOR_CONCURRENCY": "16"
        }

    result = Stack(nodes[0], runtime, integration, routes.routes[0])
    for name, role, node in (
        ("runtime-api", "runtime-api", 0),
        ("worker-2", "runtime-worker", 1),
        ("worker-3", "runtime-worker", 2),
        ("integration-1", "integration", 0),
        ("integration-2", "integration", 1),
        ("integration-3", "integration", 2),
    ):
        port = api_port if name == "runtime-api" else free_port()
        result.roles[name] = Role(role, port, env(node), tmp / f"{name}.log")
    try:
        for each in result.roles.values():
            await each.start()
        yield result
        for name, each in result.roles.items():
            assert await each.stop() == 0, f"{name}: {each.tail()}"
    finally:
        for each in result.roles.values():
            if each.process is not None and each.process.poll() is None:
                each.process.send_signal(signal.SIGKILL)
            if each.process is not None:
                each.process.wait(timeout=30)
        await integration.dispose()
        await runtime.engine.dispose()


async def test_role_writers_on_every_node_apply_every_delivery_once_in_lane_order(
    stack: Stack,
) -> None:
    ingress = [stack.roles[f"integration-{n}"] for n in range(1, NODES + 1)]
    total = OBJECTS * UPDATES
    acknowledged: set[str] = set()
    started = time.monotonic()

    async def send(n: int, client: httpx.AsyncClient) -> None:
        delivery_id, body, headers = delivery(stack, n)
        for attempt in range(100):  # a provider retries (on the next endpoint)
            target = ingress[(n + attempt) % NODES]
            try:
                reply = await client.post(
                    f"{target.url}/hooks/crm-demo/contacts", content=body, headers=headers
                )
                if reply.status_code == 200:
                    acknowledged.add(delivery_id)
                    return
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.05)
        raise AssertionError(f"{delivery_id} was never acknowledged")

    async with httpx.AsyncClient(timeout=10) as client:
        for version in range(UPDATES):  # an object's next update after its last one
            for start in range(version * OBJECTS, (version + 1) * OBJECTS, 100):
                await asyncio.gather(*(send(n, client) for n in range(start, start + 100)))
    assert len(acknowledged) == total

    async def applied() -> bool:
        records = await stack.records("two-")
        return len(records) == OBJECTS and set(records.values()) == {UPDATES}

    async def delivered() -> bool:
        return (await stack.work_states()).get("succeeded", 0) == total

    await until(applied, 240, "every delivery was applied")
    await until(delivered, 120, "every WorkItem succeeded")
    elapsed = time.monotonic() - started
    assert await stack.work_states() == {"succeeded": total}
    inbox = await stack.inbox_states()
    assert inbox == {"succeeded": total}, inbox  # one inbox command per delivery, none dead
    await lanes_ran_in_order(stack)
    assert [role.crashed_loops() for role in stack.roles.values()] == [0] * len(stack.roles)
    print(
        f"galera pipeline: {total} deliveries through 3 integration processes on 3 nodes, "
        f"applied once in {elapsed:.1f} s ({total / elapsed:.0f}/s)"
    )
