"""What a chunked background job's work item is: its family and queue class, its lane, its
payload (ADR 0062; ADR 0077 made it a shape that CSV imports and Bulk API jobs share).

A job runs as WorkItems of one family per org, `<org_id>/<installation>`, in Runtime's work
tables (the outbox's set, `runtime_outbox_*`, which retention, the dead-letter console and
the queue gauges already cover). Each kind of job has an owner of its own (imports:
`runtime-worker.imports`), so only that kind's `Worker` claims it (the outbox's, owned by
`runtime-worker`, never sees it).

One item runs one chunk of one job. Every item of a job is in the job's source lane, so two
chunks of one job never run at once and run in order; a chunk that leaves work to do
enqueues the next item in its own transaction (`follows`: it is not the first).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
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
    """The payload of one chunk item: which job, and whether a chunk of it ran before."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    v: Literal[1] = 1
    org_id: str
    job_id: str
    follows: bool = False


@dataclass(frozen=True)
class ChunkFamily:
    """One kind of chunked job: the installation its families are named after and the
    owner whose `Worker` alone claims them."""

    installation: str
    owner: str
    queue_class: str = QUEUE_CLASS
    max_attempts: int = MAX_ATTEMPTS
    lease_ms: int = LEASE_MS

    def family(self, org_id: str) -> str:
        return family_key(org_id, self.installation)

    def policy(self) -> QueuePolicy:
        """A dead chunk halts its job's lane: its job failed, or an operator replays it."""
        return QueuePolicy(max_attempts=self.max_attempts, lane_policy="halt")

    def store(
        self, *, lease_ms: int | None = None, orgs: Collection[str] | None = None
    ) -> WorkStore:
        return WorkStore(
            outbox,
            owner=self.owner,
            lease_ms=self.lease_ms if lease_ms is None else lease_ms,
            orgs=orgs,
            policy=self.policy(),
        )

    async def enqueue(
        self, session: AsyncSession, org_id: str, job_id: str, *, follows: bool = False
    ) -> None:
        """The job's next chunk, in the caller's transaction (it commits with the job's data
        or with the chunk before it)."""
        payload = ImportChunk(org_id=org_id, job_id=job_id, follows=follows).model_dump_json()
        item = NewItem(
            self.family(org_id), self.queue_class, payload, lane_key=lane_key(org_id, job_id)
        )
        await self.store().enqueue(await session.connection(), [item])


IMPORTS = ChunkFamily(INSTALLATION, OWNER)


def family(org_id: str) -> str:
    return IMPORTS.family(org_id)


def import_store(*, lease_ms: int = LEASE_MS, orgs: Collection[str] | None = None) -> WorkStore:
    return IMPORTS.store(lease_ms=lease_ms, orgs=orgs)


def queue_policy() -> QueuePolicy:
    return IMPORTS.policy()


def lane_key(org_id: str, job_id: str) -> str:
    return f"{org_id}:{job_id}"


async def enqueue_chunk(
    session: AsyncSession, org_id: str, job_id: str, *, follows: bool = False
) -> None:
    """An import's next chunk, in the caller's transaction."""
    await IMPORTS.enqueue(session, org_id, job_id, follows=follows)
