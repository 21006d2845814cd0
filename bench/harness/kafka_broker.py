"""Apache Kafka for the benchmarks: a private broker, the shared one at --bootstrap, topics,
the sink's producer settings, and a consumer that counts a topic's messages."""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

from bench.harness.paths import SERVICES_SCRIPT
from tests.helpers.ports import free_port_block


class PrivateKafka:
    """A private single-node Apache Kafka (KRaft, broker and controller in one JVM) started for
    one benchmark run by `scripts/services.sh kafka-instance` in `directory`, on a free port
    (its controller on the next one): nobody else's topics, load or restarts. Its data is on
    disk in `directory`; the JVM heap is REPLICAD_KAFKA_HEAP (default 768m)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.port = 0

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _services(self, action: str, timeout: float) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            [
                "bash",
                str(SERVICES_SCRIPT),
                "kafka-instance",
                action,
                str(self.directory),
                str(self.port),
            ],
            check=False,
            timeout=timeout,
        )

    def start(self) -> str:
        """Start it (formatting its storage); returns the bootstrap address once a metadata
        round trip lists the broker."""
        self.port = free_port_block(2)
        if self._services("up", 300).returncode != 0:
            self.stop()  # a JVM that started but never answered must not outlive the run
            raise SystemExit(
                f"the private Kafka on {self.bootstrap} did not start; see "
                f"{self.directory / 'kafka.log'}"
            )
        return self.bootstrap

    @property
    def pid(self) -> int:
        """The broker's JVM (for CPU accounting)."""
        return int((self.directory / "kafka.pid").read_text().split()[0])

    def stop(self) -> None:
        """Graceful stop (SIGTERM; the script SIGKILLs it after 30 s)."""
        if self.port:
            self._services("down", 120)


CONSUME_BATCH_TIMEOUT_S = 0.05


def kafka_reachable(bootstrap: str) -> bool:
    from confluent_kafka.admin import AdminClient

    try:  # log_level 0: no connection-refused lines while it is down
        AdminClient({"bootstrap.servers": bootstrap, "log_level": 0}).list_topics(timeout=5)
    except Exception:  # KafkaException, or anything librdkafka raises: not reachable
        return False
    return True


def ensure_kafka(bootstrap: str) -> None:
    if kafka_reachable(bootstrap):
        return
    subprocess.run(["bash", str(SERVICES_SCRIPT), "up", "kafka"], check=True)
    if not kafka_reachable(bootstrap):
        raise SystemExit(f"no Kafka API at {bootstrap}")


def sink_producer_settings(bootstrap: str) -> dict[str, Any]:
    """The librdkafka settings replicad's at-least-once Kafka sink uses (from replicad itself,
    so they cannot drift), without its error callback."""
    from replicad.config import KafkaSinkConfig
    from replicad.sinks.kafka import producer_settings

    settings = producer_settings(KafkaSinkConfig(bootstrap_servers=bootstrap), "e2e-bench")
    settings["client.id"] = "replicad-e2e-bench"
    return settings


def create_topic(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(30)


def delete_topics(bootstrap: str, prefix: str) -> list[str]:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    names = [t for t in admin.list_topics(timeout=10).topics if t.startswith(prefix + ".")]
    if names:
        for future in admin.delete_topics(names, operation_timeout=30).values():
            future.result(60)
    return sorted(names)


class TopicReader:
    """Reads one topic from its first offset by assign(): no group, nothing committed;
    read_committed (librdkafka's default), so an exactly-once run's messages count once
    their transaction committed."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        from confluent_kafka import Consumer

        self.topic = topic
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"replicad-e2e-{uuid.uuid4().hex}",  # required; never joined
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "enable.partition.eof": False,
            }
        )
        self.assigned = False

    def try_assign(self) -> bool:
        """Assign every partition once the topic exists (replicad creates it on demand)."""
        from confluent_kafka import OFFSET_BEGINNING, TopicPartition

        if self.assigned:
            return True
        meta = self.consumer.list_topics(self.topic, timeout=5).topics.get(self.topic)
        if meta is None or meta.error is not None or not meta.partitions:
            return False
        self.consumer.assign(
            [TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in sorted(meta.partitions)]
        )
        self.assigned = True
        return True

    def batch(self, timeout: float = CONSUME_BATCH_TIMEOUT_S) -> list[Any]:
        """Messages (errors dropped: librdkafka retries transient ones; fatal ones raise)."""
        from confluent_kafka import KafkaException

        if not self.try_assign():
            time.sleep(0.05)
            return []
        out = []
        for msg in self.consumer.consume(num_messages=10_000, timeout=timeout):
            err = msg.error()
            if err is None:
                out.append(msg)
            elif err.fatal():
                raise KafkaException(err)
        return out

    def one(self, timeout: float) -> Any | None:
        """One message as soon as it arrives (consume() would wait to fill its batch)."""
        from confluent_kafka import KafkaException

        if not self.try_assign():
            time.sleep(0.05)
            return None
        msg = self.consumer.poll(timeout)
        if msg is None:
            return None
        err = msg.error()
        if err is None:
            return msg
        if err.fatal():
            raise KafkaException(err)
        return None

    def close(self) -> None:
        self.consumer.close()


def op_of(value: bytes) -> str:
    """The envelope's op, found near its end (`..."op":"c","ts_ms":...}`) without parsing."""
    i = value.rfind(b'"op":"')
    if i < 0:
        return str(json.loads(value)["op"])
    return chr(value[i + 6])
