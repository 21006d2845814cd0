"""The daemon's Kafka sink and the readers of its topics (the Spark jobs, the invalidator)
name topics alike: before replicad/published/topics.py the Spark jobs took an empty
`sinks.kafka.prefix` for the pipeline's name and none of the readers replaced the characters
the sink replaces, so they read topics nobody wrote."""

from __future__ import annotations

import re

import pytest

from replicad.config import load_config
from replicad.published.topics import TopicNames
from replicad.sinks.routing import KafkaRouting
from replicad.spark.jobs import Source

CASES = [  # (sinks.kafka.prefix or None, db, table)
    ("", "shop", "orders"),
    (None, "shop", "orders"),
    ("cdc", "shöp", "my table"),
    ("a b", "db", "t"),
]


@pytest.mark.parametrize(("prefix", "db", "table"), CASES)
def test_sink_spark_and_invalidator_agree(prefix: str | None, db: str, table: str) -> None:
    env = {"REPLICAD_PIPELINE": "p1", "REPLICAD_SINKS__KAFKA__BOOTSTRAP_SERVERS": "k:9092"}
    if prefix is not None:
        env["REPLICAD_SINKS__KAFKA__PREFIX"] = prefix
    config = load_config(None, env)
    kafka = config.sinks.kafka
    assert kafka is not None
    written = KafkaRouting(kafka, config.pipeline).topic(db, table)
    read_by_spark = Source.of(config).options(f"{db}.{table}")["topic"]
    assert read_by_spark == written
    subscribed = re.compile(TopicNames.of(kafka, config.pipeline).pattern())
    assert subscribed.match(written), (subscribed.pattern, written)
    expected_prefix = "p1" if prefix is None else re.sub(r"[^A-Za-z0-9._-]", "_", prefix)
    assert written.startswith(f"{expected_prefix}.")
