"""What `replicad invalidate` reports on `invalidate.metrics_listen` (served by
published/http.py: /metrics, /healthz, /readyz). The counters are the invalidator's own plain
integers, read when Prometheus scrapes; one histogram observation per applied batch."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from replicad.published.http import register_process_collectors

if TYPE_CHECKING:
    from replicad.invalidate.run import Invalidator

# Seconds from the oldest change of a batch committed on the primary to the batch applied
# in Redis (binlog commit times have whole-second resolution).
BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)

COUNTERS = (
    ("messages", "Kafka messages read (tombstones and schema events included)"),
    ("changes", "Row changes and table-level events turned into Redis operations"),
    ("keys_deleted", "Keys unlinked (after coalescing within a batch)"),
    ("notices", "Keys announced on Redis channels"),
    ("table_wide", "Table-wide actions (scan or generation) for TRUNCATE, DROP, RENAME"),
    ("batches", "Batches applied"),
    ("redis_errors", "Attempts Redis did not take (the batch is retried)"),
    ("rebalanced_batches", "Batches dropped because a rebalance took their partitions"),
)


class InvalidatorTelemetry:
    def __init__(self, invalidator: Invalidator, ready_redis_down_s: float = 5.0) -> None:
        self.invalidator = invalidator
        self.registry = CollectorRegistry(auto_describe=True)
        self.loop_tick = time.monotonic()
        self.serving = False
        self.ready_redis_down_s = ready_redis_down_s
        self.commit_to_apply = Histogram(
            "replicad_invalidate_commit_to_apply_seconds",
            "From the oldest change of a batch committed on the primary to the batch applied",
            buckets=BUCKETS,
            registry=self.registry,
        )
        self.registry.register(_Collector(self))
        register_process_collectors(self.registry)

    def ready(self) -> tuple[bool, dict[str, Any]]:
        """In the group and Redis taking batches (or away for less than a few seconds)."""
        inv = self.invalidator
        report: dict[str, Any] = {"partitions": len(inv.assigned)}
        problem = None
        if inv.stopping.is_set():
            problem = "stopping"
        elif not inv.subscribed:
            problem = "not subscribed yet"
        elif inv.redis_down_since is not None:
            down = time.monotonic() - inv.redis_down_since
            if down > self.ready_redis_down_s:
                problem = f"Redis has not taken a batch for {down:.0f} s"
        if problem is not None:
            report["problem"] = problem
        return problem is None, report


class _Collector(Collector):
    def __init__(self, telemetry: InvalidatorTelemetry) -> None:
        self.telemetry = telemetry

    def collect(self) -> Iterator[Metric]:
        inv = self.telemetry.invalidator
        counters = inv.counters
        for name, text in COUNTERS:
            yield CounterMetricFamily(
                f"replicad_invalidate_{name}", text, value=getattr(counters, name)
            )
        yield GaugeMetricFamily(
            "replicad_invalidate_assigned_partitions",
            "Partitions this instance of the group holds",
            value=len(inv.assigned),
        )
        yield GaugeMetricFamily(
            "replicad_invalidate_redis_up",
            "0 while Redis does not take batches (consumption paused)",
            value=int(inv.redis_down_since is None),
        )
        yield GaugeMetricFamily(
            "replicad_invalidate_pending_batches",
            "Applied batches waiting for their redelete before their offsets are committed",
            value=len(inv.pending),
        )
        ready, _ = self.telemetry.ready()
        yield GaugeMetricFamily(
            "replicad_invalidate_ready", "1 when /readyz answers 200", value=int(ready)
        )
