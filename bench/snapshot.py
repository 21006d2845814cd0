"""Initial-snapshot throughput: replicad's `snapshot.mode: initial` against
`mariadb-dump --single-transaction` of the same table, in one run, on the local MariaDB that
scripts/services.sh starts (bash scripts/services.sh up mariadb).

Both read the table inside one consistent-snapshot transaction and write text to /dev/null:
mariadb-dump its INSERT statements, replicad its JSON-lines messages (the stdout sink). For
replicad the figure is the snapshot's own time (`snapshot_done` in its log: from the first
chunk to the last acknowledged read, without process start-up), plus its wall time from
spawn to the log line; CPU and peak RSS are the replicad process's own.

With --kafka, the same rows also go to a private Apache Kafka twice: read by an initial
snapshot (`snapshot.mode: initial_only`), and streamed from the binlog position before the
INSERT that wrote them (one transaction); for each, spawn -> last message consumed and from
the first message consumed to the last, with replicad's CPU at that point.

With --incremental, the same table is also read by an on-demand incremental snapshot
(`replicad snapshot request`, watermarked chunks of --chunk-rows beside a quiet stream, JSON
lines to /dev/null): from `snapshot_request_started` to `snapshot_request_done` in its log.

    python3 bench/snapshot.py [--rows 300000] [--chunk-rows 10000] [--kafka] [--incremental]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import pymysql

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness import kafka_broker
from bench.harness.children import python_env, stop_process
from bench.harness.mariadb import MARIADB_PORT
from bench.harness.paths import ROOT
from bench.harness.procstat import cpu_seconds, vm_kb
from bench.harness.tables import grid
from bench.workloads.ten_columns import create_table, insert_rows, recreate_database

DB = "bench_snapshot"


REPLICAD = [sys.executable, "-m", "replicad.cli"]
ENV = {**python_env(), "BENCH_PW": "repl"}


def spawn(config: Path, log: Path) -> subprocess.Popen[bytes]:
    """`replicad run` with `config`, its log (stderr) to `log`."""
    with log.open("wb") as err:
        return subprocess.Popen(
            [*REPLICAD, "run", "-c", str(config)],
            cwd=ROOT,
            env=ENV,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )


def prepare(rows: int) -> dict[str, str | int]:
    """The table with `rows` rows, written by one INSERT; the binlog position before it."""
    conn = pymysql.connect(host="127.0.0.1", port=MARIADB_PORT, user="root", password="root")
    with conn.cursor() as cur:
        recreate_database(cur, DB)
        cur.execute(create_table())
        cur.execute("SHOW MASTER STATUS")
        file, pos = cur.fetchone()[:2]
        cur.execute(insert_rows(1, rows))
    conn.commit()
    conn.close()
    return {"file": str(file), "pos": int(pos)}


def to_kafka(
    bootstrap: str, workdir: Path, rows: int, start: dict[str, str | int] | None
) -> dict[str, float]:
    """replicad into Kafka: an initial snapshot of the table (start None), else streaming
    from `start`; timed until `rows` messages of its topic are consumed."""
    name = "snapshot" if start is None else "stream"
    config = workdir / f"{name}.yaml"
    source = {"host": "127.0.0.1", "port": MARIADB_PORT, "user": "repl"}
    source |= {"password_env": "BENCH_PW", "server_id": 7991}
    if start is not None:
        source["start"] = start
    settings = {
        "pipeline": f"bench-{name}",
        "source": source,
        "sinks": {"kafka": {"bootstrap_servers": bootstrap, "prefix": f"bench-{name}"}},
        "coordination": {"local": {"path": str(workdir / f"{name}-position.json")}},
        "filters": {"include": [rf"{DB}\.t"]},
        "snapshot": {"mode": "initial_only" if start is None else "never"},
        "log": {"format": "json", "level": "info"},
    }
    config.write_text(json.dumps(settings))  # JSON is YAML
    reader = kafka_broker.TopicReader(bootstrap, f"bench-{name}.{DB}.t")
    started = time.perf_counter()
    proc = spawn(config, workdir / f"{name}.log")
    seen, first, cpu = 0, 0.0, 0.0
    try:
        while seen < rows:
            if time.perf_counter() - started > 600:
                raise TimeoutError(f"{name}: {seen:,} of {rows:,} messages after 600 s")
            batch = reader.batch()
            if batch and not seen:
                first = time.perf_counter()
            seen += len(batch)
            cpu = cpu_seconds(proc.pid) or cpu
        last = time.perf_counter()
    finally:
        reader.close()
        stop_process(proc, 30)
    return {"wall": last - started, "streaming": last - first, "cpu": cpu}


def mariadb_dump() -> dict[str, float]:
    started = time.perf_counter()
    subprocess.run(
        [
            "mariadb-dump",
            "-h127.0.0.1",
            f"-P{MARIADB_PORT}",
            "-uroot",
            "-proot",
            "--single-transaction",
            DB,
            "t",
        ],
        stdout=subprocess.DEVNULL,
        check=True,
    )
    return {"seconds": time.perf_counter() - started}


def replicad(chunk_rows: int, workdir: Path) -> dict[str, float | int | None]:
    config = workdir / "config.yaml"
    config.write_text(
        "pipeline: bench\n"
        f"source: {{host: 127.0.0.1, port: {MARIADB_PORT}, user: repl, password_env: BENCH_PW, "
        "server_id: 7990}\n"
        "sinks: {stdout: {path: /dev/null}}\n"
        f"coordination: {{local: {{path: {workdir / 'position.json'}}}}}\n"
        f"filters: {{include: ['{DB}\\.t']}}\n"
        f"snapshot: {{mode: initial, chunk_rows: {chunk_rows}}}\n"
        "log: {format: json, level: info}\n"
    )
    log = workdir / "replicad.log"
    started = time.perf_counter()
    proc = spawn(config, log)
    done = None
    peak = 0
    cpu = None
    try:
        while done is None:
            if proc.poll() is not None:
                raise RuntimeError(f"replicad exited {proc.returncode}: {log.read_text()[:3000]}")
            peak = max(peak, vm_kb("VmHWM", proc.pid) or 0)
            cpu = cpu_seconds(proc.pid) or cpu
            for line in log.read_text().splitlines():
                if '"snapshot_done"' in line:
                    done = json.loads(line)
            time.sleep(0.01)
        wall = time.perf_counter() - started
    finally:
        stop_process(proc, 30)
    return {
        "seconds": done["seconds"],
        "wall": wall,
        "rows": done["rows"],
        "cpu": cpu,
        "peak_rss_kb": peak,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=300_000)
    parser.add_argument("--chunk-rows", type=int, default=10_000)
    parser.add_argument("--kafka", action="store_true", help="also snapshot vs stream to Kafka")
    parser.add_argument("--incremental", action="store_true", help="also a requested snapshot")
    args = parser.parse_args()
    start = prepare(args.rows)
    with tempfile.TemporaryDirectory() as tmp:
        dump = mariadb_dump()
        ours = replicad(args.chunk_rows, Path(tmp))
        dump_again = mariadb_dump()  # before and after: the page cache is warm for both
        if args.kafka:
            kafka_runs(args.rows, Path(tmp), start)
        if args.incremental:
            run = incremental(args.rows, args.chunk_rows, Path(tmp))
            print(
                f"\nincremental snapshot (requested, chunks of {args.chunk_rows}): "
                f"{run['seconds']:.2f} s, {args.rows / run['seconds']:,.0f} rows/s, "
                f"{best_dump_rate(dump, dump_again, args.rows) / (args.rows / run['seconds']):.2f}"
                f"x slower than mariadb-dump; replicad CPU {run['cpu']:.2f} s (whole process)"
            )
    best_dump = min(dump["seconds"], dump_again["seconds"])
    rows = args.rows
    print(
        grid(
            ("reader", "seconds", "rows/s", "vs mariadb-dump"),
            [
                (
                    "mariadb-dump --single-transaction",
                    f"{best_dump:.2f}",
                    f"{rows / best_dump:,.0f}",
                    "1.00",
                ),
                (
                    "replicad snapshot (snapshot_done)",
                    f"{ours['seconds']:.2f}",
                    f"{rows / ours['seconds']:,.0f}",
                    f"{best_dump / ours['seconds']:.2f}",
                ),
                (
                    "replicad, spawn to snapshot_done",
                    f"{ours['wall']:.2f}",
                    f"{rows / ours['wall']:,.0f}",
                    f"{best_dump / ours['wall']:.2f}",
                ),
            ],
        )
    )
    print(
        f"\nreplicad: {ours['rows']} reads, CPU {ours['cpu']:.2f} s, peak RSS "
        f"{ours['peak_rss_kb'] / 1024:.0f} MiB, chunks of {args.chunk_rows} rows; "
        f"mariadb-dump runs: {dump['seconds']:.2f} s, {dump_again['seconds']:.2f} s"
    )


def incremental(rows: int, chunk_rows: int, workdir: Path) -> dict[str, float]:
    """An on-demand incremental snapshot of the table while replicad streams (a quiet source)."""
    conn = pymysql.connect(host="127.0.0.1", port=MARIADB_PORT, user="root", password="root")
    with conn.cursor() as cur:
        cur.execute(
            f"CREATE TABLE IF NOT EXISTS {DB}.replicad_signal (id VARCHAR(128) PRIMARY KEY, "
            "kind VARCHAR(16) NOT NULL, window_id VARCHAR(64) NOT NULL, "
            "at TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3))"
        )
        cur.execute(f"GRANT INSERT, UPDATE, DELETE ON {DB}.replicad_signal TO 'repl'@'127.0.0.1'")
    conn.close()
    config = workdir / "incremental.yaml"
    settings = {
        "pipeline": "bench-incremental",
        "source": {
            "host": "127.0.0.1",
            "port": MARIADB_PORT,
            "user": "repl",
            "password_env": "BENCH_PW",
            "server_id": 7992,
            "start": "latest",
        },
        "sinks": {"stdout": {"path": "/dev/null"}},
        "coordination": {"local": {"path": str(workdir / "incremental-position.json")}},
        "filters": {"include": [rf"{DB}\.t"]},
        "snapshot": {"signal": {"database": DB, "table": "replicad_signal"}},
        "log": {"format": "json", "level": "info"},
    }
    config.write_text(json.dumps(settings))
    log = workdir / "incremental.log"
    proc = spawn(config, log)
    try:
        events: dict[str, dict] = {}
        requested = False
        deadline = time.monotonic() + 600
        while "snapshot_request_done" not in events:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"incremental snapshot: {log.read_text()[-3000:]}")
            for line in log.read_text().splitlines():
                event = json.loads(line) if line.startswith("{") else {}
                events.setdefault(str(event.get("event")), event)
            if not requested and "source_connected" in events:
                request = ["snapshot", "request", f"{DB}.t", "--chunk-rows", str(chunk_rows)]
                subprocess.run(
                    [*REPLICAD, *request, "-c", str(config)],
                    cwd=ROOT,
                    env=ENV,
                    check=True,
                    capture_output=True,
                )
                requested = True
            time.sleep(0.05)
        cpu = cpu_seconds(proc.pid) or 0.0
    finally:
        stop_process(proc, 30)
    started = datetime.fromisoformat(events["snapshot_request_started"]["timestamp"])
    done = datetime.fromisoformat(events["snapshot_request_done"]["timestamp"])
    return {"seconds": (done - started).total_seconds(), "cpu": cpu}


def best_dump_rate(first: dict[str, float], second: dict[str, float], rows: int) -> float:
    return rows / min(first["seconds"], second["seconds"])


def kafka_runs(rows: int, workdir: Path, start: dict[str, str | int]) -> None:
    broker = kafka_broker.PrivateKafka(workdir / "kafka")
    bootstrap = broker.start()
    try:
        snapshot = to_kafka(bootstrap, workdir, rows, None)
        stream = to_kafka(bootstrap, workdir, rows, start)
    finally:
        broker.stop()
    print(
        "\n"
        + grid(
            ("into Kafka", "spawn to last", "first to last", "rows/s (first to last)", "CPU s"),
            [
                (
                    label,
                    f"{run['wall']:.2f}",
                    f"{run['streaming']:.2f}",
                    f"{rows / run['streaming']:,.0f}",
                    f"{run['cpu']:.2f}",
                )
                for label, run in (("snapshot", snapshot), ("streaming the INSERT", stream))
            ],
        )
    )
    print(
        f"snapshot / streaming, first to last: {stream['streaming'] / snapshot['streaming']:.2f}x"
    )


if __name__ == "__main__":
    main()
