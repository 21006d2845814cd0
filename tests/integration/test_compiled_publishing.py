"""The compiled publishing path (whole ROWS events encoded in C, `sinks/event_envelope.py`)
publishes exactly what the pure-Python path publishes.

The same binlog range - every column type of tests/helpers/all_types.py with random values,
updates, primary-key changes, deletes, a table without a primary key (`key_without_pk:
table`) - is published twice by `replicad run`, into Kafka and into the JSON-lines sink:
once with the accelerator, once with REPLICAD_PURE_PYTHON=1. Every message must be
byte-identical (key, value, headers), except the envelope's top-level `ts_ms`, `ts_us` and
`ts_ns`, the time of publishing. `/metrics` shows which path each run took, so the test
cannot pass with both runs on the same path.
"""

from __future__ import annotations

import random
import re
import uuid

import pytest

from replicad.sinks import writer_choice
from tests.helpers.all_types import ALL_TYPES, COLUMNS, insert_random
from tests.helpers.binlog_helpers import binlog_position
from tests.helpers.http import http_get, sample
from tests.helpers.invalidate import free_port
from tests.helpers.kafka_helpers import Record, consume_all
from tests.helpers.kafka_run import KafkaReplicad, wait_caught_up

pytestmark = pytest.mark.integration

_TS_MS = re.compile(rb',"ts_ms":\d+,"ts_us":\d+,"ts_ns":\d+,"transaction":null}$')


def _comparable(record: Record) -> tuple[object, ...]:
    value = None if record.value is None else _TS_MS.sub(b"", record.value)
    assert record.value is None or value != record.value, record.value  # ts_ms was there
    return record.key, value, sorted(record.headers.items())


def _publish(
    tmp_path,
    kafka: str | None,
    db: str,
    start: tuple[str, int],
    pure: bool,
    monkeypatch,
    processes: int = 1,
) -> dict:
    """Run one pipeline over the workload, into Kafka or (kafka None) JSON lines; its topic
    prefix or output file, and its path counters. `processes`: sinks.kafka.producer_processes."""
    path = ("pure" if pure else "compiled") + (f"-{processes}" if processes > 1 else "")
    prefix = f"c{uuid.uuid4().hex[:8]}"
    port = free_port()
    if pure:
        monkeypatch.setenv("REPLICAD_PURE_PYTHON", "1")
    else:
        monkeypatch.delenv("REPLICAD_PURE_PYTHON", raising=False)
    replicad = KafkaReplicad(
        tmp_path / path / ("kafka" if kafka else "lines"),
        server_id=7201 + pure + (2 if kafka else 0) + (4 if processes > 1 else 0),
        prefix=prefix,
        kafka=kafka or "127.0.0.1:9",
        kafka_yaml=f"key_without_pk: table\nproducer_processes: {processes}",
        extra_yaml=f"metrics: {{listen: '127.0.0.1:{port}'}}\n",
        start=f"{{file: {start[0]}, pos: {start[1]}}}",
        db=db,
    )
    if kafka is None:  # the same pipeline with the JSON-lines sink instead
        config = replicad.config.read_text()
        head, rest = config.split("sinks:\n", 1)
        rest = rest[rest.index("coordination:") :]
        replicad.config.write_text(f"{head}sinks:\n  stdout: {{path: {replicad.out}}}\n{rest}")
    replicad.start()
    wait_caught_up(replicad)
    status, metrics = http_get(f"http://127.0.0.1:{port}/metrics")
    assert status == 200
    assert replicad.stop() == 0
    monkeypatch.delenv("REPLICAD_PURE_PYTHON", raising=False)
    started = [e for e in replicad.log_events() if e["event"] == "kafka_producer_processes_started"]
    assert len(started[-1]["pids"] if started else [None]) == processes
    return {
        "prefix": prefix,
        "out": replicad.out,
        "compiled": sample(metrics, "replicad_rows_events_total", path="compiled"),
        "row_by_row": sample(metrics, "replicad_rows_events_total", path="row_by_row"),
    }


def _workload(conn) -> tuple[str, int]:
    """Every column type, updates, key changes, deletes, a table without a key; the binlog
    position before it."""
    rng = random.Random(20)
    with conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        cur.execute(ALL_TYPES)
        cur.execute("CREATE TABLE nokey (a INT, b VARCHAR(20), c DOUBLE)")
    start = binlog_position(conn)
    with conn.cursor() as cur:
        insert_random(cur, rng, range(1, 81), COLUMNS)
        for i in rng.sample(range(1, 81), 20):
            cur.execute(
                f"UPDATE t SET vc = 'upd\\n\"', de = -de, tm = '-01:02:03.4' WHERE id = {i}"
            )
        cur.execute("UPDATE t SET id = id + 1000 WHERE id IN (5, 6, 7)")  # key changes
        cur.execute("UPDATE t SET id = id + 1, ti = 1 WHERE id > 1000 ORDER BY id DESC")
        cur.execute("DELETE FROM t WHERE id IN (8, 9, 10, 1006)")
        cur.execute("INSERT INTO nokey VALUES (1, 'x', -0.0), (2, NULL, 1e-5), (3, 'é', 1e22)")
        cur.execute("UPDATE nokey SET b = 'z' WHERE a < 3")
        cur.execute("DELETE FROM nokey WHERE a = 1")
    return start


def _assert_paths(compiled: dict, pure: dict) -> None:
    assert compiled["compiled"] and compiled["compiled"] >= 10, compiled
    assert not compiled["row_by_row"], compiled
    assert not pure["compiled"] and pure["row_by_row"], pure


@pytest.mark.skipif(not writer_choice.available(), reason="_writer is not built")
def test_compiled_and_pure_paths_publish_identical_messages(
    db, kafka, tmp_path, monkeypatch
) -> None:
    """And with two producer processes (sinks/producer_pool.py: the child builds the headers
    of a compiled event): the same messages, each key's in the same order (the processes'
    messages interleave differently in a partition from run to run, keys do not)."""
    conn, name = db
    start = _workload(conn)
    runs = [_publish(tmp_path, kafka, name, start, pure, monkeypatch) for pure in (False, True)]
    _assert_paths(*runs)
    split = _publish(tmp_path, kafka, name, start, False, monkeypatch, processes=2)
    _assert_paths(split, runs[1])

    # t: 80 inserts, up to 20 updates, 6 key changes (a delete and a create each), 4
    # deletes; a tombstone after each delete. nokey: 3 inserts, 2 updates, 1 delete.
    for table, least, tombstones in (("t", 80 + 12 + 4, 10), ("nokey", 6, 1)):
        topics = [f"{run['prefix']}.{name}.{table}" for run in runs]
        fast, slow = (consume_all(kafka, [topic], idle_s=3.0) for topic in topics)
        assert len([r for r in slow if r.value is not None]) >= least, table
        assert [_comparable(r) for r in fast] == [_comparable(r) for r in slow], table
        assert len([r for r in fast if r.value is None]) == tombstones, table
        two = consume_all(kafka, [f"{split['prefix']}.{name}.{table}"], idle_s=3.0)
        assert _by_key(two) == _by_key(slow), table


def _by_key(records: list[Record]) -> dict[bytes | None, list[tuple[object, ...]]]:
    out: dict[bytes | None, list[tuple[object, ...]]] = {}
    for record in records:
        out.setdefault(record.key, []).append(_comparable(record))
    return out


@pytest.mark.skipif(not writer_choice.available(), reason="_writer is not built")
def test_compiled_and_pure_paths_write_identical_json_lines(db, tmp_path, monkeypatch) -> None:
    conn, name = db
    start = _workload(conn)
    runs = [_publish(tmp_path, None, name, start, pure, monkeypatch) for pure in (False, True)]
    _assert_paths(*runs)
    fast, slow = (run["out"].read_bytes().splitlines() for run in runs)
    assert len(slow) >= 80 + 12 + 4 + 6
    assert [_TS_MS.sub(b"", line) for line in fast] == [_TS_MS.sub(b"", line) for line in slow]
    assert all(_TS_MS.search(line) for line in fast + slow)


@pytest.mark.skipif(not writer_choice.available(), reason="_writer is not built")
def test_a_full_producer_queue_keeps_every_tombstone(db, kafka, tmp_path) -> None:
    """A delete that finds librdkafka's queue full goes to the pending list; its tombstone
    must follow it there. It was dropped (bench/publish.py's at-least-once run: one of
    10,000 tombstones missing, every row message there)."""
    conn, name = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE d (id INT PRIMARY KEY, pad VARCHAR(100))")
    start = binlog_position(conn)
    with conn.cursor() as cur:
        values = ",".join(f"({i}, REPEAT('p', 100))" for i in range(1, 601))
        cur.execute(f"INSERT INTO d VALUES {values}")
        cur.execute("DELETE FROM d")  # one event of 600 rows: the compiled route
    prefix = f"q{uuid.uuid4().hex[:8]}"
    replicad = KafkaReplicad(
        tmp_path,
        server_id=7231,
        prefix=prefix,
        kafka=kafka,
        kafka_yaml="producer: {queue.buffering.max.messages: 7}",
        start=f"{{file: {start[0]}, pos: {start[1]}}}",
        db=name,
    )
    replicad.start()
    wait_caught_up(replicad)
    assert replicad.stop() == 0
    records = consume_all(kafka, [f"{prefix}.{name}.d"], idle_s=3.0)
    deletes = [i for i, r in enumerate(records) if r.value is not None and b'"op":"d"' in r.value]
    assert len(deletes) == 600
    following = [records[i + 1] if i + 1 < len(records) else None for i in deletes]
    missing = [
        records[i].key
        for i, after in zip(deletes, following, strict=True)
        if after is None or after.value is not None or after.key != records[i].key
    ]
    assert missing == [], f"deletes without their tombstone: {missing[:5]}"
