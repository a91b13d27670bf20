"""`nexus work transfer` and `nexus work stats` as an operator runs them (real processes)
against the integration database, on SQLite and MariaDB."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from sqlalchemy.ext.asyncio import AsyncEngine

from nexus.contracts.roles import LogicalService
from nexus.integration.delivery import models as delivery_tables
from nexus.platform.db.engine import create_engine
from nexus.platform.migrations import upgrade_to_head
from nexus.platform.workqueue.store import SUCCESS, NewItem, WorkStore
from tests.conftest import Backend
from tests.support.integration_rows import DIE

pytestmark = pytest.mark.asyncio(loop_scope="module")


async def nexus(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "nexus", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def database(
    backend: Backend, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[tuple[AsyncEngine, dict[str, str]]]:
    engine = create_engine(backend.url(LogicalService.INTEGRATION), application_name="cli-test")
    await upgrade_to_head(engine, LogicalService.INTEGRATION)
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEXUS_")}
    env.update(backend.env(), NEXUS_VAR_DIR=str(tmp_path_factory.mktemp("var")))
    yield engine, env
    await engine.dispose()


async def test_transfer_lists_the_blocking_items_then_succeeds_once_they_finish(
    database: tuple[AsyncEngine, dict[str, str]],
) -> None:
    engine, env = database
    old = WorkStore(delivery_tables.work, owner="integration-a")
    async with engine.begin() as conn:
        await old.ensure_queue(conn, "org1/routes:shop", "default")
        await old.enqueue(conn, [NewItem("org1/routes:shop", "default", "{}") for _ in range(3)])
        epoch = (await old.admitted_families(conn))["org1/routes:shop"]
        held = await old.claim(conn, "org1/routes:shop", "default", epoch, 2)
    args = ("work", "transfer", "--service", "integration", "--family", "org1/routes:shop")
    blocked = await nexus(env, *args, "--to", "integration-b", "--timeout", "0.5")
    assert blocked.returncode == 1, blocked.stderr
    assert sorted(blocked.stdout.split()) == sorted(
        ["blocking:", "blocking:", held[0].id, held[1].id]
    )
    assert "still has live leases" in blocked.stderr
    assert "claims re-admitted" in blocked.stderr

    async with engine.begin() as conn:  # the holder finishes its items
        await old.finish(conn, "org1/routes:shop", epoch, held[0].token, [(held[0], SUCCESS)])
        await old.finish(conn, "org1/routes:shop", epoch, held[1].token, [(held[1], DIE)])
    moved = await nexus(env, *args, "--to", "integration-b", "--timeout", "5")
    assert moved.returncode == 0, moved.stderr
    assert moved.stdout.strip() == (
        "integration: work family org1/routes:shop is owned by integration-b (ownership epoch 2)"
    )
    async with engine.begin() as conn:  # the old owner is fenced off
        assert await old.claim(conn, "org1/routes:shop", "default", epoch, 10) == []

    stats = await nexus(env, "work", "stats", "--service", "integration")
    assert stats.returncode == 0, stats.stderr
    lines = {tuple(line.split()[:5]) for line in stats.stdout.splitlines()[1:]}
    assert ("integration", "org1/routes:shop", "default", "pending", "1") in lines
    assert ("integration", "org1/routes:shop", "default", "dead", "1") in lines
    assert not any(line[3] == "succeeded" for line in lines)  # open states unless --all

    unknown = await nexus(
        env, "work", "transfer", "--service", "integration", "--family", "nope", "--to", "x"
    )
    assert unknown.returncode == 1
    assert unknown.stderr.strip() == "nexus: error: no work family 'nope' in integration"


async def test_stats_without_migrations_is_one_clear_error(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEXUS_")}
    env["NEXUS_VAR_DIR"] = str(tmp_path)
    done = await nexus(env, "work", "stats", "--service", "integration")
    assert done.returncode == 1
    assert done.stderr.startswith("nexus: error: cannot read the work queues")
    assert "nexus migrate" in done.stderr
