"""`replicad spark materialize` lag: from a commit on MariaDB to the row visible in the Delta lake
table, at an offered load, in one run on this machine.

Pieces: the local MariaDB (scripts/services.sh), a private single-node Apache Kafka
(bench/harness/kafka_broker.py's PrivateKafka, as `bench/e2e.py --private-kafka`), `replicad
run` publishing to it, and `replicad spark materialize` (local[2], `spark.trigger_s` 1) keeping
two lake tables: `load`, written at `--rate` rows/s (transactions of 100 rows), and `probe`,
one row updated every 0.25 s with its commit time (UTC, to the microsecond). This process reads
the probe table's current Delta version (delta-rs: no Spark session here) every 50 ms; each
probe value's lag is the time it was first seen minus the time it was committed. The job's own
batch durations come from its log. The jars come from `scripts/services.sh spark-jars`.

    python3 bench/spark_lag.py [--rate 5000] [--seconds 60] [--session-conf '{"k": "v"}']
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from deltalake import DeltaTable
from deltalake.exceptions import DeltaError

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness.daemons import Daemons, config_head, start_load
from bench.harness.kafka_broker import PrivateKafka
from bench.harness.mariadb import connect, prepare_load_database
from bench.harness.paths import ROOT
from bench.harness.tables import grid, percentiles

DB = "bench_spark_lag"


def prober(stop: threading.Event, probes: dict[str, float]) -> None:
    conn = connect(DB)
    with conn.cursor() as cur:
        while not stop.is_set():
            cur.execute("UPDATE probe SET at = UTC_TIMESTAMP(6) WHERE id = 1")
            conn.commit()
            cur.execute("SELECT at FROM probe WHERE id = 1")
            (at,) = cur.fetchone()
            probes[at.isoformat()] = at.replace(tzinfo=dt.UTC).timestamp()
            conn.rollback()
            time.sleep(0.25)
    conn.close()


def seen_probe(lake: Path) -> str | None:
    """The probe row's `at` in the lake table's current version (None: not there yet)."""
    if not (lake / "_delta_log").is_dir():
        return None
    try:
        rows = DeltaTable(str(lake)).to_pyarrow_table(columns=["id", "at"]).to_pylist()
    except (OSError, ValueError, DeltaError):
        return None  # the table being created: the next poll sees it
    for row in rows:
        if row["id"] == 1 and row["at"] is not None:
            return str(row["at"].isoformat())
    return None


def spark_jars() -> str:
    fetched = subprocess.run(
        ["bash", str(ROOT / "scripts/services.sh"), "spark-jars"],
        capture_output=True,
        text=True,
        check=True,
    )
    return fetched.stdout.strip().splitlines()[-1]


def write_config(work: Path, bootstrap: str, session_conf: dict[str, str]) -> Path:
    config = work / "config.yaml"
    config.write_text(
        config_head("lag", 7995, bootstrap, work, DB)
        + f"spark: {{lake_path: {work / 'lake'}, checkpoint_path: {work / 'ckpt'}, "
        f"lake_jars: {spark_jars()}, trigger_s: 1.0, discover_s: 2.0, "
        f"session_conf: {json.dumps(session_conf)}}}\n"
        "log: {format: json, level: info}\n"
    )
    return config


def probe_lags(args: argparse.Namespace, lake: Path) -> tuple[int, list[float]]:
    """The load at --rate and the probe, watched in the lake for --seconds after a 30 s
    warm-up: the rows committed, and each new probe value's commit -> seen (s)."""
    stop = threading.Event()
    committed = [0]
    probes: dict[str, float] = {}
    lags: list[float] = []
    threads = start_load(DB, args.rate, stop, committed, prober, (stop, probes))
    try:
        warmup_until = time.time() + 30  # the job's start-up and first batches
        end = warmup_until + args.seconds
        last = None
        while time.time() < end:
            value = seen_probe(lake)
            if value is not None and value != last:
                last = value
                committed_at = probes.get(value)
                if committed_at is not None and time.time() > warmup_until:
                    lags.append(time.time() - committed_at)
            time.sleep(0.05)
    finally:
        stop.set()
    for thread in threads:
        thread.join(10)
    return committed[0], lags


def report(args: argparse.Namespace, committed: int, lags: list[float], spark_log: Path) -> None:
    batches = [
        json.loads(line)
        for line in spark_log.read_text(errors="replace").splitlines()
        if '"lake_batch_applied"' in line
    ]
    seconds = [b["seconds"] for b in batches if b.get("table", "").endswith(".load_rows")]
    lag = percentiles(lags) or {}
    batch = percentiles(seconds) or {}
    print(
        f"offered {args.rate} rows/s for {args.seconds:.0f} s after a 30 s warm-up; "
        f"{committed} rows committed; {len(lags)} probe values seen; {os.cpu_count()} CPUs"
    )
    print(
        grid(
            ("measure", "p50 s", "p90 s", "p99 s", "max s"),
            [
                (
                    "commit -> visible in the lake (probe)",
                    *(f"{lag.get(k, 0) / 1000:.2f}" for k in ("p50", "p90", "p99", "max")),
                ),
                (
                    "micro-batch apply, load_rows",
                    *(f"{batch.get(k, 0) / 1000:.2f}" for k in ("p50", "p90", "p99", "max")),
                ),
            ],
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=5000)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument(
        "--session-conf", type=json.loads, default={}, help="spark.session_conf, as JSON"
    )
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-spark-lag-"))
    broker = PrivateKafka(work / "kafka")
    bootstrap = broker.start()
    prepare_load_database(DB, "id INT PRIMARY KEY, at DATETIME(6)", "1, UTC_TIMESTAMP(6)")
    config = write_config(work, bootstrap, args.session_conf)
    daemons = Daemons(work, {"PYSPARK_PYTHON": sys.executable})
    try:
        daemons.start("replicad", ["run", "-c", str(config)])
        daemons.start("spark", ["spark", "materialize", "-c", str(config), "--master", "local[2]"])
        time.sleep(3)
        committed, lags = probe_lags(args, work / "lake" / DB / "probe")
    finally:
        daemons.stop_all(60)
        broker.stop()
    report(args, committed, lags, work / "spark.log")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
