"""e2e.py's timed phases: end to end throughput, the broker ceiling, commit -> consume latency
(with and without an incremental snapshot) and the broker alone."""

from __future__ import annotations

import argparse
import json
import os
import pickle
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.harness import children, mariadb
from bench.harness.kafka_broker import TopicReader, create_topic, op_of, sink_producer_settings
from bench.harness.procstat import CpuWatch, thread_cpu, thread_cpu_delta
from bench.harness.replicad_process import Profiler, Replicad, ReplicadDied
from bench.harness.tables import percentiles
from bench.measure.e2e_children import child_command
from bench.workloads import decode_rows
from bench.workloads.e2e_load import DATABASE, OPS, SNAPSHOT_TABLE

CEILING_SAMPLES = 2_000  # consumed messages kept to replay in the broker ceiling


IDLE_S = 30.0  # latency phases: give up when nothing more arrived for this long


def throughput_phase(
    replicad: Replicad,
    reader: TopicReader,
    plan: decode_rows.Plan,
    pids: dict[str, int],
    profiler: Profiler | None,
) -> dict[str, Any]:
    """Start replicad at the position before the load; count every message of the table."""
    expected = {**plan.counts(), "tombstones": plan.deletes}
    expected_total = sum(expected.values())
    counts = dict.fromkeys([*OPS, "tombstones"], 0)
    total = message_bytes = 0
    samples: list[tuple[bytes | None, bytes | None, Any]] = []
    keep_every = max(1, expected_total // CEILING_SAMPLES)
    timeline: list[tuple[float, int]] = []
    timeout = max(120.0, plan.total / 2_000)
    pid = replicad.start()
    watch = CpuWatch({"replicad": pid, **pids}).start()
    if profiler is not None:
        time.sleep(0.2)  # py-spy cannot attach before the interpreter is up
        profiler.start(pid)
    first = last = None
    next_tick = 0.0
    while total < expected_total:
        now = time.perf_counter() - replicad.spawned
        if now > timeout:
            raise TimeoutError(f"{total:,} of {expected_total:,} messages after {timeout:.0f} s")
        if not replicad.alive():
            raise ReplicadDied(f"replicad exited {replicad.exit_status()}")
        msgs = reader.batch()
        if not msgs:
            continue
        got = time.perf_counter()
        first = first if first is not None else got
        last = got
        for msg in msgs:
            value = msg.value()
            key = msg.key()
            if total % keep_every == 0 and len(samples) < CEILING_SAMPLES:
                samples.append((key, value, msg.headers()))
            total += 1
            if value is None:
                counts["tombstones"] += 1
            else:
                counts[op_of(value)] += 1
                message_bytes += len(value)
            message_bytes += len(key or b"")
        if got - replicad.spawned >= next_tick:
            timeline.append((round(got - replicad.spawned, 3), total))
            next_tick += 0.5
    assert first is not None and last is not None
    cpu = watch.stop()
    cpu_s, peak_rss = replicad.cpu_s(), replicad.peak_rss_mb()
    threads = thread_cpu(pid)
    timeline.append((round(last - replicad.spawned, 3), total))
    return {
        "profile": profiler.stop() if profiler is not None else None,
        "expected": expected,
        "counts": counts,
        "messages": total,
        "message_bytes": message_bytes,
        "e2e_s": last - replicad.spawned,
        "startup_s": first - replicad.spawned,
        "streaming_s": last - first,
        "replicad_cpu_s": cpu_s,
        "replicad_threads_cpu_s": {k: round(v, 2) for k, v in threads.items()},
        "replicad_peak_rss_mb": peak_rss,
        "cpu": cpu,
        "timeline": timeline,
        "samples": samples,
    }


def broker_ceiling(
    bootstrap: str, topic: str, samples: list[Any], count: int, pids: dict[str, int]
) -> dict[str, Any]:
    """Produce `count` messages cycling through the samples with KafkaSink's at-least-once
    producer settings (after a 100-message warm-up); seconds until the last delivery report."""
    from confluent_kafka import Producer

    create_topic(bootstrap, topic)
    producer = Producer({**sink_producer_settings(bootstrap), "message.timeout.ms": 120_000})
    delivered = failed = 0

    def report(err: Any, _msg: Any) -> None:
        nonlocal delivered, failed
        if err is None:
            delivered += 1
        else:
            failed += 1

    for key, value, headers in samples[:100]:
        producer.produce(topic, value, key, headers=headers)
    producer.flush(60)
    watch = CpuWatch(pids).start()
    started = time.perf_counter()
    for i in range(count):
        key, value, headers = samples[i % len(samples)]
        while True:
            try:
                producer.produce(topic, value, key, on_delivery=report, headers=headers)
                break
            except BufferError:
                producer.poll(0.01)
        if i % 1000 == 0:
            producer.poll(0)
    left = producer.flush(180)
    seconds = time.perf_counter() - started
    producer.close()
    return {
        "messages": count,
        "delivered": delivered,
        "failed": failed,
        "undelivered": left,
        "seconds": seconds,
        "cpu": watch.stop(),
    }


def consume_during(
    reader: TopicReader,
    child: subprocess.Popen[bytes],
    out_path: Path,
    replicad: Replicad,
    count_key: str,
    record: Any,
) -> tuple[int, dict[str, Any]]:
    """Hand every message to `record(msg, consumed_at)` (True: it counts) while the child
    runs, then until result[count_key] counted messages came or none came for IDLE_S.
    Returns (counted, the child's result)."""
    consumed = 0
    result: dict[str, Any] | None = None
    last_arrival = time.monotonic()
    while result is None or consumed < result[count_key]:
        msg = reader.one(0.1)
        if msg is not None:
            last_arrival = time.monotonic()
            if record(msg, time.time()):
                consumed += 1
        if result is None and child.poll() is not None:
            result = json.loads(out_path.read_text()) if out_path.exists() else {}
            if child.returncode != 0 or "error" in result or count_key not in result:
                raise RuntimeError(f"the {count_key} child failed: {result.get('error', '')}")
        if result is not None and time.monotonic() - last_arrival > IDLE_S:
            break
        if not replicad.alive():
            raise ReplicadDied(f"replicad exited {replicad.exit_status()}")
    assert result is not None
    return consumed, result


def latency_phase(
    replicad: Replicad,
    reader: TopicReader,
    server: mariadb.Server,
    args: argparse.Namespace,
    workdir: Path,
    pids: dict[str, int],
    first_id: int = 1,
) -> dict[str, Any]:
    """Paced inserts while replicad runs; per-row latencies as seen by the consumer."""
    out_path = workdir / "writer.json"
    out_path.unlink(missing_ok=True)
    spec = {
        "first_id": first_id,
        "host": server.host,
        "port": server.port,
        "user": server.user,
        "password": server.password,
        "rate": args.rate,
        "seconds": args.seconds,
        "batch": args.batch,
        "out": str(out_path),
    }
    while not reader.try_assign():
        time.sleep(0.05)
    replicad_cpu = replicad.cpu_s()
    threads = thread_cpu(replicad.pid)
    watch = CpuWatch({"replicad": replicad.pid, **pids}).start()
    writer = subprocess.Popen(child_command("writer", spec), env=children.python_env())
    rows: list[tuple[int, str, float, int]] = []  # txn, ts text, consumed at, Kafka ts (ms)
    ts_types: set[int] = set()

    def record(msg: Any, consumed: float) -> bool:
        after = json.loads(msg.value())["after"]
        ts_type, ts_ms = msg.timestamp()
        ts_types.add(ts_type)
        rows.append((after["txn"], after["ts"], consumed, ts_ms))
        return True

    consumed, written = consume_during(reader, writer, out_path, replicad, "rows", record)
    cpu = watch.stop()
    cpu["writer"] = written.get("cpu_s", 0.0)
    cpu_s = replicad.cpu_s()
    threads = thread_cpu_delta(threads, thread_cpu(replicad.pid))
    # DATETIME(6) text of the UTC session -> epoch seconds; a transaction's rows share it.
    epoch: dict[str, float] = {}
    committed = {t[0]: t[3] for t in written["txns"]}
    to_consume, to_produce, from_commit_ok = [], [], []
    for txn, ts_text, consumed_at, ts_ms in rows:
        ts = epoch.get(ts_text)
        if ts is None:
            ts = epoch[ts_text] = datetime.fromisoformat(ts_text).replace(tzinfo=UTC).timestamp()
        to_consume.append(consumed_at - ts)
        if ts_ms > 0:
            to_produce.append(ts_ms / 1000 - ts)
        from_commit_ok.append(consumed_at - committed[txn])
    span = written["last_committed"] - written["first_due"]
    names = {0: "not available", 1: "CreateTime", 2: "LogAppendTime"}
    return {
        "writer": {k: v for k, v in written.items() if k != "txns"},
        "achieved_rows_per_s": written["rows"] / span if span > 0 else None,
        "consumed": consumed,
        "kafka_timestamp_type": ", ".join(names.get(t, str(t)) for t in sorted(ts_types)),
        "commit_to_consume_ms": percentiles(to_consume),
        "commit_to_produce_ts_ms": percentiles(to_produce),
        "commit_ok_to_consume_ms": percentiles(from_commit_ok),
        "replicad_cpu_s": (
            round(cpu_s - replicad_cpu, 2) if cpu_s is not None and replicad_cpu else None
        ),
        "replicad_threads_cpu_s": threads,
        "cpu": cpu,
    }


def snapshot_latency_phase(
    replicad: Replicad,
    reader: TopicReader,
    server: mariadb.Server,
    args: argparse.Namespace,
    workdir: Path,
    pids: dict[str, int],
    first_id: int,
) -> dict[str, Any]:
    """The latency phase again, with an incremental snapshot of SNAPSHOT_TABLE requested
    right before it: how much the snapshot's chunks delay the live stream."""
    env = {**os.environ, "REPLICAD_E2E_PASSWORD": server.repl_password}
    before = len(replicad.log_events())
    requested = subprocess.run(
        [
            sys.executable,
            "-m",
            "replicad.cli",
            "snapshot",
            "request",
            f"{DATABASE}.{SNAPSHOT_TABLE}",
            "--chunk-rows",
            str(args.snapshot_chunk_rows),
            "-c",
            str(replicad.config_path),
        ],
        env=env,
        capture_output=True,
        timeout=60,
    )
    if requested.returncode != 0:
        raise RuntimeError(f"snapshot request failed: {requested.stderr.decode()}")
    lat = latency_phase(replicad, reader, server, args, workdir, pids, first_id)
    events = replicad.log_events()[before:]
    emitted = [e for e in events if e.get("event") == "snapshot_chunk_emitted"]
    done = [e for e in events if e.get("event") == "snapshot_request_done"]
    lat["snapshot"] = {
        "rows_emitted": sum(e.get("rows", 0) for e in emitted),
        "chunks": len(emitted),
        "done_during_phase": bool(done),
        "chunk_rows": args.snapshot_chunk_rows,
    }
    return lat


def broker_latency(
    replicad: Replicad,
    bootstrap: str,
    topic: str,
    samples: list[Any],
    args: argparse.Namespace,
    workdir: Path,
    pids: dict[str, int],
) -> dict[str, Any]:
    """The broker alone at the latency phase's pace and burst shape (replicad idle)."""
    create_topic(bootstrap, topic)
    samples_path = workdir / "samples.pickle"
    samples_path.write_bytes(pickle.dumps(samples))
    out_path = workdir / "producer.json"
    spec = {
        "settings": {**sink_producer_settings(bootstrap), "message.timeout.ms": 120_000},
        "topic": topic,
        "samples": str(samples_path),
        "rate": args.rate,
        "seconds": args.seconds,
        "batch": args.batch,
        "out": str(out_path),
    }
    reader = TopicReader(bootstrap, topic)
    try:
        while not reader.try_assign():
            time.sleep(0.05)
        watch = CpuWatch(pids).start()
        child = subprocess.Popen(child_command("producer", spec), env=children.python_env())
        latencies: list[float] = []

        def record(msg: Any, consumed: float) -> bool:
            sent = dict(msg.headers() or []).get("e2e.sent", b"")
            if sent == b"warm-up":
                return False
            latencies.append(consumed - float(sent))
            return True

        _, result = consume_during(reader, child, out_path, replicad, "messages", record)
        cpu = watch.stop()
        cpu["producer"] = result.get("producer_cpu_s", 0.0)
    finally:
        reader.close()
        samples_path.unlink(missing_ok=True)
    return {
        **result,
        "consumed": len(latencies),
        "produce_to_consume_ms": percentiles(latencies),
        "cpu": cpu,
    }
