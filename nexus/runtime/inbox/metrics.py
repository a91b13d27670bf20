"""The inbox on runtime-worker's /metrics: queue depth (all processes) and this process's
executions. Read at scrape time from what the loop already holds: no query per scrape."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import REGISTRY, CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from nexus.runtime.inbox.loop import InboxLoop


class InboxCollector(Collector):
    def __init__(self) -> None:
        self.loops: list[InboxLoop] = []

    def collect(self) -> Iterator[Metric]:
        items = GaugeMetricFamily(
            "nexus_inbox_items",
            "Inbox commands by live state, all workers (counted every few seconds)",
            labels=["state"],
        )
        oldest = GaugeMetricFamily(
            "nexus_inbox_oldest_pending_seconds",
            "Age of the oldest pending inbox command (its run-after time)",
        )
        executed = CounterMetricFamily(
            "nexus_inbox_executions",
            "Inbox command executions this process finished, by outcome",
            labels=["outcome"],
        )
        reclaimed = CounterMetricFamily(
            "nexus_inbox_reclaimed", "Expired inbox leases this process took back"
        )
        latency = GaugeMetricFamily(
            "nexus_inbox_claim_latency_ms", "Inbox claim round trip (moving average)"
        )
        for loop in self.loops:
            for state, count in loop.depth.items.items():
                items.add_metric([state], count)
            oldest.add_metric([], loop.depth.oldest_pending_seconds)
            stats = loop.stats
            if stats is None:
                continue
            for outcome, value in (
                ("succeeded", stats.succeeded),
                ("retried", stats.retried),
                ("dead", stats.dead),
                ("outcome_unknown", stats.unknown),
                ("lease_lost", stats.lost),
            ):
                executed.add_metric([outcome], value)
            reclaimed.add_metric([], stats.reclaimed)
            latency.add_metric([], stats.claim_latency_ms)
        yield from (items, oldest, executed, reclaimed, latency)


COLLECTOR = InboxCollector()
REGISTRY.register(COLLECTOR)
