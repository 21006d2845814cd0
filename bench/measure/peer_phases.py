"""peers.py's phases, run for each contender: snapshot, live streaming, latency at each rate,
restart with a backlog."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import time
import traceback
import uuid
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson

from bench.harness import kafka_broker, procstat, tables
from bench.harness.machine import loadavg
from bench.peers.contenders import (
    Contender,
    ContenderDied,
    DebeziumContender,
    ReplicadContender,
    Tree,
)
from bench.workloads.peer_rows import (
    BACKLOG_BASE,
    LATENCY_BASE,
    LIVE_BASE,
    TXN_PER_S,
    run_writer,
    writer_result,
)

IDLE_S = 60.0  # a phase fails when no awaited message arrived for this long


def drain(
    reader: kafka_broker.TopicReader,
    tree: Tree,
    handle: Callable[[Any, float], bool],
    done: Callable[[], bool],
    what: str,
    one: bool = False,
    writer: subprocess.Popen[bytes] | None = None,
    tick: Callable[[float], None] | None = None,
) -> None:
    """Messages to `handle(msg, consumed_at)` (True: an awaited message) until `done()`;
    fails when the contender or the writer fails, or no awaited message came for IDLE_S."""
    last = time.monotonic()
    while not done():
        if one:
            msg = reader.one(0.05)
            batch = [] if msg is None else [msg]
        else:
            batch = reader.batch(0.02)
        now = time.time()
        if tick is not None:
            tick(now)
        for msg in batch:
            if handle(msg, now):
                last = time.monotonic()
        tree.sample()
        if writer is not None and writer.poll() is not None:
            writer_result(writer)  # raises when the writer failed
            writer = None
        if not tree.contender.alive():
            raise ContenderDied(
                f"{tree.contender.label} exited during {what}:\n{tree.contender.log_tail()}"
            )
        if time.monotonic() - last > IDLE_S:
            raise RuntimeError(f"{tree.contender.label}: nothing new for {IDLE_S} s in {what}")


def key_id(msg: Any) -> int:
    return int(orjson.loads(msg.key())["id"])


def wait_streaming(contender: Contender, tree: Tree, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not contender.streaming():
        tree.sample()
        if not contender.alive():
            raise ContenderDied(f"{contender.label} exited:\n{contender.log_tail()}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{contender.label} not streaming after {timeout} s")
        time.sleep(0.05)


def phase(results: dict[str, Any], name: str, work: Callable[[], dict[str, Any]]) -> None:
    before = loadavg()
    started = time.time()
    busy0, total0 = procstat.machine_ticks()
    out = work()
    busy1, total1 = procstat.machine_ticks()
    cores = os.cpu_count() or 1
    out["machine_busy_cores"] = round((busy1 - busy0) / max(1, total1 - total0) * cores, 2)
    out["load_before"], out["load_after"] = before, loadavg()
    out["wall_s"] = round(time.time() - started, 2)
    results[name] = out
    shown = {k: v for k, v in out.items() if k != "sample_messages"}
    print(f"  {name}: {json.dumps(shown)}", flush=True)


def snapshot_phase(
    contender: Contender, tree: Tree, reader: kafka_broker.TopicReader, rows: int
) -> dict[str, Any]:
    spawned = contender.spawn()
    seen: set[int] = set()
    first: list[float] = []

    def handle(msg: Any, now: float) -> bool:
        if not first:
            first.append(now)
        n = len(seen)
        seen.add(key_id(msg))
        return len(seen) > n

    drain(reader, tree, handle, lambda: len(seen) >= rows, "the snapshot")
    last = time.time()
    cpu = tree.cpu()
    wait_streaming(contender, tree)
    return {
        "rows": len(seen),
        "spawn_to_last_s": round(last - spawned, 2),
        "first_to_last_s": round(last - first[0], 2),
        "rows_per_s": round(rows / (last - spawned)),
        "rows_per_s_first_to_last": round(rows / max(1e-6, last - first[0])),
        "cpu_s": round(cpu, 2),
        "cpu_s_per_1k_rows": round(cpu / rows * 1000, 4),
    }


def live_phase(
    contender: Contender,
    tree: Tree,
    reader: kafka_broker.TopicReader,
    workdir: Path,
    database: str,
    table: str,
    rows: int,
    batch: int,
) -> dict[str, Any]:
    inserts = rows // 2
    spec = {
        "database": database,
        "table": table,
        "mode": "bulk",
        "rows": inserts,
        "first_id": LIVE_BASE,
        "batch": batch,
        "updates": True,
    }
    cpu0 = tree.cpu()
    writer = run_writer(spec, workdir)
    seen: set[tuple[int, str]] = set()
    sizes = {"messages": 0, "key_bytes": 0, "value_bytes": 0, "headers": 0}
    samples: dict[str, str] = {}

    def handle(msg: Any, now: float) -> bool:
        i = key_id(msg)
        value = msg.value()
        if not LIVE_BASE <= i < LATENCY_BASE or value is None:
            return False
        n = len(seen)
        op = kafka_broker.op_of(value)
        seen.add((i, op))
        sizes["messages"] += 1
        sizes["key_bytes"] += len(msg.key())
        sizes["value_bytes"] += len(value)
        sizes["headers"] += len(msg.headers() or [])
        samples.setdefault(op, msg.key().decode() + " " + value.decode())
        return len(seen) > n

    drain(reader, tree, handle, lambda: len(seen) >= 2 * inserts, "live streaming", writer=writer)
    last = time.time()
    cpu = tree.cpu() - cpu0
    written = writer_result(writer)
    changes = 2 * inserts
    ops = sorted({op for _, op in seen})
    return {
        "row_changes": changes,
        "ops": ops,
        "commit_to_last_s": round(last - written["began"], 2),
        "rows_per_s": round(changes / (last - written["began"])),
        "writer_rows_per_s": round(changes / (written["ended"] - written["began"])),
        "last_consumed_after_last_commit_s": round(last - written["ended"], 2),
        "cpu_s": round(cpu, 2),
        "cpu_s_per_1k_rows": round(cpu / changes * 1000, 4),
        "avg_key_bytes": round(sizes["key_bytes"] / max(1, sizes["messages"]), 1),
        "avg_value_bytes": round(sizes["value_bytes"] / max(1, sizes["messages"]), 1),
        "headers_per_message": round(sizes["headers"] / max(1, sizes["messages"]), 2),
        "sample_messages": samples,
    }


def at_seconds(value: Any) -> float:
    """`at` (DATETIME(6), UTC) as Debezium's MicroTimestamp (epoch µs) or ISO text."""
    if isinstance(value, int):
        return value / 1e6
    return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()


def latency_phase(
    contender: Contender,
    tree: Tree,
    reader: kafka_broker.TopicReader,
    workdir: Path,
    database: str,
    table: str,
    rate: int,
    seconds: float,
    first_id: int,
) -> dict[str, Any]:
    batch = max(1, rate // TXN_PER_S)
    spec = {
        "database": database,
        "table": table,
        "mode": "paced",
        "rate": rate,
        "seconds": seconds,
        "first_id": first_id,
        "batch": batch,
    }
    expected = max(1, round(rate * seconds / batch)) * batch
    cpu0 = tree.cpu()
    writer = run_writer(spec, workdir)
    lat: dict[int, float] = {}

    def handle(msg: Any, now: float) -> bool:
        i = key_id(msg)
        if not first_id <= i < first_id + expected or i in lat:
            return False
        lat[i] = now - at_seconds(orjson.loads(msg.value())["after"]["at"])
        return True

    drain(reader, tree, handle, lambda: len(lat) >= expected, f"latency {rate}/s", True, writer)
    cpu = tree.cpu() - cpu0
    written = writer_result(writer)
    span = written["ended"] - written["began"]
    return {
        "offered_rows_per_s": rate,
        "rows_per_txn": batch,
        "achieved_rows_per_s": round(written["rows"] / span) if span > 0 else None,
        "writer_max_late_s": round(written["max_late_s"], 3),
        "commit_to_consume_ms": tables.percentiles(list(lat.values())),
        "cpu_s_per_1k_rows": round(cpu / expected * 1000, 4),
    }


def restart_phase(
    contender: Contender,
    tree: Tree,
    reader: kafka_broker.TopicReader,
    workdir: Path,
    database: str,
    table: str,
    rows: int,
    batch: int,
) -> dict[str, Any]:
    exit_code = contender.stop()
    spec = {
        "database": database,
        "table": table,
        "mode": "bulk",
        "rows": rows,
        "first_id": BACKLOG_BASE,
        "batch": batch,
        "updates": False,
    }
    writer_result(run_writer(spec, workdir))
    spawned = contender.spawn()
    marks: dict[str, float] = {}
    seen: set[int] = set()

    def tick(now: float) -> None:
        if "streaming" not in marks and contender.streaming():
            marks["streaming"] = now

    def handle(msg: Any, now: float) -> bool:
        i = key_id(msg)
        if not BACKLOG_BASE <= i < BACKLOG_BASE + rows or i in seen:
            return False
        marks.setdefault("first", now)
        seen.add(i)
        return True

    drain(reader, tree, handle, lambda: len(seen) >= rows, "the restart", tick=tick)
    last = time.time()
    wait_streaming(contender, tree)
    marks.setdefault("streaming", time.time())  # a bound: seen only after the last message
    first = marks["first"]
    return {
        "stop_exit_code": exit_code,
        "backlog_rows": rows,
        "spawn_to_streaming_log_s": round(marks["streaming"] - spawned, 2),
        "spawn_to_first_backlog_s": round(first - spawned, 2),
        "backlog_rows_per_s": round(rows / max(1e-6, last - first)),
        "cpu_s_from_spawn": round(tree.cpu(), 2),
    }


def run_contender(
    kind: str, tuned: bool, n: int, args: argparse.Namespace, database: str, workdir: Path
) -> dict[str, Any]:
    label = f"{kind}-{'tuned' if tuned else 'default'}"
    prefix = f"peers-{uuid.uuid4().hex[:8]}"
    table = f"live_{n}"
    cls = ReplicadContender if kind == "replicad" else DebeziumContender
    contender: Contender = cls(
        label, workdir / label, database, ["snap", table], prefix, tuned, args.bootstrap
    )
    tree = Tree(contender)
    results: dict[str, Any] = {"label": label, "prefix": prefix, "table": table}
    print(f"{label} (topics {prefix}.*)", flush=True)
    snap = kafka_broker.TopicReader(args.bootstrap, f"{prefix}.{database}.snap")
    live = kafka_broker.TopicReader(args.bootstrap, f"{prefix}.{database}.{table}")
    try:
        phase(
            results, "snapshot", lambda: snapshot_phase(contender, tree, snap, args.snapshot_rows)
        )
        snap.close()
        phase(
            results,
            "live",
            lambda: live_phase(
                contender, tree, live, workdir, database, table, args.rows, args.batch
            ),
        )
        for k, rate in enumerate(args.rates):
            first = LATENCY_BASE + k * 5_000_000
            phase(
                results,
                f"latency_{rate}",
                lambda r=rate, f=first: latency_phase(
                    contender, tree, live, workdir, database, table, r, args.latency_seconds, f
                ),
            )
        phase(
            results,
            "restart",
            lambda: restart_phase(
                contender, tree, live, workdir, database, table, args.backlog_rows, args.batch
            ),
        )
    except Exception as exc:
        results["error"] = "".join(traceback.format_exception_only(exc)).strip()
        print(f"!!! {label}: {results['error']}\n{traceback.format_exc()}", flush=True)
    finally:
        tree.sample(force=True)
        results["peak_rss_mb"] = round(tree.peak_kb / 1024, 1)
        results["final_exit_code"] = contender.stop()
        live.close()
        results["topics_deleted"] = delete_topics(args.bootstrap, prefix)
    return results


def delete_topics(bootstrap: str, prefix: str) -> list[str]:
    """The run's topics: `<prefix>.*` and Debezium's schema-change topic `<prefix>`."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    names = [
        t for t in admin.list_topics(timeout=10).topics if t == prefix or t.startswith(prefix + ".")
    ]
    if names:
        for future in admin.delete_topics(names, operation_timeout=30).values():
            future.result(60)
    return sorted(names)
