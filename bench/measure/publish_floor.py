"""publish.py's librdkafka floor: the same messages produced by a bare confluent_kafka
Producer with the sink's settings, in a child process."""

from __future__ import annotations

import json
import pickle
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from bench.harness import children, kafka_broker, procstat
from bench.harness.paths import BENCH_DIR
from bench.workloads.publish_binlog import DATABASE, ROWS_PER_TRANSACTION, TABLE

FLOOR_SAMPLES = 2_000  # consumed messages kept for the librdkafka floor, cycled


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
    kafka_broker.create_topic(bootstrap, topic)  # replicad creates its topics too, before producing
    from replicad.sinks.kafka import POLL_EVERY

    spec = {  # settings and POLL_EVERY from replicad here: the child does not import it
        "settings": kafka_broker.sink_producer_settings(bootstrap),
        "poll_every": POLL_EVERY,
        "samples": run["samples_path"],
        "topic": topic,
        "messages": run["messages"],
        "headers": headers,
        "callback": callback,
    }
    print(f"librdkafka floor: {label} ...", file=sys.stderr)
    cmd = [sys.executable, str(BENCH_DIR / "publish.py"), "--child", "floor", "--spec"]
    watch = procstat.CpuWatch(pids).start()
    m = children.measure_process([*cmd, json.dumps(spec)], capture=True)
    machine = watch.stop()
    machine["floor child"] = round(m["cpu_s"], 2)
    result = children.child_result(m.pop("exit_code"), m.pop("stdout"))
    m.update(result, peak_rss_kb=procstat.peak_kb(result.get("peak_rss_kb"), m["peak_rss_kb"]))
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
