"""`nexus_work_*` on the /metrics of the roles that run work (integration, runtime-worker),
served on real sockets, on SQLite and MariaDB: queue gauges from the periodic count, labels
family / queue_class / state only; gauges nobody reads are not recounted every interval, and
a read of a stale snapshot has it recounted at once (docs/adr/0055)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import pytest_asyncio
from prometheus_client import generate_latest
from sqlalchemy.ext.asyncio import AsyncEngine

from nexus.contracts.roles import LogicalService
from nexus.integration.app import create_app as integration_app
from nexus.platform.db.engine import create_engine
from nexus.platform.migrations import upgrade_to_head
from nexus.platform.settings import Settings, load_settings
from nexus.platform.workqueue import metrics
from nexus.platform.workqueue.metrics import _Source, watching_queues
from nexus.platform.workqueue.store import NewItem, WorkStore
from nexus.runtime.app import create_worker_app
from nexus.runtime.inbox.models import inbox
from tests.conftest import Backend
from tests.support.integration_rows import DIE, execute, route_delivery
from tests.support.servers import serving

pytestmark = pytest.mark.asyncio(loop_scope="module")
ORG = "00D000000000001AAA"
LABELS = re.compile(r"^nexus_work_\w+\{([^}]*)\}", re.MULTILINE)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def engines(
    backend: Backend, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[tuple[AsyncEngine, AsyncEngine, Settings]]:
    integration = create_engine(backend.url(LogicalService.INTEGRATION), application_name="t")
    runtime = create_engine(backend.url(LogicalService.RUNTIME), application_name="t")
    await upgrade_to_head(integration, LogicalService.INTEGRATION)
    await upgrade_to_head(runtime, LogicalService.RUNTIME)
    settings = load_settings(
        var_dir=Path(tmp_path_factory.mktemp("var")),
        integration_database_url=backend.url(LogicalService.INTEGRATION),
        runtime_database_url=backend.url(LogicalService.RUNTIME),
        work_stats_interval_seconds=0.1,
    )
    yield integration, runtime, settings
    await integration.dispose()
    await runtime.dispose()


async def metrics_once(url: str, wanted: str) -> str:
    async with httpx.AsyncClient(base_url=url) as client:
        async with asyncio.timeout(20):
            while True:
                text = (await client.get("/metrics")).text
                if wanted in text:
                    return text
                await asyncio.sleep(0.05)


async def test_the_integration_role_publishes_its_queue_depths(
    engines: tuple[AsyncEngine, AsyncEngine, Settings],
) -> None:
    engine, _, settings = engines
    routed = [
        await route_delivery(engine, org_id=ORG, connector="shop", route="orders", route_version=1)
        for _ in range(3)
    ]
    await execute(engine, "routes:shop", DIE, org_id=ORG)
    await route_delivery(engine, org_id=ORG, connector="shop", route="orders", route_version=1)
    async with serving(integration_app(settings, loops="all")) as url:
        text = await metrics_once(
            url,
            f'nexus_work_items{{family="{ORG}/routes:shop",queue_class="default",'
            'state="dead"} 3.0',
        )
    assert (
        f'nexus_work_items{{family="{ORG}/routes:shop",queue_class="default",state="pending"}} 1.0'
        in (text)
    )
    assert f'nexus_work_in_flight{{family="{ORG}/routes:shop",queue_class="default"}} 0.0' in text
    assert "nexus_work_oldest_pending_age_seconds{" in text
    for labels in LABELS.findall(text):  # family, queue_class, state: never an id
        assert {part.split("=")[0] for part in labels.split(",")} <= {
            "family",
            "queue_class",
            "state",
        }
    assert not any(r.work_id in text or r.event_id in text for r in routed)


async def test_runtime_worker_publishes_its_inbox_depth(
    engines: tuple[AsyncEngine, AsyncEngine, Settings],
) -> None:
    _, engine, settings = engines
    store = WorkStore(inbox, owner="runtime-worker")
    async with engine.begin() as conn:
        # due in an hour: the worker (same owner) must not claim them before they are counted
        due_later = [
            NewItem("org1/commands", "records", "{}", delay_ms=3_600_000) for _ in range(2)
        ]
        await store.enqueue(conn, due_later)
    async with serving(create_worker_app(settings)) as url:
        await metrics_once(
            url,
            'nexus_work_items{family="org1/commands",queue_class="records",state="pending"} 2.0',
        )


async def test_unread_gauges_rest_and_a_stale_read_recounts_them_at_once(
    engines: tuple[AsyncEngine, AsyncEngine, Settings], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, engine, _ = engines
    counts = 0
    real_refresh = metrics.refresh

    async def counting(engine: AsyncEngine, source: _Source) -> None:
        nonlocal counts
        counts += 1
        await real_refresh(engine, source)

    monkeypatch.setattr(metrics, "refresh", counting)
    store = WorkStore(inbox, owner="runtime-worker")
    gauge = 'nexus_work_items{family="org1/metrics-demand",queue_class="q",state="pending"}'
    async with watching_queues(engine, [inbox], interval_s=0.5):
        await asyncio.sleep(1.2)
        assert counts == 1  # at start; nobody read the gauges since, two ticks went by
        async with engine.begin() as conn:
            await store.enqueue(
                conn, [NewItem("org1/metrics-demand", "q", "{}", delay_ms=3_600_000)]
            )
        assert f"{gauge} " not in generate_latest().decode()  # the old snapshot, and...
        await asyncio.sleep(0.1)
        assert counts == 2  # ...recounted at once
        assert f"{gauge} 1.0" in generate_latest().decode()
        for _ in range(6):  # read at a scraper's pace: counted every interval again
            generate_latest()
            await asyncio.sleep(0.25)
        assert counts >= 4
