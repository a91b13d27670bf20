"""AcceptCommand's built-once statements (ADR 0056), both backends, on the engine runtime-api
accepts on (SQLite: on the loop, where `fast_sql` bypasses SQLAlchemy's execution): a new
command, its duplicate, a conflict, a repeat inside a batch, several keys and several orgs
(an unbound one refused alone), the dedupe rows they leave, a digest that still matches the
one earlier releases stored, and the metadata view's revision read."""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from sqlalchemy import select, update

from nexus.contracts.commands import AcceptCommandRequest, AcceptCommandResponse, RecordCommand
from nexus.contracts.errors import Conflict, Forbidden
from nexus.platform.db.engine import create_engine, reading, session_factory, unit_of_work
from nexus.runtime.inbox import models as inbox_tables
from nexus.runtime.inbox.accept import CommandInbox, command_digest
from nexus.runtime.inbox.queue import inbox_store
from nexus.runtime.metadata import models as m
from nexus.runtime.metadata.view import MetadataCache
from tests.integration.runtime.test_statement_budget import counting
from tests.support.commands import RuntimeDb, command
from tests.support.commands import db as db  # noqa: PLC0414  (fixture)

pytestmark = pytest.mark.asyncio(loop_scope="module")
UNKNOWN_ORG = "00Dnosuchorg0000"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def accept_engine(db: RuntimeDb) -> AsyncIterator[Any]:
    """As runtime-api builds its accept engine: on the loop on SQLite."""
    engine = create_engine(db.url, application_name="nexus-test-accept", sqlite_on_loop=True)
    yield engine
    await engine.dispose()


def request(
    db: RuntimeDb, message_id: str, external_id: str, **fields: Any
) -> AcceptCommandRequest:
    return AcceptCommandRequest(
        org_id=db.org_id,
        message_id=message_id,
        command=RecordCommand.model_validate(command(external_id, **fields)),
    )


async def dedupe_rows(db: RuntimeDb, keys: list[str]) -> dict[str, tuple[str, str]]:
    t = inbox_tables.inbox_message
    async with reading(db.engine) as conn:
        rows = await conn.execute(
            select(t.c.message_key, t.c.work_id, t.c.command_sha256).where(
                t.c.org_id == db.org_id, t.c.message_key.in_(keys)
            )
        )
        return {str(r[0]): (str(r[1]), str(r[2])) for r in rows}


async def test_dedupe_and_bindings_hold_on_the_accept_engine(
    db: RuntimeDb, accept_engine: Any
) -> None:
    inbox = CommandInbox(inbox_store(), session_factory(accept_engine), max_body_bytes=65536)
    metadata = MetadataCache()
    tag = uuid.uuid4().hex[:8]
    first = request(db, f"{tag}-a", f"{tag}-1", LastName="A")
    (accepted,) = await inbox.accept_batch(metadata, workload="integration", requests=[first])
    assert isinstance(accepted, AcceptCommandResponse)
    assert accepted.status == "accepted"

    other = request(db, f"{tag}-b", f"{tag}-2", LastName="B")
    stranger = AcceptCommandRequest(
        org_id=UNKNOWN_ORG, message_id=f"{tag}-c", command=other.command
    )
    changed = request(db, f"{tag}-a", f"{tag}-1", LastName="Changed")
    with counting(accept_engine) as statements:
        outcomes = await inbox.accept_batch(
            metadata,
            workload="integration",
            requests=[first, other, stranger, other, changed],
        )
    duplicate, new, refused, repeat, conflict = outcomes
    assert isinstance(duplicate, AcceptCommandResponse)
    assert (duplicate.status, duplicate.work_id) == ("duplicate", accepted.work_id)
    assert isinstance(new, AcceptCommandResponse)
    assert new.status == "accepted"
    assert isinstance(refused, Forbidden)
    assert refused.code == "WORKLOAD_NOT_BOUND"
    assert isinstance(repeat, AcceptCommandResponse)
    assert (repeat.status, repeat.work_id) == ("duplicate", new.work_id)
    assert isinstance(conflict, Conflict)
    assert conflict.code == "IDEMPOTENCY_CONFLICT"
    if db.url.startswith("sqlite"):  # bindings, dedupe, revision, insert, enqueue: fast_sql
        assert statements == []

    stored = await dedupe_rows(db, [f"integration:{tag}-a", f"integration:{tag}-b"])
    assert stored == {
        f"integration:{tag}-a": (accepted.work_id, command_digest(first.command)),
        f"integration:{tag}-b": (new.work_id, command_digest(other.command)),
    }

    unbound = await inbox.accept_batch(metadata, workload="nobody", requests=[other])
    assert isinstance(unbound[0], Forbidden)


async def test_the_digest_is_the_one_earlier_releases_stored() -> None:
    """Dedupe rows outlive releases: a repeat must hash to the stored digest."""
    body = RecordCommand.model_validate(
        command("zß-1", LastName="Ünïcode \u2603", Email="a@b.example", Phone="+1 555")
    )
    earlier = json.dumps(body.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    assert command_digest(body) == hashlib.sha256(earlier.encode()).hexdigest()


async def test_the_view_follows_the_revision_read_on_the_accept_engine(
    db: RuntimeDb, accept_engine: Any
) -> None:
    sessions = session_factory(accept_engine)
    cache = MetadataCache()
    async with unit_of_work(sessions, readonly=True) as session:
        view = await cache.view(session, db.org_id)
        assert await cache.view(session, db.org_id) is view  # same revision: the cached one
        empty = await cache.view(session, UNKNOWN_ORG)  # no state row: revision 0, no objects
    assert view.object("Contact") is not None
    assert (empty.revision, empty.schema_generation, empty.objects) == (0, 0, {})
    state = m.org_state
    async with unit_of_work(session_factory(db.engine)) as session:
        await session.execute(
            update(state)
            .where(state.c.org_id == db.org_id)
            .values(metadata_revision=state.c.metadata_revision + 1)
        )
    try:
        async with unit_of_work(sessions, readonly=True) as session:
            fresh = await cache.view(session, db.org_id)
        assert fresh is not view
        assert (fresh.revision, fresh.schema_generation) == (
            view.revision + 1,
            view.schema_generation,
        )
    finally:
        async with unit_of_work(session_factory(db.engine)) as session:
            await session.execute(
                update(state)
                .where(state.c.org_id == db.org_id)
                .values(metadata_revision=state.c.metadata_revision - 1)
            )
