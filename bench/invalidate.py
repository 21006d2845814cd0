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

from bench.harness.daemons import Daemons, config_head, start_load
from bench.harness.kafka_broker import PrivateKafka
from bench.harness.mariadb import connect, prepare_load_database
from bench.harness.paths import SERVICES_SCRIPT
from bench.harness.tables import grid, percentiles
from tests.helpers.ports import free_port_block

DB = "bench_invalidate"


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


def redis_instance(action: str, work: Path, port: int, check: bool) -> None:
    subprocess.run(
        ["bash", str(SERVICES_SCRIPT), "redis-instance", action, str(work / "redis"), str(port)],
        check=check,
    )


def write_config(work: Path, bootstrap: str, redis_port: int) -> Path:
    config = work / "config.yaml"
    config.write_text(
        config_head("inv", 7996, bootstrap, work, DB) + "invalidate:\n"
        "  group_id: bench-invalidate\n"
        f"  redis: {{url: 'redis://127.0.0.1:{redis_port}/0'}}\n"
        "  rules:\n"
        f"    - {{table: '{DB}\\.load_rows', keys: ['load:{{id}}']}}\n"
        f"    - {{table: '{DB}\\.probe', keys: ['probe:{{id}}']}}\n"
        "log: {format: json, level: info}\n"
    )
    return config


def probe_lags(args: argparse.Namespace, cache: redis.Redis) -> tuple[int, list[float]]:
    """The load at --rate for --seconds after a 10 s warm-up, probed all along: the rows
    committed while measured, and each probe's commit -> key gone (s)."""
    stop = threading.Event()
    committed = [0]
    lags: list[float] = []
    threads = start_load(DB, args.rate, stop, committed, prober, (cache, stop, lags))
    try:
        time.sleep(10)  # warm-up: topics created, the group formed
        lags.clear()
        measured_from = committed[0]
        time.sleep(args.seconds)
    finally:
        stop.set()
    for thread in threads:
        thread.join(15)
    return committed[0] - measured_from, lags


def write_backlog(bootstrap: str, topic: str, rows: int) -> dict[int, int]:
    """`rows` changes committed while no invalidator runs; the topic's ends once it holds
    them all (or after 300 s)."""
    before = sum(_ends(bootstrap, topic).values())  # one partition: its message count
    conn = connect(DB)
    with conn.cursor() as cur:
        for first in range(0, rows, 10_000):
            values = ", ".join(f"({first + i}, {i}, 'b')" for i in range(10_000))
            cur.execute(f"REPLACE INTO load_rows VALUES {values}")
            conn.commit()
    conn.close()
    deadline = time.monotonic() + 300
    ends = _ends(bootstrap, topic)
    while sum(ends.values()) < before + rows and time.monotonic() < deadline:
        time.sleep(1)
        ends = _ends(bootstrap, topic)
    return ends


def backlog_rate(
    args: argparse.Namespace, bootstrap: str, daemons: Daemons, config: Path
) -> tuple[int, float]:
    """Throughput: a backlog the invalidator works through from a standing start; the
    messages committed from its first commit on (the group's forming left out) and the
    seconds that took."""
    daemons.stop("invalidate", 30)
    topic = f"inv.{DB}.load_rows"
    ends = write_backlog(bootstrap, topic, args.backlog)
    daemons.start("invalidate", ["invalidate", "-c", str(config)])
    total, first = sum(ends.values()), _committed(bootstrap, "bench-invalidate", topic, ends)
    began, done = None, first
    while done < total:
        time.sleep(0.1)
        done = _committed(bootstrap, "bench-invalidate", topic, ends)
        if began is None and done > first:
            began, first_done = time.perf_counter(), done
    assert began is not None
    return total - first_done, time.perf_counter() - began


def report(
    args: argparse.Namespace, offered: int, lags: list[float], backlog_n: int, backlog_s: float
) -> None:
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
    redis_instance("up", work, redis_port, check=True)
    cache = redis.Redis(port=redis_port)
    prepare_load_database(DB, "id INT PRIMARY KEY, n BIGINT", "1, 0")
    config = write_config(work, bootstrap, redis_port)
    daemons = Daemons(work)
    try:
        daemons.start("replicad", ["run", "-c", str(config)])
        daemons.start("invalidate", ["invalidate", "-c", str(config)])
        time.sleep(5)
        offered, lags = probe_lags(args, cache)
        backlog_n, backlog_s = backlog_rate(args, bootstrap, daemons, config)
    finally:
        daemons.stop_all(30)
        broker.stop()
        redis_instance("down", work, redis_port, check=False)
    report(args, offered, lags, backlog_n, backlog_s)
    if os.environ.get("BENCH_KEEP"):
        print(f"kept: {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
