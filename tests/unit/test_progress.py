"""The lag, the acknowledgement stall and the latency buckets of service/progress.py, with
the clocks given explicitly."""

from __future__ import annotations

import time

from prometheus_client.core import HistogramMetricFamily

from replicad.service.progress import LatencyHistogram, Progress


def test_the_lag_is_the_oldest_unacknowledged_commit_then_zero_after_a_heartbeat() -> None:
    progress = Progress(heartbeat_s=1.0)
    now_wall, now_mono = time.time(), time.monotonic()
    progress.transaction_started()
    progress.transaction_read(1, now_wall - 30)  # read 30 s after its commit
    progress.transaction_started()
    progress.transaction_read(2, now_wall - 10)
    assert 29.5 < progress.lag_seconds(time.time(), now_mono, now_mono) < 31
    progress.acknowledged(1)
    # the oldest waiting is now 10 s old, but the last read one was 10 s late when read
    assert 9.5 < progress.lag_seconds(time.time(), now_mono, now_mono) < 11
    progress.acknowledged(2)
    # nothing waits: how late the last transaction was when read, until a heartbeat says
    # the primary has nothing newer
    assert 9.5 < progress.lag_seconds(time.time(), now_mono, now_mono) < 11
    progress.heartbeat(in_transaction=False)
    assert progress.lag_seconds(time.time(), now_mono, now_mono) == 0.0
    # a heartbeat in the middle of a transaction (cannot come from MariaDB) proves nothing
    progress.heartbeat(in_transaction=True)
    assert progress.lag_seconds(time.time(), now_mono, now_mono) > 9


def test_silence_beyond_two_heartbeat_periods_is_lag() -> None:
    progress = Progress(heartbeat_s=1.0)
    progress.heartbeat(in_transaction=False)
    now_mono = time.monotonic()
    assert progress.lag_seconds(time.time(), now_mono, last_heard=now_mono - 2.5) == 0.0
    assert progress.lag_seconds(time.time(), now_mono, last_heard=now_mono - 7.0) == 7.0


def test_acknowledgement_stall_needs_waiting_transactions_and_time() -> None:
    progress = Progress(heartbeat_s=1.0)
    now = time.monotonic()
    assert progress.ack_stall(now + 100, 30) is None  # nothing waits: no stall
    progress.transaction_read(1, time.time())
    started = progress.ack_progress_at
    assert progress.ack_stall(started + 29, 30) is None
    problem = progress.ack_stall(started + 31, 30)
    assert problem is not None and "(1 transactions waiting)" in problem
    progress.acknowledged(1)
    assert progress.ack_stall(started + 100, 30) is None


def test_restart_keeps_counters_and_drops_live_state() -> None:
    progress = Progress(heartbeat_s=1.0)
    progress.table_rows[("d", "t", "c")] = 5
    progress.transaction_read(1, time.time() - 50)
    progress.restart()
    assert progress.table_rows == {("d", "t", "c"): 5} and progress.transactions == 1
    assert not progress.unacked and progress.read_lag_s == 0.0


def test_latency_buckets_are_cumulative_with_le_semantics() -> None:
    histogram = LatencyHistogram([0.1, 1.0])
    for value in (0.05, 0.1, 0.5, 1.0, 3.0):
        histogram.observe(value)
    family = HistogramMetricFamily("x_seconds", "x", labels=["p"])
    histogram.add_to(family, ["a"])
    samples = {(s.name, s.labels.get("le")): s.value for s in family.samples}
    assert samples[("x_seconds_bucket", "0.1")] == 2  # 0.05 and 0.1 (le: <=)
    assert samples[("x_seconds_bucket", "1.0")] == 4
    assert samples[("x_seconds_bucket", "+Inf")] == 5
    assert samples[("x_seconds_count", None)] == 5
    assert abs(samples[("x_seconds_sum", None)] - 4.65) < 1e-9
