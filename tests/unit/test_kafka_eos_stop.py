"""Exactly-once at a stop, without a broker: a stop cancels the pipeline wherever it waits,
possibly while a batch commits (librdkafka's commit_transaction runs in a worker thread).
The drain that follows must neither produce into a transaction that is committing or already
committed ("Erroneous state": exit 75) nor commit twice; a stop inside a binlog transaction
aborts the open batch instead of ending it off a mark. tests/integration/test_kafka_eos_stop.py
stops a real daemon so, at random moments."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from structlog.testing import capture_logs

from replicad.binlog.changes import RowChange
from replicad.binlog.position import Position
from replicad.checkpoint_record import Checkpoint
from replicad.config import FiltersConfig, KafkaSinkConfig
from replicad.sinks.routing import ChangeFilter

pytestmark = pytest.mark.unit


class _TransactionalProducer:
    """librdkafka's transactional states, as far as the sink meets them: produce and begin
    outside their state fail with _STATE; commit_transaction (in a worker thread) holds the
    COMMITTING state until `release` is set."""

    def __init__(self, settings: dict[str, Any]) -> None:
        self.settings = settings
        self.state = "ready"
        self.log: list[str] = []
        self.sent: list[str] = []
        self.release = threading.Event()
        self.purged: tuple[bool, bool] | None = None  # purge(in_queue, in_flight) asked

    def _refuse(self, what: str) -> KafkaException:
        return KafkaException(KafkaError(KafkaError._STATE, f"{what}: Local: Erroneous state"))

    def produce(self, topic: str, value: Any, key: Any, **_: Any) -> None:
        if self.state != "in_transaction":
            raise self._refuse("Unable to produce message")
        self.sent.append(topic)

    def begin_transaction(self) -> None:
        if self.state != "ready":
            raise self._refuse("Unable to begin transaction")
        self.state = "in_transaction"
        self.log.append("begin")

    def commit_transaction(self, timeout: float) -> None:
        if self.state != "in_transaction":
            raise self._refuse("Unable to commit transaction")
        self.state = "committing"
        assert self.release.wait(10), "the test never let the commit finish"
        self.state = "ready"
        self.log.append("commit")

    def abort_transaction(self, timeout: float) -> None:
        if self.state != "in_transaction":
            raise KafkaException(KafkaError(KafkaError._CONFLICT, "a commit is in progress"))
        self.state = "ready"
        self.log.append("abort")

    def poll(self, timeout: float) -> int:
        return 0

    def flush(self, timeout: float) -> int:
        return 0

    def purge(self, in_queue: bool, in_flight: bool, blocking: bool) -> None:
        self.purged = (in_queue, in_flight)

    def __len__(self) -> int:
        return 0


def _sink(monkeypatch: pytest.MonkeyPatch, producer: type = _TransactionalProducer) -> Any:
    from replicad.sinks import kafka, kafka_admin

    monkeypatch.setattr(kafka, "Producer", producer)
    monkeypatch.setattr(kafka_admin, "AdminClient", _TransactionalProducer)  # no connections
    config = KafkaSinkConfig(bootstrap_servers="127.0.0.1:1", prefix="p", exactly_once=True)
    sink = kafka.KafkaSink(config, "pipe", ChangeFilter(FiltersConfig()))
    sink.topics.ready.update({"p.shop.users", sink.routing.positions_topic})
    return sink


def _row(row: int) -> RowChange:
    return RowChange("c", "shop", "users", None, {"id": row}, "bin.000001", 4, row, "0-1-7", 1, 0)


async def _cancelled_inside_commit(sink: Any) -> None:
    """One batch published and marked; its commit is cancelled (the stop) while librdkafka
    commits it in the worker thread."""
    sink.publish(_row(0))
    sink.mark(1, Checkpoint(Position("bin.000001", 100)), True)
    committing = asyncio.ensure_future(sink._commit_batch())
    while sink.producer.state != "committing":
        await asyncio.sleep(0.001)
    committing.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await committing


@pytest.mark.parametrize("commit_ends", ["before the drain", "during the drain"])
def test_stop_inside_a_commit_drains_cleanly(monkeypatch, commit_ends: str) -> None:
    """The cancelled commit completes (before the drain begins, or while it waits): the
    drain commits nothing more and produces nothing into a closed transaction; the batch
    counts as committed once, and close() has nothing to abort."""
    sink = _sink(monkeypatch)
    producer = sink.producer

    async def stop() -> None:
        await _cancelled_inside_commit(sink)
        if commit_ends == "before the drain":
            producer.release.set()
            while producer.state != "ready":
                await asyncio.sleep(0.001)
        else:
            asyncio.get_running_loop().call_later(0.05, producer.release.set)
        await sink.drain(5.0)
        sink.close()

    with capture_logs() as logs:
        asyncio.run(stop())
    assert producer.log == ["begin", "commit"]
    assert producer.sent == ["p.shop.users", sink.routing.positions_topic]
    assert sink.acked() == 1
    assert not [e for e in logs if e["log_level"] in ("warning", "error")], logs


def test_maintain_after_a_cancelled_commit_waits_for_it(monkeypatch) -> None:
    """The ticker's maintain() after a stream cancelled inside a commit: it waits for that
    commit instead of starting another beside it."""
    sink = _sink(monkeypatch)
    producer = sink.producer

    async def tick() -> None:
        await _cancelled_inside_commit(sink)
        asyncio.get_running_loop().call_later(0.05, producer.release.set)
        await sink.maintain()

    asyncio.run(tick())
    assert producer.log == ["begin", "commit"] and sink.acked() == 1


def test_stop_inside_a_binlog_transaction_aborts_the_batch(monkeypatch) -> None:
    """Messages after the last mark (the stop's grace ran out mid-transaction): the batch
    cannot end at a mark, so it is aborted, not committed, and the stop is still clean."""
    sink = _sink(monkeypatch)
    producer = sink.producer
    sink.publish(_row(0))
    sink.mark(1, Checkpoint(Position("bin.000001", 100)), True)
    sink.publish(_row(1))  # the next binlog transaction, unfinished

    async def stop() -> None:
        await sink.drain(5.0)
        sink.close()

    with capture_logs() as logs:
        asyncio.run(stop())
    assert producer.log == ["begin", "abort"]
    assert sink.routing.positions_topic not in producer.sent
    assert sink.acked() == 0  # a restart resumes from the last committed position
    assert [e["event"] for e in logs if e["log_level"] == "warning"] == [
        "kafka_batch_aborted_at_stop"
    ]
