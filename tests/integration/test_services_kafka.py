"""The services the replicad tests build on, checked for what those tests assume: Apache Kafka
(fetched from Maven Central by scripts/services.sh) keeps acknowledged messages across a graceful
restart, hides aborted transactions from read_committed readers, does not create topics on its
own; the read-back helpers see everything in order; ZooKeeper answers.
"""

from __future__ import annotations

import os
import socket
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from confluent_kafka import KafkaError, Message, Producer
from confluent_kafka.admin import AdminClient

from tests.helpers.kafka_helpers import (
    SERVICES,
    PrivateKafka,
    consume_all,
    create_topics,
    delete_topics,
    fold_by_key,
    key_text,
)
from tests.helpers.ports import free_port_block

pytestmark = pytest.mark.integration


@pytest.fixture
def topic_prefix(kafka: str) -> Iterator[str]:
    """A unique topic-name prefix; the test's topics are deleted afterwards."""
    prefix = f"svc-{uuid.uuid4().hex[:12]}"
    yield prefix
    existing = AdminClient({"bootstrap.servers": kafka}).list_topics(timeout=10).topics
    delete_topics(kafka, [name for name in existing if name.startswith(prefix)])


def _produce(bootstrap: str, messages: list[tuple[str, int, bytes, bytes | None]]) -> None:
    """Send (topic, partition, key, value) with an idempotent acks=all producer; every one must
    be acknowledged."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
        }
    )
    errors: list[KafkaError] = []
    acked: list[tuple[str, int, int]] = []

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            errors.append(err)
        else:
            acked.append((msg.topic() or "", msg.partition() or 0, msg.offset() or 0))

    for seq, (topic, partition, key, value) in enumerate(messages):
        producer.produce(
            topic,
            key=key,
            value=value,
            partition=partition,
            headers={"seq": str(seq).encode()},
            on_delivery=on_delivery,
        )
        producer.poll(0)
    assert producer.flush(30) == 0, "messages still queued after 30 s"
    assert errors == []
    assert len(acked) == len(messages)


def _refuses(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except ConnectionRefusedError:
        return True
    return False


def test_acknowledged_messages_survive_a_graceful_broker_restart(
    private_kafka: PrivateKafka,
) -> None:
    kafka = private_kafka.bootstrap
    topic_prefix = "restart"
    topic = f"{topic_prefix}-durable"
    create_topics(kafka, [topic])
    n = 500
    sent = [(f"k{i}".encode(), f"value {i}".encode() * 4) for i in range(n)]
    _produce(kafka, [(topic, 0, k, v) for k, v in sent])

    private_kafka.stop()
    assert _refuses(private_kafka.port), "the broker still accepts connections"
    private_kafka.start()

    records = consume_all(kafka, [topic], idle_s=2.0)
    assert [(r.key, r.value) for r in records] == sent
    assert [r.offset for r in records] == sorted(r.offset for r in records)
    assert len({r.offset for r in records}) == n
    assert {r.topic for r in records} == {topic} and {r.partition for r in records} == {0}
    assert [r.headers["seq"] for r in records] == [str(i).encode() for i in range(n)]
    assert all(r.timestamp is not None for r in records)


def test_fold_by_key_over_partitions_with_a_topic_regex(kafka: str, topic_prefix: str) -> None:
    topics = [f"{topic_prefix}-a", f"{topic_prefix}-b"]
    create_topics(kafka, topics, partitions=3)

    def envelope(op: str, before: dict | None, after: dict | None) -> bytes:
        return orjson.dumps({"op": op, "before": before, "after": after, "source": {}})

    def key(i: int) -> bytes:
        return orjson.dumps({"id": i})

    row = {i: {"id": i, "v": f"v{i}"} for i in range(6)}
    messages: list[tuple[str, int, bytes, bytes | None]] = []
    for i in range(6):
        messages.append((topics[0], i % 3, key(i), envelope("c", None, row[i])))
    messages += [
        (topics[0], 1, key(1), envelope("u", row[1], {"id": 1, "v": "new"})),
        (topics[0], 2, key(2), envelope("d", row[2], None)),
        (topics[0], 2, key(2), None),  # the tombstone after a delete
        (topics[0], 0, key(3), envelope("d", row[3], None)),
        (topics[0], 0, key(3), envelope("c", None, {"id": 3, "v": "again"})),
        (topics[1], 0, key(9), envelope("r", None, {"id": 9})),
    ]
    _produce(kafka, messages)

    records = consume_all(kafka, rf"{topic_prefix}-.*", idle_s=1.5)
    assert len(records) == len(messages)
    assert fold_by_key(records) == {
        topics[0]: {
            key_text({"id": 0}): row[0],
            key_text({"id": 1}): {"id": 1, "v": "new"},
            key_text({"id": 3}): {"id": 3, "v": "again"},
            key_text({"id": 4}): row[4],
            key_text({"id": 5}): row[5],
        },
        topics[1]: {'{"id":9}': {"id": 9}},
    }
    assert consume_all(kafka, [f"{topic_prefix}-missing"], idle_s=0.5) == []


def test_zookeeper_answers_ruok(zookeeper: str) -> None:
    host, port = zookeeper.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(b"ruok")
        assert sock.recv(16) == b"imok"


def test_without_maven_central_up_kafka_fails_with_one_line_naming_the_artifact(
    tmp_path: Path,
) -> None:
    """A machine that cannot reach Maven Central: `up kafka` fails at once, saying what it
    tried to fetch, instead of a Maven log or a broker that never comes."""
    settings = tmp_path / "settings.xml"
    settings.write_text(
        "<settings><mirrors><mirror><id>nowhere</id><mirrorOf>*</mirrorOf>"
        "<url>http://127.0.0.1:9/maven2</url></mirror></mirrors></settings>"
    )
    env = {
        **os.environ,
        "REPLICAD_SERVICES_DIR": str(tmp_path / "services"),
        "REPLICAD_MAVEN_ARGS": f"-s {settings} -Dmaven.repo.local={tmp_path / 'm2'}",
        "REPLICAD_KAFKA_PORT": str(free_port_block(2)),
    }
    result = subprocess.run(
        ["bash", str(SERVICES), "up", "kafka"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode != 0
    lines = [line for line in result.stderr.splitlines() if "cannot fetch" in line]
    assert len(lines) == 1, result.stderr
    assert "org.apache.kafka:kafka_2.13:4.4.0 from Maven Central" in lines[0]
    assert "127.0.0.1:9" in lines[0], lines[0]


def test_the_broker_hides_aborted_transactions_and_creates_no_topic_itself(
    kafka: str, topic_prefix: str
) -> None:
    """What the exactly-once tests build on: read_committed shows the committed transaction
    only, read_uncommitted shows both; producing to a missing topic does not create it."""
    topic = f"{topic_prefix}-txn"
    create_topics(kafka, [topic])
    producer = Producer({"bootstrap.servers": kafka, "transactional.id": f"{topic}-tx"})
    producer.init_transactions(30)
    for outcome in ("abort", "commit"):
        producer.begin_transaction()
        producer.produce(topic, key=outcome.encode(), value=outcome.encode())
        producer.flush(30)
        getattr(producer, f"{outcome}_transaction")(30)
    committed = consume_all(kafka, [topic], idle_s=1.0)
    everything = consume_all(kafka, [topic], idle_s=1.0, isolation="read_uncommitted")
    assert [r.value for r in committed] == [b"commit"]
    assert [r.value for r in everything] == [b"abort", b"commit"]

    missing = f"{topic_prefix}-never-created"
    errors: list[KafkaError] = []
    plain = Producer({"bootstrap.servers": kafka, "message.timeout.ms": 3000})
    plain.produce(missing, value=b"x", on_delivery=lambda err, _msg: errors.append(err))
    plain.flush(10)
    assert errors and errors[0] is not None, "a message to a missing topic was delivered"
    topics = AdminClient({"bootstrap.servers": kafka}).list_topics(timeout=10).topics
    assert missing not in topics
