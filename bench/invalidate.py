"""`replicad invalidate`: from a commit on MariaDB to the Redis key gone, at an offered load,
and the invalidations per second it sustains, in one run on this machine.

Pieces: the local MariaDB (scripts/services.sh), a private single-node Apache Kafka
(bench/harness/kafka_broker.py's PrivateKafka, as `bench/spark_lag.py`), a private Redis
(scripts/services.sh redis-instance), `replicad run` publishing to the broker and `replicad
invalidate` working on the Redis. Rules: `load:{id}`
for `load_rows`, written at `--rate` rows/s (transactions of 100 rows), and `probe:{id}` for
`probe`. Latency: every 50 ms this process sets `probe:1`, commits an update of the probe row,
and polls Redis until the key is gone; the lag is from the COMMIT's return to the first poll
that finds no key. Throughput: the invalidator is stopped, `--backlog` row changes are
committed, and the invalidator is started again: keys deleted per second from its first offset
commit until its group has committed the whole topic.

    python3 bench/invalidate.py [--rate 5000] [--seconds 30] [--backlog 200000]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import redis
from confluent_kafka import Consumer, TopicPartition

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness.children import python_env, stop_process
from bench.harness.kafka_broker import PrivateKafka, free_port_block
from bench.harness.mariadb import MARIADB_PORT, connect, paced_writer, prepare_load_database
from bench.harness.paths import ROOT
from bench.harness.tables import grid, percentiles

DB = "bench_invalidate"
SERVICES = ROOT / "scripts" / "services.sh"


def prober(cache: redis.Redis, stop: threading.Event, lags: list[float]) -> None:
    conn = connect(DB)
    n = 0
    with conn.cursor() as cur:
        while not stop.is_set():
            n += 1
            cache.set("probe:1", "cached")
            cur.execute("UPDATE probe SET n = %s WHERE id = 1", (n,))
            conn.commit()
            committed = time.perf_counter()
            deadline = committed + 10
            while cache.exists("probe:1") and time.perf_counter() < deadline:
                time.sleep(0.0005)
            lags.append(time.perf_counter() - committed)
            time.sleep(0.05)
    conn.close()


def _ends(bootstrap: str, topic: str) -> dict[int, int]:
    """Per partition, the offset after its last message (the high watermark)."""
    reader = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "bench-ends", "enable.auto.commit": False}
    )
    try:
        partitions = reader.list_topics(topic, timeout=10).topics[topic].partitions
        return {
            p: reader.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in partitions
        }
    finally:
        reader.close()


def _committed(bootstrap: str, group: str, topic: str, ends: dict[int, int]) -> int:
    """Messages of the topic the group has committed (negative offsets: none)."""
    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        found = reader.committed([TopicPartition(topic, p) for p in ends], 10)
        return sum(max(0, c.offset) for c in found)
    finally:
        reader.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=5000)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--backlog", type=int, default=200_000)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-invalidate-"))
    broker = PrivateKafka(work / "kafka")
    bootstrap = broker.start()
    redis_port = free_port_block(1)  # below the ephemeral range
    subprocess.run(
        ["bash", str(SERVICES), "redis-instance", "up", str(work / "redis"), str(redis_port)],
        check=True,
    )
    cache = redis.Redis(port=redis_port)
    prepare_load_database(DB, "id INT PRIMARY KEY, n BIGINT", "1, 0")
    config = work / "config.yaml"
    config.write_text(
        "pipeline: inv\n"
        f"source: {{host: 127.0.0.1, port: {MARIADB_PORT}, user: repl, password_env: BENCH_PW, "
        "server_id: 7996, start: latest}\n"
        f"sinks: {{kafka: {{bootstrap_servers: '{bootstrap}', prefix: inv}}}}\n"
        f"coordination: {{local: {{path: {work / 'position.json'}}}}}\n"
        f"filters: {{include: ['{DB}\\..*']}}\n"
        "invalidate:\n"
        "  group_id: bench-invalidate\n"
        f"  redis: {{url: 'redis://127.0.0.1:{redis_port}/0'}}\n"
        "  rules:\n"
        f"    - {{table: '{DB}\\.load_rows', keys: ['load:{{id}}']}}\n"
        f"    - {{table: '{DB}\\.probe', keys: ['probe:{{id}}']}}\n"
        "log: {format: json, level: info}\n"
    )
    env = {**python_env(), "BENCH_PW": "repl"}
    procs: dict[str, subprocess.Popen[bytes]] = {}
    stop = threading.Event()
    committed = [0]
    lags: list[float] = []

    def start(name: str, command: list[str]) -> None:
        with (work / f"{name}.log").open("ab") as log:
            procs[name] = subprocess.Popen(
                [sys.executable, "-m", "replicad.cli", *command, "-c", str(config)],
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=log,
            )

    try:
        start("replicad", ["run"])
        start("invalidate", ["invalidate"])
        time.sleep(5)
        threads = [
            threading.Thread(
                target=paced_writer, args=(DB, args.rate, stop, committed), daemon=True
            ),
            threading.Thread(target=prober, args=(cache, stop, lags), daemon=True),
        ]
        for thread in threads:
            thread.start()
        time.sleep(10)  # warm-up: topics created, the group formed
        lags.clear()
        measured_from = committed[0]
        time.sleep(args.seconds)
        stop.set()
        for thread in threads:
            thread.join(15)
        offered = committed[0] - measured_from

        # Throughput: a backlog the invalidator works through from a standing start.
        stop_process(procs.pop("invalidate"), 30)
        topic = f"inv.{DB}.load_rows"
        before = sum(_ends(bootstrap, topic).values())  # one partition: its message count
        conn = connect(DB)
        with conn.cursor() as cur:
            for first in range(0, args.backlog, 10_000):
                values = ", ".join(f"({first + i}, {i}, 'b')" for i in range(10_000))
                cur.execute(f"REPLACE INTO load_rows VALUES {values}")
                conn.commit()
        conn.close()
        deadline = time.monotonic() + 300
        ends = _ends(bootstrap, topic)
        while sum(ends.values()) < before + args.backlog and time.monotonic() < deadline:
            time.sleep(1)
            ends = _ends(bootstrap, topic)
        start("invalidate", ["invalidate"])
        total, first = sum(ends.values()), _committed(bootstrap, "bench-invalidate", topic, ends)
        began, done = None, first
        while done < total:  # from its first commit on: the group's forming left out
            time.sleep(0.1)
            done = _committed(bootstrap, "bench-invalidate", topic, ends)
            if began is None and done > first:
                began, first_done = time.perf_counter(), done
        assert began is not None
        backlog_s = time.perf_counter() - began
        backlog_n = total - first_done
    finally:
        stop.set()
        for proc in procs.values():
            stop_process(proc, 30)
        broker.stop()
        subprocess.run(
            ["bash", str(SERVICES), "redis-instance", "down", str(work / "redis"), str(redis_port)],
            check=False,
        )
    lag = percentiles(lags) or {}
    print(
        f"offered {args.rate} rows/s for {args.seconds:.0f} s after a 10 s warm-up "
        f"({offered} rows committed, {offered / args.seconds:.0f} rows/s reached); "
        f"{len(lags)} probes; {os.cpu_count()} CPUs"
    )
    print(
        grid(
            ("measure", "p50 ms", "p90 ms", "p99 ms", "max ms"),
            [
                (
                    "commit -> Redis key gone (probe)",
                    *(f"{lag.get(k, 0):.1f}" for k in ("p50", "p90", "p99", "max")),
                )
            ],
        )
    )
    print(
        f"backlog of {args.backlog} changes: {backlog_n} UNLINKs (after its first commit) in "
        f"{backlog_s:.1f} s: {backlog_n / backlog_s:.0f} invalidations/s"
    )
    if os.environ.get("BENCH_KEEP"):
        print(f"kept: {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
