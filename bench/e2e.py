#!/usr/bin/env python3
"""End-to-end benchmark: MariaDB -> `replicad run` -> Kafka -> a consumer.

One run, on the local MariaDB of scripts/services.sh and Apache Kafka: by default the
services' broker at --bootstrap (scripts/services.sh up kafka), or with --private-kafka a
private single-node Apache Kafka started for the run on a free port
(bench/harness/kafka_broker.py's PrivateKafka, scripts/services.sh kafka-instance) and stopped
after it.

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
import json
import shutil
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness import kafka_broker, mariadb
from bench.harness.kafka_broker import TopicReader, create_topic, delete_topics, ensure_kafka
from bench.harness.procstat import service_pids
from bench.harness.replicad_process import Profiler, Replicad, ReplicadDied
from bench.measure.e2e_children import measure_decode, run_child
from bench.measure.e2e_phases import (
    broker_ceiling,
    broker_latency,
    latency_phase,
    snapshot_latency_phase,
    throughput_phase,
)
from bench.reports.e2e_report import report
from bench.workloads import decode_rows
from bench.workloads.e2e_load import DATABASE, LATENCY_TABLE, TABLE, load, setup_database

DEFAULT_ROWS = 200_000
DEFAULT_RATE = 5_000
DEFAULT_SECONDS = 20.0
DEFAULT_BATCH = 100  # rows per latency transaction: 50 transactions/s at 5,000 rows/s
REPLICAD_SERVER_ID = 91235  # decode.py's peer uses 91234


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


@dataclass
class E2ERun:
    """One run's set-up and what it has found so far."""

    args: argparse.Namespace
    server: mariadb.Server
    plan: decode_rows.Plan
    pipeline: str
    workdir: Path
    bootstrap: str
    broker: kafka_broker.PrivateKafka | None
    pids: dict[str, int]
    replicad: Replicad
    results: dict[str, Any]
    problems: list[str] = field(default_factory=list)
    readers: list[TopicReader] = field(default_factory=list)

    def reader(self, table: str) -> TopicReader:
        reader = TopicReader(self.bootstrap, f"{self.pipeline}.{DATABASE}.{table}")
        self.readers.append(reader)
        return reader


def say(message: str) -> None:
    print(message, file=sys.stderr)


def start_kafka(
    args: argparse.Namespace, workdir: Path
) -> tuple[kafka_broker.PrivateKafka | None, str, dict[str, int]]:
    """The broker (a private one with --private-kafka), its bootstrap address and the pids of
    the services whose CPU each phase reports."""
    if not args.private_kafka:
        ensure_kafka(args.bootstrap)
        return None, args.bootstrap, service_pids()  # after ensure_kafka: it may restart it
    pids = service_pids()
    broker = kafka_broker.PrivateKafka(workdir / "kafka")
    bootstrap = broker.start()
    pids = {"kafka (private)": broker.pid, **{k: v for k, v in pids.items() if k == "mariadbd"}}
    return broker, bootstrap, pids


def set_up(args: argparse.Namespace) -> E2ERun:
    server = mariadb.server_of(args)
    mariadb.ensure_server(server)
    pipeline = f"e2e-{uuid.uuid4().hex[:8]}"
    workdir = Path(tempfile.mkdtemp(prefix="replicad-e2e-"))
    broker, bootstrap, pids = start_kafka(args, workdir)
    replicad = Replicad(workdir, server, bootstrap, pipeline, args.tls, DATABASE)
    hidden = ("child", "spec", "password", "repl_password")
    results: dict[str, Any] = {
        "args": {k: v for k, v in vars(args).items() if k not in hidden},
        "bootstrap": bootstrap,
        "broker": "private Apache Kafka" if broker else "scripts/services.sh broker",
        "pipeline": pipeline,
        "workdir": str(workdir),
        "loadavg_start": " ".join(Path("/proc/loadavg").read_text().split()[:3]),
        "services": pids,
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    plan = decode_rows.Plan.for_rows(args.rows)
    return E2ERun(args, server, plan, pipeline, workdir, bootstrap, broker, pids, replicad, results)


def load_and_decode(e2e: E2ERun) -> None:
    """The load, then decode-only and decode + encode on its binlog range."""
    say(f"set-up: database {DATABASE}, pipeline/prefix {e2e.pipeline}, Kafka {e2e.bootstrap}")
    setup_database(e2e.server, e2e.args.snapshot_rows)
    say(f"loading {e2e.plan.total:,} row changes (replicad stopped) ...")
    workload = load(e2e.server, e2e.plan)
    e2e.results["workload"] = {k: v for k, v in workload.items() if k != "segments"}
    segments = workload["segments"]
    e2e.replicad.write_config(workload["start"])
    say("decode only / decode + encode, on the same binlog range ...")
    for name, encode in (("decode_only", False), ("decode_encode", True)):
        e2e.results[name] = measure_decode(segments, encode, e2e.bootstrap, e2e.pipeline)
    for name in ("decode_only", "decode_encode"):
        d = e2e.results[name]
        if d.get("error"):
            e2e.problems.append(f"{name} FAILED:\n{d['error']}")
        elif d["counts"] != e2e.plan.counts():
            e2e.problems.append(f"{name} counted {d['counts']}, the load made {e2e.plan.counts()}")


def end_to_end(e2e: E2ERun, profiler: Profiler | None) -> list[Any]:
    """replicad started and caught up with the load; the consumed messages it sampled."""
    say("end to end: starting replicad ..." + (" (profiled by py-spy)" if profiler else ""))
    reader = e2e.reader(TABLE)
    t = throughput_phase(e2e.replicad, reader, e2e.plan, e2e.pids, profiler)
    samples: list[Any] = t.pop("samples")
    e2e.results["throughput"] = t
    if t["counts"] != t["expected"]:
        e2e.problems.append(f"consumer counted {t['counts']}, expected {t['expected']}")
    enc = e2e.results["decode_encode"]
    null_count = enc.get("messages_by_topic", {}).get(reader.topic)
    if not enc.get("error") and null_count != t["messages"]:
        e2e.problems.append(
            f"the null producer got {null_count} messages for {reader.topic}, "
            f"the topic {t['messages']:,}"
        )
    return samples


def ceiling(e2e: E2ERun, samples: list[Any]) -> None:
    say("broker ceiling ...")
    messages = e2e.results["throughput"]["messages"]
    topic = f"{e2e.pipeline}.ceiling"
    result = broker_ceiling(e2e.bootstrap, topic, samples, messages, e2e.pids)
    e2e.results["ceiling"] = result
    if result["delivered"] != messages:
        e2e.problems.append(f"broker ceiling: {result}")


def latencies(e2e: E2ERun, samples: list[Any]) -> None:
    """Latency with replicad caught up, the broker alone at the same pace, and (with
    --snapshot-rows) latency again while an incremental snapshot runs."""
    args, replicad, workdir, pids = e2e.args, e2e.replicad, e2e.workdir, e2e.pids
    say(f"latency: {args.rate:,} rows/s for {args.seconds:g} s ...")
    create_topic(e2e.bootstrap, f"{e2e.pipeline}.{DATABASE}.{LATENCY_TABLE}")
    lat_reader = e2e.reader(LATENCY_TABLE)
    lat = latency_phase(replicad, lat_reader, e2e.server, args, workdir, pids)
    e2e.results["latency"] = lat
    if lat["consumed"] != lat["writer"]["rows"]:
        e2e.problems.append(
            f"latency: consumed {lat['consumed']:,} of {lat['writer']['rows']:,} rows"
        )
    say("broker latency baseline (same pace, producer only) ...")
    topic = f"{e2e.pipeline}.baseline"
    base = broker_latency(replicad, e2e.bootstrap, topic, samples, args, workdir, pids)
    e2e.results["broker_latency"] = base
    if base["consumed"] != base["messages"] or base["failed"] or base["undelivered"]:
        e2e.problems.append(f"broker latency baseline: {base}")
    if args.snapshot_rows:
        say(f"latency again, while an incremental snapshot reads {args.snapshot_rows:,} rows ...")
        first_id = lat["writer"]["rows"] + 1
        e2e.results["latency_snapshot"] = snapshot_latency_phase(
            replicad, lat_reader, e2e.server, args, workdir, pids, first_id
        )


def clean_up(e2e: E2ERun) -> None:
    """Readers closed, replicad stopped (its exit and log summarised); unless --keep, the
    topics (on the shared broker) and the database dropped; the private broker stopped."""
    for reader in e2e.readers:
        reader.close()
    code = e2e.replicad.stop()
    e2e.results["replicad"] = {"exit_code": code, **_summarize_log(e2e.replicad)}
    if code not in (0, None):
        e2e.problems.append(f"replicad exited {code}; log tail:\n{e2e.replicad.log_tail()}")
    if not e2e.args.keep:
        if e2e.broker is None:
            try:
                e2e.results["topics_deleted"] = delete_topics(e2e.bootstrap, e2e.pipeline)
            except Exception as exc:  # clean-up must not hide the results
                e2e.problems.append(f"deleting topics failed: {exc}")
        conn = e2e.server.connect()
        try:
            with conn.cursor() as cur:
                cur.execute(f"DROP DATABASE IF EXISTS {DATABASE}")
        finally:
            conn.close()
    if e2e.broker is not None:
        e2e.broker.stop()  # its data is in the temp dir


def finish(e2e: E2ERun, wall_s: float, keep_files: bool) -> int:
    """The report, the problems, the JSON file; the exit status."""
    results, problems = e2e.results, e2e.problems
    results["wall_s"] = round(wall_s, 1)
    results["verdicts"] = report(results) if "workload" in results else []
    results["problems"] = problems
    keep_files = keep_files or bool(problems)
    print(
        f"\nwall time of the run: {results['wall_s']:.1f} s"
        + (f"; replicad's config, log and position in {e2e.workdir}" if keep_files else "")
    )
    for problem in problems:
        print(f"\n!!! {problem}", file=sys.stderr)
    if e2e.args.json:
        Path(e2e.args.json).write_text(json.dumps(results, indent=2, default=str) + "\n")
        print(f"results written to {e2e.args.json}")
    if not keep_files:
        shutil.rmtree(e2e.workdir, ignore_errors=True)
    return 1 if problems else 0


def run(args: argparse.Namespace) -> int:
    wall_started = time.perf_counter()
    e2e = set_up(args)
    profiler = Profiler(args.py_spy, e2e.workdir / "py-spy.txt") if args.py_spy else None
    try:
        load_and_decode(e2e)
        samples = end_to_end(e2e, profiler)
        if not args.no_ceiling:
            ceiling(e2e, samples)
        if args.seconds > 0:
            latencies(e2e, samples)
    except (ReplicadDied, TimeoutError, RuntimeError) as exc:
        tail = e2e.replicad.log_tail()
        e2e.problems.append(f"{type(exc).__name__}: {exc}\nreplicad log tail:\n{tail}")
    finally:
        clean_up(e2e)
    return finish(e2e, time.perf_counter() - wall_started, args.keep or profiler is not None)


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
