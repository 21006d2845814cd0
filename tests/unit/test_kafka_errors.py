"""How Kafka client errors map to the exit codes systemd acts on: a restart fixes transient
and fatal-producer-state errors (75), not refusals an operator must fix (78)."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError

from replicad.sinks.base import ProducerFencedError, SinkError, SinkUnavailableError
from replicad.sinks.kafka import _fenced_or

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("code", "fatal", "retriable", "kind"),
    [
        (KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER, True, False, SinkUnavailableError),
        (KafkaError.UNKNOWN_PRODUCER_ID, True, False, SinkUnavailableError),
        (KafkaError.REQUEST_TIMED_OUT, False, True, SinkUnavailableError),
        (KafkaError.CLUSTER_AUTHORIZATION_FAILED, True, False, SinkError),
        (KafkaError.TOPIC_AUTHORIZATION_FAILED, False, False, SinkError),
        (KafkaError.MSG_SIZE_TOO_LARGE, False, False, SinkError),
        (KafkaError.PRODUCER_FENCED, True, False, ProducerFencedError),
    ],
)
def test_error_classes(code: int, fatal: bool, retriable: bool, kind: type) -> None:
    error = _fenced_or(KafkaError(code, "x", fatal=fatal, retriable=retriable), "why")
    assert type(error) is kind
