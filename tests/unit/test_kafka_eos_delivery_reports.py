"""Exactly-once asks confluent-kafka for failed delivery reports only
(`delivery.report.only.error`): a delivered message costs no Python call, and the commit of
a Kafka transaction is what says its messages arrived. The delivery units must then be
settled by the commit (not wait forever for reports that never come), and a failure that is
reported must still stop the batch. tests/integration/test_kafka_delivery_failure.py does
the failure against a real broker."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from confluent_kafka import KafkaError

from replicad.binlog.changes import RowChange
from replicad.binlog.position import Position
from replicad.checkpoint_record import Checkpoint
from replicad.config import FiltersConfig, KafkaSinkConfig
from replicad.sinks.base import SinkError
from replicad.sinks.routing import ChangeFilter

pytestmark = pytest.mark.unit


class _Message:
    def __init__(self, topic: str, key: bytes | None) -> None:
        self._topic, self._key = topic, key

    def topic(self) -> str:
        return self._topic

    def key(self) -> bytes | None:
        return self._key


class _OnlyErrorsProducer:
    """A transactional producer that reports deliveries as confluent-kafka does with
    delivery.report.only.error: nothing for a delivered message; a refused one (its key in
    `refuse`) gets its callback at the next poll."""

    refuse: frozenset[bytes] = frozenset()

    def __init__(self, settings: dict[str, Any]) -> None:
        self.settings = settings
        self.reports: list[tuple[Any, KafkaError, _Message]] = []
        self.log: list[str] = []

    def produce(self, topic: str, value: Any, key: Any, on_delivery: Any = None, **_: Any) -> None:
        assert self.settings.get("delivery.report.only.error") is True
        if key in self.refuse:
            error = KafkaError(KafkaError.MSG_SIZE_TOO_LARGE, "Broker: Message size too large")
            self.reports.append((on_delivery, error, _Message(topic, key)))

    def poll(self, timeout: float) -> int:
        reports, self.reports = self.reports, []
        for callback, error, message in reports:
            callback(error, message)
        return len(reports)

    def begin_transaction(self) -> None:
        self.log.append("begin")

    def commit_transaction(self, timeout: float) -> None:
        self.log.append("commit")

    def abort_transaction(self, timeout: float) -> None:
        self.log.append("abort")

    def flush(self, timeout: float) -> int:
        return 0

    def purge(self, *_: Any, **__: Any) -> None:
        pass

    def __len__(self) -> int:
        return len(self.reports)


def _sink(monkeypatch: pytest.MonkeyPatch, refuse: frozenset[bytes]) -> Any:
    from replicad.sinks import kafka, kafka_admin

    producer = type("Producer", (_OnlyErrorsProducer,), {"refuse": refuse})
    monkeypatch.setattr(kafka, "Producer", producer)
    monkeypatch.setattr(kafka_admin, "AdminClient", _OnlyErrorsProducer)  # no connections
    config = KafkaSinkConfig(bootstrap_servers="127.0.0.1:1", prefix="p", exactly_once=True)
    sink = kafka.KafkaSink(config, "pipe", ChangeFilter(FiltersConfig()))
    sink.topics.ready.update({"p.shop.users", sink.routing.positions_topic})
    return sink


def _row(row: int) -> RowChange:
    return RowChange(
        "c", "shop", "users", None, {"id": row}, "bin.000001", 4, row, "0-1-7", 1, 0, ("id",)
    )


def test_commits_settle_the_units_without_success_reports(monkeypatch) -> None:
    """200 batches of 3 rows, each committed: the position follows every commit and no unit
    is left waiting for a report (they would pile up, one per mark, for the process's life)."""
    sink = _sink(monkeypatch, refuse=frozenset())

    async def run() -> None:
        for batch in range(1, 201):
            for row in range(3):
                sink.publish(_row(batch * 10 + row))
            sink.mark(batch, Checkpoint(Position("bin.000001", 100 * batch)), True)
            await sink._commit_batch()
            assert sink.acked() == batch
            assert sink.tracker.outstanding == 0 and not sink.tracker._units

    asyncio.run(run())
    assert sink.producer.log.count("commit") == 200


def test_a_reported_failure_stops_the_batch_before_its_commit(monkeypatch) -> None:
    """The second batch's middle message is refused: the batch is not committed (its abort
    is left to the next producer's fencing), the error names the topic and key, and the
    position stays at the first batch."""
    sink = _sink(monkeypatch, refuse=frozenset({b'{"id":21}'}))

    async def run() -> None:
        for batch in (1, 2):
            for row in range(3):
                sink.publish(_row(batch * 10 + row))
            sink.mark(batch, Checkpoint(Position("bin.000001", 100 * batch)), True)
            await sink._commit_batch()

    with pytest.raises(SinkError) as info:
        asyncio.run(run())
    assert info.value.context["topic"] == "p.shop.users"
    assert info.value.context["key"] == '{"id":21}'
    assert sink.producer.log == ["begin", "commit", "begin"]
    assert sink._committed_seq == 1
