"""Reproduce a defect of the test broker (tansu 0.6.0 on s3): a graceful stop with a produce
request in flight can lose a batch that the producer is then told was delivered.

An idempotent librdkafka producer (acks=all, no message timeout: nothing may be dropped)
writes numbered messages to a new topic; the broker is stopped (SIGTERM) mid-stream and started
again a few seconds later; the producer flushes. Every message whose delivery report said
success must be in the topic. When one is not, the producer's debug log showed (in the issue 6
investigation) its batch retried after the restart and answered DUPLICATE_SEQUENCE_NUMBER:
tansu had recorded the batch's sequence number but not the batch.

Usage: .venv/bin/python scripts/repro_tansu_inflight_stop.py [--runs N]
(services up: `bash scripts/services.sh up`). Exit 1 when a run lost acknowledged messages.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
import uuid
from pathlib import Path

from confluent_kafka import KafkaError, Message, Producer

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.helpers.kafka_helpers import consume_all, start_broker, stop_broker

BOOTSTRAP = "127.0.0.1:9092"


def one_run(produce_s: float, stop_after_s: float, down_s: float) -> tuple[int, int, list[int]]:
    topic = f"repro-inflight-{uuid.uuid4().hex[:8]}"
    producer = Producer(
        {
            "bootstrap.servers": BOOTSTRAP,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "message.timeout.ms": 0,
            "queue.buffering.max.messages": 300,
            "log_level": 2,  # the broker's absence is expected: no connection-refused lines
        }
    )
    acknowledged: set[int] = set()
    failures: list[str] = []

    def report(err: KafkaError | None, msg: Message) -> None:
        if err is None:
            acknowledged.add(int(msg.value()))
        else:
            failures.append(err.str())

    def outage() -> None:
        time.sleep(stop_after_s)
        stop_broker()
        time.sleep(down_s)
        start_broker()

    broker = threading.Thread(target=outage)
    broker.start()
    sent = 0
    deadline = time.monotonic() + produce_s
    while time.monotonic() < deadline:
        try:
            producer.produce(topic, str(sent).encode(), on_delivery=report)
            sent += 1
        except BufferError:  # the queue is full while the broker is away
            producer.poll(0.01)
            continue
        producer.poll(0)
        time.sleep(0.0005)
    broker.join()
    producer.flush(120)
    if failures:
        raise SystemExit(f"delivery failures (not the defect looked for): {failures[:3]}")
    in_topic = {int(r.value) for r in consume_all(BOOTSTRAP, [topic], idle_s=5.0) if r.value}
    return sent, len(acknowledged), sorted(acknowledged - in_topic)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    lossy = 0
    for run in range(1, args.runs + 1):
        sent, acked, lost = one_run(produce_s=9.0, stop_after_s=2.0, down_s=3.0)
        lossy += bool(lost)
        print(f"run {run}: sent {sent}, acknowledged {acked}, acknowledged but missing "
              f"{len(lost)} {lost[:10]}", flush=True)  # fmt: skip
    print(f"{lossy} of {args.runs} runs lost acknowledged messages")
    return 1 if lossy else 0


if __name__ == "__main__":
    sys.exit(main())
