#!/usr/bin/env python3
"""End-to-end benchmark: MariaDB -> `replicad run` -> Kafka -> a consumer.

One run, on the local MariaDB of scripts/services.sh and Apache Kafka: by default the
services' broker at --bootstrap (scripts/services.sh up kafka), or with --private-kafka a
private single-node Apache Kafka started for the run on a free port (common.PrivateKafka,
scripts/services.sh kafka-instance) and stopped after it.

  1. Set-up: database `replicad_e2e` with decode.py's 12-column table (`bench_rows`) and the
     same table plus `txn INT` and `ts DATETIME(6)` (`latency_rows`); a unique pipeline name
     and topic prefix (`e2e-<hex>`); `replicad run` configured in a temp dir (Kafka sink with
     its at-least-once defaults: idempotent producer, acks=all, tombstones ON, one partition
     per topic; position file in the temp dir; JSON log to a file).
  2. Throughput: with replicad NOT running, load --rows row changes (decode.py's mix: 2/3
     inserts, 7/30 updates, 1/10 deletes; 1000-row single-statement transactions) and note
     the binlog file:pos before and after. Start replicad with `source.start` at the position
     before the load and time until a consumer (assign() from OFFSET_BEGINNING, no group) has
     counted every message: one per row change plus one tombstone per delete.
     On the same binlog range, in child processes: "decode only" (replicad's decoder from
     disk, as decode.py) and "decode + KafkaSink.publish" (every change through the real sink
     code: routing, key, envelope, JSON, headers, tombstones, delivery tracking; its producer
     replaced by a null one). The broker's ceiling: as many messages, sampled from what was
     consumed, produced with the sink's own producer settings (warmed up first).
  3. Latency: with replicad running and caught up, a writer process inserts --rate rows/s
     for --seconds (autocommit INSERTs of --batch rows with `ts = NOW(6)`, on an absolute
     schedule). Per row the consumer records consume time - ts (commit -> consume), the
     Kafka timestamp - ts (commit -> produce(): librdkafka's CreateTime is taken when replicad
     calls produce()) and consume time - the writer's COMMIT-returned time. Then the broker
     alone at the same pace and burst shape (a producer with the sink's settings, replicad
     idle): produce() -> delivery report, and produce() -> consumed.
  4. Clean-up: SIGTERM to replicad, drop the database, delete the run's topics (unless
     --keep), stop the private broker.

Caveats:
  - Everything shares one machine (2 cores here): MariaDB, the broker (a JVM), replicad,
    the consumer and the writer compete for CPU; every phase reports the
    CPU seconds of each and of the whole machine, and replicad's split into its Python and
    librdkafka threads. The e2e time is replicad's only when replicad is what saturates.
  - e2e time runs from the spawn of `replicad run` (imports, connection, schema snapshot,
    topic creation) to the last message consumed; start-up and streaming are also shown
    apart. The consumer reads in batches: at most 50 ms late at the end.
  - `ts = NOW(6)` is the INSERT statement's start on the server and the commit follows when
    it returns, so consume - ts over-states commit -> consume a little; consume - COMMIT
    returned (the client's clock after the OK) under-states it.
  - Commit -> ack (replicad's delivery report) is not visible from outside. With one broker
    and acks=all a record is readable when the broker acknowledges it, so commit -> consume
    bounds commit -> ack from above, plus the consumer's fetch (Kafka answers a waiting
    fetch as soon as records arrive, so librdkafka's fetch.wait.max.ms adds nothing).
    The broker-alone rows show how much of each figure the broker takes by itself.
  - DATETIME has no zone: both sessions use time_zone '+00:00', so `ts` is UTC wall clock
    compared with time.time() (same machine, same clock).
  - The consumer counts messages from the first offset until it has the expected number
    (no high watermark, no partition EOF): a missing message shows as a timeout, an extra
    one as a count that differs.
  - The latency topic is created before its phase (as in production), so its first rows do
    not wait for topic creation; the throughput topic is created by replicad.
  - --py-spy EXE samples replicad during the throughput phase and prints the top frames;
    native code (Cython, orjson, librdkafka's produce()) counts for the Python frame calling
    it. Sampling pauses replicad, so a profiled run's timings are not comparable.

Usage: python bench/e2e.py [--rows N] [--rate R] [--seconds S] [--json PATH] [--keep]
                           [--private-kafka] [--py-spy .venv/bin/py-spy]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import pickle
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

if __package__:  # python -m bench.e2e
    from bench import common, decode
else:  # python bench/e2e.py: bench/ is sys.path[0]
    import common
    import decode

ROOT = Path(__file__).resolve().parents[1]
SERVICES_SCRIPT = ROOT / "scripts" / "services.sh"
SERVICES_DIR = ROOT / ".services"

DATABASE = "replicad_e2e"
TABLE = decode.TABLE  # decode.py's table, in our database
LATENCY_TABLE = "latency_rows"
SNAPSHOT_TABLE = "snap_rows"  # --snapshot-rows: read by an incremental snapshot
DEFAULT_ROWS = 200_000
DEFAULT_RATE = 5_000
DEFAULT_SECONDS = 20.0
DEFAULT_BATCH = 100  # rows per latency transaction: 50 transactions/s at 5,000 rows/s
ROWS_PER_TRANSACTION = 1_000  # load: one multi-row statement per transaction
REPLICAD_SERVER_ID = 91235  # decode.py's peer uses 91234
TARGET_RATIO = 2.0  # e2e time <= 2x decode-only time
TARGET_P99_MS = 100.0  # p99 commit -> ack at 5k rows/s
LATENCY_POOL = 2_000  # distinct pre-rendered row bodies the writer cycles through
CEILING_SAMPLES = 2_000  # consumed messages kept to replay in the broker ceiling
CONSUME_BATCH_TIMEOUT_S = 0.05
IDLE_S = 30.0  # latency phases: give up when nothing more arrived for this long
OPS = decode.OPS


def _in_database(sql: str) -> str:
    """decode.py's statements name its database; the same statements on ours."""
    out = sql.replace(f"{decode.DATABASE}.", f"{DATABASE}.")
    assert out != sql, "decode.py's SQL no longer names its database as expected"
    return out


CREATE_ROWS = _in_database(decode.CREATE_TABLE)
UPDATE_SQL = _in_database(decode.UPDATE_SQL)
DELETE_SQL = _in_database(decode.DELETE_SQL)
CREATE_LATENCY = CREATE_ROWS.replace(f".{TABLE} (", f".{LATENCY_TABLE} (").replace(
    "qty INT NOT NULL\n", "qty INT NOT NULL,\n    txn INT NOT NULL,\n    ts DATETIME(6) NOT NULL\n"
)
assert "ts DATETIME(6)" in CREATE_LATENCY and LATENCY_TABLE in CREATE_LATENCY


# --------------------------------------------------------------------------- processes


def thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds of a process's threads grouped by kind: the Python threads (named after
    the interpreter) and librdkafka's (named rdk:*), from /proc/<pid>/task/*/stat."""
    groups: dict[str, float] = {}
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            comm = (task / "comm").read_text().strip()
        except OSError:
            continue
        seconds = common.cpu_seconds(f"{pid}/task/{task.name}")
        if seconds is not None:
            kind = "librdkafka threads" if comm.startswith("rdk:") else "Python threads"
            groups[kind] = groups.get(kind, 0.0) + seconds
    return groups


def thread_cpu_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: round(v - before.get(k, 0.0), 2) for k, v in after.items()}


def machine_cpu() -> tuple[float, float]:
    """(busy, total) CPU seconds of the machine, all cores, from /proc/stat."""
    busy, total = common.machine_ticks()
    return busy / common.CLK_TCK, total / common.CLK_TCK


def service_pids() -> dict[str, int]:
    """The pids of scripts/services.sh's servers (best effort: a stale pid file is skipped)."""
    wanted = {
        "kafka": (SERVICES_DIR / "kafka" / "kafka.pid", "java"),
        "mariadbd": (SERVICES_DIR / "mariadb" / "mariadb.pid", "mariadbd"),
    }
    pids: dict[str, int] = {}
    for name, (pid_file, comm) in wanted.items():
        try:
            pid = int(pid_file.read_text().split()[0])
            if comm in Path(f"/proc/{pid}/comm").read_text():
                pids[name] = pid
        except (OSError, ValueError, IndexError):
            continue
    return pids


@dataclass(slots=True)
class CpuWatch:
    """CPU seconds of named processes and of the whole machine between start and stop."""

    pids: dict[str, int]
    started: dict[str, float] = field(default_factory=dict)
    wall_started: float = 0.0
    machine_started: tuple[float, float] = (0.0, 0.0)

    def start(self) -> CpuWatch:
        self.started = {
            n: s for n, p in self.pids.items() if (s := common.cpu_seconds(p)) is not None
        }
        self.started["this script"] = time.process_time()
        self.machine_started = machine_cpu()
        self.wall_started = time.perf_counter()
        return self

    def stop(self) -> dict[str, Any]:
        wall = time.perf_counter() - self.wall_started
        busy, total = machine_cpu()
        out: dict[str, Any] = {"wall_s": round(wall, 3)}
        for name, pid in self.pids.items():
            now = common.cpu_seconds(pid)
            if now is not None and name in self.started:
                out[name] = round(now - self.started[name], 2)
        out["this script"] = round(time.process_time() - self.started["this script"], 2)
        out["machine busy"] = round(busy - self.machine_started[0], 2)
        out["machine total"] = round(total - self.machine_started[1], 2)
        return out


# --------------------------------------------------------------------------- workload


def _ranges(first: int, last: int) -> list[tuple[int, int]]:
    return [
        (lo, min(lo + ROWS_PER_TRANSACTION - 1, last))
        for lo in range(first, last + 1, ROWS_PER_TRANSACTION)
    ]


def _statements(plan: decode.Plan) -> Iterator[tuple[str, str, list[Any]]]:
    """(op, sql, params) of the load: multi-row INSERTs of decode.py's generated rows, then
    UPDATEs of the lowest ids and DELETEs of the highest (disjoint; every row exists)."""
    rng = random.Random(decode.SEED)
    row_sql = "(" + ",".join(["%s"] * len(decode.COLUMNS)) + ")"
    head = f"INSERT INTO {DATABASE}.{TABLE} ({','.join(decode.COLUMNS)}) VALUES "
    for lo, hi in _ranges(1, plan.inserts):
        rows = [decode.make_row(row_id, rng) for row_id in range(lo, hi + 1)]
        yield "c", head + ",".join([row_sql] * len(rows)), [v for row in rows for v in row]
    for lo, hi in _ranges(1, plan.updates):
        yield "u", UPDATE_SQL, [lo, hi]
    for lo, hi in _ranges(plan.inserts - plan.deletes + 1, plan.inserts):
        yield "d", DELETE_SQL, [lo, hi]


def master_status(cur: Any) -> tuple[str, int]:
    cur.execute("SHOW MASTER STATUS")
    row = cur.fetchone()
    return str(row[0]), int(row[1])


def setup_database(server: decode.Server, snapshot_rows: int = 0) -> None:
    conn = server.connect()
    try:
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {DATABASE}")
            cur.execute(f"CREATE DATABASE {DATABASE}")
            cur.execute(CREATE_ROWS)
            cur.execute(CREATE_LATENCY)
            if snapshot_rows:
                # The table an incremental snapshot reads during the second latency phase
                # (written before replicad's start position: only the snapshot reads it), and
                # the signal table with the grant docs/snapshots.md asks for.
                cur.execute(
                    f"CREATE TABLE {DATABASE}.{SNAPSHOT_TABLE} (id BIGINT PRIMARY KEY, n INT, "
                    "s VARCHAR(64), d DECIMAL(12,2), at DATETIME(6))"
                )
                cur.execute(
                    f"INSERT INTO {DATABASE}.{SNAPSHOT_TABLE} SELECT seq, seq % 1000, "
                    "CONCAT('name-', seq), seq / 7, '2024-01-02' + INTERVAL seq SECOND "
                    f"FROM {DATABASE}.seq_1_to_{int(snapshot_rows)}"
                )
                cur.execute(
                    f"CREATE TABLE {DATABASE}.replicad_signal (id VARCHAR(128) PRIMARY KEY, "
                    "kind VARCHAR(16) NOT NULL, window_id VARCHAR(64) NOT NULL, "
                    "at TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3))"
                )
                cur.execute(
                    f"GRANT INSERT, UPDATE, DELETE ON {DATABASE}.replicad_signal "
                    f"TO '{server.repl_user}'@'127.0.0.1'"
                )
    finally:
        conn.close()


def load(server: decode.Server, plan: decode.Plan) -> dict[str, Any]:
    """Run the load (replicad is not running); the binlog range it occupies."""
    conn = server.connect()
    done = dict.fromkeys(OPS, 0)
    try:
        with conn.cursor() as cur:
            # As decode.py: UTC, and no ANNOTATE_ROWS events (the statement text of a 1000-row
            # INSERT is ~300 kB), so the binlog holds row events only.
            cur.execute("SET SESSION time_zone = '+00:00'")
            cur.execute("SET SESSION binlog_annotate_row_events = OFF")
            start = master_status(cur)
            started = time.perf_counter()
            for op, sql, params in _statements(plan):
                done[op] += cur.execute(sql, params)  # autocommit: one transaction each
            seconds = time.perf_counter() - started
            end = master_status(cur)
            cur.execute("SELECT @@log_bin_basename, @@version")
            basename, version = cur.fetchone()
            cur.execute("SHOW BINARY LOGS")
            logs = [(str(r[0]), int(r[1])) for r in cur.fetchall()]
    finally:
        conn.close()
    if done != plan.counts():
        raise SystemExit(f"the load affected {done} rows, planned {plan.counts()}")
    binlog_dir = os.path.dirname(basename)
    index = {name: i for i, (name, _) in enumerate(logs)}
    names = [name for name, _ in logs[index[start[0]] : index[end[0]] + 1]]
    segments = []
    for name in names:
        first = start[1] if name == start[0] else None
        stop = end[1] if name == end[0] else None
        segments.append((os.path.join(binlog_dir, name), first, stop))
    size = sum((stop or os.path.getsize(path)) - (first or 4) for path, first, stop in segments)
    return {
        "counts": done,
        "seconds": round(seconds, 2),
        "start": {"file": start[0], "pos": start[1]},
        "end": {"file": end[0], "pos": end[1]},
        "segments": segments,
        "bytes": size,
        "server_version": version,
    }


# --------------------------------------------------------------------------- children


class _NullProducer:
    """Stands in for confluent_kafka.Producer: counts what would have been produced."""

    def __init__(self) -> None:
        self.messages = 0
        self.bytes = 0
        self.by_topic: dict[str, int] = {}

    def produce(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        on_delivery: Any = None,
        headers: Any = None,
        partition: int | None = None,  # KafkaSink names one for a TRUNCATE (every partition)
    ) -> None:
        self.messages += 1
        self.bytes += len(value or b"") + len(key or b"")
        self.by_topic[topic] = self.by_topic.get(topic, 0) + 1

    def poll(self, timeout: float = 0) -> int:
        return 0

    def flush(self, timeout: float = 0) -> int:
        return 0

    def __len__(self) -> int:
        return 0


class _EveryTopic(set[str]):
    """KafkaSink's set of topics known to exist: here, all of them."""

    def __contains__(self, item: object) -> bool:
        return True


def child_decode(spec: dict[str, Any]) -> dict[str, Any]:
    """Decode the binlog range from disk. With spec["encode"], also hand every change to the
    real KafkaSink.publish (routing, key, envelope, JSON, headers, tombstones, delivery
    tracking), whose producer is replaced by a null one: no librdkafka, no broker, no marks."""
    from replicad.binlog.changes import iter_row_changes
    from replicad.binlog.files import iter_file_events

    publish = None
    null = _NullProducer()
    if spec["encode"]:
        from replicad.config import FiltersConfig, KafkaSinkConfig
        from replicad.sinks.kafka import KafkaSink
        from replicad.sinks.routing import ChangeFilter

        config = KafkaSinkConfig(bootstrap_servers=spec["bootstrap"], prefix=spec["prefix"])
        sink = KafkaSink(config, spec["prefix"], ChangeFilter(FiltersConfig()))
        sink.producer = null  # the real one is never polled, so it never calls back
        sink.topics.ready = _EveryTopic()
        publish = sink.publish
    counts = dict.fromkeys(OPS, 0)
    other = 0
    base = common.vm_kb("VmHWM")
    cpu = time.process_time()
    started = time.perf_counter()
    for path, first, stop in spec["segments"]:
        events = iter_file_events(path, start=first, stop=stop)
        for change in iter_row_changes(events, file=os.path.basename(path)):
            if change.table == TABLE and change.db == DATABASE:
                counts[change.op] += 1
            else:
                other += 1
            if publish is not None:
                publish(change)
    return {
        "counts": counts,
        "other_rows": other,
        "seconds": time.perf_counter() - started,
        "cpu_s": time.process_time() - cpu,
        "base_rss_kb": base,
        "messages": null.messages,
        "message_bytes": null.bytes,
        "messages_by_topic": null.by_topic,
    }


def child_writer(spec: dict[str, Any]) -> dict[str, Any]:
    """Insert spec["rate"] rows/s for spec["seconds"]: autocommit INSERTs of spec["batch"]
    rows with ts = NOW(6), started on an absolute schedule (no drift; a late transaction is
    not made up by a shorter pause only, it starts at once). Row bodies are rendered before
    the clock starts, so the loop is cheap. Per transaction: (txn, due, began, committed)."""
    import pymysql

    conn = pymysql.connect(
        host=spec["host"],
        port=spec["port"],
        user=spec["user"],
        password=spec["password"],
        charset="utf8mb4",
        autocommit=True,
    )
    rng = random.Random(decode.SEED + 1)
    rest = decode.COLUMNS[1:]
    template = "(" + ",".join(["%s"] * len(rest)) + ")"
    txns: list[tuple[int, float, float, float]] = []
    with conn.cursor() as cur:
        cur.execute("SET SESSION time_zone = '+00:00'")
        cur.execute("SET SESSION binlog_annotate_row_events = OFF")
        bodies = [
            cur.mogrify(template, decode.make_row(i, rng)[1:])[1:-1] for i in range(LATENCY_POOL)
        ]
        head = f"INSERT INTO {DATABASE}.{LATENCY_TABLE} ({','.join(decode.COLUMNS)},txn,ts) VALUES "
        batch = spec["batch"]
        count = max(1, round(spec["rate"] * spec["seconds"] / batch))
        interval = batch / spec["rate"]
        next_id = first_id = spec.get("first_id", 1)
        t0 = time.time() + 0.1
        for txn in range(count):
            due = t0 + txn * interval
            pause = due - time.time()
            if pause > 0:
                time.sleep(pause)
            values = ",".join(
                f"({row_id},{bodies[row_id % LATENCY_POOL]},{txn},NOW(6))"
                for row_id in range(next_id, next_id + batch)
            )
            next_id += batch
            began = time.time()
            cur.execute(head + values)
            txns.append((txn, due, began, time.time()))
    conn.close()
    late = [began - due for _, due, began, _ in txns]
    return {
        "rows": next_id - first_id,
        "transactions": len(txns),
        "batch": batch,
        "first_due": txns[0][1],
        "last_committed": txns[-1][3],
        "max_late_s": max(late),
        "late_over_10ms": sum(1 for x in late if x > 0.01),
        "cpu_s": round(time.process_time(), 2),
        "txns": txns,
    }


def child_producer(spec: dict[str, Any]) -> dict[str, Any]:
    """The broker's own latency at the writer's pace: bursts of spec["batch"] messages (sampled
    from the throughput phase) on the writer's schedule, with the sink's producer settings
    (warmed up first, as replicad's producer is by then). Each burst carries its send time in
    the header `e2e.sent`; per message: delivery report time - send time."""
    from confluent_kafka import Producer

    samples = pickle.loads(Path(spec["samples"]).read_bytes())
    producer = Producer(spec["settings"])
    topic = spec["topic"]
    acks: list[float] = []
    failed = 0

    def delivered(sent: float, err: Any, _msg: Any) -> None:
        nonlocal failed
        if err is None:
            acks.append(time.time() - sent)
        else:
            failed += 1

    cpu = time.process_time()  # all threads: librdkafka's included
    warm = [("e2e.sent", b"warm-up")]
    for key, value, _ in samples[:100]:
        producer.produce(topic, value, key, headers=warm)
    producer.flush(60)
    batch = spec["batch"]
    count = max(1, round(spec["rate"] * spec["seconds"] / batch))
    interval = batch / spec["rate"]
    sent_messages = 0
    t0 = time.time() + 0.1
    for burst in range(count):
        due = t0 + burst * interval
        while (pause := due - time.time()) > 0:
            producer.poll(pause)  # serves delivery reports while waiting
        sent = time.time()
        headers = [("e2e.sent", repr(sent).encode())]
        report = functools.partial(delivered, sent)
        for i in range(batch):
            key, value, _ = samples[(sent_messages + i) % len(samples)]
            producer.produce(topic, value, key, headers=headers, on_delivery=report)
        sent_messages += batch
        producer.poll(0)
    left = producer.flush(60)
    producer.close()
    return {
        "messages": sent_messages,
        "warm_up": min(100, len(samples)),
        "failed": failed,
        "undelivered": left,
        "span_s": time.time() - t0,
        "producer_cpu_s": round(time.process_time() - cpu, 2),
        "produce_to_ack_ms": percentiles(acks),
    }


def run_child(args: argparse.Namespace) -> int:
    spec = json.loads(args.spec)
    children = {"writer": child_writer, "producer": child_producer, "decode": child_decode}
    result = common.child_outcome(lambda: children[args.child](spec))
    if "out" in spec:
        Path(spec["out"]).write_text(json.dumps(result))
    else:
        print(json.dumps(result))
    return 0


def child_command(kind: str, spec: dict[str, Any]) -> list[str]:
    return [
        sys.executable,
        str(Path(__file__).resolve()),
        "--child",
        kind,
        "--spec",
        json.dumps(spec),
    ]


def measure_decode(
    segments: list[Any], encode: bool, bootstrap: str, prefix: str
) -> dict[str, Any]:
    spec = {"segments": segments, "encode": encode, "bootstrap": bootstrap, "prefix": prefix}
    code, wall, sampled_kb, out = common.run_process(child_command("decode", spec), capture=True)
    result = common.child_result(code, out)
    result["wall_s"] = wall
    result["peak_rss_kb"] = common.peak_kb(result.get("peak_rss_kb"), sampled_kb)
    return result


# --------------------------------------------------------------------------- Kafka


def kafka_reachable(bootstrap: str) -> bool:
    from confluent_kafka.admin import AdminClient

    try:  # log_level 0: no connection-refused lines while it is down
        AdminClient({"bootstrap.servers": bootstrap, "log_level": 0}).list_topics(timeout=5)
    except Exception:  # KafkaException, or anything librdkafka raises: not reachable
        return False
    return True


def ensure_kafka(bootstrap: str) -> None:
    if kafka_reachable(bootstrap):
        return
    subprocess.run(["bash", str(SERVICES_SCRIPT), "up", "kafka"], check=True)
    if not kafka_reachable(bootstrap):
        raise SystemExit(f"no Kafka API at {bootstrap}")


def sink_producer_settings(bootstrap: str) -> dict[str, Any]:
    """The librdkafka settings replicad's at-least-once Kafka sink uses (from replicad itself,
    so they cannot drift), without its error callback."""
    from replicad.config import KafkaSinkConfig
    from replicad.sinks.kafka import producer_settings

    settings = producer_settings(KafkaSinkConfig(bootstrap_servers=bootstrap), "e2e-bench")
    settings["client.id"] = "replicad-e2e-bench"
    return settings


def create_topic(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(30)


def delete_topics(bootstrap: str, prefix: str) -> list[str]:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    names = [t for t in admin.list_topics(timeout=10).topics if t.startswith(prefix + ".")]
    if names:
        for future in admin.delete_topics(names, operation_timeout=30).values():
            future.result(60)
    return sorted(names)


class TopicReader:
    """Reads one topic from its first offset by assign(): no group, nothing committed;
    read_committed (librdkafka's default), so an exactly-once run's messages count once
    their transaction committed."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        from confluent_kafka import Consumer

        self.topic = topic
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"replicad-e2e-{uuid.uuid4().hex}",  # required; never joined
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "enable.partition.eof": False,
            }
        )
        self.assigned = False

    def try_assign(self) -> bool:
        """Assign every partition once the topic exists (replicad creates it on demand)."""
        from confluent_kafka import OFFSET_BEGINNING, TopicPartition

        if self.assigned:
            return True
        meta = self.consumer.list_topics(self.topic, timeout=5).topics.get(self.topic)
        if meta is None or meta.error is not None or not meta.partitions:
            return False
        self.consumer.assign(
            [TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in sorted(meta.partitions)]
        )
        self.assigned = True
        return True

    def batch(self, timeout: float = CONSUME_BATCH_TIMEOUT_S) -> list[Any]:
        """Messages (errors dropped: librdkafka retries transient ones; fatal ones raise)."""
        from confluent_kafka import KafkaException

        if not self.try_assign():
            time.sleep(0.05)
            return []
        out = []
        for msg in self.consumer.consume(num_messages=10_000, timeout=timeout):
            err = msg.error()
            if err is None:
                out.append(msg)
            elif err.fatal():
                raise KafkaException(err)
        return out

    def one(self, timeout: float) -> Any | None:
        """One message as soon as it arrives (consume() would wait to fill its batch)."""
        from confluent_kafka import KafkaException

        if not self.try_assign():
            time.sleep(0.05)
            return None
        msg = self.consumer.poll(timeout)
        if msg is None:
            return None
        err = msg.error()
        if err is None:
            return msg
        if err.fatal():
            raise KafkaException(err)
        return None

    def close(self) -> None:
        self.consumer.close()


def _op_of(value: bytes) -> str:
    """The envelope's op, found near its end (`..."op":"c","ts_ms":...}`) without parsing."""
    i = value.rfind(b'"op":"')
    if i < 0:
        return str(json.loads(value)["op"])
    return chr(value[i + 6])


# --------------------------------------------------------------------------- replicad


@dataclass(slots=True)
class Replicad:
    workdir: Path
    server: decode.Server
    bootstrap: str
    pipeline: str
    tls: str
    proc: subprocess.Popen[bytes] | None = None
    spawned: float = 0.0
    exit_code: int | None = None

    @property
    def config_path(self) -> Path:
        return self.workdir / "replicad.yaml"

    @property
    def log_path(self) -> Path:
        return self.workdir / "replicad.log"

    def write_config(self, start: dict[str, Any]) -> None:
        config = {
            "pipeline": self.pipeline,
            "source": {
                "host": self.server.host,
                "port": self.server.port,
                "user": self.server.repl_user,
                "password_env": "REPLICAD_E2E_PASSWORD",
                "server_id": self.server.server_id,
                "tls": {"mode": self.tls},
                "start": start,
            },
            # At-least-once defaults (tombstones on, headers on, 1 partition per topic).
            "sinks": {"kafka": {"bootstrap_servers": self.bootstrap, "prefix": self.pipeline}},
            "coordination": {"local": {"path": str(self.workdir / "position.json")}},
            "snapshot": {"signal": {"database": DATABASE, "table": "replicad_signal"}},
            "log": {"format": "json", "level": "info"},
        }
        self.config_path.write_text(json.dumps(config, indent=2) + "\n")  # JSON is YAML

    def start(self) -> int:
        env = {**os.environ, "REPLICAD_E2E_PASSWORD": self.server.repl_password}
        cmd = [sys.executable, "-m", "replicad.cli", "run", "-c", str(self.config_path)]
        with open(self.log_path, "ab") as log:
            self.spawned = time.perf_counter()
            self.proc = subprocess.Popen(
                cmd, cwd=self.workdir, env=env, stdout=log, stderr=subprocess.STDOUT
            )
        return self.proc.pid

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def cpu_s(self) -> float | None:
        return common.cpu_seconds(self.pid) if self.alive() else None

    def peak_rss_mb(self) -> float | None:
        kb = common.vm_kb("VmHWM", self.pid) if self.alive() else None
        return kb / 1024 if kb is not None else None

    def exit_status(self) -> str:
        code = self.proc.poll() if self.proc is not None else None
        return "(running)" if code is None else str(code)

    def stop(self, timeout: float = 60.0) -> int | None:
        if self.proc is None:
            return None
        common.stop_process(self.proc, timeout)
        self.exit_code = self.proc.returncode
        return self.exit_code

    def log_events(self) -> list[dict[str, Any]]:
        if not self.log_path.exists():
            return []
        events = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:
                events.append({"event": "(not JSON)", "level": "raw", "text": line})
        return events

    def log_tail(self, lines: int = 40) -> str:
        if not self.log_path.exists():
            return "(no log)"
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


class ReplicadDied(RuntimeError):
    pass


# --------------------------------------------------------------------------- phases


def percentiles(values: list[float]) -> dict[str, float] | None:
    """Nearest-rank p50/p90/p99 and max, in ms (values in seconds)."""
    if not values:
        return None
    ordered = sorted(values)
    n = len(ordered)

    def rank(p: float) -> float:
        return ordered[min(n - 1, max(0, int(-(-p * n // 100)) - 1))] * 1000

    return {
        "p50": round(rank(50), 2),
        "p90": round(rank(90), 2),
        "p99": round(rank(99), 2),
        "max": round(ordered[-1] * 1000, 2),
        "n": n,
    }


@dataclass(slots=True)
class Profiler:
    """py-spy sampling a process (`record --format raw`; idle threads, e.g. the event loop
    waiting in epoll, are not sampled). py-spy pauses the target for every sample (without
    that, --nonblocking, a quarter of the stacks came out truncated), so the profiled run's
    timings are inflated (about 2x here): use it for where the time goes, not how much."""

    exe: str
    output: Path
    proc: subprocess.Popen[bytes] | None = None

    def start(self, pid: int) -> None:
        cmd = [self.exe, "record", "--pid", str(pid), "--rate", "250", "--format", "raw",
               "--output", str(self.output)]  # fmt: skip
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.DEVNULL, stderr=open(self.output.with_suffix(".log"), "wb")
        )

    def stop(self) -> dict[str, Any]:
        if self.proc is None:
            return {}
        common.stop_process(self.proc, 60, signal.SIGINT)  # py-spy writes its output on SIGINT
        if not self.output.exists():
            log = self.output.with_suffix(".log")
            return {"error": log.read_text(errors="replace")[-2000:] if log.exists() else "?"}
        return top_frames(self.output)


def top_frames(raw: Path, top: int = 20) -> dict[str, Any]:
    """Self and inclusive sample shares per function from py-spy's raw (collapsed) stacks,
    `frame;frame;... count` with frames `function (file:line)`; lines are merged."""
    own: dict[str, int] = {}
    inclusive: dict[str, int] = {}
    total = 0
    for line in raw.read_text(errors="replace").splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        total += count
        frames = []
        for frame in stack.split(";"):
            name, _, where = frame.partition(" (")
            path = where.rsplit(":", 1)[0]
            for marker in ("/site-packages/", "/replicad/", "/lib/python3"):
                if marker in path:
                    path = marker.strip("/") + "/" + path.split(marker, 1)[1]
                    break
            frames.append(f"{name} ({path})" if where else name)
        own[frames[-1]] = own.get(frames[-1], 0) + count
        for frame in set(frames):
            inclusive[frame] = inclusive.get(frame, 0) + count

    def share(table: dict[str, int]) -> list[tuple[str, float]]:
        ranked = sorted(table.items(), key=lambda kv: -kv[1])[:top]
        return [(name, round(100 * n / total, 1)) for name, n in ranked]

    return {"samples": total, "self_pct": share(own), "inclusive_pct": share(inclusive)}


def throughput_phase(
    replicad: Replicad,
    reader: TopicReader,
    plan: decode.Plan,
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
                counts[_op_of(value)] += 1
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
    server: decode.Server,
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
    writer = subprocess.Popen(child_command("writer", spec), env=common.python_env())
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
    server: decode.Server,
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
        [sys.executable, "-m", "replicad.cli", "snapshot", "request",
         f"{DATABASE}.{SNAPSHOT_TABLE}", "--chunk-rows", str(args.snapshot_chunk_rows),
         "-c", str(replicad.config_path)],
        env=env, capture_output=True, timeout=60,
    )  # fmt: skip
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
        child = subprocess.Popen(child_command("producer", spec), env=common.python_env())
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


# --------------------------------------------------------------------------- reporting


def _mb(kb: int | None) -> str:
    return f"{kb / 1024:.1f}" if kb is not None else "-"


def _rate(n: float, seconds: float | None) -> str:
    return f"{n / seconds:,.0f}" if seconds else "-"


def _threads(groups: dict[str, float] | None) -> str:
    return ", ".join(f"{k} {v:.2f}" for k, v in sorted((groups or {}).items())) or "-"


def _cpu_line(cpu: dict[str, Any]) -> str:
    """The processes' CPU seconds, and what the rest of the machine used meanwhile (another
    test run, for instance, which makes the phase's figures unreliable)."""
    procs = {k: v for k, v in cpu.items() if k not in ("wall_s", "machine busy", "machine total")}
    other = cpu["machine busy"] - sum(procs.values())
    return (
        f"CPU s over {cpu['wall_s']:.2f} s: "
        + ", ".join(f"{k} {v:.2f}" for k, v in procs.items())
        + f", other processes {max(other, 0.0):.2f}; machine busy {cpu['machine busy']:.2f} "
        f"of {cpu['machine total']:.2f}"
    )


def _pct_row(label: str, p: dict[str, float] | None) -> tuple[str, ...]:
    if p is None:
        return (label, "-", "-", "-", "-", "0")
    return (label, *(f"{p[k]:.1f}" for k in ("p50", "p90", "p99", "max")), f"{p['n']:,}")


def report_throughput(results: dict[str, Any], verdicts: list[str]) -> None:
    t = results["throughput"]
    rows = sum(t["expected"][op] for op in OPS)
    print(
        f"\nThroughput: {rows:,} row changes = {t['messages']:,} messages (tombstones on: one "
        f"more per delete), {t['message_bytes'] / 2**20:.1f} MiB of keys and values"
    )
    head = ("", "seconds", "rows/s", "msgs/s", "CPU s", "peak RSS MB")
    lines: list[tuple[str, ...]] = []
    for label, name in (
        ("decode only (replicad decoder, from disk)", "decode_only"),
        ("decode + KafkaSink.publish, null producer", "decode_encode"),
    ):
        d = results.get(name) or {}
        if d.get("error") or "seconds" not in d:
            lines.append((label, "FAILED", "", "", "", ""))
            continue
        msgs = d.get("messages_by_topic", {}).get(f"{results['pipeline']}.{DATABASE}.{TABLE}")
        lines.append(
            (
                label,
                f"{d['seconds']:.2f}",
                _rate(rows, d["seconds"]),
                _rate(msgs, d["seconds"]) if msgs else "-",
                f"{d['cpu_s']:.2f}",
                _mb(d.get("peak_rss_kb")),
            )
        )
    rss, cpu_s = t["replicad_peak_rss_mb"], t["replicad_cpu_s"]
    lines.append(
        (
            "end to end (spawn -> last message consumed)",
            f"{t['e2e_s']:.2f}",
            _rate(rows, t["e2e_s"]),
            _rate(t["messages"], t["e2e_s"]),
            f"{cpu_s:.2f}" if cpu_s is not None else "-",
            f"{rss:.1f}" if rss is not None else "-",
        )
    )
    lines.append(("  start-up (spawn -> first message)", f"{t['startup_s']:.2f}", *[""] * 4))
    lines.append(
        (
            "  streaming (first -> last message)",
            f"{t['streaming_s']:.2f}",
            _rate(rows, t["streaming_s"]),
            _rate(t["messages"], t["streaming_s"]),
            "",
            "",
        )
    )
    ceiling = results.get("ceiling")
    if ceiling:
        lines.append(
            (
                "broker ceiling: same messages, producer only",
                f"{ceiling['seconds']:.2f}",
                "",
                _rate(ceiling["messages"], ceiling["seconds"]),
                f"{ceiling['cpu']['this script']:.2f}",
                "",
            )
        )
    print(common.grid(head, lines))
    print(
        "CPU s and peak RSS (VmHWM): the decoding child's; for end to end, the replicad process "
        "(utime+stime); for the ceiling, the producing process"
    )
    print("e2e phase " + _cpu_line(t["cpu"]))
    print(f"replicad's CPU s by thread: {_threads(t.get('replicad_threads_cpu_s'))}")
    if ceiling:
        print("ceiling phase " + _cpu_line(ceiling["cpu"]))
    dec = results.get("decode_only") or {}
    if dec.get("seconds"):
        ratio = t["e2e_s"] / dec["seconds"]
        stream_ratio = t["streaming_s"] / dec["seconds"]
        ok = "MET" if ratio <= TARGET_RATIO else "MISSED"
        verdict = (
            f"e2e time / decode-only time = {ratio:.2f} (streaming only: {stream_ratio:.2f}); "
            f"target <= {TARGET_RATIO:.0f}: {ok}"
        )
        print(verdict)
        verdicts.append(verdict)
    profile = t.get("profile")
    if profile:
        if profile.get("error"):
            print(f"py-spy failed: {profile['error']}")
        else:
            print(
                f"\npy-spy on replicad during the e2e phase: {profile['samples']:,} samples "
                "(the timings above are inflated by the sampling)"
            )
            for title, key in (("self", "self_pct"), ("inclusive", "inclusive_pct")):
                print(f"  top {title} %:")
                for name, pct in profile[key]:
                    print(f"    {pct:5.1f}  {name}")


def report_latency(results: dict[str, Any], verdicts: list[str]) -> None:
    lat = results["latency"]
    wr = lat["writer"]
    args = results["args"]
    print(
        f"\nLatency: {wr['rows']:,} rows in {wr['transactions']:,} autocommit INSERTs of "
        f"{wr['batch']} rows, target {args['rate']:,} rows/s for {args['seconds']:g} s: achieved "
        f"{lat['achieved_rows_per_s']:,.0f} rows/s, max start lateness "
        f"{wr['max_late_s'] * 1000:.1f} ms; consumed {lat['consumed']:,}; Kafka timestamps: "
        f"{lat['kafka_timestamp_type']}"
    )
    head = ("ms", "p50", "p90", "p99", "max", "n")
    lines = [
        _pct_row("commit (ts=NOW(6)) -> consumed", lat["commit_to_consume_ms"]),
        _pct_row("commit (ts=NOW(6)) -> produce() timestamp", lat["commit_to_produce_ts_ms"]),
        _pct_row("COMMIT returned to client -> consumed", lat["commit_ok_to_consume_ms"]),
    ]
    base = results.get("broker_latency")
    if base:
        lines.append(
            _pct_row("broker alone: produce() -> delivery report", base["produce_to_ack_ms"])
        )
        lines.append(_pct_row("broker alone: produce() -> consumed", base["produce_to_consume_ms"]))
    during = results.get("latency_snapshot")
    if during:
        lines.append(
            _pct_row("commit -> consumed, incremental snapshot running",
                     during["commit_to_consume_ms"])
        )  # fmt: skip
    print(common.grid(head, lines))
    if during:
        snap = during["snapshot"]
        print(
            f"during the second phase the snapshot emitted {snap['rows_emitted']:,} reads in "
            f"{snap['chunks']} chunks of {snap['chunk_rows']:,} rows (finished: "
            f"{snap['done_during_phase']}); achieved {during['achieved_rows_per_s']:,.0f} rows/s, "
            f"consumed {during['consumed']:,} of {during['writer']['rows']:,}"
        )
    print("latency phase " + _cpu_line(lat["cpu"]))
    print(f"replicad's CPU s by thread: {_threads(lat.get('replicad_threads_cpu_s'))}")
    if base:
        print("broker-alone phase " + _cpu_line(base["cpu"]))
    p99 = (lat["commit_to_consume_ms"] or {}).get("p99")
    if p99 is not None:
        ok = "MET" if p99 <= TARGET_P99_MS else "MISSED"
        verdict = (
            f"p99 commit -> consume {p99:.1f} ms (an upper bound of commit -> ack); target p99 "
            f"commit -> ack <= {TARGET_P99_MS:.0f} ms at {args['rate']:,} rows/s: {ok}"
        )
        print(verdict)
        verdicts.append(verdict)


def report(results: dict[str, Any]) -> list[str]:
    """Print the report; returns the verdict lines (also kept in the JSON)."""
    verdicts: list[str] = []
    w = results["workload"]
    print(
        f"MariaDB {w['server_version']} -> replicad run (Kafka sink, at-least-once defaults) -> "
        f"Kafka API at {results['bootstrap']} ({results['broker']}); {os.cpu_count()} CPUs, "
        f"load average at start {results['loadavg_start']}"
    )
    c = w["counts"]
    print(
        f"load: {c['c']:,} inserts, {c['u']:,} updates, {c['d']:,} deletes in "
        f"{ROWS_PER_TRANSACTION}-row transactions, {w['seconds']:.1f} s "
        f"({_rate(sum(c.values()), w['seconds'])} rows/s) with replicad stopped; binlog "
        f"{w['start']['file']}:{w['start']['pos']} -> {w['end']['file']}:{w['end']['pos']} "
        f"({w['bytes'] / 2**20:.1f} MiB)"
    )
    if results.get("throughput"):
        report_throughput(results, verdicts)
    if results.get("latency"):
        report_latency(results, verdicts)
    r = results.get("replicad", {})
    if r:
        print(
            f"\nreplicad: exit code {r.get('exit_code')} after SIGTERM; log lines by level "
            f"{r.get('log_levels')}; warnings/errors: {r.get('notable') or 'none'}"
        )
    return verdicts


# --------------------------------------------------------------------------- main


def _summarize_log(replicad: Replicad) -> dict[str, Any]:
    levels: dict[str, int] = {}
    notable: dict[str, int] = {}
    for event in replicad.log_events():
        level = str(event.get("level"))
        levels[level] = levels.get(level, 0) + 1
        if level in ("warning", "error", "critical", "raw"):
            name = str(event.get("event"))
            notable[name] = notable.get(name, 0) + 1
    return {"log_levels": levels, "notable": notable, "log": str(replicad.log_path)}


def run(args: argparse.Namespace) -> int:
    wall_started = time.perf_counter()
    server = decode.server_of(args)
    decode.ensure_server(server)
    plan = decode.Plan.for_rows(args.rows)
    pipeline = f"e2e-{uuid.uuid4().hex[:8]}"
    workdir = Path(tempfile.mkdtemp(prefix="replicad-e2e-"))
    pids = service_pids()
    broker: common.PrivateKafka | None = None
    if args.private_kafka:
        broker = common.PrivateKafka(workdir / "kafka")
        bootstrap = broker.start()
        pids = {
            "kafka (private)": broker.pid,
            **{k: v for k, v in pids.items() if k == "mariadbd"},
        }
    else:
        bootstrap = args.bootstrap
        ensure_kafka(bootstrap)
        pids = service_pids()  # after ensure_kafka: it may have (re)started the broker
    profiler = None
    if args.py_spy:
        profiler = Profiler(args.py_spy, workdir / "py-spy.txt")
    replicad = Replicad(workdir, server, bootstrap, pipeline, args.tls)
    results: dict[str, Any] = {
        "args": {
            k: v
            for k, v in vars(args).items()
            if k not in ("child", "spec", "password", "repl_password")
        },
        "bootstrap": bootstrap,
        "broker": "private Apache Kafka" if broker else "scripts/services.sh broker",
        "pipeline": pipeline,
        "workdir": str(workdir),
        "loadavg_start": " ".join(Path("/proc/loadavg").read_text().split()[:3]),
        "services": pids,
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    problems: list[str] = []
    readers: list[TopicReader] = []
    try:
        say = functools.partial(print, file=sys.stderr)
        say(f"set-up: database {DATABASE}, pipeline/prefix {pipeline}, Kafka {bootstrap}")
        setup_database(server, args.snapshot_rows)
        say(f"loading {plan.total:,} row changes (replicad stopped) ...")
        workload = load(server, plan)
        results["workload"] = {k: v for k, v in workload.items() if k != "segments"}
        segments = workload["segments"]
        replicad.write_config(workload["start"])

        say("decode only / decode + encode, on the same binlog range ...")
        results["decode_only"] = measure_decode(segments, False, bootstrap, pipeline)
        results["decode_encode"] = measure_decode(segments, True, bootstrap, pipeline)
        for name in ("decode_only", "decode_encode"):
            d = results[name]
            if d.get("error"):
                problems.append(f"{name} FAILED:\n{d['error']}")
            elif d["counts"] != plan.counts():
                problems.append(f"{name} counted {d['counts']}, the load made {plan.counts()}")

        say("end to end: starting replicad ..." + (" (profiled by py-spy)" if profiler else ""))
        reader = TopicReader(bootstrap, f"{pipeline}.{DATABASE}.{TABLE}")
        readers.append(reader)
        t = throughput_phase(replicad, reader, plan, pids, profiler)
        samples = t.pop("samples")
        results["throughput"] = t
        if t["counts"] != t["expected"]:
            problems.append(f"consumer counted {t['counts']}, expected {t['expected']}")
        enc = results["decode_encode"]
        null_count = enc.get("messages_by_topic", {}).get(reader.topic)
        if not enc.get("error") and null_count != t["messages"]:
            problems.append(
                f"the null producer got {null_count} messages for {reader.topic}, "
                f"the topic {t['messages']:,}"
            )

        if not args.no_ceiling:
            say("broker ceiling ...")
            ceiling = broker_ceiling(bootstrap, f"{pipeline}.ceiling", samples, t["messages"], pids)
            results["ceiling"] = ceiling
            if ceiling["delivered"] != t["messages"]:
                problems.append(f"broker ceiling: {ceiling}")

        if args.seconds > 0:
            say(f"latency: {args.rate:,} rows/s for {args.seconds:g} s ...")
            latency_topic = f"{pipeline}.{DATABASE}.{LATENCY_TABLE}"
            create_topic(bootstrap, latency_topic)
            lat_reader = TopicReader(bootstrap, latency_topic)
            readers.append(lat_reader)
            lat = latency_phase(replicad, lat_reader, server, args, workdir, pids)
            results["latency"] = lat
            if lat["consumed"] != lat["writer"]["rows"]:
                problems.append(
                    f"latency: consumed {lat['consumed']:,} of {lat['writer']['rows']:,} rows"
                )
            say("broker latency baseline (same pace, producer only) ...")
            base = broker_latency(
                replicad, bootstrap, f"{pipeline}.baseline", samples, args, workdir, pids
            )
            results["broker_latency"] = base
            if base["consumed"] != base["messages"] or base["failed"] or base["undelivered"]:
                problems.append(f"broker latency baseline: {base}")
            if args.snapshot_rows:
                say(f"latency again, while an incremental snapshot reads {args.snapshot_rows:,} "
                    "rows ...")  # fmt: skip
                results["latency_snapshot"] = snapshot_latency_phase(
                    replicad, lat_reader, server, args, workdir, pids, lat["writer"]["rows"] + 1
                )
    except (ReplicadDied, TimeoutError, RuntimeError) as exc:
        problems.append(f"{type(exc).__name__}: {exc}\nreplicad log tail:\n{replicad.log_tail()}")
    finally:
        for reader in readers:
            reader.close()
        code = replicad.stop()
        results["replicad"] = {"exit_code": code, **_summarize_log(replicad)}
        if code not in (0, None):
            problems.append(f"replicad exited {code}; log tail:\n{replicad.log_tail()}")
        if not args.keep:
            if broker is None:
                try:
                    results["topics_deleted"] = delete_topics(bootstrap, pipeline)
                except Exception as exc:  # clean-up must not hide the results
                    problems.append(f"deleting topics failed: {exc}")
            conn = server.connect()
            try:
                with conn.cursor() as cur:
                    cur.execute(f"DROP DATABASE IF EXISTS {DATABASE}")
            finally:
                conn.close()
        if broker is not None:
            broker.stop()  # its data is in the temp dir

    results["wall_s"] = round(time.perf_counter() - wall_started, 1)
    results["verdicts"] = report(results) if "workload" in results else []
    results["problems"] = problems
    keep_files = args.keep or bool(problems) or profiler is not None
    print(
        f"\nwall time of the run: {results['wall_s']:.1f} s"
        + (f"; replicad's config, log and position in {workdir}" if keep_files else "")
    )
    for problem in problems:
        print(f"\n!!! {problem}", file=sys.stderr)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, default=str) + "\n")
        print(f"results written to {args.json}")
    if not keep_files:
        shutil.rmtree(workdir, ignore_errors=True)
    return 1 if problems else 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=DEFAULT_ROWS, help="row changes to load")
    parser.add_argument("--rate", type=int, default=DEFAULT_RATE, help="latency rows/s")
    parser.add_argument(
        "--seconds", type=float, default=DEFAULT_SECONDS, help="latency phase length (0: skip it)"
    )
    parser.add_argument(
        "--batch", type=int, default=DEFAULT_BATCH, help="rows per latency transaction"
    )
    parser.add_argument(
        "--snapshot-rows",
        type=int,
        default=0,
        help="then repeat the latency phase while an incremental snapshot reads a table of "
        "this many rows (0: skip)",
    )
    parser.add_argument("--snapshot-chunk-rows", type=int, default=10_000)
    parser.add_argument("--json", metavar="PATH", help="write the results as JSON to PATH")
    parser.add_argument("--keep", action="store_true", help="keep the topics, database, files")
    parser.add_argument("--no-ceiling", action="store_true", help="skip the broker ceiling")
    parser.add_argument("--bootstrap", default="127.0.0.1:9092", help="Kafka bootstrap servers")
    parser.add_argument(
        "--private-kafka",
        action="store_true",
        help="start a private single-node Apache Kafka for the run instead of using --bootstrap",
    )
    parser.add_argument("--py-spy", metavar="EXE", help="profile replicad's throughput phase")
    parser.add_argument("--tls", default="disabled", help="replicad's source.tls.mode")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=3306, help="MariaDB port")
    parser.add_argument("--user", default="root")
    parser.add_argument("--password", default="root")
    parser.add_argument("--repl-user", default="repl")
    parser.add_argument("--repl-password", default="repl")
    parser.add_argument("--server-id", type=int, default=REPLICAD_SERVER_ID, help=argparse.SUPPRESS)
    child = parser.add_argument_group("internal: a measured child process")
    child.add_argument("--child", choices=("decode", "writer", "producer"))
    child.add_argument("--spec", default="{}")
    args = parser.parse_args(argv)
    if args.rows < 30:
        parser.error("--rows must be at least 30")
    if args.rate < 1 or args.batch < 1:
        parser.error("--rate and --batch must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child:
        return run_child(args)
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
