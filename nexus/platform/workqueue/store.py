"""Every statement of the work engine: enqueue, claim, renew, finish, reclaim, operate.

Invariants (ENGINE.md) and where they are kept:
- one live lease per item: every holder write carries `id IN (...) AND lease_token = :token
  AND state = 'processing'`; rowcount short of the ids = some lease was lost, and only the
  rows still carrying the token are written;
- `attempt` only grows (claim adds one; reclaim, retry and replay keep it);
- a source lane runs its head only: the lane row's `head_seq` is the head's `lane_seq`, only
  a finished head advances it (a retrying head blocks its lane, a dead one halts it unless
  the queue's policy skips), and only the head is ever `pending`: the items behind it are
  `waiting` (enqueue decides under the lane row's lock), and the transaction that advances
  the lane promotes the next one (CAS on `state = 'waiting'` and the lane's new head);
- a target lane has one holder: a lane lease row taken by CAS in the claim transaction and
  released with the item when it finishes, is released or reclaimed. A holder whose lease ran
  out keeps its lane until the sweep reclaims its item (it may still renew or finish until
  then, so the lane must not move to another item before); an expired lane whose holder no
  longer runs under it is taken over. A claim that finds an item's target lane held parks
  the item in `target_wait` and counts it on the lane row (`waiters`, written only while the
  lane is still held, so the park is ordered after any release by the lane row's lock); the
  transaction that frees the lane promotes its oldest waiter back to `pending`;
- the family's ownership epoch is checked by claim, renewal and completion;
- every time is the database's (`db_now_ms()` inside the statement).

`pending` is the one claimable state (`attempt > 0` means it is a retry), so the claim scan is
one ordered range of the claim index, and a blocked item is never read by it (ADR 0064): a
backlog behind slow lane heads or hot targets costs its promotions, not every claim. Rows a
holder finished keep its lease token, which is how a batch completion learns exactly which of
its rows it finished; every other way out of `processing` (reclaim, release) clears the
token, so a stale holder's retry or dead outcome is never mistaken for written.
"""

from __future__ import annotations

import functools
import secrets
import time
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    Select,
    Table,
    and_,
    bindparam,
    case,
    func,
    insert,
    literal_column,
    or_,
    select,
    tuple_,
    update,
)
from sqlalchemy.ext.asyncio import AsyncConnection

from nexus.platform.db import fast_sql
from nexus.platform.db.backend import (
    backend_of,
    insert_ignore,
    ordered_join,
    skips_locked,
    upsert,
)
from nexus.platform.db.clock import db_now_ms, read_now_ms
from nexus.platform.workqueue.keys import SEPARATOR, installation_of, org_of
from nexus.platform.workqueue.tables import WorkTables

PENDING = "pending"
WAITING = "waiting"  # behind its source lane's head: promoted when the head finishes
TARGET_WAIT = "target_wait"  # its target lane was held: promoted when the lane is freed
PROCESSING = "processing"
SUCCEEDED = "succeeded"
DEAD = "dead"
OUTCOME_UNKNOWN = "outcome_unknown"
CANCELLED = "cancelled"
FINAL = frozenset({SUCCEEDED, DEAD, CANCELLED})
PARKED = frozenset({DEAD, OUTCOME_UNKNOWN})  # waiting for an operator

RETRYABLE = "retryable"
DEFERRED = "deferred"  # nothing reached the target: retried without spending an attempt
TERMINAL = "terminal"
UNKNOWN = "outcome_unknown"
LEASE_EXPIRED = "lease_expired"


def new_work_id() -> str:
    """Time-ordered (creation millisecond first) and unique: FIFO within a queue."""
    return f"{int(time.time() * 1000):012x}{secrets.token_hex(10)}"


def new_token() -> str:
    return secrets.token_hex(16)


@dataclass(frozen=True)
class NewItem:
    family: str
    queue_class: str
    payload: str
    id: str | None = None
    lane_key: str | None = None  # source lane: FIFO, head only
    target_key: str | None = None  # target lane: one in flight
    delay_ms: int = 0


@dataclass(frozen=True)
class QueuePolicy:
    max_attempts: int = 8
    weight: int = 1
    lane_policy: str = "halt"  # what a dead lane head does to its lane: "halt" or "skip"


@dataclass(frozen=True)
class Claimed:
    id: str
    family: str
    queue_class: str
    token: str
    epoch: int
    attempt: int
    max_attempts: int
    payload: str
    lane_key: str | None
    lane_seq: int | None
    target_key: str | None
    passes: int = 0  # how many heads before it in its lane passed their executor on to it


@dataclass(frozen=True)
class PassOn:
    """A holder that takes each finished head's next item straight away (`finish_passing_on`):
    the follower is claimed under `token` in the completion's transaction, instead of being
    promoted to `pending` for the next claim to find. Only a head with fewer than `below`
    passes behind it passes on, so a deep lane gives its executor back now and then and the
    poller's round-robin still decides who runs (0: nobody passes on)."""

    token: str
    below: int


@dataclass(frozen=True)
class LaneSeat:
    """An item's place in its source lane: its sequence, and whether it is the head."""

    seq: int
    head: bool


@dataclass(frozen=True)
class _LaneHead:
    """A finished source-lane head: `parked` (dead / unknown) halts its lane."""

    id: str
    queue_class: str
    lane_key: str
    lane_seq: int
    parked: bool
    passes: int | None = None  # its `Claimed.passes` when it may pass its executor on


@dataclass(frozen=True)
class Outcome:
    """How an execution ended: `state` is succeeded, pending (retry), dead or
    outcome_unknown; `error` is a sanitized summary (class and short message, never data)."""

    state: str
    failure_class: str | None = None
    error: str | None = None
    delay_ms: int = 0


SUCCESS = Outcome(SUCCEEDED)

#: Candidate reads per claim: a round whose candidates were parked on held target lanes
#: reads again, up to this many times.
CLAIM_ROUNDS = 4


def effective(claimed: Claimed, outcome: Outcome) -> Outcome:
    """The outcome as recorded: a retry on the last attempt is dead (a deferral never is:
    it gives its attempt back, see `finish`)."""
    if outcome.failure_class == DEFERRED:
        return outcome
    if outcome.state == PENDING and claimed.attempt >= claimed.max_attempts:
        return Outcome(DEAD, outcome.failure_class, outcome.error)
    return outcome


def _claimed(row: Any, family: str, token: str, epoch: int, passes: int = 0) -> Claimed:
    """A row read by a claim (id, target_key, queue_class, attempt, max_attempts, payload,
    lane_key, lane_seq) as its holder sees it once claimed: the claim bumped its attempt."""
    return Claimed(
        id=row[0],
        family=family,
        queue_class=row[2],
        token=token,
        epoch=epoch,
        attempt=int(row[3]) + 1,
        max_attempts=int(row[4]),
        payload=row[5],
        lane_key=row[6],
        lane_seq=None if row[7] is None else int(row[7]),
        target_key=row[1],
        passes=passes,
    )


#: The columns `enqueue` writes (the others start NULL): the insert's rows name each.
ITEM_COLUMNS = (
    "id",
    "family",
    "queue_class",
    "state",
    "run_after",
    "lane_key",
    "lane_seq",
    "target_key",
    "attempt",
    "max_attempts",
    "reclaims",
    "payload",
    "created_at",
)
_LANE_COLUMNS = ("family", "lane_key", "head_seq", "next_seq")


def _of_installation(families: Table, installation: str) -> Any:
    """The families of `installation` in every org (a scan of the small queues table)."""
    return families.c.family.endswith(SEPARATOR + installation, autoescape=True)


def _one_per_lane(heads: list[tuple[str, int]]) -> list[list[tuple[str, int]]]:
    """(lane key, sequence) pairs in rounds that name each lane at most once, lower
    sequences first: one UPDATE advances a lane by one, so two heads of one lane (not seen
    in practice: only a lane's head runs) take two statements, in order."""
    rounds: list[list[tuple[str, int]]] = []
    earlier: dict[str, int] = {}  # heads of each lane already placed: its next round
    for key, seq in sorted(heads, key=lambda head: head[1]):
        n = earlier.get(key, 0)
        earlier[key] = n + 1
        if n == len(rounds):
            rounds.append([])
        rounds[n].append((key, seq))
    return rounds


def _bump_lanes(lanes: Table, dialect: str) -> Any:
    """Insert each lane row with its sequences taken (`next_seq` = 1 + count), or add the
    count to an existing row's `next_seq`: one statement for a batch of lanes."""
    # a literal, not a bound 1: MySQL's executemany repeats only the VALUES part
    one: Any = literal_column("1")
    return upsert(
        lanes,
        dialect,
        [lanes.c.family, lanes.c.lane_key],
        lambda incoming: {"next_seq": lanes.c.next_seq + incoming.next_seq - one},
    ).values(fast_sql.row_values(lanes, _LANE_COLUMNS))


class WorkStore:
    """The work engine's statements for one owner. `orgs`, when given, scopes the store to
    those orgs' families: it sees and claims nothing else, and its claim CAS checks the
    family's org, so even a family key from elsewhere cannot be claimed through it."""

    def __init__(
        self,
        tables: WorkTables,
        *,
        owner: str,
        lease_ms: int = 30_000,
        orgs: Collection[str] | None = None,
        policy: QueuePolicy | None = None,
    ) -> None:
        self.t = tables
        self.policy = policy or QueuePolicy()  # of a new queue the first of its kind
        self.owner = owner
        self.lease_ms = lease_ms
        self.orgs = None if orgs is None else frozenset(orgs)
        self.turn_wait_ms = 0.0  # how long the last claim waited for its turn (queueing)
        self._bumps: dict[str, Any] = {}  # `_bump_lanes` per dialect
        self._target_inserts: dict[str, Any] = {}  # `_insert_targets` per dialect

    # ------------------------------------------------------------------ enqueue
    async def ensure_queue(
        self,
        conn: AsyncConnection,
        family: str,
        queue_class: str,
        *,
        owner: str | None = None,
        policy: QueuePolicy | None = None,
    ) -> None:
        """Create the family (owned by `owner`, epoch 1) and the queue if they are new. A new
        queue follows `policy`, else the installation's policy row (which its workers set,
        `apply_policy`), else the store's.
        Existing rows are only read: an insert-or-ignore of an existing row takes a shared
        lock on InnoDB, which deadlocks with a concurrent enqueue's update of the queue row."""
        now = db_now_ms()
        dialect = conn.dialect.name
        f, q = self.t.families, self.t.queues
        if (await conn.execute(select(f.c.family).where(f.c.family == family))).first() is None:
            await conn.execute(
                insert_ignore(f, dialect).values(
                    family=family,
                    org_id=org_of(family),
                    owner=owner or self.owner,
                    ownership_epoch=1,
                    admitting=True,
                    updated_at=now,
                )
            )
        queue = select(q.c.family).where(q.c.family == family, q.c.queue_class == queue_class)
        if (await conn.execute(queue)).first() is None:
            policy = policy or await self._installation_policy(conn, family, queue_class)
            await conn.execute(
                insert_ignore(q, dialect).values(
                    family=family,
                    queue_class=queue_class,
                    weight=policy.weight,
                    max_attempts=policy.max_attempts,
                    lane_policy=policy.lane_policy,
                    last_enqueued_at=now,
                )
            )

    async def _installation_policy(
        self, conn: AsyncConnection, family: str, queue_class: str
    ) -> QueuePolicy:
        """The policy the installation's workers set (`apply_policy`), else the store's."""
        q = self.t.queues
        row = (
            await conn.execute(
                select(q.c.max_attempts, q.c.lane_policy, q.c.weight).where(
                    q.c.family == installation_of(family), q.c.queue_class == queue_class
                )
            )
        ).first()
        if row is None:
            return self.policy
        return QueuePolicy(max_attempts=int(row[0]), lane_policy=str(row[1]), weight=int(row[2]))

    async def apply_policy(
        self, conn: AsyncConnection, installation: str, queue_class: str, policy: QueuePolicy
    ) -> None:
        """Make every org's queue of `installation` and class follow `policy` (for items
        enqueued from now on: each item keeps the max attempts it was enqueued with), and
        keep it as the installation's policy row (family = the bare installation, which no
        family row admits, so nothing is ever claimed from it): an org's queue created later,
        by any process, copies it (`ensure_queue`)."""
        q = self.t.queues
        values = {"max_attempts": policy.max_attempts, "lane_policy": policy.lane_policy}
        await conn.execute(
            update(q)
            .where(_of_installation(q, installation), q.c.queue_class == queue_class)
            .values(**values)
        )
        row = upsert(q, conn.dialect.name, [q.c.family, q.c.queue_class], lambda _: values)
        await conn.execute(
            row.values(
                family=installation,
                queue_class=queue_class,
                weight=policy.weight,
                last_enqueued_at=0,
                **values,
            )
        )

    async def enqueue(self, conn: AsyncConnection, items: Sequence[NewItem]) -> list[str]:
        """Insert items in the caller's transaction (so they commit with the business write
        that caused them); source-lane sequences are allocated here, in arrival order. A
        queue that does not exist yet (an org's first item of it) is created (`ensure_queue`)."""
        if not items:
            return []
        dialect = conn.dialect.name
        queues = {(i.family, i.queue_class) for i in items}
        policies: dict[tuple[str, str], int] = {}
        for family, queue_class in sorted(queues):
            row = (
                await fast_sql.execute(
                    conn, self._max_attempts, {"b_family": family, "b_class": queue_class}
                )
            ).first()
            if row is None:
                await self.ensure_queue(conn, family, queue_class)
                row = (
                    await fast_sql.execute(
                        conn, self._max_attempts, {"b_family": family, "b_class": queue_class}
                    )
                ).first()
            assert row is not None  # noqa: S101 - ensured just now
            policies[(family, queue_class)] = int(row[0])
        seats = await self._allocate_lane_seqs(conn, items)
        targets = sorted({(i.family, i.target_key) for i in items if i.target_key})
        if targets:
            await fast_sql.execute(
                conn,
                self._insert_targets(dialect),
                [{"family": f, "target_key": k} for f, k in targets],
            )
        now = await read_now_ms(conn)
        rows: list[dict[str, Any]] = []
        for index, item in enumerate(items):
            seat = seats.get(index)
            rows.append(
                {
                    "id": item.id or new_work_id(),
                    "family": item.family,
                    "queue_class": item.queue_class,
                    "state": PENDING if seat is None or seat.head else WAITING,
                    "run_after": now + item.delay_ms,
                    "lane_key": item.lane_key,
                    "lane_seq": None if seat is None else seat.seq,
                    "target_key": item.target_key,
                    "attempt": 0,
                    "max_attempts": policies[(item.family, item.queue_class)],
                    "reclaims": 0,
                    "payload": item.payload,
                    "created_at": now,
                }
            )
        await fast_sql.execute(conn, self._insert_items, rows)
        await fast_sql.execute(
            conn,
            self._touch_queues,
            [{"b_family": f, "b_class": q, "b_now": now} for f, q in sorted(queues)],
        )
        return [r["id"] for r in rows]

    async def _allocate_lane_seqs(
        self, conn: AsyncConnection, items: Sequence[NewItem]
    ) -> dict[int, LaneSeat]:
        """Reserve consecutive sequences per source lane: one insert-or-increment statement
        for every lane of the batch (each row's exclusive lock serializes concurrent
        enqueuers, and orders this against the head's completion advancing the lane), then
        one read per family of the bumped values and the heads under those locks. An item
        whose sequence is its lane's head runs now (`pending`); the others wait.
        (Insert-or-ignore, then a compare-and-set update, took a shared lock on an existing
        row on InnoDB; upgrading it deadlocked with a completion advancing the same lane, or
        with a second enqueuer doing the same.)"""
        wanted: dict[tuple[str, str], list[int]] = {}
        for index, item in enumerate(items):
            if item.lane_key:
                wanted.setdefault((item.family, item.lane_key), []).append(index)
        if not wanted:
            return {}
        ordered = sorted(wanted.items())  # one lock order for every enqueuer
        await fast_sql.execute(
            conn,
            self._bump(conn.dialect.name),
            [
                {"family": f, "lane_key": k, "head_seq": 1, "next_seq": 1 + len(indexes)}
                for (f, k), indexes in ordered
            ],
        )
        after: dict[tuple[str, str], tuple[int, int]] = {}
        for family in sorted({f for f, _ in wanted}):
            keys = [k for f, k in wanted if f == family]
            rows = await fast_sql.execute(
                conn, self._lane_ends, {"b_family": family, "b_keys": keys}
            )
            after.update({(family, str(r[0])): (int(r[1]), int(r[2])) for r in rows})
        seats: dict[int, LaneSeat] = {}
        for key, indexes in ordered:
            head, next_seq = after[key]
            first = next_seq - len(indexes)
            for offset, index in enumerate(indexes):
                seats[index] = LaneSeat(first + offset, first + offset == head)
        return seats

    # ------------------------------------------------------------------ claim
    async def admitted_families(self, conn: AsyncConnection) -> dict[str, int]:
        """The families this owner may claim now, with their current epochs."""
        rows = await fast_sql.execute(conn, self._admitted)
        return {str(r[0]): int(r[1]) for r in rows}

    async def active_queues(self, conn: AsyncConnection) -> list[tuple[str, str, int, str]]:
        """(family, queue class, weight, org) of every queue this owner may claim from."""
        rows = await fast_sql.execute(conn, self._active_queues)
        return [(str(r[0]), str(r[1]), int(r[2]), str(r[3])) for r in rows]

    def _claims_here(self) -> list[Any]:
        """The families this store may claim from: admitting its owner, of its orgs."""
        f = self.t.families
        conditions = [f.c.owner == self.owner, f.c.admitting.is_(True)]
        if self.orgs is not None:
            conditions.append(f.c.org_id.in_(sorted(self.orgs)))
        return conditions

    @functools.cached_property
    def _admitted(self) -> Select[Any]:
        f = self.t.families
        return select(f.c.family, f.c.ownership_epoch).where(*self._claims_here())

    @functools.cached_property
    def _active_queues(self) -> Select[Any]:
        q, f = self.t.queues, self.t.families
        return (
            select(q.c.family, q.c.queue_class, q.c.weight, f.c.org_id)
            .join(f, f.c.family == q.c.family)
            .where(*self._claims_here())
            .order_by(q.c.family, q.c.queue_class)
        )

    def _epoch_holds(self, family: Any, epoch: Any, *, claiming: bool = False) -> Any:
        """The family is still at `epoch`; to claim, it must also admit this owner (and be of
        this store's orgs). (Holders of a draining family renew and finish under their epoch;
        a transfer advances it.)"""
        f = self.t.families
        conditions = [f.c.family == family]
        if claiming:
            conditions += self._claims_here()
        current = select(f.c.ownership_epoch).where(*conditions).scalar_subquery()
        return current == epoch

    def _claimable(self, family: Any, queue_class: Any, now: Any, *columns: Any) -> Select[Any]:
        """Pending items of one queue that may run now: one range of the claim index and
        nothing else. Only lane heads are pending; an item whose target lane turns out to be
        held is parked by the claim (`_park`), so it is read once, not by every claim."""
        items = self.t.items
        return select(*columns).where(
            items.c.family == family,
            items.c.queue_class == queue_class,
            items.c.state == PENDING,
            items.c.run_after <= now,
        )

    @functools.cached_property
    def _peek(self) -> Select[Any]:
        """`has_claimable`'s query, built once (an idle poller runs it several times a
        second: building and hashing the expression cost more than running it)."""
        family: Any = bindparam("family")
        queue_class: Any = bindparam("queue_class")
        return self._claimable(family, queue_class, db_now_ms(), self.t.items.c.id).limit(1)

    @functools.cached_property
    def _candidates(self) -> Select[Any]:
        """`claim`'s candidate read, built once; parameters family, queue_class, limit."""
        items = self.t.items
        read = self._claimable(
            bindparam("family"), bindparam("queue_class"), db_now_ms(), *self._claim_columns
        )
        return read.order_by(items.c.run_after, items.c.id).limit(bindparam("limit"))

    @functools.cached_property
    def _claim_columns(self) -> tuple[Any, ...]:
        """What a claim reads of an item, in `_claimed`'s order."""
        c = self.t.items.c
        return (
            c.id, c.target_key, c.queue_class, c.attempt, c.max_attempts, c.payload,
            c.lane_key, c.lane_seq,
        )  # fmt: skip

    # Statements run every round, built once per store (bound parameters, expanding IN
    # lists): building a statement and its cache key costs more CPU than running it on
    # SQLite. Parameters are named b_* (UPDATE reserves the column names).
    @functools.cached_property
    def _claim_update(self) -> Any:
        """`claim`'s CAS: b_ids, b_family, b_epoch, b_token."""
        return self._take_items(PENDING)

    @functools.cached_property
    def _pass_update(self) -> Any:
        """`finish_passing_on`'s CAS on the followers: the claim's, from `waiting`."""
        return self._take_items(WAITING)

    def _take_items(self, state: str, *which: Any) -> Any:
        """Items b_ids (or those `which` names) in `state` and due are this holder's under
        b_token (b_family still at b_epoch and admitting this owner)."""
        items = self.t.items
        now = db_now_ms()
        return (
            update(items)
            .where(
                *(which or (items.c.id.in_(bindparam("b_ids", expanding=True)),)),
                items.c.state == state,
                items.c.run_after <= now,
                self._epoch_holds(bindparam("b_family"), bindparam("b_epoch"), claiming=True),
            )
            .values(
                state=PROCESSING,
                lease_token=bindparam("b_token"),
                lease_owner=self.owner,
                lease_until=now + self.lease_ms,
                run_after=now + self.lease_ms,  # a processing row may run again at expiry
                attempt=items.c.attempt + 1,
                claim_epoch=bindparam("b_epoch"),
            )
        )

    def _next_items(self) -> Any:
        """SQLite only: the rows (by rowid) of the items at the heads of family b_family's
        lanes b_keys, which have just advanced: the lane rows by primary key drive, one
        covering probe of the source index each (as `_lane_followers`)."""
        items, lanes = self.t.items, self.t.source_lanes
        nxt = items.alias("nxt")
        on = and_(
            nxt.c.family == lanes.c.family,
            nxt.c.lane_key == lanes.c.lane_key,
            nxt.c.lane_seq == lanes.c.head_seq,
        )
        seats: Select[Any] = (
            select(literal_column("nxt.rowid"))
            .select_from(ordered_join(lanes, nxt, on))
            .where(
                lanes.c.family == bindparam("b_family"),
                lanes.c.lane_key.in_(bindparam("b_keys", expanding=True)),
            )
        )
        return literal_column(f"{items.name}.rowid").in_(seats)

    @functools.cached_property
    def _pass_next(self) -> Any:
        """`UPDATE ... RETURNING` backends: `_pass_update` for the waiting next items of
        lanes b_keys (`_next_items`) of queue class b_class without a target lane,
        returning what `_claimed` reads (the attempt as it was before this claim)."""
        items = self.t.items
        columns = [
            (c - 1).label("attempt") if c is items.c.attempt else c for c in self._claim_columns
        ]
        return self._take_items(
            WAITING,
            self._next_items(),
            items.c.queue_class == bindparam("b_class"),
            items.c.target_key.is_(None),
        ).returning(*columns)

    @functools.cached_property
    def _promote_next(self) -> Any:
        """The waiting next items of lanes b_keys (`_next_items`) become `pending`."""
        return (
            update(self.t.items)
            .where(self._next_items(), self.t.items.c.state == WAITING)
            .values(state=PENDING)
        )

    @functools.cached_property
    def _take_target_lane(self) -> Any:
        """`claim`'s target lane CAS: b_family, b_key, b_id (the item), b_token. The lane is
        free, or its lease expired and its holder no longer runs under it."""
        items, targets = self.t.items, self.t.target_lanes
        now = db_now_ms()
        holder_runs = (  # the lane's holder still runs under it (expired or not)
            select(items.c.id)
            .where(
                items.c.id == targets.c.holder_id,
                items.c.lease_token == targets.c.holder_token,
                items.c.state == PROCESSING,
            )
            .exists()
        )
        return (
            update(targets)
            .where(
                targets.c.family == bindparam("b_family"),
                targets.c.target_key == bindparam("b_key"),
                or_(
                    targets.c.holder_id.is_(None),
                    and_(targets.c.lease_until < now, ~holder_runs),
                ),
            )
            .values(
                holder_id=bindparam("b_id"),
                holder_token=bindparam("b_token"),
                lease_until=now + self.lease_ms,
            )
        )

    @functools.cached_property
    def _free_targets(self) -> Any:
        """Release the target lanes b_keys that b_ids hold under b_token in family b_family."""
        targets = self.t.target_lanes
        return (
            update(targets)
            .where(
                targets.c.family == bindparam("b_family"),
                targets.c.target_key.in_(bindparam("b_keys", expanding=True)),
                targets.c.holder_token == bindparam("b_token"),
                targets.c.holder_id.in_(bindparam("b_ids", expanding=True)),
            )
            .values(holder_id=None, holder_token=None, lease_until=None)
        )

    @functools.cached_property
    def _count_waiters(self) -> Any:
        """`_park`: b_n more waiters on lane b_key of b_family, if it is still held."""
        targets = self.t.target_lanes
        return (
            update(targets)
            .where(
                targets.c.family == bindparam("b_family"),
                targets.c.target_key == bindparam("b_key"),
                targets.c.holder_id.isnot(None),
            )
            .values(waiters=targets.c.waiters + bindparam("b_n"))
        )

    @functools.cached_property
    def _awaited_targets(self) -> Any:
        """Of lanes b_keys of b_family, the free ones that have waiters."""
        targets = self.t.target_lanes
        return select(targets.c.target_key).where(
            targets.c.family == bindparam("b_family"),
            targets.c.target_key.in_(bindparam("b_keys", expanding=True)),
            targets.c.holder_id.is_(None),
            targets.c.waiters > 0,
        )

    @functools.cached_property
    def _oldest_waiter(self) -> Any:
        """The first item waiting for lane b_key of b_family (the target index)."""
        items = self.t.items
        return (
            select(items.c.id)
            .where(
                items.c.family == bindparam("b_family"),
                items.c.waiting_on == bindparam("b_key"),
            )
            .order_by(items.c.run_after, items.c.id)
            .limit(1)
        )

    @functools.cached_property
    def _uncount_waiter(self) -> Any:
        """b_n waiters fewer on lane b_key of b_family (none left when b_none is 1)."""
        targets = self.t.target_lanes
        return (
            update(targets)
            .where(
                targets.c.family == bindparam("b_family"),
                targets.c.target_key == bindparam("b_key"),
            )
            .values(
                waiters=case(
                    (bindparam("b_none") == 1, 0),
                    (targets.c.waiters > bindparam("b_n"), targets.c.waiters - bindparam("b_n")),
                    else_=0,
                )
            )
        )

    @functools.cached_property
    def _park_items(self) -> Any:
        """Pending items b_ids wait for target lane b_key (a CAS on their state)."""
        items = self.t.items
        return (
            update(items)
            .where(items.c.id.in_(bindparam("b_ids", expanding=True)), items.c.state == PENDING)
            .values(state=TARGET_WAIT, waiting_on=bindparam("b_key"))
        )

    @functools.cached_property
    def _unpark_item(self) -> Any:
        """Waiting item b_id is pending again (a CAS on its state)."""
        items = self.t.items
        return (
            update(items)
            .where(items.c.id == bindparam("b_id"), items.c.state == TARGET_WAIT)
            .values(state=PENDING, waiting_on=None)
        )

    @functools.cached_property
    def _lane_followers(self) -> Any:
        """Lanes b_keys of family b_family: the `waiting` item at each lane's head (the
        lanes have just advanced), with what a claim of it needs. The lane rows by primary
        key drive the join, one probe of the source index each (`ordered_join`, and the
        index forced on MySQL: SQLite otherwise walks every item the lanes ever had,
        finished ones too; a tuple IN over the items read the whole table on MariaDB)."""
        items, lanes = self.t.items, self.t.source_lanes
        on = and_(
            items.c.family == lanes.c.family,
            items.c.lane_key == lanes.c.lane_key,
            items.c.lane_seq == lanes.c.head_seq,
        )
        return (
            select(*self._claim_columns, (items.c.run_after <= db_now_ms()).label("due"))
            .select_from(ordered_join(lanes, items, on))
            .where(
                lanes.c.family == bindparam("b_family"),
                lanes.c.lane_key.in_(bindparam("b_keys", expanding=True)),
                items.c.state == WAITING,
            )
            # MariaDB, its statistics of the source index stale after a burst, chose a full
            # scan of the items with a join buffer (seconds per completion of 1,000 heads)
            .with_hint(items, f"FORCE INDEX ({self._source_index})", "mysql")
        )

    @functools.cached_property
    def _source_index(self) -> str:
        return next(str(ix.name) for ix in self.t.items.indexes if str(ix.name).endswith("_source"))

    @functools.cached_property
    def _promote(self) -> Any:
        """Waiting items b_ids become `pending` (a CAS on their state)."""
        items = self.t.items
        return (
            update(items)
            .where(items.c.id.in_(bindparam("b_ids", expanding=True)), items.c.state == WAITING)
            .values(state=PENDING)
        )

    @functools.cached_property
    def _carrying(self) -> Any:
        """Ids of b_ids carrying the token b_token."""
        items = self.t.items
        return select(items.c.id).where(
            items.c.id.in_(bindparam("b_ids", expanding=True)),
            items.c.lease_token == bindparam("b_token"),
        )

    @functools.cached_property
    def _succeed(self) -> Any:
        """`finish` for succeeded items: b_ids, b_token, b_family, b_epoch."""
        return (
            update(self.t.items)
            .where(
                self._held_by(bindparam("b_ids", expanding=True), bindparam("b_token")),
                self._epoch_holds(bindparam("b_family"), bindparam("b_epoch")),
            )
            .values(state=SUCCEEDED, finished_at=db_now_ms(), lease_until=None)
        )

    @functools.cached_property
    def _in_state(self) -> Any:
        """Ids of b_ids in state b_state under token b_token."""
        return self._carrying.where(self.t.items.c.state == bindparam("b_state"))

    @functools.cached_property
    def _skip_policies(self) -> Any:
        q = self.t.queues
        return select(q.c.queue_class, q.c.lane_policy).where(
            q.c.family == bindparam("b_family"),
            q.c.queue_class.in_(bindparam("b_classes", expanding=True)),
        )

    @functools.cached_property
    def _advance_lanes(self) -> Any:
        """Source lanes of family b_family past their finished heads, in ONE statement:
        b_keys (the lanes) and b_heads ((lane key, the head's sequence) pairs; a lane at
        most once). On a server every statement is a round trip, and a batch's heads are
        usually on as many lanes as it has items. `lane_key IN` lets the primary key find
        the rows; the pair decides which of them advance."""
        lanes = self.t.source_lanes
        return (
            update(lanes)
            .where(
                lanes.c.family == bindparam("b_family"),
                lanes.c.lane_key.in_(bindparam("b_keys", expanding=True)),
                tuple_(lanes.c.lane_key, lanes.c.head_seq).in_(
                    bindparam("b_heads", expanding=True)
                ),
            )
            .values(head_seq=lanes.c.head_seq + 1, halted_by=None)
        )

    @functools.cached_property
    def _advance_lanes_returning(self) -> Any:
        """`_advance_lanes` returning each advanced lane's key, new head and next sequence."""
        lanes = self.t.source_lanes
        return self._advance_lanes.returning(lanes.c.lane_key, lanes.c.head_seq, lanes.c.next_seq)

    @functools.cached_property
    def _halt_lanes(self) -> Any:
        """Executemany: b_family, b_key, b_id (the dead head)."""
        lanes = self.t.source_lanes
        return (
            update(lanes)
            .where(lanes.c.family == bindparam("b_family"), lanes.c.lane_key == bindparam("b_key"))
            .values(halted_by=bindparam("b_id"))
        )

    @functools.cached_property
    def _max_attempts(self) -> Any:
        q = self.t.queues
        return select(q.c.max_attempts).where(
            q.c.family == bindparam("b_family"), q.c.queue_class == bindparam("b_class")
        )

    @functools.cached_property
    def _touch_queues(self) -> Any:
        """Executemany: b_family, b_class, b_now (the enqueue's database time)."""
        q = self.t.queues
        return (
            update(q)
            .where(
                q.c.family == bindparam("b_family"),
                q.c.queue_class == bindparam("b_class"),
                # at most once a second: the queue row is also the claim turn (`claim`), and
                # an enqueue that writes it holds it until its caller commits
                q.c.last_enqueued_at < bindparam("b_now") - 1000,
            )
            .values(last_enqueued_at=bindparam("b_now"))
        )

    @functools.cached_property
    def _lane_ends(self) -> Any:
        """Lanes b_keys of family b_family with their head and next sequences."""
        lanes = self.t.source_lanes
        return select(lanes.c.lane_key, lanes.c.head_seq, lanes.c.next_seq).where(
            lanes.c.family == bindparam("b_family"),
            lanes.c.lane_key.in_(bindparam("b_keys", expanding=True)),
        )

    @functools.cached_property
    def _insert_items(self) -> Any:
        """Executemany: one row per item, by `ITEM_COLUMNS`."""
        return insert(self.t.items).values(fast_sql.row_values(self.t.items, ITEM_COLUMNS))

    def _bump(self, dialect: str) -> Any:
        if dialect not in self._bumps:
            self._bumps[dialect] = _bump_lanes(self.t.source_lanes, dialect)
        return self._bumps[dialect]

    def _insert_targets(self, dialect: str) -> Any:
        """Executemany: family, target_key (a target lane row starts free)."""
        if dialect not in self._target_inserts:
            targets = self.t.target_lanes
            self._target_inserts[dialect] = insert_ignore(targets, dialect).values(
                fast_sql.row_values(targets, ("family", "target_key"))
            )
        return self._target_inserts[dialect]

    async def has_claimable(self, conn: AsyncConnection, family: str, queue_class: str) -> bool:
        """Would a claim find anything? A read (no write lock, no claim turn), for pollers
        that found their queue empty last time."""
        found = await fast_sql.execute(
            conn, self._peek, {"family": family, "queue_class": queue_class}
        )
        return found.first() is not None

    async def _take_claim_turn(self, conn: AsyncConnection, family: str, queue_class: str) -> None:
        """Claimers of one queue take turns (a row lock on the queue row until commit), so
        the next one reads its candidates after the last one's claims are committed instead
        of reading the same ones, waiting on their row locks and winning nothing. The CAS
        still decides who wins; the turn only saves the wasted work. SQLite needs none: its
        write transactions already run one at a time. Taken after any outcome writes in the
        same transaction (lane rows first, then the turn, as `enqueue` does: no deadlock)."""
        if backend_of(conn).one_writer:
            return
        q = self.t.queues
        started = time.perf_counter()
        await conn.execute(
            select(q.c.weight)
            .where(q.c.family == family, q.c.queue_class == queue_class)
            .with_for_update()
        )
        self.turn_wait_ms = (time.perf_counter() - started) * 1000

    async def claim(
        self, conn: AsyncConnection, family: str, queue_class: str, epoch: int, limit: int
    ) -> list[Claimed]:
        """Claim up to `limit` claimable items in one transaction: candidates from the claim
        index (pending = runnable lane heads), target lane leases by CAS (an item whose lane
        is held is parked instead), then one UPDATE under a fresh token; the winners are the
        rows carrying it. A round that parked items reads again (at most `CLAIM_ROUNDS`), so
        a batch that met a hot target still claims what is queued behind it."""
        await self._take_claim_turn(conn, family, queue_class)
        token = new_token()
        won: list[Claimed] = []
        taken: set[str] = set()  # target lanes this claim holds
        for _ in range(CLAIM_ROUNDS):
            got, parked = await self._claim_round(
                conn, family, queue_class, epoch, limit=limit - len(won), token=token, taken=taken
            )
            won += got
            if not parked or len(won) >= limit:
                break
        return won

    async def _claim_round(
        self,
        conn: AsyncConnection,
        family: str,
        queue_class: str,
        epoch: int,
        *,
        limit: int,
        token: str,
        taken: set[str],
    ) -> tuple[list[Claimed], int]:
        """One read of candidates and one claim CAS; returns the winners and how many items
        were parked on held target lanes."""
        params = {"family": family, "queue_class": queue_class, "limit": limit}
        rows = (await fast_sql.execute(conn, self._candidates, params)).rows
        candidates = {row[0]: row for row in rows}
        if not candidates:
            return [], 0
        ids: list[str] = []
        held: list[tuple[str, str]] = []
        blocked: dict[str, list[str]] = {}  # target key -> items to park
        for item_id, row in candidates.items():
            target_key = row[1]
            if target_key is None:
                ids.append(item_id)
                continue
            if target_key not in taken:
                acquired = await fast_sql.execute(
                    conn,
                    self._take_target_lane,
                    {"b_family": family, "b_key": target_key, "b_id": item_id, "b_token": token},
                )
                if acquired.rowcount == 1:
                    taken.add(target_key)
                    ids.append(item_id)
                    held.append((item_id, target_key))
                    continue
            blocked.setdefault(target_key, []).append(item_id)
        winners: set[str] = set()
        if ids:
            winners = await self._take(
                conn, self._claim_update, ids, family=family, epoch=epoch, token=token
            )
            lost = [(i, k) for i, k in held if i not in winners]
            taken.difference_update(k for _, k in lost)
            await self._free_target_lanes(conn, family, token, lost)
        # parked after the CAS: behind a lane this claim took and then lost (the family
        # moved, say) an item stays pending; parked behind it, nothing would wake it
        parked = await self._park(conn, family, blocked)
        return [
            _claimed(candidates[item_id], family, token, epoch)
            for item_id in ids
            if item_id in winners
        ], parked

    async def _take(
        self,
        conn: AsyncConnection,
        cas: Any,
        ids: list[str],
        *,
        family: str,
        epoch: int,
        token: str,
    ) -> set[str]:
        """Run a claim CAS (`_take_items`) on `ids`; the winners are the rows carrying the
        token (someone else won the rest)."""
        params = {"b_ids": ids, "b_family": family, "b_epoch": epoch, "b_token": token}
        taken = await fast_sql.execute(conn, cas, params)
        if taken.rowcount == len(ids):
            return set(ids)
        rows = await fast_sql.execute(conn, self._carrying, {"b_ids": ids, "b_token": token})
        return {r[0] for r in rows}

    async def _park(self, conn: AsyncConnection, family: str, blocked: dict[str, list[str]]) -> int:
        """Park pending items whose target lane is held: count them on the lane row, written
        only while the lane is still held (a lane freed meanwhile leaves its items pending for
        the next round), then move them to `target_wait`. Returns how many were parked."""
        parked = 0
        for target_key, ids in sorted(blocked.items()):
            counted = await fast_sql.execute(
                conn,
                self._count_waiters,
                {"b_family": family, "b_key": target_key, "b_n": len(ids)},
            )
            if counted.rowcount != 1:
                continue
            moved = await fast_sql.execute(
                conn, self._park_items, {"b_ids": ids, "b_key": target_key}
            )
            parked += moved.rowcount
        return parked

    # ------------------------------------------------------------------ holder writes
    def _held(self, ids: Iterable[str], token: str) -> Any:
        return self._held_by(list(ids), token)

    def _held_by(self, ids: Any, token: Any) -> Any:
        items = self.t.items
        return and_(items.c.id.in_(ids), items.c.lease_token == token, items.c.state == PROCESSING)

    async def renew(
        self,
        conn: AsyncConnection,
        family: str,
        epoch: int,
        token: str,
        ids: Sequence[str],
        *,
        target_keys: Collection[str] = (),
    ) -> set[str]:
        """Extend the leases of `ids` (and of the target lanes `target_keys` they hold);
        returns the ids whose lease was lost (reclaimed, finished by someone else, or the
        family moved to a new epoch)."""
        items, targets = self.t.items, self.t.target_lanes
        now = db_now_ms()
        renewed = await conn.execute(
            update(items)
            .where(self._held(ids, token), self._epoch_holds(family, epoch))
            .values(lease_until=now + self.lease_ms, run_after=now + self.lease_ms)
        )
        if target_keys:
            await conn.execute(
                update(targets)
                .where(
                    targets.c.family == family,
                    targets.c.target_key.in_(sorted(target_keys)),
                    targets.c.holder_token == token,
                )
                .values(lease_until=now + self.lease_ms)
            )
        if renewed.rowcount == len(ids):
            return set()
        still = await conn.execute(
            select(items.c.id).where(self._held(ids, token), self._epoch_holds(family, epoch))
        )
        return set(ids) - {r[0] for r in still}

    async def finish(
        self,
        conn: AsyncConnection,
        family: str,
        epoch: int,
        token: str,
        results: Sequence[tuple[Claimed, Outcome]],
    ) -> set[str]:
        """Record outcomes for items held under one token; returns the ids that were not
        written because their lease was lost (nothing is recorded for those)."""
        lost, _ = await self.finish_passing_on(conn, family, epoch, token, results, pass_on=None)
        return lost

    async def finish_passing_on(
        self,
        conn: AsyncConnection,
        family: str,
        epoch: int,
        token: str,
        results: Sequence[tuple[Claimed, Outcome]],
        *,
        pass_on: PassOn | None,
    ) -> tuple[set[str], list[Claimed]]:
        """`finish`, and with `pass_on` the next item of each lane whose head finished is
        claimed here (under `pass_on.token`, at `epoch`) when it is due, has no target lane
        and is of its head's queue class: a laned item then costs its holder no promotion
        and no claim of its own (ADR 0068). Returns the lost ids and the items claimed."""
        items = self.t.items
        now = db_now_ms()
        fenced = self._epoch_holds(family, epoch)
        recorded = [(claimed, effective(claimed, outcome)) for claimed, outcome in results]
        by_state: dict[str, list[tuple[Claimed, Outcome]]] = {}
        for claimed, outcome in recorded:
            by_state.setdefault(outcome.state, []).append((claimed, outcome))
        written: set[str] = set()
        for state, group in by_state.items():
            ids = [c.id for c, _ in group]
            if state == SUCCEEDED:
                done = await fast_sql.execute(
                    conn,
                    self._succeed,
                    {"b_ids": ids, "b_token": token, "b_family": family, "b_epoch": epoch},
                )
                if done.rowcount == len(ids):
                    written.update(ids)
                else:
                    written.update(await self._written(conn, ids, token, SUCCEEDED))
                continue
            params = [
                {
                    "b_id": c.id,
                    "b_delay": o.delay_ms,
                    "b_class": o.failure_class,
                    "b_error": (o.error or "")[:300] or None,
                }
                | ({"b_refund": int(o.failure_class == DEFERRED)} if state == PENDING else {})
                for c, o in group
            ]
            values: dict[str, Any] = {
                "state": state,
                "failure_class": bindparam("b_class"),
                "last_error": bindparam("b_error"),
                "lease_until": None,
            }
            if state == PENDING:
                values["run_after"] = now + bindparam("b_delay")
                values["lease_owner"] = None
                # a deferral (nothing reached the target) keeps its retry budget: `attempt`
                # only grows (the claim counted one), so the budget grows by that one
                values["max_attempts"] = items.c.max_attempts + bindparam("b_refund")
            else:
                values["finished_at"] = now
            await conn.execute(
                update(items)
                .where(
                    items.c.id == bindparam("b_id"),
                    items.c.lease_token == token,
                    items.c.state == PROCESSING,
                    fenced,
                )
                .values(**values),
                params,
            )
            written.update(await self._written(conn, ids, token, state))
        finished = [(c, o) for c, o in recorded if c.id in written]
        await self._free_target_lanes(
            conn, family, token, [(c.id, c.target_key) for c, _ in finished if c.target_key]
        )
        below = pass_on.below if pass_on is not None else 0
        passed = await self._move_lanes(
            conn,
            family,
            [
                _LaneHead(
                    c.id,
                    c.queue_class,
                    c.lane_key,
                    c.lane_seq or 0,
                    o.state in PARKED,
                    c.passes if c.passes < below else None,
                )
                for c, o in finished
                if c.lane_key and o.state != PENDING
            ],
            (pass_on.token, epoch) if pass_on is not None else None,
        )
        return {c.id for c, _ in results} - written, passed

    async def _written(
        self, conn: AsyncConnection, ids: list[str], token: str, state: str
    ) -> set[str]:
        rows = await fast_sql.execute(
            conn, self._in_state, {"b_ids": ids, "b_token": token, "b_state": state}
        )
        return {r[0] for r in rows}

    async def _free_target_lanes(
        self,
        conn: AsyncConnection,
        family: str,
        token: str,
        holders: Sequence[tuple[str, str]],
    ) -> None:
        """Release the target lanes these (item id, target key) hold under `token` (none
        held: no-op), and promote the oldest waiter of each freed lane that has one. The
        release writes the lane row first, so a claim parking on it meanwhile waits for this
        transaction and then finds the lane free (it leaves its item pending)."""
        if not holders:
            return
        keys = sorted({key for _, key in holders})
        await fast_sql.execute(
            conn,
            self._free_targets,
            {
                "b_family": family,
                "b_token": token,
                "b_keys": keys,
                "b_ids": [item_id for item_id, _ in holders],
            },
        )
        waited = await fast_sql.execute(
            conn, self._awaited_targets, {"b_family": family, "b_keys": keys}
        )
        for (key,) in list(waited):
            await self._promote_waiter(conn, family, str(key))

    async def _promote_waiter(self, conn: AsyncConnection, family: str, key: str) -> None:
        """The oldest `target_wait` item of a free target lane becomes `pending` again (CAS
        on its state); the lane counts one waiter less, or none when none was found."""
        found = (
            await fast_sql.execute(conn, self._oldest_waiter, {"b_family": family, "b_key": key})
        ).first()
        promoted = 0
        if found is not None:
            moved = await fast_sql.execute(conn, self._unpark_item, {"b_id": found[0]})
            promoted = moved.rowcount
        await fast_sql.execute(
            conn,
            self._uncount_waiter,
            {"b_family": family, "b_key": key, "b_none": int(found is None), "b_n": promoted},
        )

    async def _move_lanes(
        self,
        conn: AsyncConnection,
        family: str,
        heads: Sequence[_LaneHead],
        holder: tuple[str, int] | None = None,
    ) -> list[Claimed]:
        """Source lanes past their finished heads: a succeeded (or cancelled) head advances its
        lane and the next item (if enqueued yet) becomes `pending`, or is claimed by `holder`
        (token, epoch) when its head may pass on; a dead or unknown head halts its lane unless
        the queue skips. Returns the items claimed."""
        if not heads:
            return []
        parked = {h.queue_class for h in heads if h.parked}  # only they ask for the policy
        skipping = await self._lane_policies(conn, family, parked) if parked else {}
        advance: list[_LaneHead] = []
        halt = []
        for head in heads:
            if head.parked and not skipping.get(head.queue_class, False):
                halt.append({"b_family": family, "b_key": head.lane_key, "b_id": head.id})
            else:
                advance.append(head)
        passed = await self._advance(conn, family, advance, holder)
        if halt:
            await fast_sql.execute(conn, self._halt_lanes, halt)
        return passed

    async def advance_lanes(
        self, conn: AsyncConnection, family: str, heads: Sequence[tuple[str, int]]
    ) -> None:
        """Lanes past their heads ((lane key, the head's sequence) pairs: CAS on `head_seq`,
        un-halting them), and each lane's next item, if enqueued yet, `pending`."""
        finished = [_LaneHead("", "", key, seq, parked=False) for key, seq in heads]
        await self._advance(conn, family, finished, None)

    async def _advance(
        self,
        conn: AsyncConnection,
        family: str,
        heads: Sequence[_LaneHead],
        holder: tuple[str, int] | None,
    ) -> list[Claimed]:
        """`advance_lanes` for finished heads, the next items claimed by `holder` where the
        heads may pass on (`_move_lanes`)."""
        by_lane = {h.lane_key: h for h in heads}
        passed: list[Claimed] = []
        returning = backend_of(conn).update_returning
        for step in _one_per_lane([(h.lane_key, h.lane_seq) for h in heads]):
            keys = [k for k, _ in step]
            params = {"b_family": family, "b_keys": keys, "b_heads": step}
            if holder is not None and returning:
                passed += await self._pass_returning(conn, family, by_lane, params, holder)
                continue
            await fast_sql.execute(conn, self._advance_lanes, params)
            followers = (
                await fast_sql.execute(
                    conn, self._lane_followers, {"b_family": family, "b_keys": keys}
                )
            ).rows
            if not followers:
                continue
            taken: set[str] = set()
            if holder is not None:
                takers = [  # (row, the passes behind it)
                    (row, head.passes + 1)
                    for row in followers
                    for head in (by_lane[row[6]],)
                    if head.passes is not None
                    and row[1] is None  # no target lane to take
                    and row[8]  # due
                    and row[2] == head.queue_class
                ]
                won = await self._take_followers(conn, family, takers, *holder)
                passed += won
                taken = {c.id for c in won}
            rest = [row[0] for row in followers if row[0] not in taken]
            if rest:
                await fast_sql.execute(conn, self._promote, {"b_ids": rest})
        return passed

    async def _pass_returning(
        self,
        conn: AsyncConnection,
        family: str,
        by_lane: dict[str, _LaneHead],
        params: dict[str, Any],
        holder: tuple[str, int],
    ) -> list[Claimed]:
        """`_advance`'s step on an `UPDATE ... RETURNING` backend: the advance returns which
        lanes have a next item, and the pass CAS claims those (of their head's class, due,
        without a target lane) and returns them, so no statement reads the followers
        first; the next items not passed are promoted. Three statements, the last only
        when some lane's next item was not passed."""
        token, epoch = holder
        moved = await fast_sql.execute(conn, self._advance_lanes_returning, params)
        following = [str(r[0]) for r in moved.rows if int(r[2]) > int(r[1])]
        if not following:
            return []
        passed: list[Claimed] = []
        by_class: dict[str, list[str]] = {}
        for key in following:
            head = by_lane[key]
            if head.passes is not None:
                by_class.setdefault(head.queue_class, []).append(key)
        for queue_class, keys in by_class.items():
            rows = await fast_sql.execute(
                conn,
                self._pass_next,
                {
                    "b_family": family,
                    "b_keys": keys,
                    "b_class": queue_class,
                    "b_epoch": epoch,
                    "b_token": token,
                },
            )
            passed += [
                _claimed(row, family, token, epoch, (by_lane[row[6]].passes or 0) + 1)
                for row in rows.rows
            ]
        if len(passed) < len(following):
            taken = {c.lane_key for c in passed}
            rest = [key for key in following if key not in taken]
            await fast_sql.execute(conn, self._promote_next, {"b_family": family, "b_keys": rest})
        return passed

    async def _take_followers(
        self,
        conn: AsyncConnection,
        family: str,
        takers: list[tuple[Any, int]],
        token: str,
        epoch: int,
    ) -> list[Claimed]:
        """Claim waiting followers under `token` at `epoch`: the claim's CAS from
        `waiting`; the winners are the rows carrying the token (the family may have moved
        to another owner or epoch: then none win and they are promoted instead)."""
        if not takers:
            return []
        ids = [row[0] for row, _ in takers]
        winners = await self._take(
            conn, self._pass_update, ids, family=family, epoch=epoch, token=token
        )
        return [
            _claimed(row, family, token, epoch, passes)
            for row, passes in takers
            if row[0] in winners
        ]

    async def _lane_policies(
        self, conn: AsyncConnection, family: str, classes: set[str]
    ) -> dict[str, bool]:
        rows = await fast_sql.execute(
            conn, self._skip_policies, {"b_family": family, "b_classes": sorted(classes)}
        )
        return {str(r[0]): r[1] == "skip" for r in rows}

    # ------------------------------------------------------------------ reclaim
    async def reclaim_expired(
        self, conn: AsyncConnection, family: str, queue_class: str, limit: int = 500
    ) -> int:
        """Expired `processing` rows go back to `pending` (CAS on their old token, so a
        concurrent sweep or a late renewal cannot double it); an item whose lease expired on
        its last attempt is dead. Their target lanes are freed. Returns the number reclaimed.

        A row still held by an open transaction (its holder is finishing it, or is frozen
        mid-commit: a stopped process keeps its row locks) is passed over where the backend
        can (`skips_locked`), not waited for: the sweep runs in the claim loop, and a wait of
        the lock timeout there would stop this worker claiming anything."""
        items = self.t.items
        now = db_now_ms()
        query = (
            select(
                items.c.id,
                items.c.lease_token,
                items.c.attempt,
                items.c.max_attempts,
                items.c.lane_key,
                items.c.lane_seq,
                items.c.queue_class,
                items.c.target_key,
            )
            .where(
                items.c.family == family,
                items.c.queue_class == queue_class,
                items.c.state == PROCESSING,
                items.c.run_after < now,
            )
            .order_by(items.c.run_after, items.c.id)
            .limit(limit)
        )
        if skips_locked(conn):
            query = query.with_for_update(skip_locked=True)
        expired = list(await conn.execute(query))
        if not expired:
            return 0
        count = 0
        for row in expired:
            exhausted = int(row[2]) >= int(row[3])
            values: dict[str, Any] = (
                {
                    "state": DEAD,
                    "failure_class": LEASE_EXPIRED,
                    "last_error": "the lease expired on the last attempt",
                    "finished_at": now,
                    "lease_token": None,  # no holder finished it (see `finish`)
                    "lease_until": None,
                }
                if exhausted
                else {
                    "state": PENDING,
                    "run_after": now,
                    "lease_token": None,
                    "lease_owner": None,
                    "lease_until": None,
                    "reclaims": items.c.reclaims + 1,
                }
            )
            moved = await conn.execute(
                update(items)
                .where(
                    items.c.id == row[0],
                    items.c.lease_token == row[1],
                    items.c.state == PROCESSING,
                    items.c.lease_until < now,
                )
                .values(**values)
            )
            if moved.rowcount != 1:
                continue
            count += 1
            if row[7]:
                await self._free_target_lanes(conn, family, row[1], [(row[0], row[7])])
            if exhausted and row[4]:
                head = _LaneHead(row[0], row[6], row[4], int(row[5]), parked=True)
                await self._move_lanes(conn, family, [head])
        return count

    async def release(
        self,
        conn: AsyncConnection,
        family: str,
        token: str,
        ids: Sequence[str],
        *,
        target_keys: dict[str, str] | None = None,
    ) -> None:
        """Give unfinished items back (graceful drain): pending now, attempt kept; the target
        lanes they hold (`target_keys`: item id -> key) are freed."""
        items = self.t.items
        if not ids:
            return
        await conn.execute(
            update(items)
            .where(self._held(ids, token))
            .values(
                state=PENDING,
                run_after=db_now_ms(),
                lease_token=None,
                lease_owner=None,
                lease_until=None,
            )
        )
        holders = [(i, k) for i in ids if (k := (target_keys or {}).get(i))]
        await self._free_target_lanes(conn, family, token, holders)

    # ------------------------------------------------------------------ statistics
    async def counts(self, conn: AsyncConnection) -> list[dict[str, Any]]:
        """Per (family, queue class, state): items and the oldest run_after (the index
        prefix answers it)."""
        items = self.t.items
        rows = await conn.execute(
            select(
                items.c.family,
                items.c.queue_class,
                items.c.state,
                func.count(),
                func.min(items.c.run_after),
            ).group_by(items.c.family, items.c.queue_class, items.c.state)
        )
        return [
            {
                "family": r[0],
                "queue_class": r[1],
                "state": r[2],
                "count": int(r[3]),
                "oldest_run_after": None if r[4] is None else int(r[4]),
            }
            for r in rows
        ]
