"""The Kafka sink's answers to broker faults, without a broker: a topic creation refused while
KRaft fences its brokers is retried (not a config error), a message timeout the user set is an
outage (75, not 78), and a topic deleted under the pipeline is named and ends it for good
(78). tests/faults/test_kafka_broker_faults.py produces the same faults on a real cluster."""

from __future__ import annotations

import asyncio
from concurrent.futures import Future
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from structlog.testing import capture_logs

from replicad.config import KafkaSinkConfig
from replicad.errors import ConfigError
from replicad.exit_codes import EXIT_CONFIG, EXIT_TEMPFAIL
from replicad.sinks import kafka_admin
from replicad.sinks.base import DeliveryTracker, SinkUnavailableError, TopicDeletedError
from replicad.sinks.kafka import _delivery_failure, _fenced_or
from replicad.sinks.kafka_admin import Topics

pytestmark = pytest.mark.unit

FENCED = "Unable to replicate the partition 3 time(s): All brokers are currently fenced."


class _RefusingAdmin:
    """create_topics fails with `refusals` errors in turn, then succeeds."""

    def __init__(self, refusals: list[KafkaError]) -> None:
        self.refusals = list(refusals)
        self.calls = 0

    def create_topics(self, topics: list[Any], **_: Any) -> dict[str, Future[None]]:
        self.calls += 1
        future: Future[None] = Future()
        if self.refusals:
            future.set_exception(KafkaException(self.refusals.pop(0)))
        else:
            future.set_result(None)
        return {topics[0].topic: future}


def _topics(admin: _RefusingAdmin) -> Topics:
    topics = Topics(KafkaSinkConfig(bootstrap_servers="127.0.0.1:1"))
    topics.admin = admin  # type: ignore[assignment]
    return topics


async def _no_sleep(_: float) -> None:
    return None


def test_replication_refused_while_fenced_is_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    """KRaft shutting down or starting: CreateTopics answers INVALID_REPLICATION_FACTOR; the
    creation is tried again instead of ending the run as a config error (exit 78)."""
    monkeypatch.setattr(kafka_admin.asyncio, "sleep", _no_sleep)
    admin = _RefusingAdmin([KafkaError(KafkaError.INVALID_REPLICATION_FACTOR, FENCED)] * 3)
    topics = _topics(admin)
    for _ in range(4):
        asyncio.run(topics._create("t", compacted=False))
    assert admin.calls == 4 and not admin.refusals


def test_replication_refused_for_good_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """A replication factor the cluster never has stays a config error once the refusal has
    lasted the grace period."""
    monkeypatch.setattr(kafka_admin.asyncio, "sleep", _no_sleep)
    monkeypatch.setattr(kafka_admin, "REPLICATION_REFUSED_GRACE_S", 0.0)
    refusal = KafkaError(KafkaError.INVALID_REPLICATION_FACTOR, "only 1 broker(s) registered")
    topics = _topics(_RefusingAdmin([refusal]))
    with pytest.raises(ConfigError) as caught:
        asyncio.run(topics._create("t", compacted=False))
    assert caught.value.exit_code == EXIT_CONFIG and caught.value.context["topic"] == "t"


@pytest.mark.parametrize(
    "code", [KafkaError._MSG_TIMED_OUT, KafkaError._TIMED_OUT, KafkaError._ALL_BROKERS_DOWN]
)
def test_user_message_timeout_is_an_outage(code: int) -> None:
    """A `message.timeout.ms` set in sinks.kafka.producer makes an outage end in delivery
    reports that librdkafka does not mark retriable: still transient (75), not 78."""
    error = _fenced_or(KafkaError(code, "Local: Message timed out"), "not delivered")
    assert type(error) is SinkUnavailableError and error.exit_code == EXIT_TEMPFAIL


class _Message:
    def topic(self) -> str:
        return "shop.db.items"

    def key(self) -> bytes:
        return b'{"id":1}'


@pytest.mark.parametrize("code", [KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC])
def test_deleted_topic_is_named_and_final(code: int) -> None:
    """librdkafka fails the messages of a topic deleted under the pipeline with an unknown
    topic: a TopicDeletedError naming it, exit 78, and the event `kafka_topic_deleted`."""
    unit = DeliveryTracker().current
    with capture_logs() as logs:
        error = _delivery_failure(KafkaError(code, "Broker: Unknown topic"), _Message(), unit)
    assert type(error) is TopicDeletedError and error.exit_code == EXIT_CONFIG
    assert error.context["topic"] == "shop.db.items" and "deleted" in str(error)
    assert [e["topic"] for e in logs if e["event"] == "kafka_topic_deleted"] == ["shop.db.items"]
