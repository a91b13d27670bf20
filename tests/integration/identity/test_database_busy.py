"""A write that cannot get the database in time is a 503 with Retry-After, never a 500, and
nothing stays wedged (issue 25, point 1): another process holds SQLite's write lock while a
user signs in (the sign-in writes its session); the sign-in waits the busy timeout, then
answers 503 `DATABASE_BUSY`; once the lock is gone the next sign-in succeeds at once."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import pytest_asyncio

from nexus.contracts.roles import LogicalService
from nexus.identity.setup import bootstrap_first_admin
from nexus.platform.db.engine import create_engine, session_factory
from nexus.platform.migrations import upgrade_to_head
from nexus.platform.secrets import ensure_local_secrets
from nexus.platform.settings import load_settings
from nexus.runtime.app import create_api_app
from tests.support.servers import serving

pytestmark = pytest.mark.asyncio(loop_scope="module")
PASSWORD = "busy-admin-password-1"
BUSY_TIMEOUT_MS = 1000


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def runtime(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[tuple[str, Path]]:
    var_dir = tmp_path_factory.mktemp("busy-var")
    database = var_dir / "runtime.sqlite3"
    url = f"sqlite+aiosqlite:///{database}"
    engine = create_engine(url, application_name="nexus-test")
    await upgrade_to_head(engine, LogicalService.RUNTIME)
    await bootstrap_first_admin(session_factory(engine), password=PASSWORD)
    await engine.dispose()
    ensure_local_secrets(var_dir, ["app-sfcrm", "catalog", "integration", "gateway"])
    settings = load_settings(
        var_dir=var_dir, runtime_database_url=url, sqlite_busy_timeout_ms=BUSY_TIMEOUT_MS
    )
    async with serving(create_api_app(settings)) as base_url:
        yield base_url, database


async def sign_in(base_url: str) -> httpx.Response:
    async with httpx.AsyncClient(base_url=base_url, timeout=30) as client:
        return await client.post(
            "/services/oauth2/token",
            data={"grant_type": "password", "username": "admin", "password": PASSWORD},
        )


async def test_a_held_write_lock_is_a_503_then_writes_work_again(
    runtime: tuple[str, Path],
) -> None:
    base_url, database = runtime
    assert (await sign_in(base_url)).status_code == 200
    holder = sqlite3.connect(database, isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")  # another process's write transaction
        started = time.monotonic()
        busy = await sign_in(base_url)
        waited = time.monotonic() - started
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert busy.status_code == 503, busy.text
    assert busy.json()["code"] == "DATABASE_BUSY"
    assert busy.headers["retry-after"] == "1"
    assert "locked" not in busy.text  # not the driver's message
    assert waited < 10 * BUSY_TIMEOUT_MS / 1000  # bounded by the busy timeouts, not minutes
    started = time.monotonic()
    after = await sign_in(base_url)
    assert after.status_code == 200, after.text
    assert time.monotonic() - started < 5
