"""`nexus_work_*` on `/metrics`: queue gauges from a periodic indexed count, worker counters.

Gauges: a role that runs work wraps its lifetime in `watching_queues(engine, tables)`; one
task recounts (`stats.queue_stats`, open states only) every `interval_s` seconds and a scrape
reads the last snapshot, so a scrape never touches the database. It recounts every interval
only while someone reads the gauges (a scrape within `UNREAD_AFTER_S`); nobody scraping, it
recounts every `UNREAD_INTERVAL_S`, and a scrape that finds the snapshot older than two
intervals has it recounted at once (its own answer shows the age, as after a failed count;
docs/adr/0055). A scraper at any usual rate sees what it saw before. Counters: summed over
every `Worker` this process created (`worker.PROCESS_STATS`). Labels are `family`, `queue_class`
and `state` only — never ids or payloads.

    nexus_work_items{family,queue_class,state}            gauge   depth per open state
    nexus_work_in_flight{family,queue_class}              gauge   processing with a live lease
    nexus_work_oldest_pending_age_seconds{family,queue_class}
    nexus_work_stats_age_seconds                          gauge   how old the snapshot is
    nexus_work_claimed_total, nexus_work_succeeded_total, nexus_work_retries_total,
    nexus_work_dead_total, nexus_work_outcome_unknown_total, nexus_work_reclaims_total,
    nexus_work_lease_lost_total                           counters (this process's workers)
    nexus_work_claim_latency_seconds                      summary (claim transactions)
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
    SummaryMetricFamily,
)
from prometheus_client.registry import REGISTRY, Collector
from sqlalchemy.ext.asyncio import AsyncEngine

from nexus.platform.db.engine import reading
from nexus.platform.periodic import every
from nexus.platform.workqueue.stats import QueueCount, queue_stats
from nexus.platform.workqueue.tables import WorkTables
from nexus.platform.workqueue.worker import PROCESS_STATS

DEFAULT_INTERVAL_S = 5.0
#: Gauges nobody read for this long are not recounted (Prometheus scrapes every 15-60 s);
#: the next read has them recounted at once.
UNREAD_AFTER_S = 300.0
#: How often gauges nobody reads are recounted (so a first scrape's answer is this fresh).
UNREAD_INTERVAL_S = 60.0

_COUNTERS = (
    ("claimed", "nexus_work_claimed", "Work items claimed by this process's workers"),
    ("succeeded", "nexus_work_succeeded", "Work items that succeeded"),
    ("retried", "nexus_work_retries", "Work item attempts that failed and were scheduled again"),
    (
        "deferred",
        "nexus_work_deferred",
        "Work items put back without spending an attempt (nothing reached their target)",
    ),
    ("dead", "nexus_work_dead", "Work items recorded dead (terminal or out of attempts)"),
    ("unknown", "nexus_work_outcome_unknown", "Work items whose outcome cannot be known"),
    ("reclaimed", "nexus_work_reclaims", "Expired leases this process's workers reclaimed"),
    ("lost", "nexus_work_lease_lost", "Leases lost before the outcome was recorded"),
    (
        "conflicts",
        "nexus_work_claim_conflicts",
        "Claims and outcome writes rolled back by a deadlock or a lost certification (retried)",
    ),
)


@dataclass(eq=False)
class _Source:
    """One watched set of work tables and its last counts."""

    tables: Sequence[WorkTables]
    interval_s: float = DEFAULT_INTERVAL_S
    counts: list[QueueCount] = field(default_factory=list)
    counted_at: float | None = None  # monotonic
    read_at: float | None = None  # monotonic: the last scrape of these gauges
    recount: Callable[[], None] | None = None  # count now (the periodic step, at once)

    def read(self, now: float) -> None:
        """A scrape reads the snapshot: keep counting, and now if it is stale."""
        self.read_at = now
        stale = self.counted_at is None or now - self.counted_at > 2 * self.interval_s
        if stale and self.recount is not None:
            self.recount()

    def watched(self, now: float) -> bool:
        return self.read_at is not None and now - self.read_at < UNREAD_AFTER_S


class WorkCollector(Collector):
    def __init__(self) -> None:
        self._sources: list[_Source] = []

    def add(self, source: _Source) -> None:
        self._sources.append(source)

    def remove(self, source: _Source) -> None:
        if source in self._sources:
            self._sources.remove(source)

    def collect(self) -> Iterator[Metric]:
        if self._sources:
            yield from self._gauges()
        if PROCESS_STATS:
            yield from self._counters()

    def _gauges(self) -> Iterator[Metric]:
        depth: dict[tuple[str, str, str], int] = {}
        in_flight: dict[tuple[str, str], int] = {}
        oldest: dict[tuple[str, str], float] = {}
        ages = []
        now = time.monotonic()
        for source in list(self._sources):
            source.read(now)
            if source.counted_at is not None:
                ages.append(now - source.counted_at)
            for c in source.counts:
                key = (c.family, c.queue_class)
                depth[(*key, c.state)] = depth.get((*key, c.state), 0) + c.count
                in_flight[key] = in_flight.get(key, 0) + c.in_flight
                if c.oldest_age_ms is not None:
                    oldest[key] = max(oldest.get(key, 0.0), c.oldest_age_ms / 1000)
                else:
                    oldest.setdefault(key, 0.0)
        items = GaugeMetricFamily(
            "nexus_work_items",
            "Work items per open state (pending, waiting, target_wait, processing, dead, "
            "outcome_unknown)",
            labels=["family", "queue_class", "state"],
        )
        for labels, value in sorted(depth.items()):
            items.add_metric(list(labels), value)
        flight = GaugeMetricFamily(
            "nexus_work_in_flight",
            "Work items processing under a live lease",
            labels=["family", "queue_class"],
        )
        for key, value in sorted(in_flight.items()):
            flight.add_metric(list(key), value)
        age = GaugeMetricFamily(
            "nexus_work_oldest_pending_age_seconds",
            "How long the oldest runnable pending item has waited (0 when none)",
            labels=["family", "queue_class"],
        )
        for key, seconds in sorted(oldest.items()):
            age.add_metric(list(key), seconds)
        yield from (items, flight, age)
        if ages:
            yield GaugeMetricFamily(
                "nexus_work_stats_age_seconds",
                "Seconds since the queue gauges were counted",
                value=max(ages),
            )

    def _counters(self) -> Iterator[Metric]:
        stats = list(PROCESS_STATS)
        for attribute, name, documentation in _COUNTERS:
            yield CounterMetricFamily(
                name, documentation, value=sum(getattr(s, attribute) for s in stats)
            )
        yield SummaryMetricFamily(
            "nexus_work_claim_latency_seconds",
            "Claim transactions (candidate read, lane leases, CAS update) and their duration",
            count_value=sum(s.claims for s in stats),
            sum_value=sum(s.claim_seconds for s in stats),
        )


COLLECTOR = WorkCollector()
REGISTRY.register(COLLECTOR)


async def refresh(engine: AsyncEngine, source: _Source) -> None:
    """Count once (one read-only transaction, one grouped statement per table set)."""
    counts: list[QueueCount] = []
    async with reading(engine) as conn:
        for tables in source.tables:
            counts += (await queue_stats(conn, tables)).counts
    source.counts = counts
    source.counted_at = time.monotonic()


async def _count_if_read(engine: AsyncEngine, source: _Source) -> None:
    """The periodic step: every tick while someone reads the gauges, else now and then."""
    now = time.monotonic()
    if (
        source.counted_at is None
        or source.watched(now)
        or now - source.counted_at >= UNREAD_INTERVAL_S
    ):
        await refresh(engine, source)


@asynccontextmanager
async def watching_queues(
    engine: AsyncEngine, tables: Sequence[WorkTables], *, interval_s: float = DEFAULT_INTERVAL_S
) -> AsyncIterator[None]:
    """Publish queue gauges for `tables` while the block runs (recounted every `interval_s`
    while scraped; a failed count keeps the last one, and `nexus_work_stats_age_seconds`
    shows its age)."""
    source = _Source(list(tables), interval_s)
    step = every(interval_s, lambda: _count_if_read(engine, source), name="work-queue-gauges")
    async with step as ticker:
        source.recount = ticker.now
        COLLECTOR.add(source)
        try:
            yield
        finally:
            COLLECTOR.remove(source)
