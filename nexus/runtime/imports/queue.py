"""What an import's work item is: its family and queue class, its lane, its payload (ADR 0062).

An import runs as WorkItems of the family `<org_id>/runtime.import` in Runtime's work tables (the
outbox's set, `runtime_outbox_*`, which retention, the dead-letter console and the queue
gauges already cover). The family has an owner of its own, `runtime-worker.imports`, so only
the imports `Worker` claims it (the outbox's, owned by `runtime-worker`, never sees it).

One item runs one chunk of one job. Every item of a job is in the job's source lane, so two
chunks of one job never run at once and run in order; a chunk that leaves rows to do
enqueues the next item in its own transaction (`follows`: pause before it).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Literal

from pydantic import BaseModel, ConfigDict
from sqlalchemy.ext.asyncio import AsyncSession

from nexus.platform.workqueue.keys import family_key
from nexus.platform.workqueue.store import NewItem, QueuePolicy, WorkStore
from nexus.runtime.outbox.models import outbox

INSTALLATION = "runtime.import"
QUEUE_CLASS = "chunks"
OWNER = "runtime-worker.imports"
#: Attempts of one chunk before its job fails (the runner's MAX_FAILURES was 3 failures in a
#: row; the engine also counts an attempt a crash or a drain cut short, hence a little more).
MAX_ATTEMPTS = 5
LEASE_MS = 30_000


class ImportChunk(BaseModel):
    """The payload of one import item: which job, and whether a chunk of it ran before."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    v: Literal[1] = 1
    org_id: str
    job_id: str
    follows: bool = False


def family(org_id: str) -> str:
    return family_key(org_id, INSTALLATION)


def import_store(*, lease_ms: int = LEASE_MS, orgs: Collection[str] | None = None) -> WorkStore:
    return WorkStore(outbox, owner=OWNER, lease_ms=lease_ms, orgs=orgs, policy=queue_policy())


def queue_policy() -> QueuePolicy:
    """A dead chunk halts its job's lane: its job failed, or an operator replays it."""
    return QueuePolicy(max_attempts=MAX_ATTEMPTS, lane_policy="halt")


def lane_key(org_id: str, job_id: str) -> str:
    return f"{org_id}:{job_id}"


async def enqueue_chunk(
    session: AsyncSession, org_id: str, job_id: str, *, follows: bool = False
) -> None:
    """The job's next chunk, in the caller's transaction (it commits with the job's rows or
    with the chunk before it)."""
    payload = ImportChunk(org_id=org_id, job_id=job_id, follows=follows).model_dump_json()
    item = NewItem(family(org_id), QUEUE_CLASS, payload, lane_key=lane_key(org_id, job_id))
    await import_store().enqueue(await session.connection(), [item])
