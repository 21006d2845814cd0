"""How far a pipeline has got, as the metrics and /readyz see it (docs/observability.md):
rows and bytes per table, transactions, the acknowledgement latencies, the lag and whether
acknowledgements have stalled.

One `Progress` per pipeline name lives as long as the process: a pipeline restarted inside it
(after a ZooKeeper command, or leadership regained) continues its counters, and only the live
state (`restart()`) starts afresh. The event loop writes; the metrics thread reads single
values or copies, never iterating a structure the loop may be changing.
"""

from __future__ import annotations

import contextlib
import time
from bisect import bisect_left
from collections import deque
from collections.abc import Sequence

from prometheus_client.core import HistogramMetricFamily
from prometheus_client.utils import floatToGoString

# Seconds. Binlog commit times have whole-second resolution: the first buckets matter for
# read->ack, the later ones for both.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800)


class LatencyHistogram:
    """A histogram whose observation is a bisect and two additions (prometheus-client's own
    takes a lock and ~0.7 µs: once per transaction that is felt at 50k transactions/s)."""

    def __init__(self, bounds: Sequence[float] = LATENCY_BUCKETS) -> None:
        self.bounds = list(bounds)
        self.counts = [0] * (len(self.bounds) + 1)  # the last one: above every bound
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value

    def add_to(self, family: HistogramMetricFamily, labels: list[str]) -> None:
        counts, total = list(self.counts), self.sum
        cumulative, buckets = 0, []
        bounds = [floatToGoString(b) for b in self.bounds] + ["+Inf"]
        for bound, count in zip(bounds, counts, strict=True):
            cumulative += count
            buckets.append((bound, cumulative))
        family.add_metric(labels, buckets, total)


class Progress:
    def __init__(self, heartbeat_s: float) -> None:
        self.table_rows: dict[tuple[str, str, str], int] = {}  # (db, table, op) -> rows
        self.table_bytes: dict[tuple[str, str, str], int] = {}  # binlog bytes of their events
        self.transactions = 0
        # ROWS events published through the compiled path (whole events) and row by row
        self.events_by_path = {"compiled": 0, "row_by_row": 0}
        self.commit_to_ack = LatencyHistogram()
        self.read_to_ack = LatencyHistogram()
        # Silence from the primary beyond this: it may have more than we know (no heartbeat).
        self.silence_s = 2 * heartbeat_s + 1.0
        self.restart()

    def restart(self) -> None:
        """A new pipeline: nothing read, nothing waiting."""
        # Transactions read and not yet acknowledged: (mark, commit time, read at).
        self.unacked: deque[tuple[int, float, float]] = deque()
        self.ack_progress_at = time.monotonic()
        self.read_lag_s = 0.0  # of the last transaction, when it was read
        self.caught_up = False  # a heartbeat (the primary had nothing more) came last

    # ------------------------------------------------------------------ the event loop
    def transaction_started(self) -> None:
        self.caught_up = False

    def heartbeat(self, in_transaction: bool) -> None:
        self.caught_up = not in_transaction

    def transaction_read(self, mark: int, commit_ts: float) -> None:
        now_wall, now_mono = time.time(), time.monotonic()
        self.read_lag_s = max(0.0, now_wall - commit_ts)
        if not self.unacked:
            self.ack_progress_at = now_mono  # the stall clock starts now
        self.unacked.append((mark, commit_ts, now_mono))
        self.transactions += 1

    def acknowledged(self, acked: int) -> None:
        """Every sink acknowledged the marks up to `acked`."""
        unacked = self.unacked
        if not unacked or unacked[0][0] > acked:
            return
        now_wall, now_mono = time.time(), time.monotonic()
        while unacked and unacked[0][0] <= acked:
            _, commit_ts, read_at = unacked.popleft()
            self.commit_to_ack.observe(max(0.0, now_wall - commit_ts))
            self.read_to_ack.observe(now_mono - read_at)
        self.ack_progress_at = now_mono

    # ------------------------------------------------------------------ readers
    def lag_seconds(self, now_wall: float, now_mono: float, last_heard: float) -> float:
        """How far the acknowledged position is behind the primary: the age of the oldest
        transaction not yet acknowledged, else how far behind the last one read was when it
        was read (0 once a heartbeat said the primary has nothing newer), and at least the
        silence since the source was last heard from (`last_heard`, monotonic) beyond two
        heartbeat periods."""
        lag = 0.0
        with contextlib.suppress(IndexError):  # emptied by the event loop meanwhile
            lag = now_wall - self.unacked[0][1]
        if not self.caught_up:
            lag = max(lag, self.read_lag_s)
        silence = now_mono - last_heard
        if silence > self.silence_s:
            lag = max(lag, silence)
        return max(0.0, lag)

    def ack_stall(self, now_mono: float, stall_s: float) -> str | None:
        """Why the sinks look stuck (None: they are not)."""
        waiting = len(self.unacked)
        stalled = now_mono - self.ack_progress_at
        if waiting and stalled > stall_s:
            return (
                f"no acknowledgement from the sinks for {stalled:.0f} s "
                f"({waiting} transactions waiting)"
            )
        return None
