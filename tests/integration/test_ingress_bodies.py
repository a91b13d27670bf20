"""Large webhook bodies kept as files: removed once no receipt references them (after
retention pruned or an operator purged the receipt, or when an ingest crashed before its
receipt committed), never while a receipt or a concurrent ingest still needs them."""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncEngine

from nexus.contracts.roles import LogicalService
from nexus.integration.ingress import models as ingress_tables
from nexus.integration.ingress.bodies import BODIES, _discard, keep_body, read_body, sweep_orphans
from nexus.platform.db.engine import create_engine
from nexus.platform.migrations import upgrade_to_head
from tests.conftest import Backend
from tests.support.integration_rows import route_delivery

pytestmark = pytest.mark.asyncio(loop_scope="module")

ORG = "00D000000000001AAA"
HOUR = 3600


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def engine(backend: Backend) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(backend.url(LogicalService.INTEGRATION), application_name="bodies")
    await upgrade_to_head(engine, LogicalService.INTEGRATION)
    yield engine
    await engine.dispose()


def kept(var_dir: Path, body: bytes, *, age_s: float = 0) -> tuple[str, Path]:
    sha = hashlib.sha256(body).hexdigest()
    ref = keep_body(var_dir, sha, body)
    path = var_dir / BODIES / sha[:2] / sha
    if age_s:
        then = time.time() - age_s
        os.utime(path, (then, then))
    return ref, path


async def receipt_with(engine: AsyncEngine, ref: str) -> str:
    routed = await route_delivery(
        engine, org_id=ORG, connector="bodies", route="contacts", route_version=1
    )
    rc = ingress_tables.ingress_receipt
    async with engine.begin() as conn:
        await conn.execute(
            update(rc)
            .where(rc.c.receipt_id == routed.receipt_id)
            .values(body_ref=ref, body_snapshot=None)
        )
    return routed.receipt_id


async def test_only_old_unreferenced_bodies_and_stale_leftovers_are_removed(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    referenced_ref, referenced = kept(tmp_path, b"referenced " * 100, age_s=2 * HOUR)
    await receipt_with(engine, referenced_ref)
    _, orphan = kept(tmp_path, b"orphan " * 100, age_s=2 * HOUR)  # crashed before its receipt
    _, young = kept(tmp_path, b"young " * 100)  # an ingest may be about to commit it
    leftover = orphan.parent / ".tmpfile.123.ab.tmp"  # a writer died mid-write
    leftover.write_bytes(b"x")
    os.utime(leftover, (time.time() - 2 * HOUR,) * 2)

    assert await sweep_orphans(engine, tmp_path, batch=1) == 2
    assert [p.exists() for p in (referenced, young, orphan, leftover)] == [True, True, False, False]
    assert read_body(tmp_path, referenced_ref) == b"referenced " * 100
    assert await sweep_orphans(engine, tmp_path) == 0


async def test_a_body_goes_once_its_last_receipt_is_gone(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    body = b"shared " * 100  # two deliveries with the same content share one file
    ref, path = kept(tmp_path, body, age_s=2 * HOUR)
    first, second = await receipt_with(engine, ref), await receipt_with(engine, ref)
    rc = ingress_tables.ingress_receipt
    async with engine.begin() as conn:
        await conn.execute(rc.delete().where(rc.c.receipt_id == first))
    assert await sweep_orphans(engine, tmp_path) == 0
    assert path.exists()
    async with engine.begin() as conn:
        await conn.execute(rc.delete().where(rc.c.receipt_id == second))
    assert await sweep_orphans(engine, tmp_path) == 1
    assert not path.exists()


async def test_an_ingest_touching_the_file_mid_sweep_keeps_it(tmp_path: Path) -> None:
    """The sweep renamed an old file aside; an ingest of the same content touched it just
    before: the sweep sees the fresh mtime and puts it back."""
    body = b"raced " * 100
    ref, path = kept(tmp_path, body, age_s=2 * HOUR)
    cutoff = time.time() - HOUR
    keep_body(tmp_path, hashlib.sha256(body).hexdigest(), body)  # the ingest's touch
    assert _discard(path, cutoff, restore=True) is False
    assert read_body(tmp_path, ref) == body
    os.utime(path, (time.time() - 2 * HOUR,) * 2)
    assert _discard(path, cutoff, restore=True) is True
    keep_body(tmp_path, hashlib.sha256(body).hexdigest(), body)  # gone: written anew
    assert read_body(tmp_path, ref) == body


async def test_a_reference_outside_the_var_dir_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not a var-dir file"):
        read_body(tmp_path, "var:../../etc/passwd")
    with pytest.raises(ValueError, match="not a var-dir file"):
        read_body(tmp_path, "s3:bucket/key")
