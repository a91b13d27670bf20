"""The ingest writer's raw-sqlite3 transaction stores exactly what `store_receipts` stores,
and the route cache reads secrets only when their files change, logging a missing one once
(ADR 0054, 0057). SQLite files (the raw-sqlite3 store exists for SQLite only)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import structlog
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from nexus.contracts.roles import LogicalService
from nexus.integration.ingress import models as ingress_tables
from nexus.integration.ingress.repository import ReceiptRow, Stored, store_receipts
from nexus.integration.ingress.service import RouteCache
from nexus.integration.ingress.writer import SqliteReceipts
from nexus.integration.routing.routes import parse_route_file
from nexus.integration.routing.service import apply_routes
from nexus.platform.db.engine import create_engine, create_sqlite_sync_engine
from nexus.platform.db.sqlite.batch import SqliteWriter
from nexus.platform.migrations import upgrade_to_head
from nexus.platform.observability import configure_logging
from nexus.platform.secrets import webhook_secret_dir, write_webhook_secret

pytestmark = pytest.mark.asyncio

ORG = "00D000000000001AAA"
ROUTES = {
    "org_id": ORG,
    "routes": [
        {
            "connector": "demo",
            "route": "signed",
            "signature": {"scheme": "standard_webhooks"},
            "secrets": ["demo-new", "demo-old"],
        },
        {
            "connector": "demo",
            "route": "unset",
            "signature": {"scheme": "github"},
            "secrets": ["never-set"],
        },
    ],
}


async def migrated(path: Path) -> tuple[str, AsyncEngine]:
    url = f"sqlite+aiosqlite:///{path}"
    engine = create_engine(url, application_name="nexus-test")
    await upgrade_to_head(engine, LogicalService.INTEGRATION)
    return url, engine


def row(delivery_id: str, receipt_id: str, *, connector: str = "demo") -> ReceiptRow:
    return ReceiptRow(
        org_id=ORG,
        receipt_id=receipt_id,
        connector=connector,
        route_key="signed",
        route_version=1,
        provider_delivery_id=delivery_id,
        delivery_id_source="scheme",
        method="POST",
        content_type="application/json",
        event_kind=None,
        correlation={"delivery_id": delivery_id, "note": 'é"\\'},
        body_bytes=2,
        body_snapshot=b"{}",
        body_ref=None,
        payload_sha256="0" * 64,
        signature_scheme="standard_webhooks",
        signature_key_index=1,
    )


#: Batches with every dedupe case: new rows, a repeat within the batch, repeats of earlier
#: batches (twice in one batch), the same delivery id under another connector, and ids that
#: differ only in case.
BATCHES = [
    [row("a", "r" * 31 + "1"), row("b", "r" * 31 + "2"), row("a", "r" * 31 + "3")],
    [row("A", "r" * 31 + "4"), row("b", "r" * 31 + "5"), row("a", "r" * 31 + "6")],
    [row("b", "r" * 31 + "7"), row("a", "r" * 31 + "8", connector="other")],
    [row(f"many-{n}", f"{n:032d}") for n in range(1200)],
]


async def stored_rows(engine: AsyncEngine) -> list[tuple[Any, ...]]:
    t = ingress_tables.ingress_receipt
    skip = {"received_at_ms", "last_delivery_at_ms", "next_attempt_at_ms"}
    columns = [c for c in t.c if c.name not in skip]
    async with engine.connect() as conn:
        found = await conn.execute(select(*columns).order_by(t.c.receipt_id))
        return [tuple(r) for r in found]


async def test_the_raw_sqlite3_transaction_stores_what_store_receipts_stores(
    tmp_path: Path,
) -> None:
    url, direct_db = await migrated(tmp_path / "direct.sqlite3")
    _, reference_db = await migrated(tmp_path / "reference.sqlite3")
    store = SqliteReceipts(SqliteWriter(create_sqlite_sync_engine(url)))
    try:
        by_direct: list[list[Stored]] = []
        by_reference: list[list[Stored]] = []
        for batch in BATCHES:
            by_direct.append(await store.commit(batch))
            async with reference_db.begin() as conn:
                by_reference.append(await conn.run_sync(store_receipts, batch))
    finally:
        await store.close()
    assert by_direct == by_reference
    assert [s.duplicate for s in by_direct[1]] == [False, True, True]
    assert by_direct[1][2].receipt_id == "r" * 31 + "1"
    direct_rows, reference_rows = await stored_rows(direct_db), await stored_rows(reference_db)
    assert direct_rows == reference_rows
    assert len(direct_rows) == 4 + 1200
    t = ingress_tables.ingress_receipt
    async with direct_db.connect() as conn:
        found = await conn.execute(select(t.c.receipt_id, t.c.deliveries).where(t.c.deliveries > 1))
        counts = {str(r.receipt_id): int(r.deliveries) for r in found}
    assert counts == {"r" * 31 + "1": 3, "r" * 31 + "2": 3}  # a: 1 + 1 + 1; b: 1 + 1 + 1
    await direct_db.dispose()
    await reference_db.dispose()


async def test_a_failed_batch_rolls_back_and_the_next_one_gets_a_new_connection(
    tmp_path: Path,
) -> None:
    url, engine = await migrated(tmp_path / "direct.sqlite3")
    store = SqliteReceipts(SqliteWriter(create_sqlite_sync_engine(url)))
    broken = row("x", "x" * 32)
    broken.body_bytes = None  # type: ignore[assignment]  # NOT NULL: the INSERT fails
    try:
        with pytest.raises(Exception):  # noqa: B017, PT011  (the driver's IntegrityError)
            await store.commit([row("ok-1", "1" * 32), broken])
        assert await store.commit([row("ok-2", "2" * 32)]) == [Stored("2" * 32, False)]
    finally:
        await store.close()
    assert [r[1] for r in await stored_rows(engine)] == ["2" * 32]  # nothing of the failed one
    await engine.dispose()


@pytest.fixture
def stdlib_logs(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """structlog through the stdlib handlers, as the role configures it, into `caplog`."""
    configure_logging(role="integration", level="debug", fmt="json")
    caplog.set_level(logging.WARNING)
    yield caplog
    logging.getLogger().handlers.clear()
    structlog.reset_defaults()


def missing_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    lines = [r.getMessage() for r in caplog.records if "ingress.secret_missing" in r.getMessage()]
    caplog.clear()
    return lines


@pytest_asyncio.fixture
async def routes(tmp_path: Path) -> AsyncIterator[tuple[RouteCache, Path]]:
    _, engine = await migrated(tmp_path / "routes.sqlite3")
    await apply_routes(engine, org_id=ORG, route_file=parse_route_file(ROUTES))
    var_dir = tmp_path / "var"
    try:
        yield RouteCache(engine, org_id=ORG, var_dir=var_dir, ttl=0), var_dir
    finally:
        await engine.dispose()


async def secrets_of(cache: RouteCache, route: str) -> list[str]:
    known = await cache.get("demo", route)
    assert known is not None
    return known.secrets


async def test_a_missing_secret_is_logged_once_while_it_stays_missing(
    routes: tuple[RouteCache, Path], stdlib_logs: pytest.LogCaptureFixture
) -> None:
    cache, var_dir = routes  # ttl 0: every get refreshes
    caplog = stdlib_logs
    for _ in range(5):
        assert await secrets_of(cache, "unset") == []
    logged = missing_lines(caplog)
    # one line per (route, reference): never-set once, and both of `signed`'s references once
    assert len(logged) == 3
    assert sum("never-set" in line for line in logged) == 1
    write_webhook_secret(var_dir, "demo-old", "old-secret-value")
    for _ in range(3):
        assert await secrets_of(cache, "signed") == ["old-secret-value"]
    assert missing_lines(caplog) == []
    (webhook_secret_dir(var_dir) / "demo-old").unlink()  # gone again: logged again, once
    for _ in range(3):
        assert await secrets_of(cache, "signed") == []
    [again] = missing_lines(caplog)
    assert "demo-old" in again
    assert not any("old-secret-value" in r.getMessage() for r in caplog.records)


async def test_a_set_or_rotated_secret_is_read_at_the_next_refresh(
    routes: tuple[RouteCache, Path],
) -> None:
    cache, var_dir = routes
    assert await secrets_of(cache, "signed") == []
    write_webhook_secret(var_dir, "demo-new", "first")
    assert await secrets_of(cache, "signed") == ["first"]
    write_webhook_secret(var_dir, "demo-new", "second")  # same size, replaced: a new inode
    write_webhook_secret(var_dir, "demo-old", "first")
    assert await secrets_of(cache, "signed") == ["second", "first"]
    known = await cache.get("demo", "signed")
    assert known is not None
    assert known.keys == [b"second", b"first"]  # derived once, at the refresh
    (webhook_secret_dir(var_dir) / "demo-new").write_text("")  # emptied in place
    assert await secrets_of(cache, "signed") == ["first"]


async def test_the_cache_keeps_secrets_for_its_ttl(routes: tuple[RouteCache, Path]) -> None:
    cache, var_dir = routes
    cache.ttl = 3600
    assert await secrets_of(cache, "signed") == []
    write_webhook_secret(var_dir, "demo-new", "later")
    assert await secrets_of(cache, "signed") == []  # within the TTL: the cached view
    cache.invalidate()
    assert await secrets_of(cache, "signed") == ["later"]


async def test_a_lookup_late_in_the_ttl_reads_ahead_without_waiting(
    routes: tuple[RouteCache, Path],
) -> None:
    cache, var_dir = routes
    cache.ttl = 0.6
    assert await secrets_of(cache, "signed") == []  # the first read: waited for
    write_webhook_secret(var_dir, "demo-new", "rotated")
    assert await secrets_of(cache, "signed") == []  # first half of the ttl: the cached view
    await asyncio.sleep(0.35)
    # second half: answered from the cache at once, the next read runs behind it
    assert await secrets_of(cache, "signed") == []
    ahead = cache._ahead
    assert ahead is not None
    assert not ahead.done()
    await ahead
    assert await secrets_of(cache, "signed") == ["rotated"]  # well before the old ttl ended


async def test_an_invalidation_during_a_read_ahead_is_not_lost(
    routes: tuple[RouteCache, Path],
) -> None:
    cache, var_dir = routes
    cache.ttl = 0.6
    assert await secrets_of(cache, "signed") == []
    await asyncio.sleep(0.35)
    assert await secrets_of(cache, "signed") == []  # starts a read ahead
    ahead = cache._ahead
    assert ahead is not None
    for _ in range(3):  # the read gets under way: it holds the lock until it is done
        await asyncio.sleep(0)
    assert cache._lock.locked()
    write_webhook_secret(var_dir, "demo-new", "after-the-read-began")
    cache.invalidate()  # e.g. Catalog changed the routes while the read was under way
    await ahead
    assert cache._expires == 0.0  # what that read saw is not trusted for a ttl
    assert await secrets_of(cache, "signed") == ["after-the-read-began"]  # read again
