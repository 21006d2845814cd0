"""Read back what landed in Kafka (the Apache Kafka broker of scripts/services.sh) and fold it;
private brokers for the tests that stop or kill one.

`consume_all` reads partitions from their first offset by explicit assignment: no consumer
group joins, nothing is committed. It reads `read_committed` by default, as the users of an
exactly-once pipeline do, and stops once every partition has reported its end (partition EOF:
the last stable offset under read_committed) and nothing arrived for `idle_s`.
`fold_by_key` replays Debezium-style envelopes per key, as a compacting consumer would.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
import uuid
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from confluent_kafka import (
    OFFSET_BEGINNING,
    TIMESTAMP_NOT_AVAILABLE,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic

from tests.helpers.ports import free_port_block

ROOT = Path(__file__).resolve().parents[2]
SERVICES = ROOT / "scripts/services.sh"


@dataclass(frozen=True)
class Record:
    """One consumed message, detached from librdkafka."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: dict[str, bytes] = field(default_factory=dict)
    timestamp: int | None = None  # ms since the epoch (create or log-append time)

    def json(self) -> Any:
        """The value parsed as JSON (None for a tombstone)."""
        return None if self.value is None else orjson.loads(self.value)


def _topic_names(existing: Collection[str], topics: list[str] | str) -> list[str]:
    """The topics to read: the listed ones that exist (a topic nobody created has no
    messages), or every topic whose whole name matches the regex."""
    if isinstance(topics, str):
        pattern = re.compile(topics)
        return sorted(n for n in existing if pattern.fullmatch(n) and not n.startswith("__"))
    return [t for t in dict.fromkeys(topics) if t in existing]


def _record(msg: Message) -> Record:
    topic, partition, offset = msg.topic(), msg.partition(), msg.offset()
    assert topic is not None and partition is not None and offset is not None, msg
    raw = msg.headers() or []
    pairs = raw.items() if isinstance(raw, dict) else raw
    headers = {
        name: b"" if v is None else v.encode() if isinstance(v, str) else v for name, v in pairs
    }
    ts_type, ts = msg.timestamp()
    return Record(
        topic=topic,
        partition=partition,
        offset=offset,
        key=msg.key(),
        value=msg.value(),
        headers=headers,
        timestamp=None if ts_type == TIMESTAMP_NOT_AVAILABLE else ts,
    )


def consume_all(
    bootstrap: str,
    topics: list[str] | str,
    *,
    idle_s: float = 3.0,
    timeout_s: float = 60.0,
    isolation: str = "read_committed",
) -> list[Record]:
    """Every message of `topics` (names, or a regex matched against whole topic names), sorted
    by (topic, partition, offset). `isolation`: "read_committed" (aborted and open transactions
    stay hidden) or "read_uncommitted" (everything written). Raises TimeoutError if messages
    still flow after `timeout_s`, KafkaException on a fatal client error."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            # required by the Python client; no group is joined (assign) and nothing committed
            "group.id": f"consume-all-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
            "isolation.level": isolation,
        }
    )
    try:
        metadata = consumer.list_topics(timeout=10).topics
        names = _topic_names(metadata, topics)
        assignment = [
            TopicPartition(name, partition, OFFSET_BEGINNING)
            for name in names
            for partition in sorted(metadata[name].partitions)
        ]
        if not assignment:
            return []
        consumer.assign(assignment)
        return _read_to_end(consumer, len(assignment), idle_s, timeout_s)
    finally:
        consumer.close()


def _read_to_end(
    consumer: Consumer, partitions: int, idle_s: float, timeout_s: float
) -> list[Record]:
    records: list[Record] = []
    at_end: set[tuple[str | None, int | None]] = set()
    deadline = time.monotonic() + timeout_s
    last_arrival = time.monotonic()
    while len(at_end) < partitions or time.monotonic() - last_arrival < idle_s:
        if time.monotonic() > deadline:
            raise TimeoutError(f"messages still arriving after {timeout_s} s ({len(records)} read)")
        for msg in consumer.consume(num_messages=1000, timeout=min(0.5, idle_s)):
            error = msg.error()
            where = (msg.topic(), msg.partition())
            if error is None:
                last_arrival = time.monotonic()
                at_end.discard(where)
                records.append(_record(msg))
            elif error.code() == KafkaError._PARTITION_EOF:
                at_end.add(where)
            elif error.fatal():
                raise KafkaException(error)
            # else transient (e.g. a leader not known yet): librdkafka retries
    records.sort(key=lambda r: (r.topic, r.partition, r.offset))
    return records


def key_text(key: Any) -> str:
    """The canonical text of a JSON message key, as `fold_by_key` indexes it: compact, object
    keys sorted. `key_text({"id": 1})` == '{"id":1}'."""
    return orjson.dumps(key, option=orjson.OPT_SORT_KEYS).decode()


def _envelope(record: Record) -> dict[str, Any]:
    value = record.json()
    if isinstance(value, dict) and "op" not in value and isinstance(value.get("payload"), dict):
        value = value["payload"]  # Debezium JSON with schemas.enable
    if not isinstance(value, dict) or "op" not in value:
        raise ValueError(f"{record.topic}[{record.partition}]@{record.offset}: not an envelope")
    return value


def fold_by_key(records: Iterable[Record]) -> dict[str, dict[str, dict[str, Any]]]:
    """{topic: {key_text: row}}: the last state per key after applying the records in offset
    order per partition. A tombstone (value None) or op 'd' removes the key; any other op
    ('c', 'u', 'r') sets it to `after`. Raises ValueError for a record without a key, and for
    a key found in two partitions of one topic (its order would be undefined)."""
    state: dict[str, dict[str, dict[str, Any]]] = {}
    home: dict[tuple[str, str], int] = {}
    for record in sorted(records, key=lambda r: (r.topic, r.partition, r.offset)):
        where = f"{record.topic}[{record.partition}]@{record.offset}"
        if record.key is None:
            raise ValueError(f"{where}: a record without a key cannot be folded")
        try:
            key = key_text(orjson.loads(record.key))
        except orjson.JSONDecodeError:
            key = record.key.decode("utf-8", "backslashreplace")
        partition = home.setdefault((record.topic, key), record.partition)
        if partition != record.partition:
            raise ValueError(f"{where}: key {key} is also in partition {partition}")
        rows = state.setdefault(record.topic, {})
        if record.value is None:
            rows.pop(key, None)
            continue
        envelope = _envelope(record)
        if envelope["op"] == "d":
            rows.pop(key, None)
        else:
            rows[key] = envelope["after"]
    return state


def create_topics(bootstrap: str, names: list[str], *, partitions: int = 1) -> None:
    """Create topics and wait until they exist (raises KafkaException on failure)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=1) for name in names],
        operation_timeout=10,
    )
    for future in futures.values():
        future.result(timeout=30)


def delete_topics(bootstrap: str, names: list[str]) -> None:
    """Delete topics; one that does not exist is not an error."""
    if not names:
        return
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.delete_topics(list(names), operation_timeout=10)
    for future in futures.values():
        try:
            future.result(timeout=30)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise


class PrivateKafka:
    """A single-node Apache Kafka of the test's own (scripts/services.sh kafka-instance), for
    the tests that stop, kill or restart the broker: the shared one keeps serving the tests
    running beside them. Its storage outlives stop/kill; start() brings it back on it."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.port = free_port_block(2)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _run(self, action: str) -> None:
        subprocess.run(
            [
                "bash",
                str(SERVICES),
                "kafka-instance",
                action,
                str(self.dir),
                str(self.port),
                str(self.port + 1),
            ],
            check=True,
            timeout=120,
        )

    def start(self) -> None:
        """Start (or restart on its storage); returns once it answers metadata."""
        self._run("up")

    def stop(self, quiesce: Collection[int] = ()) -> None:
        """Graceful stop (SIGTERM, controlled shutdown). `quiesce`: pids SIGSTOPped meanwhile,
        so that the stop happens with nothing of theirs in flight."""
        stopped = []
        try:
            for pid in quiesce:
                os.kill(pid, signal.SIGSTOP)
                stopped.append(pid)
            self._run("down")
        finally:
            for pid in stopped:
                os.kill(pid, signal.SIGCONT)

    def kill(self) -> None:
        """SIGKILL, as a crash would."""
        self._run("kill")
