#!/usr/bin/env python3
"""Publishing cost against decoding cost, broker-independent, on one binlog in one run.

  1. The binlog: database `bench_publish`, bench/snapshot.py's 10-column table `t`; --rows row
     changes (2/3 inserts, 7/30 updates, 1/10 deletes) as 1000-row autocommit statements,
     `binlog_annotate_row_events=OFF`, between two `FLUSH BINARY LOGS`; the file(s) copied
     out of the server's data directory into a temp dir.
  2. Decoding, each in a child process (wall, user+sys CPU from wait4, peak RSS from VmHWM):
     `mariadb-binlog -v --base64-output=decode-rows`, `replicad dump` with the compiled
     decoder and with REPLICAD_PURE_PYTHON=1, replicad's decoder alone
     (`iter_row_changes(iter_file_events())`, decode.py's child) and python-mysql-replication
     streaming the same range from the server (decode.py's peer child).
  3. Publishing: `replicad run` from the position before the workload into a private
     single-node Apache Kafka (common.PrivateKafka), at-least-once (the sink's defaults) and
     exactly-once, each into its own pipeline/topic prefix, relay log off; then at-least-once
     again with the relay log on. replicad's own CPU (utime+stime from /proc, the broker
     excluded) from spawn to the last message consumed, and from the first message consumed
     to the last (streaming only); per-operation counts (tombstones extra) checked.
  4. Latency commit -> consumed at 5,000 and 50,000 rows/s offered, with the at-least-once
     replicad caught up (bench/e2e.py's latency phase and writer child, in its database
     `replicad_e2e`).
  5. The librdkafka floor: a child process producing the at-least-once run's message count,
     cycling a sample of its consumed messages, with the sink's producer settings, the same 4
     headers and a per-message delivery callback (and once without both); its wait4 CPU.
  6. --big-transaction ROWS: one INSERT ... SELECT of ROWS rows into `t2` (t's shape) in its
     own binlog file(s); `replicad dump` of it and `replicad run` at-least-once until all ROWS
     messages are consumed: wall, CPU and peak RSS next to the normal workload's.

Usage: .venv/bin/python bench/publish.py [--rows 300000] [--json OUT] [--latency-seconds 10]
                                         [--skip-latency] [--skip-relay] [--keep]
                                         [--big-transaction ROWS]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

if __package__:  # python -m bench.publish
    from bench import common, decode, e2e, snapshot
else:  # python bench/publish.py: bench/ is sys.path[0]
    import common
    import decode
    import e2e
    import snapshot

DATABASE = "bench_publish"
TABLE = "t"
BIG_TABLE = "t2"  # --big-transaction's table, t's shape
DEFAULT_ROWS = 300_000
ROWS_PER_TRANSACTION = 1_000
UPDATE_SQL = "UPDATE t SET n = n + 1, s = CONCAT(s, 'u') WHERE id BETWEEN {} AND {}"
DELETE_SQL = "DELETE FROM t WHERE id BETWEEN {} AND {}"
REPLICAD_SERVER_ID = 91243  # e2e.py's replicad uses 91235, decode.py's peer 91234
PEER_SERVER_ID = 91244
LATENCY_RATES = ((5_000, 100), (50_000, 1_000))  # rows/s offered, rows per transaction
TARGET_DUMP_OVER_MARIADB = 1.0
TARGET_DECODE_OVER_PEER = 25.0
TARGET_PUBLISH_OVER_DUMP_CPU = 1.3
FLOOR = "librdkafka producer alone (same messages, headers, callbacks)"
FLOOR_BARE = "librdkafka producer alone, no headers, no callback"
PROCESSES_LABEL = "at-least-once, producer_processes"
TARGET_N2_ROWS_PER_S = 150_000
FLOOR_SAMPLES = 2_000  # consumed messages kept for the librdkafka floor, cycled
OTHER_CORES_WARN = 0.3  # "other processes" above this many cores: a disturbed run
OPS = decode.OPS


# --------------------------------------------------------------------------- the binlog


def workload(plan: decode.Plan) -> Iterator[tuple[str, str]]:
    """(op, statement): inserts of snapshot.py's rows, updates of the lowest ids, deletes of
    the highest (disjoint; every row exists), ROWS_PER_TRANSACTION rows per statement."""
    for lo, hi in decode._ranges(1, plan.inserts, ROWS_PER_TRANSACTION):
        yield "c", snapshot.insert_rows(lo, hi)
    for lo, hi in decode._ranges(1, plan.updates, ROWS_PER_TRANSACTION):
        yield "u", UPDATE_SQL.format(lo, hi)
    first_deleted = plan.inserts - plan.deletes + 1
    for lo, hi in decode._ranges(first_deleted, plan.inserts, ROWS_PER_TRANSACTION):
        yield "d", DELETE_SQL.format(lo, hi)


def make_binlog(server: decode.Server, plan: decode.Plan, into: Path) -> dict[str, Any]:
    """Run the workload in its own binlog file(s); copy them into `into`."""
    conn = server.connect()  # autocommit: one transaction per statement
    done = dict.fromkeys(OPS, 0)
    try:
        with conn.cursor() as cur:
            cur.execute("SET SESSION binlog_annotate_row_events = OFF")  # row events only
            cur.execute(f"DROP DATABASE IF EXISTS {DATABASE}")
            cur.execute(f"CREATE DATABASE {DATABASE}")
            cur.execute(f"USE {DATABASE}")
            cur.execute(snapshot.TABLE_SQL)
            cur.execute("FLUSH BINARY LOGS")
            start = e2e.master_status(cur)
            gtid_before = decode._scalar(cur, "SELECT @@gtid_binlog_pos")
            started = time.perf_counter()
            for op, sql in workload(plan):
                done[op] += cur.execute(sql)
            seconds = time.perf_counter() - started
            end = e2e.master_status(cur)
            gtid_after = decode._scalar(cur, "SELECT @@gtid_binlog_pos")
            cur.execute("FLUSH BINARY LOGS")
            binlog_dir = Path(decode._scalar(cur, "SELECT @@log_bin_basename")).parent
    finally:
        conn.close()
    return {
        "counts": done,
        "seconds": round(seconds, 2),
        "gtid_before": gtid_before,
        "gtid_after": gtid_after,
        **copy_binlogs(binlog_dir, start, end, into),
    }


def copy_binlogs(
    binlog_dir: Path, start: tuple[str, int], end: tuple[str, int], into: Path
) -> dict[str, Any]:
    """Copy the files from start's to end's out of the server's directory into `into`."""
    lo, hi = decode._binlog_index(start[0]), decode._binlog_index(end[0])
    names = [f"{start[0].rsplit('.', 1)[0]}.{i:06d}" for i in range(lo, hi + 1)]
    into.mkdir(parents=True, exist_ok=True)
    files = [str(shutil.copy(binlog_dir / name, into / name)) for name in names]
    return {
        "start": {"file": start[0], "pos": start[1]},
        "end": {"file": end[0], "pos": end[1]},
        "names": names,
        "files": files,
        "bytes": sum(os.path.getsize(f) for f in files),
    }


def make_big_binlog(server: decode.Server, rows: int, into: Path) -> dict[str, Any]:
    """ONE autocommit `INSERT INTO t2 SELECT ... FROM seq_1_to_<rows>` (snapshot.py's rows,
    MariaDB's sequence engine) into BIG_TABLE, t's shape, in its own binlog file(s)."""
    conn = server.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SET SESSION binlog_annotate_row_events = OFF")
            cur.execute(f"USE {DATABASE}")
            cur.execute(f"DROP TABLE IF EXISTS {BIG_TABLE}")
            cur.execute(
                snapshot.TABLE_SQL.replace("CREATE TABLE t (", f"CREATE TABLE {BIG_TABLE} (", 1)
            )
            cur.execute("FLUSH BINARY LOGS")
            start = e2e.master_status(cur)
            gtid_before = decode._scalar(cur, "SELECT @@gtid_binlog_pos")
            started = time.perf_counter()
            sql = snapshot.insert_rows(1, rows).replace(
                "INSERT INTO t ", f"INSERT INTO {BIG_TABLE} ", 1
            )
            inserted = cur.execute(sql)
            seconds = time.perf_counter() - started
            end = e2e.master_status(cur)
            gtid_after = decode._scalar(cur, "SELECT @@gtid_binlog_pos")
            cur.execute("FLUSH BINARY LOGS")
            binlog_dir = Path(decode._scalar(cur, "SELECT @@log_bin_basename")).parent
    finally:
        conn.close()
    return {
        "counts": {"c": inserted, "u": 0, "d": 0},
        "seconds": round(seconds, 2),
        "gtid_before": gtid_before,
        "gtid_after": gtid_after,
        **copy_binlogs(binlog_dir, start, end, into),
    }


# --------------------------------------------------------------------------- decoders


def measure(
    cmd: list[str], env: dict[str, str] | None = None, *, capture: bool = False
) -> dict[str, Any]:
    """Run cmd, stdout to /dev/null or (capture) read back: exit code, wall and CPU seconds
    (user+sys from wait4: the child alone), peak RSS (VmHWM sampled, as common.run_process)."""
    with tempfile.TemporaryFile() as out:
        started = time.perf_counter()
        stdout = out if capture else subprocess.DEVNULL
        proc = subprocess.Popen(cmd, stdout=stdout, env=env or common.python_env())
        peak: int | None = None
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            peak = common.peak_kb(peak, common.vm_kb("VmHWM", proc.pid))
            time.sleep(common.RSS_SAMPLE_SECONDS)
        wall = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
        out.seek(0)
        text = out.read().decode(errors="replace")
    return {
        "exit_code": proc.returncode,
        "wall_s": wall,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "peak_rss_kb": peak,
        "stdout": text,
    }


def measure_tool(
    name: str, cmd: list[str], rows: int, env: dict[str, str] | None = None
) -> dict[str, Any]:
    """A program writing its output to /dev/null; rows/s from its wall time."""
    m = measure(cmd, env)
    m.pop("stdout")
    m.update(name=name, rows=rows, seconds=m["wall_s"], rows_counted=False)
    if m["exit_code"] != 0:
        m["error"] = f"{cmd[0]} exited {m['exit_code']}"
    return m


def measure_child(name: str, kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    """One of decode.py's decoder children, run by this script (see run_child)."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", kind, "--spec"]
    m = measure([*cmd, json.dumps(spec)], capture=True)
    result = common.child_result(m.pop("exit_code"), m.pop("stdout"))
    counts = result.get("counts") or {}
    m.update(result, peak_rss_kb=common.peak_kb(result.get("peak_rss_kb"), m["peak_rss_kb"]))
    m.update(name=name, rows=sum(counts.values()), rows_counted=True)
    m["seconds"] = result.get("seconds", m["wall_s"])  # the decode loop, not start-up
    return m


def run_child(kind: str, spec: dict[str, Any]) -> int:
    """decode.py's children filter on its module globals DATABASE and TABLE: pointed at this
    benchmark's table here, in the child process only."""
    decode.DATABASE, decode.TABLE = DATABASE, TABLE
    if kind == "floor":
        print(json.dumps(common.child_outcome(lambda: child_floor(spec)), default=str))
        return 0
    if kind == "decode":  # the imports outside the timed CPU
        import replicad.binlog.changes
        import replicad.binlog.files  # noqa: F401
    else:
        import pymysqlreplication  # noqa: F401

    def work() -> dict[str, Any]:
        cpu = time.process_time()
        if kind == "decode":
            out = decode.child_replicad(spec["files"], None)
        else:
            server = decode.Server(**spec["server"])
            out = decode.child_peer(server, spec["gtid"], spec["expected"], spec["last_file"])
        out["loop_cpu_s"] = time.process_time() - cpu
        return out

    print(json.dumps(common.child_outcome(work), default=str))
    return 0


def dump_command(files: list[str]) -> list[str]:
    exe = Path(sys.executable).with_name("replicad")  # the venv's entry point
    return [str(exe) if exe.exists() else "replicad", "dump", *files]


def measure_decoders(
    server: decode.Server, binlog: dict[str, Any], plan: decode.Plan
) -> list[dict[str, Any]]:
    files, rows = binlog["files"], plan.total
    mariadb_binlog = shutil.which("mariadb-binlog") or "mariadb-binlog"
    dump = dump_command(files)
    env = common.python_env()
    out = [
        measure_tool(
            "mariadb-binlog -v --base64-output=decode-rows",
            [mariadb_binlog, "--no-defaults", "-v", "--base64-output=decode-rows", *files],
            rows,
        ),
        measure_tool("replicad dump", dump, rows, {**env, "REPLICAD_REQUIRE_SPEEDUPS": "1"}),
        measure_tool(
            "replicad dump, REPLICAD_PURE_PYTHON=1",
            dump,
            rows,
            {**env, "REPLICAD_PURE_PYTHON": "1"},
        ),
        measure_child("replicad decode only (iter_row_changes)", "decode", {"files": files}),
    ]
    peer_server = dataclasses.replace(server, server_id=PEER_SERVER_ID)
    previous = decode.set_net_timeouts(server, 600)  # as decode.py: the peer is slow
    try:
        peer = measure_child(
            "python-mysql-replication (from the server)",
            "peer",
            {
                "server": dataclasses.asdict(peer_server),
                "gtid": binlog["gtid_before"],
                "expected": rows,
                "last_file": binlog["names"][-1],
            },
        )
    finally:
        decode.restore_net_timeouts(server, previous)
    out.append(peer)
    return out


# --------------------------------------------------------------------------- publishing


def configure(
    replicad: e2e.Replicad,
    start: dict[str, Any],
    *,
    eos: bool,
    relay: bool,
    table: str = TABLE,
    producers: int = 1,
) -> None:
    """e2e.py's config, with exactly_once, the relay and sinks.kafka.producer_processes
    switched, and only this benchmark's table (and the latency table) published."""
    replicad.write_config(start)
    config = json.loads(replicad.config_path.read_text())
    config.pop("snapshot", None)  # e2e.py's signal table: not used here
    config["filters"] = {
        "include": [rf"{DATABASE}\.{table}", rf"{e2e.DATABASE}\.{e2e.LATENCY_TABLE}"]
    }
    config["sinks"]["kafka"]["exactly_once"] = eos
    config["sinks"]["kafka"]["producer_processes"] = producers
    if producers > 1:
        # A partition count that is a multiple of N gives each producer process partitions of
        # its own (both split by crc32 of the key): the layout docs/performance.md advises.
        config["sinks"]["kafka"]["topics"] = {"partitions": producers}
    config["relay"] = {"enabled": relay, "directory": str(replicad.workdir / "relay")}
    replicad.config_path.write_text(json.dumps(config, indent=2) + "\n")


def publish_run(
    replicad: e2e.Replicad,
    plan: decode.Plan,
    pids: dict[str, int],
    table: str = TABLE,
    keep_samples: bool = False,
) -> tuple[dict[str, Any], e2e.TopicReader]:
    """Start replicad; count every message of the table; replicad's CPU at the first and at
    the last message consumed. replicad is left running (the caller stops it). keep_samples:
    every k-th message's (key, value, headers), about FLOOR_SAMPLES spread over the whole
    stream, pickled for the librdkafka floor, and the total key and value bytes."""
    reader = e2e.TopicReader(replicad.bootstrap, f"{replicad.pipeline}.{DATABASE}.{table}")
    expected = {**plan.counts(), "tombstones": plan.deletes}
    counts = dict.fromkeys(expected, 0)
    wanted = sum(expected.values())
    keep_every = max(1, wanted // FLOOR_SAMPLES)
    samples: list[tuple[bytes | None, bytes | None, Any]] = []
    key_bytes = value_bytes = 0
    timeout = max(120.0, plan.total / 2_000)
    pid = replicad.start()
    watch = e2e.CpuWatch({"replicad": pid, **pids}).start()
    first: tuple[float, float, int] | None = None  # (time, CPU s, row changes so far)
    last = (0.0, 0.0)
    own = children_cpu = 0.0
    first_split = (0.0, 0.0)  # (replicad's own CPU s, its children's) at the first message
    seen = 0
    while seen < wanted:
        if time.perf_counter() - replicad.spawned > timeout:
            raise TimeoutError(f"{seen:,} of {wanted:,} messages after {timeout:.0f} s")
        if not replicad.alive():
            raise e2e.ReplicadDied(f"replicad exited {replicad.exit_status()}")
        msgs = reader.batch()
        if not msgs:
            continue
        for i, msg in enumerate(msgs, seen):
            value = msg.value()
            counts["tombstones" if value is None else e2e._op_of(value)] += 1
            if keep_samples:
                key = msg.key()
                key_bytes += len(key or b"")
                value_bytes += len(value or b"")
                if i % keep_every == 0:
                    samples.append((key, value, msg.headers()))
        seen += len(msgs)
        # Producer processes (sinks.kafka.producer_processes > 1) are replicad's CPU too.
        own, children_cpu = common.tree_cpu_seconds(pid)
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
        "peak_rss_kb": common.vm_kb("VmHWM", pid),
        "children_cpu_s": round(children_cpu, 2),
        "streaming_own_cpu_s": own - first_split[0],
        "streaming_children_cpu_s": children_cpu - first_split[1],
        "children_peak_rss_kb": [common.vm_kb("VmHWM", c) for c in common.child_pids(pid)],
        "threads_cpu_s": {k: round(v, 2) for k, v in e2e.thread_cpu(pid).items()},
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
    replicad: e2e.Replicad, server: decode.Server, seconds: float, pids: dict[str, int]
) -> list[dict[str, Any]]:
    """e2e.py's latency phase at each offered rate, replicad running and caught up."""
    topic = f"{replicad.pipeline}.{e2e.DATABASE}.{e2e.LATENCY_TABLE}"
    e2e.create_topic(replicad.bootstrap, topic)
    reader = e2e.TopicReader(replicad.bootstrap, topic)
    out = []
    first_id = 1
    try:
        for rate, batch in LATENCY_RATES:
            print(f"latency: {rate:,} rows/s offered for {seconds:g} s ...", file=sys.stderr)
            args = argparse.Namespace(rate=rate, seconds=seconds, batch=batch)
            lat = e2e.latency_phase(
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
    server: decode.Server,
    binlog: dict[str, Any],
    plan: decode.Plan,
    pids: dict[str, int],
    *,
    eos: bool = False,
    relay: bool = False,
    latency_seconds: float = 0.0,
    table: str = TABLE,
    keep_samples: bool = False,
    producers: int = 1,
) -> dict[str, Any]:
    slug = label.replace(",", "").replace(" ", "-")  # a pipeline name: [A-Za-z0-9_.-]
    pipeline = f"publish-{slug}-{uuid.uuid4().hex[:6]}"
    rundir = workdir / pipeline
    rundir.mkdir()
    replicad = e2e.Replicad(rundir, server, broker, pipeline, "disabled")
    configure(replicad, binlog["start"], eos=eos, relay=relay, table=table, producers=producers)
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
            result["peak_rss_after_latency_kb"] = common.vm_kb("VmHWM", replicad.pid)
    except (e2e.ReplicadDied, TimeoutError, RuntimeError) as exc:
        result["error"] = f"{type(exc).__name__}: {exc}\nlog tail:\n{replicad.log_tail()}"
    finally:
        if reader is not None:
            reader.close()
        result["exit_code"] = replicad.stop()
    return result


# --------------------------------------------------------------------------- librdkafka floor


class FloorUnit:
    """replicad's DeliveryUnit's delivery report: a counter down, a failure kept."""

    def __init__(self) -> None:
        self.outstanding = 0
        self.failure: Any = None
        self.failed = 0

    def delivered(self, err: Any, msg: Any) -> None:
        self.outstanding -= 1
        if err is not None:
            self.failed += 1
            if self.failure is None:
                self.failure = str(err)


def child_floor(spec: dict[str, Any]) -> dict[str, Any]:
    """In a child process: spec["messages"] messages cycling through the sampled (key, value,
    headers) into spec["topic"] with the sink's at-least-once producer settings, as
    KafkaSink._produce hands them over: the 4 headers rebuilt per message with its row number
    rendered (spec["headers"]), a bound-method delivery callback per message
    (spec["callback"]), poll(0) every POLL_EVERY messages, BufferError -> poll(0.01) and
    retry; flush at the end. No warm-up: the process's whole CPU is the figure (the settings
    come in the spec, so replicad itself is not imported here)."""
    from confluent_kafka import Producer

    samples = pickle.loads(Path(spec["samples"]).read_bytes())
    prepared = []
    for key, value, headers in samples:
        h = dict(headers or [])
        first = [
            ("replicad.file", h.get("replicad.file", b"")),
            ("replicad.pos", h.get("replicad.pos", b"")),
        ]
        last = [("replicad.gtid", h["replicad.gtid"])] if "replicad.gtid" in h else []
        prepared.append((key, value, first, last))
    producer = Producer(spec["settings"])
    topic, count, n = spec["topic"], spec["messages"], len(prepared)
    with_headers, with_callback = spec["headers"], spec["callback"]
    poll_every = spec["poll_every"]
    unit = FloorUnit()
    produce, poll = producer.produce, producer.poll
    cpu, started = time.process_time(), time.perf_counter()  # process_time: all threads
    since_poll = 0
    for i in range(count):
        key, value, first, last = prepared[i % n]
        while True:
            try:
                if with_headers and with_callback:
                    headers = [*first, ("replicad.row", b"%d" % (i % ROWS_PER_TRANSACTION)), *last]
                    produce(topic, value, key, on_delivery=unit.delivered, headers=headers)
                    unit.outstanding += 1
                elif with_headers:
                    headers = [*first, ("replicad.row", b"%d" % (i % ROWS_PER_TRANSACTION)), *last]
                    produce(topic, value, key, headers=headers)
                elif with_callback:
                    produce(topic, value, key, on_delivery=unit.delivered)
                    unit.outstanding += 1
                else:
                    produce(topic, value, key)
                break
            except BufferError:
                poll(0.01)
        since_poll += 1
        if since_poll >= poll_every:
            since_poll = 0
            poll(0)
    left = producer.flush(300)
    seconds, loop_cpu = time.perf_counter() - started, time.process_time() - cpu
    return {
        "messages": count,
        "samples": n,
        "undelivered": left,
        "outstanding": unit.outstanding if with_callback else None,
        "failed": unit.failed,
        "failure": unit.failure,
        "seconds": seconds,
        "loop_cpu_s": loop_cpu,
    }


def measure_floor(
    label: str,
    bootstrap: str,
    run: dict[str, Any],
    rows: int,
    pids: dict[str, int],
    *,
    headers: bool,
    callback: bool,
) -> dict[str, Any]:
    """child_floor in a child process (CPU from wait4: its own, the broker's excluded), the
    at-least-once run's message count and samples, into a new topic of the private Kafka."""
    topic = f"publish-floor-{uuid.uuid4().hex[:6]}.{DATABASE}.{TABLE}"
    e2e.create_topic(bootstrap, topic)  # replicad creates its topics too, before producing
    from replicad.sinks.kafka import POLL_EVERY

    spec = {  # settings and POLL_EVERY from replicad here: the child does not import it
        "settings": e2e.sink_producer_settings(bootstrap),
        "poll_every": POLL_EVERY,
        "samples": run["samples_path"],
        "topic": topic,
        "messages": run["messages"],
        "headers": headers,
        "callback": callback,
    }
    print(f"librdkafka floor: {label} ...", file=sys.stderr)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", "floor", "--spec"]
    watch = e2e.CpuWatch(pids).start()
    m = measure([*cmd, json.dumps(spec)], capture=True)
    machine = watch.stop()
    machine["floor child"] = round(m["cpu_s"], 2)
    result = common.child_result(m.pop("exit_code"), m.pop("stdout"))
    m.update(result, peak_rss_kb=common.peak_kb(result.get("peak_rss_kb"), m["peak_rss_kb"]))
    m.update(name=label, rows=rows, headers=headers, callback=callback, machine_cpu=machine)
    samples = pickle.loads(Path(run["samples_path"]).read_bytes())
    m["sample_key_avg"] = sum(len(k or b"") for k, _, _ in samples) / len(samples)
    m["sample_value_avg"] = sum(len(v or b"") for _, v, _ in samples) / len(samples)
    m["run_key_avg"] = run["key_bytes"] / run["messages"]
    m["run_value_avg"] = run["value_bytes"] / run["messages"]
    if not m.get("error") and (m["undelivered"] or m["failed"] or m["outstanding"]):
        m["error"] = (
            f"{m['undelivered']} undelivered, {m['failed']} failed ({m['failure']}), "
            f"{m['outstanding']} outstanding"
        )
    return m


# --------------------------------------------------------------------------- one big transaction


def big_transaction(
    rows: int,
    server: decode.Server,
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
    env = {**common.python_env(), "REPLICAD_REQUIRE_SPEEDUPS": "1"}
    print("big transaction: replicad dump ...", file=sys.stderr)
    dump = measure_tool("replicad dump", dump_command(binlog["files"]), rows, env)
    plan = decode.Plan(rows, 0, 0)
    run = publish(
        "big transaction, at-least-once", bootstrap, workdir, server, binlog, plan, pids,
        table=BIG_TABLE,
    )  # fmt: skip
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


# --------------------------------------------------------------------------- reporting


def _f(value: float | None, fmt: str = ".2f") -> str:
    return "-" if value is None else format(value, fmt)


def _row(
    name: str,
    rows: int,
    seconds: float,
    cpu: float | None,
    rss_kb: int | None,
    dump_cpu_per_row: float | None,
) -> tuple[str, ...]:
    per_row = cpu / rows if cpu is not None and rows else None
    ratio = per_row / dump_cpu_per_row if per_row is not None and dump_cpu_per_row else None
    return (
        name,
        f"{rows:,}",
        f"{seconds:.2f}",
        f"{rows / seconds:,.0f}" if seconds > 0 else "-",
        _f(cpu),
        _f(per_row * 1e6 if per_row is not None else None, ".2f"),
        f"{rows / cpu:,.0f}" if cpu else "-",
        _f(ratio),
        _f(rss_kb / 1024 if rss_kb is not None else None, ".1f"),
    )


def other_note(cpu: dict[str, Any]) -> None:
    other = busy_elsewhere(cpu)
    if other > OTHER_CORES_WARN:
        print(
            f"    note: other processes used {other:.2f} cores during this run: "
            "its figures may be disturbed (re-run on a quiet machine)"
        )


def busy_elsewhere(cpu: dict[str, Any]) -> float:
    """Cores used by processes other than the watched ones during a phase (e2e.CpuWatch)."""
    mine = sum(v for k, v in cpu.items() if k not in ("wall_s", "machine busy", "machine total"))
    return max(cpu["machine busy"] - mine, 0.0) / cpu["wall_s"] if cpu["wall_s"] else 0.0


def report(results: dict[str, Any]) -> tuple[list[str], list[str]]:
    """Print the tables; (summary lines, problems)."""
    b, problems = results["binlog"], list(results["problems"])
    c = b["counts"]
    print(
        f"binlog: {', '.join(b['names'])} ({b['bytes'] / 2**20:.1f} MiB), {b['start']['file']}:"
        f"{b['start']['pos']} -> {b['end']['file']}:{b['end']['pos']}; {c['c']:,} inserts, "
        f"{c['u']:,} updates, {c['d']:,} deletes in {ROWS_PER_TRANSACTION}-row transactions "
        f"({b['seconds']:.1f} s); {os.cpu_count()} CPUs, load average at start "
        f"{results['loadavg_start']}; compiled decoder available: {results['compiled']}; "
        f"bytecode written before the runs: {results['bytecode']['ok']} "
        f"(PYTHONDONTWRITEBYTECODE={results['bytecode']['PYTHONDONTWRITEBYTECODE']!r}); "
        f"broker: {results.get('broker', 'not started')}"
    )
    code = results["code"]
    print(
        f"code: {code['commit']}, {len(code['uncommitted'])} uncommitted file(s) under "
        f"replicad/ {[line[3:] for line in code['uncommitted']]}; _speedups built "
        f"{code['speedups_built']}\n"
    )
    decoders = {d["name"]: d for d in results["decoders"]}
    dump = decoders["replicad dump"]
    dump_per_row = None if dump.get("error") else dump["cpu_s"] / dump["rows"]
    head = (
        "measurement",
        "row changes",
        "seconds",
        "rows/s",
        "CPU s",
        "CPU µs/row",
        "rows/s/core",
        "CPU/row ÷ dump",
        "peak RSS MB",
    )
    lines = []
    for d in results["decoders"]:
        if d.get("error"):
            lines.append((d["name"], "FAILED", *[""] * 7))
            problems.append(f"{d['name']} FAILED:\n{d['error']}")
            continue
        cpu = d.get("loop_cpu_s", d["cpu_s"])
        lines.append(_row(d["name"], d["rows"], d["seconds"], cpu, d["peak_rss_kb"], dump_per_row))
    for p in results["publish"]:
        name = f"replicad run, {p['label']}"
        if p.get("error"):
            lines.append((name, "FAILED", *[""] * 7))
            problems.append(f"{name} FAILED:\n{p['error']}")
            continue
        rss = common.peak_kb(p["peak_rss_kb"], p.get("peak_rss_after_latency_kb"))
        lines.append(
            _row(
                f"{name}: spawn -> last consumed",
                p["rows"],
                p["wall_s"],
                p["cpu_s"],
                rss,
                dump_per_row,
            )
        )
        lines.append(
            _row(
                f"{name}: first -> last consumed",
                p["streaming_rows"],
                p["streaming_s"],
                p["streaming_cpu_s"],
                None,
                dump_per_row,
            )
        )
        if p["counts"] != p["expected"]:
            problems.append(f"{name}: consumed {p['counts']}, expected {p['expected']}")
        if p.get("exit_code") not in (0, None):
            # All its messages were consumed (read_committed: exactly-once's transactions had
            # committed), but a stop that fails is a finding (its log stays in the kept temp
            # dir).
            problems.append(f"{name}: replicad exited {p['exit_code']} when stopped")
    for f in results.get("floor", []):
        if f.get("error"):
            lines.append((f["name"], "FAILED", *[""] * 7))
            problems.append(f"{f['name']} FAILED:\n{f['error']}")
            continue
        lines.append(
            _row(f["name"], f["rows"], f["seconds"], f["cpu_s"], f["peak_rss_kb"], dump_per_row)
        )
    print(common.grid(head, lines))
    print(
        "\nseconds: mariadb-binlog and replicad dump: the process's wall time (output to "
        "/dev/null); decode only and python-mysql-replication: the decode loop inside the child "
        "(the peer's includes connecting); replicad run: spawn or first message consumed -> "
        "last message consumed. CPU: user+sys of the process (wait4; /proc/<pid>/stat for "
        "replicad run, the broker excluded); for decode only and the peer, the loop's "
        "process_time. row changes: the workload's count for the tools (they count nothing); "
        "for first -> last, the rows not yet consumed at the first message. peak RSS: VmHWM "
        "(replicad run: the whole run, latency phases included)."
    )
    for d in results["decoders"]:
        if "wall_s" in d and "loop_cpu_s" in d:
            print(
                f"  {d['name']}: process wall {d['wall_s']:.2f} s, process CPU "
                f"{d['cpu_s']:.2f} s"
                + (f", {d['other_rows']:,} rows of other tables" if d.get("other_rows") else "")
            )
    for p in results["publish"]:
        if not p.get("error"):
            print(
                f"  replicad run, {p['label']}: start-up {p['startup_s']:.2f} s, {p['messages']:,} "
                f"messages ({p['counts']['tombstones']:,} tombstones), exit code "
                f"{p['exit_code']}; CPU s by thread {e2e._threads(p['threads_cpu_s'])}; "
                + e2e._cpu_line(p["machine_cpu"])
            )
            other_note(p["machine_cpu"])
    for f in results.get("floor", []):
        if not f.get("error"):
            n = f["messages"]
            print(
                f"  {f['name']}: {n:,} messages (the at-least-once run's, tombstones "
                f"included), {f['samples']:,} of its consumed messages cycled (key "
                f"{f['sample_key_avg']:.1f} B, value {f['sample_value_avg']:.1f} B on average; "
                f"the whole run: {f['run_key_avg']:.1f} B, {f['run_value_avg']:.1f} B); "
                f"process CPU {f['cpu_s']:.2f} s (wait4) = {f['cpu_s'] / n * 1e6:.2f} µs/message; "
                f"produce loop + flush {f['seconds']:.2f} s wall, {f['loop_cpu_s']:.2f} s CPU = "
                f"{f['loop_cpu_s'] / f['rows'] * 1e6:.2f} µs/row, "
                f"{f['loop_cpu_s'] / n * 1e6:.2f} µs/message; " + e2e._cpu_line(f["machine_cpu"])
            )
            other_note(f["machine_cpu"])
    latency_lines = []
    for p in results["publish"]:
        for lat in p.get("latency", []):
            w, ms = lat["writer"], lat["commit_to_consume_ms"] or {}
            latency_lines.append(
                (
                    str(p.get("producer_processes", 1)),
                    f"{lat['offered_rows_per_s']:,}",
                    f"{w['batch']:,}",
                    _f(lat["achieved_rows_per_s"], ",.0f"),
                    _f(ms.get("p50"), ".1f"),
                    _f(ms.get("p90"), ".1f"),
                    _f(ms.get("p99"), ".1f"),
                    _f(ms.get("max"), ".1f"),
                    f"{lat['consumed']:,} / {w['rows']:,}",
                    _f(w["max_late_s"] * 1000, ".0f"),
                    _f(lat["replicad_cpu_s"]),
                )
            )
            if lat["consumed"] != w["rows"]:
                problems.append(
                    f"latency at {lat['offered_rows_per_s']:,} rows/s: consumed "
                    f"{lat['consumed']:,} of {w['rows']:,}"
                )
    if latency_lines:
        print(
            "\nLatency commit (ts = NOW(6)) -> consumed, at-least-once replicad caught up "
            "(bench/e2e.py's writer):"
        )
        print(
            common.grid(
                (
                    "producer processes",
                    "offered rows/s",
                    "rows/txn",
                    "achieved rows/s",
                    "p50 ms",
                    "p90 ms",
                    "p99 ms",
                    "max ms",
                    "consumed",
                    "writer max late ms",
                    "pipeline process CPU s",
                ),
                latency_lines,
            )
        )
    else:
        print("\nLatency: not measured (--skip-latency)")
    if "big" in results:
        report_big(results, dump, problems)
    return summary(results, decoders, dump_per_row), problems


def report_big(results: dict[str, Any], dump: dict[str, Any], problems: list[str]) -> None:
    """One transaction of --big-transaction rows next to the normal workload's figures."""
    big, b = results["big"], results["big"]["binlog"]
    rows = big["rows"]
    if b["counts"]["c"] != rows:
        problems.append(f"the big transaction inserted {b['counts']['c']:,} rows, not {rows:,}")
    print(
        f"\nOne transaction of {rows:,} inserted rows ({DATABASE}.{BIG_TABLE}, t's shape; "
        f"{b['seconds']:.1f} s to write): {', '.join(b['names'])} ({b['bytes'] / 2**20:.1f} "
        f"MiB), {b['start']['file']}:{b['start']['pos']} -> {b['end']['file']}:"
        f"{b['end']['pos']}; against the normal workload ({results['binlog']['bytes'] / 2**20:.1f}"
        f" MiB, {ROWS_PER_TRANSACTION}-row transactions):"
    )
    normal = next(
        (p for p in results["publish"] if p["label"] == "at-least-once" and not p.get("error")),
        None,
    )
    head = ("measurement", "rows/txn", "row changes", "seconds", "rows/s", "CPU s", "CPU µs/row",
            "peak RSS MB")  # fmt: skip

    def line(
        name: str, per_txn: int, n: int, sec: float, cpu: float, kb: int | None
    ) -> tuple[str, ...]:
        r = _row(name, n, sec, cpu, kb, None)
        return (r[0], f"{per_txn:,}", *r[1:6], r[8])

    lines = []
    for label, per_txn, d in (("normal", ROWS_PER_TRANSACTION, dump), ("big", rows, big["dump"])):
        name = f"replicad dump, {label}"
        if d.get("error"):
            lines.append((name, "FAILED", *[""] * 6))
            problems.append(f"{name} FAILED:\n{d['error']}")
        else:
            lines.append(line(name, per_txn, d["rows"], d["seconds"], d["cpu_s"], d["peak_rss_kb"]))
    big_run = big["publish"]
    runs = [("normal", ROWS_PER_TRANSACTION, normal), ("big", rows, big_run)]
    runs += [
        (f"big, {p['producer_processes']} producer processes", rows, p)
        for p in big.get("processes", [])
    ]
    for label, per_txn, p in runs:
        name = f"replicad run at-least-once, {label}"
        if p is None or p.get("error"):
            lines.append((name, "FAILED", *[""] * 6))
            if p is not None:
                problems.append(f"{name} FAILED:\n{p['error']}")
            continue
        lines.append(
            line(f"{name}: spawn -> last", per_txn, p["rows"], p["wall_s"], p["cpu_s"],
                 p["peak_rss_kb"])
        )  # fmt: skip
        lines.append(
            line(f"{name}: first -> last", per_txn, p["streaming_rows"], p["streaming_s"],
                 p["streaming_cpu_s"], None)
        )  # fmt: skip
    print(common.grid(head, lines))
    for p in big.get("processes", []):
        if not p.get("error"):
            kb = [k for k in p["children_peak_rss_kb"] if k]
            print(
                f"  big, {p['producer_processes']} producer processes: each producer "
                f"process's peak RSS {', '.join(f'{k / 1024:.0f}' for k in kb)} MB (the row "
                "above is the pipeline process's)"
            )
            if p["counts"] != p["expected"]:
                problems.append(f"big, producer processes: consumed {p['counts']}")
    print(
        "peak RSS: VmHWM of the process (replicad run: at the last message consumed). "
        "seconds: wall time of the process (dump), spawn or first message consumed -> last "
        "message consumed (run)."
    )
    if not big_run.get("error"):
        ok = big_run["messages"] == rows and big_run["counts"] == big_run["expected"]
        print(
            f"  big run: {big_run['messages']:,} messages consumed, {rows:,} expected: "
            f"{'OK' if ok else 'MISMATCH'}; start-up {big_run['startup_s']:.2f} s; CPU s by "
            f"thread {e2e._threads(big_run['threads_cpu_s'])}; "
            + e2e._cpu_line(big_run["machine_cpu"])
        )
        other_note(big_run["machine_cpu"])
        if not ok:
            problems.append(
                f"big transaction: consumed {big_run['messages']:,} messages "
                f"({big_run['counts']}), expected {rows:,} ({big_run['expected']})"
            )


def summary(
    results: dict[str, Any], decoders: dict[str, Any], dump_per_row: float | None
) -> list[str]:
    def rate(name: str) -> float | None:
        d = decoders.get(name) or {}
        return None if d.get("error") or not d.get("seconds") else d["rows"] / d["seconds"]

    def verdict(label: str, value: float | None, goal: float, at_least: bool) -> str:
        if value is None:
            return f"{label}: not measured"
        ok = value >= goal if at_least else value <= goal
        sign = ">=" if at_least else "<="
        return f"{label} = {value:.2f} (goal {sign} {goal:g}): {'MET' if ok else 'MISSED'}"

    def ratio(a: float | None, b: float | None) -> float | None:
        return a / b if a is not None and b else None

    dump, mdb = rate("replicad dump"), rate("mariadb-binlog -v --base64-output=decode-rows")
    ours = rate("replicad decode only (iter_row_changes)")
    peer = rate("python-mysql-replication (from the server)")
    lines = [
        verdict(
            "replicad dump rows/s ÷ mariadb-binlog rows/s",
            ratio(dump, mdb),
            TARGET_DUMP_OVER_MARIADB,
            True,
        ),
        verdict(
            "decode-only rows/s ÷ python-mysql-replication rows/s",
            ratio(ours, peer),
            TARGET_DECODE_OVER_PEER,
            True,
        ),
    ]
    runs = {p["label"]: p for p in results["publish"] if not p.get("error")}
    for label in ("at-least-once", "exactly-once"):
        p = runs.get(label)
        whole = ratio(ratio(p["cpu_s"], p["rows"]), dump_per_row) if p else None
        stream = (
            ratio(ratio(p["streaming_cpu_s"], p["streaming_rows"]), dump_per_row) if p else None
        )
        line = verdict(
            f"publish CPU/row ÷ dump CPU/row, {label}, spawn -> last",
            whole,
            TARGET_PUBLISH_OVER_DUMP_CPU,
            False,
        )
        lines.append(line + (f"; streaming only {stream:.2f}" if stream is not None else ""))
        threads = (p or {}).get("threads_cpu_s") or {}
        if threads.get("librdkafka threads") is not None:
            own = threads["librdkafka threads"] / p["rows"]
            share = ratio(own, dump_per_row)
            lines.append(
                f"  of which librdkafka's own threads (batching, protocol, sockets): "
                f"{own * 1e6:.2f} µs/row = {_f(share)}× dump's CPU per row. The run also "
                "decodes and encodes every row as dump does, so with librdkafka this ratio "
                f"stays above 1 + {_f(share)} = {_f(None if share is None else 1 + share)} "
                "whatever the Python side costs"
            )
    on, off = runs.get("at-least-once, relay on"), runs.get("at-least-once")
    if on and off:

        def speed(run: dict[str, Any], rows: str, seconds: str) -> str:
            return _f(ratio(run[rows], run[seconds]), ",.0f")

        lines.append(
            f"relay log on / off, wall rows/s spawn -> last: {speed(on, 'rows', 'wall_s')} / "
            f"{speed(off, 'rows', 'wall_s')}; first -> last: "
            f"{speed(on, 'streaming_rows', 'streaming_s')} / "
            f"{speed(off, 'streaming_rows', 'streaming_s')}"
        )
    elif not results["args"]["skip_relay"]:
        lines.append("relay log on / off: not measured (a run failed)")
    lines.extend(processes_summary(runs, dump_per_row))
    floors = {f["name"]: f for f in results.get("floor", []) if not f.get("error")}
    floor, bare, alo = floors.get(FLOOR), floors.get(FLOOR_BARE), runs.get("at-least-once")
    if floor:
        x = floor["cpu_s"] / floor["rows"]
        stream = ratio(alo["streaming_cpu_s"], alo["streaming_rows"]) if alo else None
        lines.append(
            f"librdkafka floor (same messages, headers, callbacks): {x * 1e6:.2f} µs/row = "
            f"{_f(ratio(x, dump_per_row))}× dump's CPU per row; replicad run at-least-once "
            f"streaming: {_f(stream * 1e6 if stream else None)} µs/row = "
            f"{_f(ratio(stream, x))}× the floor"
        )
        loop = floor["loop_cpu_s"] / floor["rows"]
        lines.append(
            f"  the floor's produce loop + flush alone (no interpreter start-up or imports): "
            f"{loop * 1e6:.2f} µs/row = {_f(ratio(loop, dump_per_row))}× dump's; replicad "
            f"streaming = {_f(ratio(stream, loop))}× that"
        )
        if bare:
            y = bare["cpu_s"] / bare["rows"]
            lines.append(
                f"librdkafka without headers and callbacks: {y * 1e6:.2f} µs/row (the 4 "
                f"headers and the callback cost {(x - y) * 1e6:.2f} µs/row)"
            )
    elif results.get("publish"):
        lines.append("librdkafka floor: not measured (the at-least-once run or the child failed)")
    big = results.get("big")
    if big:
        d, p = big["dump"], big["publish"]
        normal_dump = decoders.get("replicad dump") or {}

        def mb(kb: int | None) -> str:
            return _f(kb / 1024 if kb is not None else None, ".0f")

        dump_mb, normal_dump_mb = mb(d.get("peak_rss_kb")), mb(normal_dump.get("peak_rss_kb"))
        run_mb, normal_run_mb = mb(p.get("peak_rss_kb")), mb(alo and alo.get("peak_rss_kb"))
        lines.append(
            f"one {big['rows']:,}-row transaction, peak RSS: replicad dump {dump_mb} MB (normal "
            f"workload {normal_dump_mb} MB), replicad run at-least-once {run_mb} MB (normal "
            f"{normal_run_mb} MB); messages {p.get('messages', 0):,} of {big['rows']:,}"
        )
    return lines


# --------------------------------------------------------------------------- main


def processes_summary(runs: dict[str, Any], dump_per_row: float | None) -> list[str]:
    """End-to-end rows/s and CPU per row with N producer processes against N = 1."""
    one = runs.get("at-least-once")
    many = sorted(
        (p for label, p in runs.items() if label.startswith(PROCESSES_LABEL)),
        key=lambda p: p["producer_processes"],
    )
    if not one or not many:
        return ["producer processes: not measured"]
    lines = []
    for p in [one, *many]:
        n = p.get("producer_processes", 1)
        wall = p["rows"] / p["wall_s"]
        stream = p["streaming_rows"] / p["streaming_s"] if p["streaming_s"] else None
        cpu = p["cpu_s"] / p["rows"]
        line = (
            f"N = {n}: {wall:,.0f} rows/s spawn -> last, {_f(stream, ',.0f')} rows/s streaming; "
            f"CPU {cpu * 1e6:.2f} µs/row (producer processes {p.get('children_cpu_s', 0):.1f} "
            f"s of {p['cpu_s']:.1f} s) = {_f(cpu / dump_per_row if dump_per_row else None)}× dump"
        )
        if p["streaming_rows"]:
            line += (
                f"; streaming: the pipeline process "
                f"{p['streaming_own_cpu_s'] / p['streaming_rows'] * 1e6:.2f} µs/row, producer "
                f"processes {p['streaming_children_cpu_s'] / p['streaming_rows'] * 1e6:.2f} µs/row"
            )
        if n == 2:
            met = "MET" if wall >= TARGET_N2_ROWS_PER_S else "MISSED"
            line += f"; goal >= {TARGET_N2_ROWS_PER_S:,} rows/s spawn -> last: {met}"
        lines.append(line)
    return lines


def code_state() -> dict[str, Any]:
    """The commit measured, the uncommitted files under replicad/ (the working tree is what
    runs), and when the compiled decoder was built."""

    def git(*cmd: str) -> str:
        done = subprocess.run(["git", *cmd], cwd=common.ROOT, capture_output=True, text=True)
        return done.stdout.rstrip("\n")

    built = sorted(common.ROOT.glob("replicad/binlog/_speedups*.so"))
    return {
        "commit": git("rev-parse", "--short", "HEAD"),
        "uncommitted": git("status", "--porcelain", "--", "replicad").splitlines(),
        "speedups_built": (
            datetime.fromtimestamp(built[0].stat().st_mtime, UTC).isoformat(timespec="seconds")
            if built
            else None
        ),
    }


def drop_databases(server: decode.Server, names: list[str]) -> None:
    conn = server.connect()
    try:
        with conn.cursor() as cur:
            for name in names:
                cur.execute(f"DROP DATABASE IF EXISTS {name}")
    finally:
        conn.close()


def run(args: argparse.Namespace) -> int:
    from replicad.binlog import decoder_choice

    started = time.perf_counter()
    server = decode.Server(
        "127.0.0.1", common.MARIADB_PORT, "root", "root", "repl", "repl", REPLICAD_SERVER_ID
    )
    decode.ensure_server(server)
    plan = decode.Plan.for_rows(args.rows)
    workdir = Path(tempfile.mkdtemp(prefix="replicad-publish-"))
    results: dict[str, Any] = {
        "args": {k: v for k, v in vars(args).items() if k not in ("child", "spec")},
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "loadavg_start": " ".join(Path("/proc/loadavg").read_text().split()[:3]),
        "compiled": decoder_choice.available(),
        "bytecode": common.compile_bytecode(),
        "code": code_state(),
        "workdir": str(workdir),
        "publish": [],
        "problems": [],
    }
    databases = [DATABASE]
    if not args.skip_latency:
        # The latency table, in e2e.py's database (its writer child writes there), created
        # before the workload: replicad's schema snapshot at start knows it.
        e2e.setup_database(server)
        databases.append(e2e.DATABASE)
    broker = common.PrivateKafka(workdir / "kafka")
    try:
        print(f"workload: {plan.total:,} row changes into {DATABASE}.{TABLE} ...", file=sys.stderr)
        binlog = make_binlog(server, plan, workdir / "binlog")
        results["binlog"] = binlog
        if binlog["counts"] != plan.counts():
            results["problems"].append(
                f"the workload made {binlog['counts']}, planned {plan.counts()}"
            )
        print("decoders, each in a child process ...", file=sys.stderr)
        results["decoders"] = measure_decoders(server, binlog, plan)
        for d in results["decoders"]:
            if d.get("rows_counted") and not d.get("error") and d["counts"] != plan.counts():
                results["problems"].append(
                    f"{d['name']} counted {d['counts']}, the workload made {plan.counts()}"
                )
        bootstrap = broker.start()
        pids = {"kafka (private)": broker.pid}
        results["broker"] = f"private Apache Kafka (KRaft, one node) on {bootstrap}"
        pids.update({k: v for k, v in e2e.service_pids().items() if k == "mariadbd"})
        latency_seconds = 0.0 if args.skip_latency else args.latency_seconds
        runs: list[tuple[str, dict[str, Any]]] = [
            ("at-least-once", {"latency_seconds": latency_seconds, "keep_samples": True}),
            ("exactly-once", {"eos": True}),
        ]
        if not args.skip_relay:
            runs.append(("at-least-once, relay on", {"relay": True}))
        for n in args.producer_processes:
            runs.append((f"{PROCESSES_LABEL} {n}", {"producers": n}))
        for label, options in runs:
            results["publish"].append(
                publish(label, bootstrap, workdir, server, binlog, plan, pids, **options)
            )
        alo = results["publish"][0]
        if not alo.get("error"):
            results["floor"] = [
                measure_floor(name, bootstrap, alo, plan.total, pids, headers=on, callback=on)
                for name, on in ((FLOOR, True), (FLOOR_BARE, False))
            ]
        if args.big_transaction:
            results["big"] = big_transaction(
                args.big_transaction, server, workdir, bootstrap, pids, args.producer_processes
            )
    finally:
        broker.stop()
        if not args.keep:
            drop_databases(server, databases)
    results["wall_s"] = round(time.perf_counter() - started, 1)
    lines, problems = report(results)
    print()
    for line in lines:
        print(line)
    results["summary"], results["problems"] = lines, problems
    print(f"\nwall time of the run: {results['wall_s']:.1f} s")
    for problem in problems:
        print(f"\n!!! {problem}", file=sys.stderr)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, default=str) + "\n")
        print(f"results written to {args.json}")
    if args.keep or problems:
        print(f"binlog copies, configs and logs kept in {workdir}")
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    return 1 if problems else 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=DEFAULT_ROWS, help="row changes to write")
    parser.add_argument("--json", metavar="OUT", help="also write the results as JSON to OUT")
    parser.add_argument(
        "--latency-seconds", type=float, default=10.0, help="length of each latency phase"
    )
    parser.add_argument("--skip-latency", action="store_true", help="no latency phases")
    parser.add_argument("--skip-relay", action="store_true", help="no run with the relay log")
    parser.add_argument(
        "--producer-processes",
        type=int,
        nargs="*",
        default=[2],
        metavar="N",
        help="also at-least-once runs with sinks.kafka.producer_processes N (default: 2; the "
        "at-least-once run is N = 1)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the temp dir and databases")
    parser.add_argument(
        "--big-transaction",
        type=int,
        default=0,
        metavar="ROWS",
        help="also one transaction of ROWS inserts: replicad dump and run, peak RSS (0: off)",
    )
    parser.add_argument("--child", choices=("decode", "peer", "floor"), help=argparse.SUPPRESS)
    parser.add_argument("--spec", default="{}", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.rows < 30:
        parser.error("--rows must be at least 30")
    if args.big_transaction < 0:
        parser.error("--big-transaction must be 0 (off) or a row count")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child:
        return run_child(args.child, json.loads(args.spec))
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
