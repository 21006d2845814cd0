"""publish.py's `replicad run`s into the private Kafka (at-least-once, exactly-once, relay on),
their CPU per row, the latency runs and the one big transaction."""

from __future__ import annotations

import argparse
import json
import pickle
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from bench.harness import children, kafka_broker, mariadb, procstat, replicad_process
from bench.measure import e2e_phases
from bench.measure.publish_decoders import dump_command, measure_tool
from bench.measure.publish_floor import FLOOR_SAMPLES
from bench.workloads import decode_rows, e2e_load
from bench.workloads.publish_binlog import BIG_TABLE, DATABASE, OPS, TABLE, make_big_binlog

LATENCY_RATES = ((5_000, 100), (50_000, 1_000))  # rows/s offered, rows per transaction


def configure(
    replicad: replicad_process.Replicad,
    start: dict[str, Any],
    *,
    eos: bool,
    relay: bool,
    table: str = TABLE,
    producers: int = 1,
    sink: dict[str, Any] | None = None,
) -> None:
    """e2e.py's config, with exactly_once, the relay and sinks.kafka.producer_processes
    switched, `sink` (more sinks.kafka settings) on top, and only this benchmark's table
    (and the latency table) published."""
    replicad.write_config(start)
    config = json.loads(replicad.config_path.read_text())
    config.pop("snapshot", None)  # e2e.py's signal table: not used here
    config["filters"] = {
        "include": [rf"{DATABASE}\.{table}", rf"{e2e_load.DATABASE}\.{e2e_load.LATENCY_TABLE}"]
    }
    config["sinks"]["kafka"]["exactly_once"] = eos
    config["sinks"]["kafka"]["producer_processes"] = producers
    if producers > 1:
        # A partition count that is a multiple of N gives each producer process partitions of
        # its own (both split by crc32 of the key): the layout docs/performance.md advises.
        config["sinks"]["kafka"]["topics"] = {"partitions": producers}
    config["sinks"]["kafka"].update(sink or {})
    config["relay"] = {"enabled": relay, "directory": str(replicad.workdir / "relay")}
    replicad.config_path.write_text(json.dumps(config, indent=2) + "\n")


def publish_run(
    replicad: replicad_process.Replicad,
    plan: decode_rows.Plan,
    pids: dict[str, int],
    table: str = TABLE,
    keep_samples: bool = False,
) -> tuple[dict[str, Any], kafka_broker.TopicReader]:
    """Start replicad; count every message of the table; replicad's CPU at the first and at
    the last message consumed. replicad is left running (the caller stops it). keep_samples:
    every k-th message's (key, value, headers), about FLOOR_SAMPLES spread over the whole
    stream, pickled for the librdkafka floor, and the total key and value bytes."""
    reader = kafka_broker.TopicReader(replicad.bootstrap, f"{replicad.pipeline}.{DATABASE}.{table}")
    expected = {**plan.counts(), "tombstones": plan.deletes}
    counts = dict.fromkeys(expected, 0)
    wanted = sum(expected.values())
    keep_every = max(1, wanted // FLOOR_SAMPLES)
    samples: list[tuple[bytes | None, bytes | None, Any]] = []
    key_bytes = value_bytes = 0
    timeout = max(120.0, plan.total / 2_000)
    pid = replicad.start()
    watch = procstat.CpuWatch({"replicad": pid, **pids}).start()
    first: tuple[float, float, int] | None = None  # (time, CPU s, row changes so far)
    last = (0.0, 0.0)
    own = children_cpu = 0.0
    first_split = (0.0, 0.0)  # (replicad's own CPU s, its children's) at the first message
    seen = 0
    while seen < wanted:
        if time.perf_counter() - replicad.spawned > timeout:
            raise TimeoutError(f"{seen:,} of {wanted:,} messages after {timeout:.0f} s")
        if not replicad.alive():
            raise replicad_process.ReplicadDied(f"replicad exited {replicad.exit_status()}")
        msgs = reader.batch()
        if not msgs:
            continue
        for i, msg in enumerate(msgs, seen):
            value = msg.value()
            counts["tombstones" if value is None else kafka_broker.op_of(value)] += 1
            if keep_samples:
                key = msg.key()
                key_bytes += len(key or b"")
                value_bytes += len(value or b"")
                if i % keep_every == 0:
                    samples.append((key, value, msg.headers()))
        seen += len(msgs)
        # Producer processes (sinks.kafka.producer_processes > 1) are replicad's CPU too.
        own, children_cpu = procstat.tree_cpu_seconds(pid)
        now, cpu = time.perf_counter(), own + children_cpu
        if first is None:
            first = (now, cpu, sum(counts[op] for op in OPS))
            first_split = (own, children_cpu)
        last = (now, cpu)
    assert first is not None
    rows = plan.total
    out = {
        "pipeline": replicad.pipeline,
        "expected": expected,
        "counts": counts,
        "messages": seen,
        "rows": rows,
        "wall_s": last[0] - replicad.spawned,
        "cpu_s": last[1],
        "startup_s": first[0] - replicad.spawned,
        "streaming_s": last[0] - first[0],
        "streaming_cpu_s": last[1] - first[1],
        "streaming_rows": rows - first[2],
        "peak_rss_kb": procstat.vm_kb("VmHWM", pid),
        "children_cpu_s": round(children_cpu, 2),
        "streaming_own_cpu_s": own - first_split[0],
        "streaming_children_cpu_s": children_cpu - first_split[1],
        "children_peak_rss_kb": [procstat.vm_kb("VmHWM", c) for c in procstat.child_pids(pid)],
        "threads_cpu_s": {k: round(v, 2) for k, v in procstat.thread_cpu(pid).items()},
        "machine_cpu": watch.stop(),
    }
    # The watch knows the parent only: the children's CPU is not "busy elsewhere".
    out["machine_cpu"]["replicad producer processes"] = out["children_cpu_s"]
    if keep_samples:
        path = replicad.workdir / "samples.pickle"
        path.write_bytes(pickle.dumps(samples))
        out.update(samples_path=str(path), key_bytes=key_bytes, value_bytes=value_bytes)
    return out, reader


def latency_runs(
    replicad: replicad_process.Replicad,
    server: mariadb.Server,
    seconds: float,
    pids: dict[str, int],
) -> list[dict[str, Any]]:
    """e2e.py's latency phase at each offered rate, replicad running and caught up."""
    topic = f"{replicad.pipeline}.{e2e_load.DATABASE}.{e2e_load.LATENCY_TABLE}"
    kafka_broker.create_topic(replicad.bootstrap, topic)
    reader = kafka_broker.TopicReader(replicad.bootstrap, topic)
    out = []
    first_id = 1
    try:
        for rate, batch in LATENCY_RATES:
            print(f"latency: {rate:,} rows/s offered for {seconds:g} s ...", file=sys.stderr)
            args = argparse.Namespace(rate=rate, seconds=seconds, batch=batch)
            lat = e2e_phases.latency_phase(
                replicad, reader, server, args, replicad.workdir, pids, first_id
            )
            lat["offered_rows_per_s"] = rate
            first_id += lat["writer"]["rows"]
            out.append(lat)
    finally:
        reader.close()
    return out


def publish(
    label: str,
    broker: str,
    workdir: Path,
    server: mariadb.Server,
    binlog: dict[str, Any],
    plan: decode_rows.Plan,
    pids: dict[str, int],
    *,
    eos: bool = False,
    relay: bool = False,
    latency_seconds: float = 0.0,
    table: str = TABLE,
    keep_samples: bool = False,
    producers: int = 1,
    sink: dict[str, Any] | None = None,
) -> dict[str, Any]:
    slug = label.replace(",", "").replace(" ", "-")  # a pipeline name: [A-Za-z0-9_.-]
    pipeline = f"publish-{slug}-{uuid.uuid4().hex[:6]}"
    rundir = workdir / pipeline
    rundir.mkdir()
    replicad = replicad_process.Replicad(
        rundir, server, broker, pipeline, "disabled", e2e_load.DATABASE
    )
    configure(
        replicad,
        binlog["start"],
        eos=eos,
        relay=relay,
        table=table,
        producers=producers,
        sink=sink,
    )
    print(f"publishing: {label} (pipeline {pipeline}) ...", file=sys.stderr)
    reader = None
    result: dict[str, Any] = {
        "label": label,
        "exactly_once": eos,
        "relay": relay,
        "producer_processes": producers,
    }
    try:
        measured, reader = publish_run(replicad, plan, pids, table, keep_samples)
        result.update(measured)
        if latency_seconds > 0:
            result["latency"] = latency_runs(replicad, server, latency_seconds, pids)
            result["peak_rss_after_latency_kb"] = procstat.vm_kb("VmHWM", replicad.pid)
    except (replicad_process.ReplicadDied, TimeoutError, RuntimeError) as exc:
        result["error"] = f"{type(exc).__name__}: {exc}\nlog tail:\n{replicad.log_tail()}"
    finally:
        if reader is not None:
            reader.close()
        result["exit_code"] = replicad.stop()
    return result


def big_transaction(
    rows: int,
    server: mariadb.Server,
    workdir: Path,
    bootstrap: str,
    pids: dict[str, int],
    producers: list[int],
) -> dict[str, Any]:
    """ONE transaction of `rows` inserts in its own binlog file(s): `replicad dump` of them
    and `replicad run` (at-least-once, relay off; also with each N of `producers` producer
    processes) from the position before it until every message is consumed; wall, CPU and
    peak RSS of each."""
    print(f"one transaction of {rows:,} rows into {DATABASE}.{BIG_TABLE} ...", file=sys.stderr)
    binlog = make_big_binlog(server, rows, workdir / "big-binlog")
    env = {**children.python_env(), "REPLICAD_REQUIRE_SPEEDUPS": "1"}
    print("big transaction: replicad dump ...", file=sys.stderr)
    dump = measure_tool("replicad dump", dump_command(binlog["files"]), rows, env)
    plan = decode_rows.Plan(rows, 0, 0)
    run = publish(
        "big transaction, at-least-once",
        bootstrap,
        workdir,
        server,
        binlog,
        plan,
        pids,
        table=BIG_TABLE,
    )
    split = [
        publish(
            f"big transaction, producer_processes {n}",
            bootstrap,
            workdir,
            server,
            binlog,
            plan,
            pids,
            table=BIG_TABLE,
            producers=n,
        )
        for n in producers
    ]
    return {"rows": rows, "binlog": binlog, "dump": dump, "publish": run, "processes": split}
