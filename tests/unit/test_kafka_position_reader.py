"""The exactly-once position read back from a positions topic whose partition has no broker
now (its only replica's broker killed): a transient error naming the topic, not a crash
with a traceback (the fault campaign's seed 19 with --cluster, a broker kill), and never
"no position", which would resume from an older one."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from replicad.config import KafkaSinkConfig
from replicad.exit_codes import EXIT_TEMPFAIL
from replicad.sinks import kafka_admin
from replicad.sinks.base import SinkUnavailableError

TOPIC = "p.replicad-positions"


class LeaderlessConsumer:
    """Metadata names the partition; asking where it ends fails as librdkafka does."""

    closed = False

    def list_topics(self, topic: str, timeout: float) -> Any:
        return SimpleNamespace(topics={topic: SimpleNamespace(partitions={0: None})})

    def get_watermark_offsets(self, partition: Any, timeout: float) -> tuple[int, int]:
        raise KafkaException(KafkaError(KafkaError._UNKNOWN_PARTITION))

    def close(self) -> None:
        self.closed = True


def test_a_partition_without_a_broker_is_a_transient_error_naming_the_topic(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    consumer = LeaderlessConsumer()
    monkeypatch.setattr(kafka_admin, "kafka_client", lambda kind, settings: consumer)
    reader = kafka_admin.PositionReader(KafkaSinkConfig(bootstrap_servers="k:1"), TOPIC, "p")
    with pytest.raises(SinkUnavailableError) as caught:
        reader.read()
    assert caught.value.exit_code == EXIT_TEMPFAIL
    assert caught.value.context["topic"] == TOPIC
    assert "positions topic" in str(caught.value)
    assert consumer.closed
