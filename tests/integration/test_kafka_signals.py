"""Signals through Kafka (`signals.kafka.topic`, Debezium's Kafka signal channel) against the
real MariaDB and Apache Kafka: an incremental snapshot started, paused, resumed and stopped by
messages on the signal topic, while the table is written; then a restart that must not apply
any signal a second time.

Oracles: SELECT (the topic folded — reads and changes in offset order — equals the table);
the count of `snapshot_chunk_read` events (no chunk while paused; none after the restart);
the stored checkpoint's `signal_offset` (after the last signal); the pipeline's status file
(`paused`, and each signal's answer).
"""

from __future__ import annotations

import json
import signal
import time
import uuid

import orjson
import pytest
from confluent_kafka import Producer

from tests.helpers.daemon_process import wait_for
from tests.helpers.ha import HaReplicad
from tests.helpers.kafka_helpers import consume_all, create_topics
from tests.helpers.kafka_run import BackgroundWriter, KafkaReplicad, wait_caught_up

from .test_incremental_snapshot import (
    BigTableWorkload,
    _big_table,
    _chunk_reads,
    _create_signal,
    _fold,
    _selected,
    _signal_yaml,
    _zk_position,
)

pytestmark = pytest.mark.integration

CHUNK = 500
OTHER_ROWS = 200_000  # read for longer than the test takes to stop it


def _send(kafka: str, topic: str, key: str, value: dict) -> None:
    producer = Producer({"bootstrap.servers": kafka})
    producer.produce(topic, orjson.dumps(value), key.encode())
    assert producer.flush(10) == 0


def _status(replicad: KafkaReplicad) -> dict:
    path = replicad.position_file.with_name("position.status.json")
    return json.loads(path.read_text()) if path.exists() else {}


def _finished(replicad: KafkaReplicad, table: str, state: str) -> bool:
    """The status lists a snapshot of `table` finished in `state`."""
    finished = (_status(replicad).get("incremental") or {}).get("finished") or []
    return any(f.get("table") == table and f.get("state") == state for f in finished)


def _reads(kafka: str, prefix: str, db: str, table: str) -> int:
    records = consume_all(kafka, [f"{prefix}.{db}.{table}"], idle_s=0.5)
    return sum(1 for r in records if r.value is not None and orjson.loads(r.value)["op"] == "r")


def test_a_snapshot_driven_through_the_signal_topic(db, kafka, tmp_path) -> None:
    conn, name = db
    with conn.cursor() as cur:
        _big_table(cur, name)
        cur.execute("CREATE TABLE other (id INT PRIMARY KEY, v INT)")
        cur.execute(f"INSERT INTO other SELECT seq, seq FROM seq_1_to_{OTHER_ROWS}")
    prefix = f"sg{uuid.uuid4().hex[:8]}"
    topic = f"{prefix}.signals"
    create_topics(kafka, [topic])
    replicad = KafkaReplicad(
        tmp_path,
        server_id=7401,
        prefix=prefix,
        kafka=kafka,
        db=name,
        extra_yaml=(
            _signal_yaml(name).replace("}}\n", f"}}, chunk_rows: {CHUNK}}}\n")
            + f"signals: {{kafka: {{topic: {topic}}}}}\n"
        ),
    )
    replicad.start()
    writer = BackgroundWriter(name, seed=3, pause_s=0.002, workload=BigTableWorkload)
    writer.start()
    try:
        _send(kafka, topic, "someone-else", {"type": "pause-snapshot"})  # not our key
        _send(kafka, topic, prefix, {"type": "log", "data": {"message": "hello from kafka"}})
        _send(
            kafka,
            topic,
            prefix,
            {"type": "execute-snapshot", "data": {"data-collections": [f"{name}.big"]}},
        )
        wait_for(lambda: len(_chunk_reads(replicad)) >= 3, 60, "three chunks read")
        _send(kafka, topic, prefix, {"type": "pause-snapshot"})
        wait_for(
            lambda: ((_status(replicad).get("incremental") or {}).get("paused")) is True,
            30,
            "the status to say paused",
        )
        held = len(_chunk_reads(replicad))
        time.sleep(3)
        assert len(_chunk_reads(replicad)) <= held + 1, "at most the window in flight ends"
        paused_at = len(_chunk_reads(replicad))
        time.sleep(2)
        assert len(_chunk_reads(replicad)) == paused_at, "no chunk while paused"
        _send(kafka, topic, prefix, {"type": "resume-snapshot"})
        wait_for(lambda: _finished(replicad, f"{name}.big", "done"), 180, "big to finish")
        _send(
            kafka,
            topic,
            prefix,
            {"type": "execute-snapshot", "data": {"data-collections": [f"{name}.other"]}},
        )
        wait_for(
            lambda: any(c["table"] == f"{name}.other" for c in _chunk_reads(replicad)),
            60,
            "a chunk of other",
        )
        # Paused first, so that the stop lands before the snapshot of other is done.
        _send(kafka, topic, prefix, {"type": "pause-snapshot"})
        _send(
            kafka,
            topic,
            prefix,
            {"type": "stop-snapshot", "data": {"data-collections": [f"{name}.other"]}},
        )
        wait_for(
            lambda: _finished(replicad, f"{name}.other", "cancelled"), 30, "other to be cancelled"
        )
        _send(kafka, topic, prefix, {"type": "resume-snapshot"})
        wait_for(
            lambda: ((_status(replicad).get("incremental") or {}).get("paused")) is False,
            30,
            "the status to say resumed",
        )
    finally:
        writer.stop()
    wait_caught_up(replicad, timeout=120)
    time.sleep(2)  # a checkpoint after the last signal's effect
    stored = replicad.position() or {}
    assert stored.get("signal_offset") == 9, stored  # nine messages, ours or not, all read
    answers = {(s["op"], s["state"]) for s in _status(replicad).get("signals") or []}
    assert ("log", "applied") in answers and ("snapshot-pause", "applied") in answers
    assert any(e.get("message") == "hello from kafka" for e in replicad.log_events())
    replicad.stop()

    records = consume_all(kafka, [f"{prefix}.{name}.big"], idle_s=1.0)
    assert _fold(records) == _selected(conn, name)
    assert 0 < _reads(kafka, prefix, name, "other") < OTHER_ROWS, "stopped before the end"

    # Restarted from the stored checkpoint: every signal was applied, none runs again.
    chunks, received = len(_chunk_reads(replicad)), replicad.count("signal_received")
    replicad.start()
    time.sleep(5)
    replicad.stop(signal.SIGTERM)
    assert len(_chunk_reads(replicad)) == chunks, "no snapshot read a second time"
    assert replicad.count("signal_received") == received, "no signal read a second time"


def test_a_signal_is_applied_once_across_a_failover(
    db, kafka, zookeeper, zk_root, tmp_path
) -> None:
    """Under ZooKeeper: the leader applies a snapshot signal and a log signal and stores the
    offset after them with the progress; SIGKILLed, the standby takes over from that
    checkpoint and reads neither again (it reads the signal sent after the kill)."""
    conn, name = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE small (id INT PRIMARY KEY, v INT)")
        cur.execute("INSERT INTO small SELECT seq, seq FROM seq_1_to_2000")
        _create_signal(cur, name)
    pipeline = f"sz{uuid.uuid4().hex[:6]}"
    prefix = f"sz{uuid.uuid4().hex[:8]}"
    topic = f"{prefix}.signals"
    create_topics(kafka, [topic])
    zk_port = int(zookeeper.rsplit(":", 1)[1])
    workers = [
        HaReplicad(
            tmp_path,
            f"w{i}",
            zk_port,
            zk_root,
            server_id=7402,
            prefix=prefix,
            kafka=kafka,
            pipeline=pipeline,
            db=name,
            extra_yaml=_signal_yaml(name) + f"signals: {{kafka: {{topic: {topic}}}}}\n",
        )
        for i in range(2)
    ]
    for worker in workers:
        worker.start()
    wait_for(lambda: any(w.count("leading") for w in workers), 60, "a leader")
    leader = next(w for w in workers if w.count("leading"))
    standby = next(w for w in workers if w is not leader)
    _send(kafka, topic, prefix, {"type": "log", "data": {"message": "before the kill"}})
    _send(
        kafka,
        topic,
        prefix,
        {"type": "execute-snapshot", "data": {"data-collections": [f"{name}.small"]}},
    )

    def stored() -> dict:
        return _zk_position(zookeeper, zk_root, pipeline) or {}

    def done(position: dict) -> bool:
        finished = json.loads(position.get("snapshot") or "{}").get("finished") or []
        return any(f["table"] == f"{name}.small" and f["state"] == "done" for f in finished)

    wait_for(lambda: done(stored()) and stored().get("signal_offset") == 2, 60, "stored")
    leader.proc.send_signal(signal.SIGKILL)
    leader.proc.wait(30)
    wait_for(lambda: standby.count("leading") > 0, 60, "the standby to lead")
    _send(kafka, topic, prefix, {"type": "log", "data": {"message": "after the kill"}})
    wait_for(
        lambda: any(e.get("message") == "after the kill" for e in standby.log_events()),
        60,
        "the new leader to read the new signal",
    )
    assert standby.stop() == 0
    messages = [e.get("message") for e in standby.log_events() if e.get("event") == "signal_log"]
    assert messages == ["after the kill"], messages
    assert standby.count("snapshot_request_started") == 0, "the snapshot was not run again"
    assert stored().get("signal_offset") == 3
