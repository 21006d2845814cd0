"""`replicad check` on Kafka: exactly-once on topics it creates with one replica is a WARN.
A broker's death leaves such a partition without a leader, and Kafka 4.x's transaction
coordinator skips the abort marker of a leaderless partition (KAFKA-20734): the fault
campaign saw an aborted batch become visible with the producer's next commit."""

from __future__ import annotations

import asyncio

import pytest

from replicad.config import KafkaSinkConfig, TopicsConfig
from replicad.service import check_deps
from replicad.service.check import PASS, WARN

pytestmark = pytest.mark.unit


def _findings(monkeypatch: pytest.MonkeyPatch, **options: object) -> list[tuple[str, str]]:
    from replicad.sinks import kafka_admin

    monkeypatch.setattr(kafka_admin, "probe_kafka", lambda config: "Kafka reached")
    config = KafkaSinkConfig(bootstrap_servers="127.0.0.1:1", **options)  # type: ignore[arg-type]
    return [(f.level, f.text) for f in asyncio.run(check_deps.kafka(config))]


def test_exactly_once_on_single_replica_topics_warns(monkeypatch) -> None:
    findings = _findings(monkeypatch, exactly_once=True)
    assert findings[0] == (PASS, "Kafka reached")
    assert [level for level, _ in findings] == [PASS, WARN]
    assert "KAFKA-20734" in findings[1][1]


@pytest.mark.parametrize(
    "options",
    [
        {"exactly_once": False},
        {"exactly_once": True, "topics": TopicsConfig(replication_factor=3)},
    ],
)
def test_replicated_topics_or_at_least_once_do_not(monkeypatch, options) -> None:
    assert [level for level, _ in _findings(monkeypatch, **options)] == [PASS]
