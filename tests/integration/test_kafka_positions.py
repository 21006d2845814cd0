"""Reading the exactly-once position back from the positions topic (`read_checkpoint`): a new
leader reads only the tail of the topic, and must still find its pipeline's last record when
other pipelines' records (sharing the topic) bury it deeper than one window."""

from __future__ import annotations

import uuid

import orjson
import pytest
from confluent_kafka import Producer

from replicad.binlog.position import Position
from replicad.checkpoint_record import Checkpoint
from replicad.config import KafkaSinkConfig
from replicad.sinks.kafka_admin import TAIL_WINDOW, read_checkpoint
from tests.helpers.kafka_helpers import create_topics, delete_topics

pytestmark = pytest.mark.integration


def _record(pipeline: str, pos: int) -> bytes:
    position = Position("mariadb-bin.000001", pos)
    return orjson.dumps({"pipeline": pipeline, "position": position.to_json(), "batch": "t:1"})


def test_the_last_record_is_found_however_deep_it_lies(kafka: str) -> None:
    topic = f"pos-{uuid.uuid4().hex[:10]}.replicad-positions"
    create_topics(kafka, [topic], partitions=2)
    try:
        producer = Producer({"bootstrap.servers": kafka, "transactional.id": f"t-{topic}"})
        producer.init_transactions(10)
        batches = [
            [("a", 4), ("a", 1000), ("b", 4)],  # a's last record, then one of b
            [("b", 100 + i) for i in range(TAIL_WINDOW * 8 + 40)],  # more than two windows
        ]
        for batch in batches:
            producer.begin_transaction()
            for pipeline, pos in batch:
                # Both pipelines in partition 0: b's records bury a's there; partition 1 is
                # empty (read as such, not waited on).
                producer.produce(topic, _record(pipeline, pos), key=pipeline.encode(), partition=0)
            producer.commit_transaction(10)
        config = KafkaSinkConfig(bootstrap_servers=kafka)
        assert read_checkpoint(config, topic, "a") == Checkpoint(
            Position("mariadb-bin.000001", 1000)
        )
        last_b = 100 + TAIL_WINDOW * 8 + 39
        assert read_checkpoint(config, topic, "b") == Checkpoint(
            Position("mariadb-bin.000001", last_b)
        )
        assert read_checkpoint(config, topic, "nobody") is None
    finally:
        delete_topics(kafka, [topic])
