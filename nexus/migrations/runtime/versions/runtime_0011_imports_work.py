"""runtime: CSV imports run as work-engine items (docs/adr/0062): the job's own lease goes.

Drops `runtime_import_job.lease_owner`, `lease_until` and `ix_runtime_import_job_state`;
creates the `runtime.import` family (owner `runtime-worker.imports`, epoch 1) and its queue in
the outbox's work tables, and gives every job still queued or running at upgrade time the work
item of its next chunk (in the job's source lane), so an import in flight survives the upgrade.
A runner of the old release that still holds a job loses nothing it committed: each chunk
committed with the job's progress, and the new item resumes after it.

The rows are written as `nexus.platform.workqueue` lays them out at this revision (a later
change to that layout needs its own migration).

Revision ID: runtime_0011
Revises: runtime_0010
Create Date: 2026-12-06
"""

import json
import secrets
import time
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "runtime_0011"
down_revision: str | None = "runtime_0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

FAMILY = "runtime.import"
OWNER = "runtime-worker.imports"
QUEUE_CLASS = "chunks"
MAX_ATTEMPTS = 5

jobs = sa.table(
    "runtime_import_job",
    sa.column("org_id"),
    sa.column("job_id"),
    sa.column("state"),
    sa.column("processed"),
    sa.column("lease_owner"),
    sa.column("lease_until"),
)
families = sa.table(
    "runtime_outbox_family",
    sa.column("family"),
    sa.column("owner"),
    sa.column("ownership_epoch"),
    sa.column("admitting"),
    sa.column("updated_at"),
)
queues = sa.table(
    "runtime_outbox_queue",
    sa.column("family"),
    sa.column("queue_class"),
    sa.column("weight"),
    sa.column("max_attempts"),
    sa.column("lane_policy"),
    sa.column("last_enqueued_at"),
)
lanes = sa.table(
    "runtime_outbox_source_lane",
    sa.column("family"),
    sa.column("lane_key"),
    sa.column("head_seq"),
    sa.column("next_seq"),
)
items = sa.table(
    "runtime_outbox_item",
    sa.column("id"),
    sa.column("family"),
    sa.column("queue_class"),
    sa.column("state"),
    sa.column("run_after"),
    sa.column("lane_key"),
    sa.column("lane_seq"),
    sa.column("attempt"),
    sa.column("max_attempts"),
    sa.column("reclaims"),
    sa.column("payload"),
    sa.column("created_at"),
)


def _now_ms(bind: sa.Connection) -> int:
    """The database clock (ENGINE.md invariant 7), as `platform.db.clock.db_now_ms` reads it."""
    if bind.dialect.name == "sqlite":
        expr = "CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)"
    else:
        expr = "CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)"
    return int(bind.execute(sa.text(f"SELECT {expr}")).scalar_one())


def _work_id() -> str:
    """As `workqueue.store.new_work_id`: creation millisecond first, then random."""
    return f"{int(time.time() * 1000):012x}{secrets.token_hex(10)}"


def upgrade() -> None:
    bind = op.get_bind()
    now = _now_ms(bind)
    family = sa.select(families.c.family).where(families.c.family == FAMILY)
    if bind.execute(family).first() is None:
        op.execute(
            families.insert().values(
                family=FAMILY, owner=OWNER, ownership_epoch=1, admitting=True, updated_at=now
            )
        )
    queue = sa.select(queues.c.family).where(
        queues.c.family == FAMILY, queues.c.queue_class == QUEUE_CLASS
    )
    if bind.execute(queue).first() is None:
        op.execute(
            queues.insert().values(
                family=FAMILY,
                queue_class=QUEUE_CLASS,
                weight=1,
                max_attempts=MAX_ATTEMPTS,
                lane_policy="halt",
                last_enqueued_at=now,
            )
        )
    unfinished = bind.execute(
        sa.select(jobs.c.org_id, jobs.c.job_id, jobs.c.processed).where(
            jobs.c.state.in_(("queued", "running"))
        )
    ).all()
    for org_id, job_id, processed in unfinished:
        lane_key = f"{org_id}:{job_id}"
        payload = {"v": 1, "org_id": org_id, "job_id": job_id, "follows": bool(processed)}
        op.execute(lanes.insert().values(family=FAMILY, lane_key=lane_key, head_seq=1, next_seq=2))
        op.execute(
            items.insert().values(
                id=_work_id(),
                family=FAMILY,
                queue_class=QUEUE_CLASS,
                state="pending",
                run_after=now,
                lane_key=lane_key,
                lane_seq=1,
                attempt=0,
                max_attempts=MAX_ATTEMPTS,
                reclaims=0,
                payload=json.dumps(payload, separators=(",", ":")),
                created_at=now,
            )
        )
    op.drop_index("ix_runtime_import_job_state", table_name="runtime_import_job")
    with op.batch_alter_table("runtime_import_job") as batch:
        batch.drop_column("lease_until")
        batch.drop_column("lease_owner")


def downgrade() -> None:
    """The lease columns come back empty: the old runner takes every unfinished job again
    (a job's progress is in its row); the family's items, lanes and queue go."""
    with op.batch_alter_table("runtime_import_job") as batch:
        batch.add_column(sa.Column("lease_owner", sa.String(64), nullable=True))
        batch.add_column(sa.Column("lease_until", sa.BigInteger, nullable=True))
    op.create_index("ix_runtime_import_job_state", "runtime_import_job", ["state", "lease_until"])
    target_lanes = sa.table("runtime_outbox_target_lane", sa.column("family"))
    for table in (items, lanes, target_lanes, queues, families):
        op.execute(table.delete().where(table.c.family == FAMILY))
