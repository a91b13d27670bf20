"""The process-local scheduler: one poller, N executors, one completer, one heartbeat.

    poller     visits the owner's active queues by deficit round-robin (a flood in one family
               cannot starve another), claims a batch per visit with one CAS statement, hands
               the items to executor tasks; sweeps expired leases every lease/2; halves its
               batch when claim latency rises past the target and recovers additively; a
               queue its last claim found empty is looked at with a read first (an idle
               poller takes no write lock: on SQLite that lock is every writer's)
    executors  run the handler (at most `concurrency` at once); the outcome goes to the
               completer, never straight to the database
    completer  writes outcomes in micro-batches (every few ms or N results), one statement
               per (token, outcome state); a lost lease is dropped, never recorded. A lane
               head's executor passes on to the lane's next item: the write that advances the
               lane claims it too (`store.finish_passing_on`, up to `lane_passes` in a row),
               and it starts once that write has committed. On SQLite
               the poller carries the outcomes in its claim transaction instead (writers take
               turns there anyway: one transaction, not two); a server database writes them
               on the completer's own connection, alongside the claims
    heartbeat  renews every live lease once per lease/3 (one statement per token); an item
               whose lease was lost is cancelled locally and records nothing
    along      a writer in this process that has just made work claimable (the receipt router
               materializing WorkItems) may run a claim round for those queues inside its own
               transaction (`claim_along`, then `along_ended`): the same claim statement and
               fencing, the same free executors, finished outcomes riding along as in the
               poller's rounds; the items start once that transaction has committed. The poller
               still claims everything else (retries, reclaims, what found no free executor)

`stop()` drains: no new claims, running items get `drain_timeout` to finish, the rest are
released (pending again, attempt kept).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from nexus.platform.db.backend import backend_of
from nexus.platform.db.engine import reading
from nexus.platform.db.errors import is_deadlock
from nexus.platform.loops import SideTasks
from nexus.platform.observability import get_logger
from nexus.platform.periodic import unless_cancelled
from nexus.platform.workqueue.store import (
    DEAD,
    DEFERRED,
    OUTCOME_UNKNOWN,
    PENDING,
    RETRYABLE,
    SUCCESS,
    TERMINAL,
    UNKNOWN,
    Claimed,
    Outcome,
    PassOn,
    WorkStore,
    effective,
    new_token,
)

log = get_logger(__name__)

Handler = Callable[[Claimed], Awaitable[None]]


class WorkFailed(Exception):
    """Raised by a handler: `message` is stored, so it must say what failed without data
    (no payload, header, token or secret); it is cut to 200 characters."""

    failure_class = RETRYABLE

    def __init__(self, message: str, *, delay_ms: int | None = None) -> None:
        super().__init__(message[:200])
        self.delay_ms = delay_ms


class Retryable(WorkFailed):
    failure_class = RETRYABLE


class Terminal(WorkFailed):
    failure_class = TERMINAL


class Deferred(WorkFailed):
    """Nothing reached the target (it was down or refused to take anything): the item runs
    again later and its attempt is given back, so an outage never kills work."""

    failure_class = DEFERRED


class OutcomeUnknown(WorkFailed):
    failure_class = UNKNOWN


class LeaseLost(Exception):
    """Raised by `Worker.complete_in` when the item's lease is no longer this holder's: the
    handler's transaction must roll back (its effect is someone else's to make)."""


@dataclass
class WorkerSettings:
    concurrency: int = 64
    batch: int = 128
    idle_poll_ms: int = 100
    flush_ms: float = 5.0
    flush_max: int = 512
    backoff_base_ms: int = 1_000
    backoff_cap_ms: int = 300_000
    claim_latency_target_ms: float = 250.0
    queue_refresh_ms: int = 1_000
    drain_timeout_s: float = 10.0
    # a finished lane head's executor takes the lane's next item (claimed in the outcome's
    # write) this many times in a row, then gives it back to the round-robin (0: never)
    lane_passes: int = 16


@dataclass
class WorkerStats:
    claimed: int = 0
    succeeded: int = 0
    retried: int = 0
    deferred: int = 0
    dead: int = 0
    unknown: int = 0
    lost: int = 0
    reclaimed: int = 0
    conflicts: int = 0  # claim or outcome writes rolled back by a deadlock / certification loss
    claims: int = 0
    passed: int = 0  # of `claimed`: taken over from their lane's head (`lane_passes`)
    claim_latency_ms: float = 0.0  # EWMA
    claim_seconds: float = 0.0  # total time in claim transactions (with `claims`: a summary)
    batch: int = 0


#: Every worker's counters in this process, for `/metrics` (`workqueue.metrics`).
PROCESS_STATS: list[WorkerStats] = []


@dataclass
class _Live:
    claimed: Claimed
    task: asyncio.Task[None] | None = None
    lost: bool = False
    finishing: bool = False  # its outcome is being written: the heartbeat leaves it alone
    completed_in_handler: Outcome | None = None  # written in the handler's own transaction


@dataclass
class _Queues:
    keys: list[tuple[str, str, int, str]] = field(default_factory=list)  # + the family's org
    epochs: dict[str, int] = field(default_factory=dict)
    read_at: float = 0.0


@dataclass
class Along:
    """A claim round carried in another writer's transaction (`Worker.claim_along`)."""

    done: list[tuple[Claimed, Outcome]] = field(default_factory=list)
    lost: set[str] = field(default_factory=set)
    claimed: list[Claimed] = field(default_factory=list)
    passed: list[Claimed] = field(default_factory=list)  # on by `done`'s lane heads
    short: bool = False  # a queue may have claimable work left: the poller looks


def _rotate(queues: list[tuple[str, str, int]], turn: int) -> list[tuple[str, str, int]]:
    start = turn % len(queues)
    return queues[start:] + queues[:start]


def backoff_ms(attempt: int, base_ms: int, cap_ms: int) -> int:
    """Exponential backoff with full jitter: uniform in [0, min(cap, base * 2^(attempt-1)))."""
    ceiling = min(cap_ms, base_ms * (2 ** max(attempt - 1, 0)))
    return int(random.uniform(0, ceiling))  # noqa: S311 - jitter, not security


class Worker:
    def __init__(
        self,
        engine: AsyncEngine,
        store: WorkStore,
        handler: Handler,
        settings: WorkerSettings | None = None,
        *,
        paused_for: Callable[[], float] | None = None,
    ) -> None:
        """`paused_for()`: seconds the handler's target cannot take work (a circuit breaker
        is open); while it is above 0 the poller claims nothing, so an outage does not turn
        into claims that defer at once."""
        self.engine = engine
        self.store = store
        self.handler = handler
        self.paused_for = paused_for
        self.settings = settings or WorkerSettings()
        self.stats = WorkerStats(batch=self.settings.batch)
        PROCESS_STATS.append(self.stats)
        self._live: dict[str, _Live] = {}
        self._results: asyncio.Queue[tuple[Claimed, Outcome]] = asyncio.Queue()
        self._stopping = asyncio.Event()
        self._stop_requested = False
        self._slots = asyncio.Event()
        self._wakeup = asyncio.Event()  # new work may be claimable: end the idle wait
        self._queues = _Queues()
        self._deficit: dict[tuple[str, str], int] = {}
        self._idle: dict[tuple[str, str], float] = {}  # when a queue was last found empty
        self._empty: set[tuple[str, str]] = set()  # found empty by their last claim
        self._turn = 0
        self._ride_along = backend_of(engine).one_writer  # outcomes in claim transactions
        self._swept_at = 0.0

    # ------------------------------------------------------------------ lifecycle
    def stop(self) -> None:
        """Stop claiming and drain; `run()` ends, and does not start again."""
        self._stop_requested = True
        self._halt()

    def _halt(self) -> None:
        self._stopping.set()
        self._slots.set()
        self._wakeup.set()

    def wake(self) -> None:
        """New work may be claimable (a doorbell rang, or this process enqueued it): end the
        idle wait and look at every queue now instead of at the next idle poll. An empty
        queue is still looked at with a read first, so a wake costs one cheap query."""
        self._idle.clear()
        if not self._queues.keys:  # the work may be in a queue this worker has not read yet
            self._queues.read_at = float("-inf")
        self._wakeup.set()

    async def run(self) -> None:
        """Claim and execute until `stop()`, then drain. The completer and the heartbeat are
        side tasks (`platform.loops.SideTasks`): when one dies the worker drains what it can
        and raises `SideTaskDied`; `run()` may then be called again (its owner's restart)."""
        if self._stop_requested:
            return
        self._stopping.clear()
        if self._live or self._results.qsize():  # what a run whose side task died left
            # their outcomes are not written: the leases run out and the items run again
            log.warning("work.restart_dropped", items=len(self._live))
            self._live = {}
            self._results = asyncio.Queue()
        async with SideTasks("work-worker", on_death=self._halt) as side:
            side.start("work-completer", self._complete_loop())
            heartbeat = side.start("work-heartbeat", self._heartbeat_loop())
            try:
                await self._poll_loop()
                await self._drain()
            finally:
                await side.cancel(heartbeat)
                await side.guard(self._results.join())  # outcomes are written, or it died
                if self._live:  # passed on by a write that committed after the drain
                    await self._drain()

    async def _drain(self) -> None:
        running = [live.task for live in self._live.values() if live.task and not live.task.done()]
        if running:
            await asyncio.wait(running, timeout=self.settings.drain_timeout_s)
        unfinished = [  # running, or claimed along and never started
            live.claimed
            for live in self._live.values()
            if live.task is None or not live.task.done()
        ]
        for claimed in unfinished:
            task = self._live[claimed.id].task
            self._live[claimed.id].lost = True
            if task is not None:
                task.cancel()
        by_token: dict[tuple[str, str], list[str]] = {}
        targets = {c.id: c.target_key for c in unfinished if c.target_key}
        for claimed in unfinished:
            by_token.setdefault((claimed.family, claimed.token), []).append(claimed.id)
        if by_token:
            async with self.engine.begin() as conn:
                for (family, token), ids in by_token.items():
                    await self.store.release(conn, family, token, ids, target_keys=targets)
            for ids in by_token.values():
                for item_id in ids:
                    self._live.pop(item_id, None)
            log.info("work.released", items=len(unfinished))

    # ------------------------------------------------------------------ poller
    async def _poll_loop(self) -> None:
        settings = self.settings
        while not self._stopping.is_set():
            free = settings.concurrency - len(self._live)
            if free <= 0:
                self._slots.clear()
                await self._slots.wait()
                continue
            self._wakeup.clear()
            pause = self.paused_for() if self.paused_for is not None else 0.0
            if pause > 0:
                await self._sleep(min(pause, 1.0))
                continue
            try:
                await self._refresh_queues()
                await self._sweep()
                claimed = await self._claim_round(free)
            except Exception as exc:  # noqa: BLE001 - the database is down or busy: back off
                unless_cancelled()
                claimed = 0
                if is_deadlock(exc):  # another claimer won these rows (on Galera: at COMMIT,
                    self.stats.conflicts += 1  # on another node): a lost CAS, claim again
                    continue
                log.warning("work.poll_failed", error=type(exc).__name__)
                await self._sleep(1.0)
            if claimed == 0:  # until the next poll, a wake, or a lane moving here
                # not `wait_for`: its task of its own costs a second trip through a busy loop
                # between the wake and the claim (ADR 0057)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(settings.idle_poll_ms / 1000):
                        await self._wakeup.wait()

    async def _sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), timeout=seconds)

    async def _refresh_queues(self) -> None:
        now = time.monotonic()
        if now - self._queues.read_at < self.settings.queue_refresh_ms / 1000:
            return
        async with reading(self.engine) as conn:
            keys = await self.store.active_queues(conn)
            epochs = await self.store.admitted_families(conn)
        self._queues = _Queues(keys=keys, epochs=epochs, read_at=now)

    async def _sweep(self) -> None:
        now = time.monotonic()
        if now - self._swept_at < self.store.lease_ms / 2000:
            return
        self._swept_at = now
        for family, queue_class, _, _ in self._queues.keys:
            if family not in self._queues.epochs:
                continue
            async with self.engine.begin() as conn:
                count = await self.store.reclaim_expired(conn, family, queue_class)
            if count:
                self.stats.reclaimed += count
                log.info("work.reclaimed", family=family, queue_class=queue_class, items=count)

    async def _claim_round(self, free: int) -> int:
        """One deficit round-robin round, across orgs first: each org that had work lately
        gets an equal part of the free executors, split between its queues by weight (a
        quantum per queue), and each queue claims at most its deficit; an empty queue rests
        (its deficit cleared) until the next idle poll. So a tenant with a deep backlog, or
        with many queues, does not starve another tenant's single queue."""
        self._turn += 1
        ordered = self._round_order(free)
        if not ordered:
            return 0
        total = 0
        for family, queue_class, weight, share in ordered:
            if free <= 0 or self._stopping.is_set():
                break
            key = (family, queue_class)
            if key in self._empty and not await self._has_work(family, queue_class):
                self._idle[key] = time.monotonic()
                continue  # an idle poll reads; it takes no write lock and no claim turn
            deficit = self._deficit.get(key, 0) + share * max(weight, 1)
            ask = min(deficit, free, self.stats.batch)
            done = self._take_results(self.settings.flush_max) if self._ride_along else []
            started = time.perf_counter()
            try:  # finished outcomes ride along in the claim transaction
                async with self.engine.begin() as conn:
                    lost, passed = await self._write_outcomes(conn, done)
                    got = await self.store.claim(
                        conn, family, queue_class, self._queues.epochs[family], ask
                    )
            except BaseException:
                self._give_back(done)
                raise
            # admission reacts to the database's pace, not to waiting for the claim turn
            # behind other processes (that wait shrank batches until claims were tiny)
            self._admit((time.perf_counter() - started) * 1000 - self.store.turn_wait_ms)
            if done:
                self._settle(done, lost, passed)
            if got:
                self._empty.discard(key)
            else:
                self._idle[key] = time.monotonic()
                self._empty.add(key)
            self._deficit[key] = 0 if len(got) < ask else deficit - len(got)
            self._start(got)
            free -= len(got)
            total += len(got)
        return total

    def _round_order(self, free: int) -> list[tuple[str, str, int, int]]:
        """This round's queues (family, class, weight, quantum): the orgs that had work
        lately in turn, interleaved, each org's queues rotated; a queue's quantum is its
        part of its org's equal part of the `free` executors."""
        now = time.monotonic()
        rest = self.settings.idle_poll_ms / 1000
        by_org: dict[str, list[tuple[str, str, int]]] = {}
        for family, queue_class, weight, org in self._queues.keys:
            if family in self._queues.epochs and (
                now - self._idle.get((family, queue_class), -rest) >= rest
            ):
                by_org.setdefault(org, []).append((family, queue_class, weight))
        if not by_org:
            return []
        orgs = sorted(by_org)
        turn = self._turn % len(orgs)
        rotated = [_rotate(by_org[org], self._turn) for org in orgs[turn:] + orgs[:turn]]
        ordered: list[tuple[str, str, int, int]] = []
        for rank in range(max(len(queues) for queues in rotated)):
            for queues in rotated:
                if rank < len(queues):
                    family, queue_class, weight = queues[rank]
                    share = max(1, free // (len(orgs) * len(queues)))
                    ordered.append((family, queue_class, weight, share))
        return ordered

    async def claim_along(
        self, conn: AsyncConnection, queues: Iterable[tuple[str, str]], fresh: int
    ) -> Along:
        """A claim round for `queues` inside the caller's write transaction `conn`, which has
        just made `fresh` items claimable there. Up to the free executors are claimed (their
        slots held from now), finished outcomes ride along (SQLite); nothing starts before
        `along_ended(along, committed=True)` after the commit. A queue of a family this
        worker does not hold (not admitted, not read yet) is left to the poller."""
        along = Along()
        if self._stopping.is_set():
            along.short = True
            return along
        along.done = self._take_results(self.settings.flush_max) if self._ride_along else []
        along.lost, passed = await self._write_outcomes(conn, along.done)
        for claimed in passed:  # their slots are held; they start after the commit
            self._live[claimed.id] = _Live(claimed, finishing=True)
        along.passed = passed
        free = self.settings.concurrency - len(self._live)
        for family, queue_class in sorted(set(queues)):
            epoch = self._queues.epochs.get(family)
            ask = min(free, self.stats.batch)
            if epoch is None or ask <= 0:
                along.short = True
                continue
            got = await self.store.claim(conn, family, queue_class, epoch, ask)
            if len(got) == ask:
                along.short = True  # there may be more than it could take
            for claimed in got:  # the slot is held; the heartbeat leaves it until it starts
                self._live[claimed.id] = _Live(claimed, finishing=True)
            along.claimed += got
            free -= len(got)
        if len(along.claimed) < fresh:
            along.short = True
        return along

    def along_ended(self, along: Along, *, committed: bool) -> None:
        """After the transaction of `claim_along`: committed, the claimed items start and the
        outcomes count; rolled back, nothing of it happened (the outcomes wait for the next
        write, the slots are free). Either way the poller looks when work may be left."""
        if not committed:
            self._give_back(along.done)
            for claimed in [*along.claimed, *along.passed]:
                self._live.pop(claimed.id, None)
            self._slots.set()
            self.wake()
            return
        if along.done:
            self._settle(along.done, along.lost, along.passed)
        for claimed in along.claimed:
            live = self._live.get(claimed.id)
            if live is None or self._stopping.is_set():
                continue  # draining: released by the drain, or left for its lease to expire
            live.finishing = False
            live.task = asyncio.create_task(self._execute(claimed))
        self.stats.claimed += len(along.claimed)
        if along.short:
            self.wake()

    async def _has_work(self, family: str, queue_class: str) -> bool:
        async with reading(self.engine) as conn:
            return await self.store.has_claimable(conn, family, queue_class)

    def _admit(self, latency_ms: float) -> None:
        """Admission budget: halve the batch when claims get slow, recover additively."""
        stats, settings = self.stats, self.settings
        stats.claims += 1
        stats.claim_seconds += latency_ms / 1000
        stats.claim_latency_ms = (
            latency_ms if stats.claims == 1 else 0.8 * stats.claim_latency_ms + 0.2 * latency_ms
        )
        if stats.claim_latency_ms > settings.claim_latency_target_ms:
            stats.batch = max(1, stats.batch // 2)
        elif stats.batch < settings.batch:
            stats.batch = min(settings.batch, stats.batch + max(1, settings.batch // 16))

    # ------------------------------------------------------------------ executors
    async def complete_in(
        self, conn: AsyncConnection, claimed: Claimed, outcome: Outcome = SUCCESS
    ) -> None:
        """Record `claimed`'s outcome inside the handler's own transaction (`conn`), so the
        handler's effect and the completion commit together (effect once). Raises LeaseLost
        when the lease is gone: the caller's transaction must then roll back."""
        if await self.complete_many_in(conn, [claimed], outcome):
            raise LeaseLost(claimed.id)

    async def complete_many_in(
        self, conn: AsyncConnection, claimed: Sequence[Claimed], outcome: Outcome = SUCCESS
    ) -> set[str]:
        """`complete_in` for several items at once (statements per claim token, not per
        item). Returns the ids whose lease is gone: nothing is recorded for those, and a
        caller that needs all of them must roll its transaction back."""
        lost = {c.id for c in claimed if (live := self._live.get(c.id)) is None or live.lost}
        by_token: dict[tuple[str, int, str], list[Claimed]] = {}
        for item in claimed:
            if item.id not in lost:
                self._live[item.id].finishing = True
                by_token.setdefault((item.family, item.epoch, item.token), []).append(item)
        for (family, epoch, token), items in by_token.items():
            lost |= await self.store.finish(
                conn, family, epoch, token, [(item, outcome) for item in items]
            )
        for item in claimed:
            if item.id not in lost:
                self._live[item.id].completed_in_handler = outcome
        return lost

    async def _execute(self, claimed: Claimed) -> None:
        try:
            await self.handler(claimed)
            outcome = SUCCESS
        except asyncio.CancelledError:
            return  # the lease was lost or the process is draining: record nothing
        except LeaseLost:
            self._forget(claimed, lost=True)
            return
        except WorkFailed as exc:
            outcome = self._failure(claimed, exc.failure_class, str(exc), exc.delay_ms)
        except Exception as exc:  # noqa: BLE001 - any handler error: its class only, never text
            outcome = self._failure(claimed, RETRYABLE, f"unexpected {type(exc).__name__}", None)
        live = self._live.get(claimed.id)
        if live is not None and live.completed_in_handler is not None:
            if outcome is SUCCESS:  # the handler's transaction committed its outcome
                self._forget(claimed, lost=False, outcome=live.completed_in_handler)
                return
            live.completed_in_handler = None  # it raised after: that transaction rolled back
            live.finishing = False
        if live is not None and not live.lost:
            self._results.put_nowait((claimed, outcome))

    def _forget(self, claimed: Claimed, *, lost: bool, outcome: Outcome = SUCCESS) -> None:
        """An item whose outcome needs no completer write: count it, free its slot."""
        if self._live.pop(claimed.id, None) is None:
            return
        if lost:
            self.stats.lost += 1
            log.warning("work.lease_lost_at_completion", items=1)
        else:
            self._count(claimed, outcome)
            self._moved(claimed)
        self._slots.set()

    def _failure(
        self, claimed: Claimed, failure_class: str, message: str, delay_ms: int | None
    ) -> Outcome:
        if failure_class == TERMINAL:
            return Outcome(DEAD, TERMINAL, message)
        if failure_class == UNKNOWN:
            return Outcome(OUTCOME_UNKNOWN, UNKNOWN, message)
        if failure_class == DEFERRED:
            wait = (
                delay_ms
                if delay_ms is not None
                else backoff_ms(1, self.settings.backoff_base_ms, self.settings.backoff_cap_ms)
            )
            return Outcome(PENDING, DEFERRED, message, wait)
        delay = (
            delay_ms
            if delay_ms is not None
            else backoff_ms(
                claimed.attempt, self.settings.backoff_base_ms, self.settings.backoff_cap_ms
            )
        )
        return Outcome(PENDING, RETRYABLE, message, delay)

    # ------------------------------------------------------------------ completer
    async def _complete_loop(self) -> None:
        """Flush outcomes the poller did not carry in a claim transaction (when it is idle or
        waiting for free executors)."""
        while True:
            first = await self._results.get()
            self._mark_finishing([first], finishing=True)
            if self._results.qsize() < self.settings.flush_max - 1:  # a full batch goes now
                await asyncio.sleep(self.settings.flush_ms / 1000)
            batch = [first, *self._take_results(self.settings.flush_max - 1)]
            delay = 0.05
            while True:
                try:
                    async with self.engine.begin() as conn:
                        lost, passed = await self._write_outcomes(conn, batch)
                    break
                except Exception as exc:  # noqa: BLE001 - keep the outcomes; leases are renewed
                    unless_cancelled()
                    if is_deadlock(exc):  # lost to a concurrent writer (Galera: at COMMIT)
                        self.stats.conflicts += 1
                        await asyncio.sleep(random.uniform(0, 0.01))  # noqa: S311 - jitter
                        continue
                    log.warning("work.flush_failed", error=type(exc).__name__, items=len(batch))
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 2.0)
            self._settle(batch, lost, passed)

    def _take_results(self, limit: int) -> list[tuple[Claimed, Outcome]]:
        batch: list[tuple[Claimed, Outcome]] = []
        while len(batch) < limit and not self._results.empty():
            batch.append(self._results.get_nowait())
        self._mark_finishing(batch, finishing=True)
        return batch

    def _mark_finishing(self, batch: list[tuple[Claimed, Outcome]], *, finishing: bool) -> None:
        for claimed, _ in batch:
            live = self._live.get(claimed.id)
            if live is not None:
                live.finishing = finishing

    def _give_back(self, batch: list[tuple[Claimed, Outcome]]) -> None:
        """Outcomes whose write failed go back to the queue (the leases are still ours)."""
        self._mark_finishing(batch, finishing=False)
        for result in batch:
            self._results.put_nowait(result)
            self._results.task_done()

    async def _write_outcomes(
        self, conn: AsyncConnection, batch: list[tuple[Claimed, Outcome]]
    ) -> tuple[set[str], list[Claimed]]:
        """Write `batch`'s outcomes; returns the lost ids and the lanes' next items the
        finished heads passed on to this worker (none while it drains): they hold executor
        slots from now and start once the caller's transaction has committed."""
        groups: dict[tuple[str, int, str], list[tuple[Claimed, Outcome]]] = {}
        for claimed, outcome in batch:
            groups.setdefault((claimed.family, claimed.epoch, claimed.token), []).append(
                (claimed, outcome)
            )
        pass_on = PassOn(new_token(), 0 if self._stopping.is_set() else self.settings.lane_passes)
        lost: set[str] = set()
        passed: list[Claimed] = []
        for (family, epoch, token), results in groups.items():
            gone, taken = await self.store.finish_passing_on(
                conn, family, epoch, token, results, pass_on=pass_on
            )
            lost |= gone
            passed += taken
        return lost, passed

    def _start(self, claimed: Sequence[Claimed]) -> None:
        """Claimed items (their claim committed) run on executors of their own."""
        for item in claimed:
            live = self._live[item.id] = _Live(item)
            live.task = asyncio.create_task(self._execute(item))
        self.stats.claimed += len(claimed)

    def _take_over(self, passed: Sequence[Claimed]) -> None:
        """Items the finished heads passed on (committed): they start now, in the slots
        their heads left; while the worker drains they wait for its release instead."""
        if not passed:
            return
        self.stats.passed += len(passed)
        if not self._stopping.is_set():
            self._start(passed)
            return
        for item in passed:
            self._live[item.id] = _Live(item)
        self.stats.claimed += len(passed)

    def _settle(
        self,
        batch: list[tuple[Claimed, Outcome]],
        lost: set[str],
        passed: Sequence[Claimed] = (),
    ) -> None:
        """After the commit: count, free the executor slots, start what the heads passed
        on (`_take_over`)."""
        lanes = {(c.family, c.lane_key) for c in passed}
        for claimed, outcome in batch:
            self._live.pop(claimed.id, None)
            self._results.task_done()
            if claimed.id in lost:
                self.stats.lost += 1
                continue
            self._count(claimed, outcome)
            if claimed.target_key is not None or (claimed.family, claimed.lane_key) not in lanes:
                self._moved(claimed)
        if lost:
            log.warning("work.lease_lost_at_completion", items=len(lost))
        self._take_over(passed)
        self._slots.set()

    def _moved(self, claimed: Claimed) -> None:
        """A lane item's outcome is committed: the next item of its source lane (unless it
        was passed on to this worker), or of its target lane, may be claimable now, and this
        poller is the first to know."""
        if claimed.lane_key is not None or claimed.target_key is not None:
            key = (claimed.family, claimed.queue_class)
            self._idle.pop(key, None)  # no rest for its queue, and no look before the claim
            self._empty.discard(key)
            self._wakeup.set()

    def _count(self, claimed: Claimed, outcome: Outcome) -> None:
        state = effective(claimed, outcome).state
        if outcome.failure_class == DEFERRED:
            self.stats.deferred += 1
        elif state == PENDING:
            self.stats.retried += 1
        elif state == DEAD:
            self.stats.dead += 1
        elif state == OUTCOME_UNKNOWN:
            self.stats.unknown += 1
        else:
            self.stats.succeeded += 1

    # ------------------------------------------------------------------ heartbeat
    async def _heartbeat_loop(self) -> None:
        interval = self.store.lease_ms / 3000
        while True:
            await asyncio.sleep(interval)
            try:
                await self._renew()
            except Exception as exc:  # noqa: BLE001 - the next beat tries again
                unless_cancelled()
                log.warning("work.heartbeat_failed", error=type(exc).__name__)

    async def _renew(self) -> None:
        groups: dict[tuple[str, int, str], list[Claimed]] = {}
        for live in list(self._live.values()):
            if not live.lost and not live.finishing:
                c = live.claimed
                groups.setdefault((c.family, c.epoch, c.token), []).append(c)
        if not groups:
            return
        lost: set[str] = set()
        async with self.engine.begin() as conn:
            for (family, epoch, token), held in groups.items():
                lost |= await self.store.renew(
                    conn,
                    family,
                    epoch,
                    token,
                    [c.id for c in held],
                    target_keys={c.target_key for c in held if c.target_key},
                )
        really = 0
        for item_id in lost:
            if item_id not in self._live or self._live[item_id].finishing:
                continue  # finished meanwhile: its outcome write decides, not this renewal
            gone = self._live.pop(item_id)
            gone.lost = True
            really += 1
            if gone.task is not None and not gone.task.done():
                gone.task.cancel()
        if really:  # (the rest were written while this renewal waited: not lost)
            self.stats.lost += really
            log.warning("work.lease_lost", items=really)
            self._slots.set()
