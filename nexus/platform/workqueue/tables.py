"""The tables one work queue needs; each user (Integration, Runtime) creates its own set under
its own prefix, in its own database.

    items          one row per WorkItem (the lease, the attempt, the schedule, the payload)
    source lanes   per (family, lane key): the sequence of the lane head and the next one
    target lanes   per (family, target key): who holds the one in-flight slot, until when, and
                   how many items wait for it
    families       per family: its org, owner, ownership epoch and whether claims are
                   admitted. A family is one installation in one org (`keys.family_key`:
                   `<org_id>/<installation>`), so the org leads every key below
    queues         per (family, queue class): the active queues the poller visits

Times are integer epoch milliseconds from the database clock (`db_now_ms`). Items have three
secondary indexes (ADR 0064):

    claim    (family, queue_class, state, run_after, id): the claim scan reads the `pending`
             range, the expired-lease sweep the `processing` one (a processing row's
             `run_after` is its lease expiry: claim and renewal set both), retention and the
             dead-letter list the finished ones. Blocked items are not in the `pending`
             range: they wait in their own states (`store.WAITING`, `store.TARGET_WAIT`)
    source   (family, lane_key, lane_seq): the next item of a lane, promoted when its head
             finishes (the seed's source-lane index; the lane order is `lane_seq`)
    target   (family, waiting_on, run_after, id): the oldest item waiting for a target
             lane, promoted when the lane is freed. `waiting_on` is the item's target key
             while it waits (`target_wait`) and NULL otherwise, so a state change of any
             other item leaves this index alone (`state` in it cost every claim and
             completion a second index rewrite on InnoDB)

The source and target indexes hold only the rows they are for on SQLite (partial indexes);
MariaDB and MySQL have no partial indexes and keep an entry for every row.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
)

from nexus.platform.db.backend import exact_key

ID = 36  # uuid4 hex with dashes, or any shorter stable id


@dataclass(frozen=True)
class WorkTables:
    items: Table
    source_lanes: Table
    target_lanes: Table
    families: Table
    queues: Table

    @property
    def all(self) -> tuple[Table, ...]:
        return (self.items, self.source_lanes, self.target_lanes, self.families, self.queues)


def work_tables(metadata: MetaData, prefix: str) -> WorkTables:
    items = Table(
        f"{prefix}_item",
        metadata,
        Column("id", String(ID), primary_key=True),
        Column("family", String(64), nullable=False),
        Column("queue_class", String(32), nullable=False),
        Column("state", String(16), nullable=False),
        Column("run_after", BigInteger, nullable=False),
        Column("lane_key", exact_key(191)),
        Column("lane_seq", BigInteger),
        Column("target_key", exact_key(191)),
        Column("waiting_on", exact_key(191)),  # = target_key while in `target_wait`
        Column("attempt", Integer, nullable=False, default=0),
        Column("max_attempts", Integer, nullable=False),
        Column("lease_token", String(32)),
        Column("lease_owner", String(64)),
        Column("lease_until", BigInteger),
        Column("claim_epoch", Integer),
        Column("reclaims", Integer, nullable=False, default=0),
        Column("payload", Text, nullable=False),
        Column("failure_class", String(16)),
        Column("last_error", String(300)),
        Column("created_at", BigInteger, nullable=False),
        Column("finished_at", BigInteger),
        Index(f"ix_{prefix}_claim", "family", "queue_class", "state", "run_after", "id"),
    )
    c = items.c
    Index(
        f"ix_{prefix}_source",
        c.family,
        c.lane_key,
        c.lane_seq,
        sqlite_where=c.lane_key.isnot(None),
    )
    Index(
        f"ix_{prefix}_target",
        c.family,
        c.waiting_on,
        c.run_after,
        c.id,
        sqlite_where=c.waiting_on.isnot(None),
    )
    source_lanes = Table(
        f"{prefix}_source_lane",
        metadata,
        Column("family", String(64), primary_key=True),
        Column("lane_key", exact_key(191), primary_key=True),
        Column("head_seq", BigInteger, nullable=False),
        Column("next_seq", BigInteger, nullable=False),
        Column("halted_by", String(ID)),  # the dead head holding the lane, for the console
    )
    target_lanes = Table(
        f"{prefix}_target_lane",
        metadata,
        Column("family", String(64), primary_key=True),
        Column("target_key", exact_key(191), primary_key=True),
        Column("holder_id", String(ID)),
        Column("holder_token", String(32)),
        Column("lease_until", BigInteger),
        # items parked in `target_wait` on this lane (a hint: the lane's release promotes
        # one while it is above 0; parking writes it, which orders parking after a release)
        Column("waiters", Integer, nullable=False, server_default="0"),
    )
    families = Table(
        f"{prefix}_family",
        metadata,
        Column("family", String(64), primary_key=True),
        Column("org_id", String(18), nullable=False),  # = keys.org_of(family)
        Column("owner", String(64), nullable=False),
        Column("ownership_epoch", Integer, nullable=False),
        Column("admitting", Boolean, nullable=False),
        Column("updated_at", BigInteger, nullable=False),
    )
    queues = Table(
        f"{prefix}_queue",
        metadata,
        Column("family", String(64), primary_key=True),
        Column("queue_class", String(32), primary_key=True),
        Column("weight", Integer, nullable=False, default=1),
        Column("max_attempts", Integer, nullable=False),
        Column("lane_policy", String(16), nullable=False, default="halt"),  # or "skip"
        Column("last_enqueued_at", BigInteger, nullable=False),
    )
    return WorkTables(items, source_lanes, target_lanes, families, queues)
