"""`sinks.kafka.producer_processes: 2`: the pipeline hands its messages to two producer
processes, split by key hash (replicad/sinks/producer_pool.py, docs/performance.md).

- A random workload on the shop tables, with a TRUNCATE in the middle, published into topics
  of 3 partitions: folded per partition from Kafka it equals `SELECT`; every key's messages
  are in binlog order; both processes carried messages. The TRUNCATE goes to every partition
  and must sit between the rows around it in each: a row written after it but landing before
  it (the other process overtaking) would be wiped by the fold, and the fold would miss it.
- SIGKILL of one producer process while the workload runs: replicad stops with the
  transient exit status and names the process; a restart from the stored position (the
  lowest acknowledged across both processes) loses nothing.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.helpers.daemon_process import wait_for
from tests.helpers.kafka_helpers import Record
from tests.helpers.kafka_run import (
    BackgroundWriter,
    KafkaReplicad,
    after_image,
    alive,
    coordinates,
    normalise_expected,
    producer_pids,
    read_topics,
    tables_state,
    wait_caught_up,
)

pytestmark = pytest.mark.faults

EXIT_TEMPFAIL = 75
KAFKA_YAML = "producer_processes: 2\ntopics: {partitions: 3}"


def started(
    db: str, kafka: str, tmp_path: Path, server_id: int
) -> tuple[KafkaReplicad, BackgroundWriter, str]:
    """replicad with two producer processes, running, and a writer under way; the prefix."""
    prefix = f"pp{uuid.uuid4().hex[:8]}"
    replicad = KafkaReplicad(
        tmp_path, server_id=server_id, prefix=prefix, kafka=kafka, kafka_yaml=KAFKA_YAML, db=db
    )
    replicad.start()
    # seed: Workload's ids start at seed * 1e6, within an INT
    writer = BackgroundWriter(db, seed=server_id % 100, pause_s=0.002)
    writer.start()
    return replicad, writer, prefix


def fold_partitions(records: list[Record], prefix: str, db: str) -> dict[str, dict[str, Any]]:
    """Replay each partition in offset order; a TRUNCATE (op "t", on every partition) drops
    the keys of its own partition only. Tables with a primary key only, as `tables_state`."""
    tables: dict[str, dict[str, tuple[int, Any]]] = {}
    for record in records:  # sorted by topic, partition, offset
        table = record.topic[len(f"{prefix}.{db}.") :]
        if table == "audit":
            continue
        state = tables.setdefault(table, {})
        envelope = None if record.value is None else orjson.loads(record.value)
        if envelope is not None and envelope["op"] == "t":
            for key in [k for k, (p, _) in state.items() if p == record.partition]:
                del state[key]
            continue
        assert record.key is not None, f"a row of {table} without a key"
        key = record.key.decode()
        if envelope is None or envelope["op"] == "d":
            state.pop(key, None)
            continue
        state[key] = (record.partition, after_image(envelope))
    return {t: {k: row for k, (_, row) in rows.items()} for t, rows in tables.items()}


def out_of_order_keys(records: list[Record]) -> list[str]:
    """Keys whose messages are not in binlog order (file, pos, row) in their partition."""
    last: dict[tuple[str, bytes], tuple[Any, ...]] = {}
    wrong = []
    for record in records:
        if record.key is None:
            continue
        at = coordinates(record)[1:4]
        seen = last.get((record.topic, record.key))
        if seen is not None and at < seen:
            wrong.append(f"{record.topic} {record.key!r}: {at} after {seen}")
        last[(record.topic, record.key)] = at
    return wrong


def test_two_producer_processes_fold_to_the_tables_in_key_order(shop, kafka, tmp_path) -> None:
    conn, db = shop
    replicad, writer, prefix = started(db, kafka, tmp_path, 7701)
    try:
        time.sleep(3.0)
        with conn.cursor() as cur:
            cur.execute("TRUNCATE TABLE accounts")
        time.sleep(3.0)
    finally:
        statements = writer.stop()
    assert statements > 200
    wait_caught_up(replicad)
    pids = producer_pids(replicad)
    assert len(pids) == 2, pids
    assert replicad.stop() == 0
    assert not [p for p in pids if alive(p)], "a producer process outlived the pipeline"
    stopped = [e for e in replicad.log_events() if e["event"] == "kafka_producer_processes_stopped"]
    assert stopped and all(n > 0 for n in stopped[-1]["messages"]), stopped
    assert stopped[-1]["unacknowledged"] == 0

    records = read_topics(kafka, prefix, db)
    truncates = [r for r in records if r.value is not None and orjson.loads(r.value)["op"] == "t"]
    assert sorted(r.partition for r in truncates) == [0, 1, 2]  # accounts: one per partition
    assert out_of_order_keys(records) == []
    assert fold_partitions(records, prefix, db) == normalise_expected(tables_state(conn, db))


def test_sigkill_of_one_producer_process_loses_nothing(shop, kafka, tmp_path) -> None:
    conn, db = shop
    replicad, writer, prefix = started(db, kafka, tmp_path, 7702)
    try:
        wait_for(lambda: (replicad.position() or {}).get("pos") is not None, 20, "a checkpoint")
        time.sleep(1.0)
        pids = producer_pids(replicad)
        assert len(pids) == 2, pids
        os.kill(pids[1], signal.SIGKILL)
        assert replicad.proc is not None
        code = replicad.proc.wait(timeout=30)
        assert code == EXIT_TEMPFAIL, replicad.err.read_text()[-3000:]
        lost = [e for e in replicad.log_events() if e["event"] == "kafka_producer_process_lost"]
        assert lost and lost[0]["process"] == 1 and lost[0]["pid"] == pids[1], lost
        assert not alive(pids[0]), "the other producer process outlived the pipeline"
        replicad.start()  # from the stored position
        time.sleep(1.0)
    finally:
        statements = writer.stop()
    assert statements > 200
    wait_caught_up(replicad)
    assert replicad.stop() == 0
    records = read_topics(kafka, prefix, db)
    assert fold_partitions(records, prefix, db) == normalise_expected(tables_state(conn, db))
