"""e2e.py's measured children (decode/encode only, the paced writer, the broker's producer),
run as `bench/e2e.py --child KIND --spec JSON`."""

from __future__ import annotations

import argparse
import functools
import json
import os
import pickle
import random
import sys
import time
from pathlib import Path
from typing import Any

from bench.harness import children, procstat
from bench.harness.paths import BENCH_DIR
from bench.harness.tables import percentiles
from bench.workloads import decode_rows
from bench.workloads.e2e_load import DATABASE, LATENCY_TABLE, OPS, TABLE

LATENCY_POOL = 2_000  # distinct pre-rendered row bodies the writer cycles through


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
    base = procstat.vm_kb("VmHWM")
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
    rng = random.Random(decode_rows.SEED + 1)
    rest = decode_rows.COLUMNS[1:]
    template = "(" + ",".join(["%s"] * len(rest)) + ")"
    txns: list[tuple[int, float, float, float]] = []
    with conn.cursor() as cur:
        cur.execute("SET SESSION time_zone = '+00:00'")
        cur.execute("SET SESSION binlog_annotate_row_events = OFF")
        bodies = [
            cur.mogrify(template, decode_rows.make_row(i, rng)[1:])[1:-1]
            for i in range(LATENCY_POOL)
        ]
        columns = ",".join(decode_rows.COLUMNS)
        head = f"INSERT INTO {DATABASE}.{LATENCY_TABLE} ({columns},txn,ts) VALUES "
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
    kinds = {"writer": child_writer, "producer": child_producer, "decode": child_decode}
    result = children.child_outcome(lambda: kinds[args.child](spec))
    if "out" in spec:
        Path(spec["out"]).write_text(json.dumps(result))
    else:
        print(json.dumps(result))
    return 0


def child_command(kind: str, spec: dict[str, Any]) -> list[str]:
    return [
        sys.executable,
        str(BENCH_DIR / "e2e.py"),
        "--child",
        kind,
        "--spec",
        json.dumps(spec),
    ]


def measure_decode(
    segments: list[Any], encode: bool, bootstrap: str, prefix: str
) -> dict[str, Any]:
    spec = {"segments": segments, "encode": encode, "bootstrap": bootstrap, "prefix": prefix}
    code, wall, sampled_kb, out = children.run_process(child_command("decode", spec), capture=True)
    result = children.child_result(code, out)
    result["wall_s"] = wall
    result["peak_rss_kb"] = procstat.peak_kb(result.get("peak_rss_kb"), sampled_kb)
    return result
