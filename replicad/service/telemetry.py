"""What `replicad run` reports about itself: one `Telemetry` per process, read by the
metrics and health endpoints (published/http.py, from their own thread) and by sd_notify
(service/notify.py).

Counting stays off the per-row path: a pipeline keeps plain integers (service/progress.py:
rows per table and op, binlog bytes, transactions, latency buckets) and this collector reads
them when Prometheus scrapes. Only rare events (errors, reconnects, heartbeat writes) go
through prometheus-client objects. Metric names are stable and documented in
docs/observability.md.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from prometheus_client import CollectorRegistry, Counter, disable_created_metrics
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

import replicad
from replicad.config import Config
from replicad.published.http import register_process_collectors
from replicad.service.progress import Progress

if TYPE_CHECKING:
    from replicad.coordination.zk_client import ZkClient
    from replicad.service.daemon import Pipeline

# The *_created samples double every counter's series for a start time nobody graphs.
disable_created_metrics()

Role = Literal["starting", "standby", "leading", "stopped"]
ROLES: tuple[Role, ...] = ("starting", "standby", "leading", "stopped")
# The `sink` label: stable names, not class names
SINK_LABELS = {"KafkaSink": "kafka", "MqttSink": "mqtt", "JsonLinesSink": "stdout"}


@dataclass
class PipelineView:
    """One pipeline of this worker as the endpoints see it."""

    name: str
    role: Role = "starting"
    epoch: int | None = None  # the leadership epoch (ZooKeeper), while leading
    pipeline: Pipeline | None = None  # the running pipeline (leading, or without ZooKeeper)
    # From the retention check (service/heartbeat.py): how many binlog files the primary
    # keeps before the one the stored position is in (0: it is the oldest, next to go).
    files_before_purge: int | None = None
    since: float = field(default_factory=time.monotonic)
    progress: Progress | None = None  # from the first pipeline on, for the process's life


class Telemetry:
    def __init__(self, ready_ack_stall_s: float = 30.0) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.pipelines: dict[str, PipelineView] = {}
        self.ready_ack_stall_s = ready_ack_stall_s
        self.loop_tick = time.monotonic()  # moved by the event loop (published/http.py)
        self.zookeeper: ZkClient | None = None  # the worker's, when coordinated
        self.stopping = False
        self.serving = False  # the endpoints are up: keep latencies and readiness current
        self._listeners: list[Callable[[PipelineView], None]] = []
        self.errors = Counter(
            "replicad_errors",
            "Errors by kind: pipeline failures, failed heartbeat writes and retention checks",
            ["pipeline", "kind"],
            registry=self.registry,
        )
        self.reconnects = Counter(
            "replicad_source_reconnects",
            "Times the binlog stream was resumed after the connection to the primary broke",
            ["pipeline"],
            registry=self.registry,
        )
        self.heartbeats = Counter(
            "replicad_heartbeat_writes",
            "Heartbeat writes to the primary (heartbeat.query)",
            ["pipeline", "outcome"],
            registry=self.registry,
        )
        self.registry.register(_PipelineCollector(self))
        register_process_collectors(self.registry)

    # ------------------------------------------------------------------ updates
    def view(self, name: str) -> PipelineView:
        view = self.pipelines.get(name)
        if view is None:
            view = self.pipelines[name] = PipelineView(name)
        return view

    def progress(self, config: Config) -> Progress:
        view = self.view(config.pipeline)
        if view.progress is None:
            view.progress = Progress(config.source.heartbeat_s)
        return view.progress

    def set_role(self, name: str, role: Role, epoch: int | None = None) -> None:
        view = self.view(name)
        if view.role != role or view.epoch != epoch:
            view.role, view.epoch, view.since = role, epoch, time.monotonic()
            for listener in self._listeners:
                listener(view)

    def attach(self, pipeline: Pipeline) -> None:
        self.view(pipeline.config.pipeline).pipeline = pipeline

    def detach(self, pipeline: Pipeline) -> None:
        view = self.view(pipeline.config.pipeline)
        if view.pipeline is pipeline:
            view.pipeline = None
            view.files_before_purge = None  # a standby does not check: no stale value

    def on_role_change(self, listener: Callable[[PipelineView], None]) -> None:
        self._listeners.append(listener)

    # ------------------------------------------------------------------ health
    def ready(self) -> tuple[bool, dict[str, Any]]:
        """Every pipeline leading and publishing, or standing by with a live ZooKeeper
        session; and the process not stopping."""
        now = time.monotonic()
        report: dict[str, Any] = {}
        ok = bool(self.pipelines) and not self.stopping
        zk_state = None if self.zookeeper is None else self.zookeeper.state
        for name, view in sorted(self.pipelines.items()):
            entry: dict[str, Any] = {"role": view.role}
            problem = None
            if view.role == "standby":
                if zk_state != "CONNECTED":
                    problem = f"ZooKeeper session {zk_state}"
            elif view.role == "leading":
                if zk_state is not None and zk_state != "CONNECTED":
                    problem = f"ZooKeeper session {zk_state}"
                elif view.pipeline is None or not view.pipeline.streaming:
                    problem = "not streaming yet"
                else:
                    problem = view.pipeline.publishing_problem(now, self.ready_ack_stall_s)
            else:
                problem = view.role
            if problem is not None:
                entry["problem"] = problem
                ok = False
            report[name] = entry
        if self.stopping:
            report["_process"] = {"problem": "stopping"}
        return ok, report


class _PipelineCollector(Collector):
    """Gauges and counters read from the running pipelines at scrape time."""

    def __init__(self, telemetry: Telemetry) -> None:
        self.telemetry = telemetry

    def collect(self) -> Iterator[Metric]:
        t = self.telemetry
        now_wall, now_mono = time.time(), time.monotonic()
        info = GaugeMetricFamily("replicad_build_info", "replicad's version", labels=["version"])
        info.add_metric([replicad.__version__], 1)
        yield info
        ready, _ = t.ready()
        yield GaugeMetricFamily("replicad_ready", "1 when /readyz answers 200", value=int(ready))
        role = GaugeMetricFamily(
            "replicad_role", "1 for the pipeline's current role", labels=["pipeline", "role"]
        )
        epoch = GaugeMetricFamily(
            "replicad_leader_epoch", "Leadership epoch while leading", labels=["pipeline"]
        )
        connected = GaugeMetricFamily(
            "replicad_source_connected",
            "1 while the binlog connection to the primary is up (0: connecting, reconnecting, "
            "or a standby, which keeps none)",
            labels=["pipeline"],
        )
        lag = GaugeMetricFamily(
            "replicad_lag_seconds",
            "How far the acknowledged position is behind the primary (heartbeat-aware)",
            labels=["pipeline"],
        )
        rows = CounterMetricFamily(
            "replicad_rows", "Row changes published", labels=["pipeline", "db", "table", "op"]
        )
        size = CounterMetricFamily(
            "replicad_binlog_bytes",
            "Binlog bytes of the published rows events",
            labels=["pipeline", "db", "table", "op"],
        )
        transactions = CounterMetricFamily(
            "replicad_transactions", "Transactions read", labels=["pipeline"]
        )
        paths = CounterMetricFamily(
            "replicad_rows_events",
            "ROWS events published, by path: compiled (the whole event encoded in C) or "
            "row_by_row (filters, value modes, no accelerator, several sinks)",
            labels=["pipeline", "path"],
        )
        pending = GaugeMetricFamily(
            "replicad_pending_marks",
            "Transactions (marks) read and not yet acknowledged by every sink",
            labels=["pipeline"],
        )
        queued = GaugeMetricFamily(
            "replicad_sink_queued_messages",
            "Messages handed to a sink and not yet acknowledged",
            labels=["pipeline", "sink"],
        )
        relay_bytes = GaugeMetricFamily(
            "replicad_relay_bytes", "Bytes in the relay log", labels=["pipeline"]
        )
        relay_segments = GaugeMetricFamily(
            "replicad_relay_segments", "Segment files in the relay log", labels=["pipeline"]
        )
        snapshot_rows = CounterMetricFamily(
            "replicad_snapshot_rows",
            "Rows read by the initial snapshot",
            labels=["pipeline", "table"],
        )
        snapshot_done = GaugeMetricFamily(
            "replicad_snapshot_done",
            "1 once a table's snapshot is published",
            labels=["pipeline", "table"],
        )
        purge = GaugeMetricFamily(
            "replicad_binlog_files_before_purge",
            "Binlog files the primary keeps before the stored position's (0: it is next)",
            labels=["pipeline"],
        )
        commit_to_ack = HistogramMetricFamily(
            "replicad_commit_to_ack_seconds",
            "From a transaction's commit on the primary (binlog timestamp, whole seconds) to "
            "its acknowledgement by every sink",
            labels=["pipeline"],
        )
        read_to_ack = HistogramMetricFamily(
            "replicad_read_to_ack_seconds",
            "From a transaction's end being read to its acknowledgement by every sink",
            labels=["pipeline"],
        )
        for name, view in sorted(t.pipelines.items()):
            for r in ROLES:
                role.add_metric([name, r], int(view.role == r))
            if view.role == "leading" and view.epoch is not None:
                epoch.add_metric([name], view.epoch)
            if view.files_before_purge is not None:
                purge.add_metric([name], view.files_before_purge)
            progress = view.progress
            if progress is not None:  # counted since the process started
                for (db, table, op), count in dict(progress.table_rows).items():
                    rows.add_metric([name, db, table, op], count)
                for (db, table, op), count in dict(progress.table_bytes).items():
                    size.add_metric([name, db, table, op], count)
                transactions.add_metric([name], progress.transactions)
                for path, count in dict(progress.events_by_path).items():
                    paths.add_metric([name, path], count)
                progress.commit_to_ack.add_to(commit_to_ack, [name])
                progress.read_to_ack.add_to(read_to_ack, [name])
            p = view.pipeline
            connected.add_metric([name], int(p is not None and p.source_connected))
            if p is None:
                continue
            lag.add_metric([name], p.lag_seconds(now_wall, now_mono))
            if p.checkpointer is not None:
                pending.add_metric([name], p.checkpointer.pending_marks)
            for sink in list(p.sinks):
                waiting = getattr(sink, "queued", None)
                if waiting is not None:
                    kind = type(sink).__name__
                    queued.add_metric([name, SINK_LABELS.get(kind, kind)], waiting)
            relay = p.relay_usage()
            if relay is not None:
                relay_bytes.add_metric([name], relay[0])
                relay_segments.add_metric([name], relay[1])
            for snapshotted in list(p.snapshot_progress):
                snapshot_rows.add_metric([name, snapshotted.table], snapshotted.rows)
                snapshot_done.add_metric([name, snapshotted.table], int(snapshotted.done))
        yield from (role, epoch, connected, lag, rows, size, transactions, paths, pending, queued)
        yield from (commit_to_ack, read_to_ack)
        yield from (relay_bytes, relay_segments, snapshot_rows, snapshot_done, purge)
