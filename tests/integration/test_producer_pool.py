"""The producer pool (sinks/producer_pool.py) on its own, against the real broker and real
child processes: what the pipeline-level tests (tests/faults/test_producer_processes.py) do
not reach directly.

- Delivery accounting: after a flush every unit is settled, the marks are acknowledged in
  order, both processes carried messages and every message is in the topic. (That units are
  not settled before Kafka acknowledges is what the SIGKILL test in
  tests/faults/test_producer_processes.py catches.)
- A failed delivery in a child fails the tracker, naming the topic and key.
- A lost leadership (KafkaSink.abandon: purge, then stop): the processes are gone at once.
- A dead process fails the pool by name, and a flush does not wait for what it held.
"""

from __future__ import annotations

import os
import signal
import time
import uuid

import pytest

from replicad.config import KafkaSinkConfig, load_config
from replicad.service.producer_process import command
from replicad.sinks.base import DeliveryTracker, SinkError, SinkUnavailableError
from replicad.sinks.kafka import QUEUE_KBYTES, producer_settings
from replicad.sinks.producer_pool import ProducerPool
from tests.helpers.daemon_process import wait_for
from tests.helpers.kafka_helpers import consume_all, create_topics
from tests.helpers.kafka_run import alive

pytestmark = pytest.mark.integration


def _pool(kafka: str, errors: list[object]) -> ProducerPool:
    config = KafkaSinkConfig(bootstrap_servers=kafka, producer_processes=2)
    return ProducerPool(
        2,
        command(load_config(None, {})),
        producer_settings(config, "pool"),
        errors.append,
        config.max_in_flight,
        QUEUE_KBYTES * 1024,
    )


def _pids(pool: ProducerPool) -> list[int]:
    return [child.proc.pid for child in pool._children]


def test_units_come_off_only_when_kafka_acknowledged_and_every_message_arrives(kafka) -> None:
    topic = f"pool{uuid.uuid4().hex[:8]}"
    create_topics(kafka, [topic], partitions=3)
    errors: list[object] = []
    pool = _pool(kafka, errors)
    tracker = DeliveryTracker()
    try:
        units = []
        for mark in range(1, 4):
            unit = tracker.current
            for i in range(700):  # more than a batch: some go at once, the rest linger
                key = b"%d-%d" % (mark, i)
                unit.outstanding += 1
                pool.produce(topic, b"v" + key, key, on_delivery=unit.delivered)
            units.append(unit)
            tracker.close(mark)
        assert pool.flush(30) == 0
        assert [u.outstanding for u in units] == [0, 0, 0]
        assert tracker.acked() == 3
        assert len(pool) == 0
        counts = [c.messages for c in pool._children]
        assert sum(counts) == 2100 and min(counts) > 0, counts
    finally:
        pool.close()
    records = consume_all(kafka, [topic], idle_s=2.0)
    assert sorted(r.value for r in records) == sorted(
        b"v%d-%d" % (m, i) for m in range(1, 4) for i in range(700)
    )
    assert errors == []


def test_a_failed_delivery_fails_the_tracker_with_topic_and_key(kafka) -> None:
    topic = f"pool{uuid.uuid4().hex[:8]}"
    create_topics(kafka, [topic])  # one partition: partition 5 does not exist
    pool = _pool(kafka, [])
    tracker = DeliveryTracker()
    try:
        unit = tracker.current
        unit.outstanding += 1
        pool.produce(topic, b"x", b"the-key", partition=5, on_delivery=unit.delivered)
        tracker.close(1)
        pool.flush(30)
        assert unit.outstanding == 0
        with pytest.raises(SinkError) as info:
            tracker.acked()
        assert info.value.context["topic"] == topic
    finally:
        pool.close()


def test_abandon_stops_the_processes_at_once(kafka) -> None:
    topic = f"pool{uuid.uuid4().hex[:8]}"
    create_topics(kafka, [topic])
    pool = _pool(kafka, [])
    pids = _pids(pool)
    tracker = DeliveryTracker()
    unit = tracker.current
    for i in range(100):
        unit.outstanding += 1
        pool.produce(topic, b"x", b"%d" % i, on_delivery=unit.delivered)
    started = time.monotonic()
    pool.purge()
    pool.close(timeout_s=2.0)
    assert time.monotonic() - started < 4.0
    assert not [pid for pid in pids if alive(pid)]


def test_a_dead_process_fails_the_pool_by_name(kafka) -> None:
    topic = f"pool{uuid.uuid4().hex[:8]}"
    create_topics(kafka, [topic])
    pool = _pool(kafka, [])
    pids = _pids(pool)
    try:
        os.kill(pids[1], signal.SIGKILL)
        wait_for(lambda: not alive(pids[1]) or _reaped(pool, 1), 10, "the child to die")
        with pytest.raises(SinkUnavailableError) as info:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                pool.poll(0)
                time.sleep(0.05)
        assert "process 1 was killed by signal 9" in str(info.value)
        assert info.value.context["pid"] == pids[1]
        with pytest.raises(SinkUnavailableError):
            tracker = DeliveryTracker()
            pool.produce(topic, b"x", b"k", on_delivery=tracker.current.delivered)
        assert pool.flush(1.0) == 0  # the live one holds nothing; the dead one is not waited for
    finally:
        pool.close()
    assert not [pid for pid in pids if alive(pid)]


def _reaped(pool: ProducerPool, index: int) -> bool:
    return pool._children[index].proc.poll() is not None
