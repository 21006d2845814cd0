"""Exactly-once after a failed batch, without a broker: once a Kafka transaction is aborted
(its messages timed out, were purged, or its commit was refused), no later commit may carry a
position record, since the data before that position went with the aborted transaction. The
fault campaign found this (bench/chaos.py --seed 37 --run 73: a Kafka cut inside a 20k-row
transaction; the drain after the failure committed a transaction holding only the position
record, and 10,244 rows were lost to read_committed consumers)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from replicad.binlog.position import Position
from replicad.checkpoint_record import Checkpoint
from replicad.sinks.base import SinkError
from tests.unit.test_kafka_eos_stop import _row, _sink, _TransactionalProducer

pytestmark = pytest.mark.unit


class _PurgingProducer(_TransactionalProducer):
    """Every data message's delivery report says it was purged (an abort, a timeout); the
    queue is empty by the time the sink looks."""

    def __init__(self, settings: dict[str, Any]) -> None:
        super().__init__(settings)
        self.reports: list[Any] = []

    def produce(self, topic: str, value: Any, key: Any, **kwargs: Any) -> None:
        super().produce(topic, value, key)
        if not topic.endswith("replicad-positions"):
            self.reports.append(kwargs["on_delivery"])

    def poll(self, timeout: float) -> int:
        reports, self.reports = self.reports, []
        for report in reports:
            report(KafkaError(KafkaError._PURGE_QUEUE, "Local: Purged in queue"), _Message())
        return len(reports)


class _Message:
    def topic(self) -> str:
        return "p.shop.users"

    def key(self) -> bytes:
        return b'{"id":0}'


class _RefusingProducer(_TransactionalProducer):
    """The first commit is refused as needing an abort: `code` says why (a local timeout:
    messages timed out in it)."""

    refused = False
    code = KafkaError._TIMED_OUT

    def commit_transaction(self, timeout: float) -> None:
        if not self.refused:
            self.refused = True
            raise KafkaException(KafkaError(self.code, "refused", txn_requires_abort=True))
        self.release.set()
        super().commit_transaction(timeout)


class _RefusingOnStateProducer(_RefusingProducer):
    code = KafkaError.INVALID_TXN_STATE  # a broker's answer: nothing of it is in flight


def _published_and_marked(sink: Any) -> None:
    sink.publish(_row(0))
    sink.mark(1, Checkpoint(Position("bin.000001", 100)), True)


def test_a_failed_delivery_reported_before_the_commit_looks_stops_it(monkeypatch) -> None:
    sink = _sink(monkeypatch, _PurgingProducer)
    producer = sink.producer
    assert isinstance(producer, _PurgingProducer)
    _published_and_marked(sink)
    with pytest.raises(SinkError, match="Purged in queue"):
        asyncio.run(sink._commit_batch())
    with pytest.raises(SinkError):  # the drain of the failed pipeline commits nothing either
        asyncio.run(sink._commit_batch())
    assert "commit" not in producer.log, producer.log
    assert sink.routing.positions_topic not in producer.sent


def test_no_commit_after_a_failed_transaction(monkeypatch) -> None:
    sink = _sink(monkeypatch, _RefusingOnStateProducer)
    producer = sink.producer
    _published_and_marked(sink)
    with pytest.raises(SinkError, match="failed"):
        asyncio.run(sink._commit_batch())
    assert producer.log == ["begin", "abort"]  # all acknowledged: safe to abort now
    # What the failed pipeline's drain, or the ticker's maintain(), would do next.
    with pytest.raises(SinkError, match="failed"):
        asyncio.run(sink._commit_batch())
    with pytest.raises(SinkError, match="failed"):
        sink.publish(_row(1))  # no new transaction after a failed one
    assert producer.log == ["begin", "abort"], "a position committed past aborted data"
    assert producer.sent.count(sink.routing.positions_topic) == 1  # in the aborted one only


def test_a_transaction_whose_messages_timed_out_is_left_to_the_next_epoch(monkeypatch) -> None:
    """Messages timed out on our side may still be appended after an abort of ours, and then
    belong to this producer id's next transaction (KAFKA-14053). So no EndTxn: the next
    init_transactions (the restart's, a standby's) or the transaction timeout aborts it under
    a new producer epoch, which refuses them. Queued, unsent messages are purged."""
    sink = _sink(monkeypatch, _RefusingProducer)
    producer = sink.producer
    _published_and_marked(sink)
    with pytest.raises(SinkError, match="failed"):
        asyncio.run(sink._commit_batch())
    with pytest.raises(SinkError, match="failed"):
        sink.publish(_row(1))
    sink.close()
    assert producer.log == ["begin"], "aborted under the epoch of requests still in flight"
    assert producer.purged == (True, False)


def test_an_undelivered_message_leaves_the_transaction_to_the_next_epoch(monkeypatch) -> None:
    sink = _sink(monkeypatch, _PurgingProducer)
    producer = sink.producer
    _published_and_marked(sink)
    with pytest.raises(SinkError):
        asyncio.run(sink._commit_batch())
    assert "abort" not in producer.log and producer.purged == (True, False)
