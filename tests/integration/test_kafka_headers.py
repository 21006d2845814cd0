"""`sinks.kafka.headers`: "full" (replicad.file/pos/row/gtid), "minimal" (replicad.gtid) or
"none", on a real topic, on both publishing paths (one multi-row event goes the compiled
way, the tombstones after its deletes too; REPLICAD_PURE_PYTHON=1 sends it row by row) and
from producer processes. Exactly-once adds replicad.batch to "full" and "minimal"."""

from __future__ import annotations

import uuid

import pytest

from tests.helpers.binlog_helpers import binlog_position
from tests.helpers.kafka_helpers import Record, consume_all
from tests.helpers.kafka_run import KafkaReplicad, wait_caught_up

pytestmark = pytest.mark.integration

ROWS = 50


def _expected(mode: str, source: dict, eos: bool) -> set[str]:
    """The header names a message with this `source` block must carry."""
    names = {"full": {"replicad.file", "replicad.pos", "replicad.row"}, "minimal": set()}
    expected = set(names.get(mode, set()))
    if mode != "none" and source.get("gtid") is not None:
        expected.add("replicad.gtid")
    if mode != "none" and eos:
        expected.add("replicad.batch")
    return expected


def _check(record: Record, source: dict, mode: str, eos: bool) -> None:
    assert set(record.headers) == _expected(mode, source, eos), (mode, record.headers)
    h = record.headers
    if "replicad.file" in h:
        assert h["replicad.file"].decode() == source["file"]
        assert int(h["replicad.pos"]) == source["pos"]
        assert int(h["replicad.row"]) == source["row"]
    if "replicad.gtid" in h:
        assert h["replicad.gtid"].decode() == source["gtid"]


@pytest.mark.parametrize(
    ("mode", "pure", "processes", "eos"),
    [
        ("full", False, 1, False),
        ("full", True, 1, False),
        ("minimal", False, 1, False),
        ("minimal", True, 1, False),
        ("minimal", False, 2, False),
        ("none", False, 1, False),
        ("none", False, 2, False),
        ("minimal", False, 1, True),
        ("none", False, 1, True),
    ],
)
def test_each_header_mode_sends_its_headers(
    db, kafka, tmp_path, monkeypatch, mode: str, pure: bool, processes: int, eos: bool
) -> None:
    conn, name = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE h (id INT PRIMARY KEY, v VARCHAR(20))")
    start = binlog_position(conn)
    with conn.cursor() as cur:
        cur.execute("INSERT INTO h VALUES " + ",".join(f"({i}, 'v{i}')" for i in range(ROWS)))
        cur.execute("DELETE FROM h WHERE id < 5")
    if pure:
        monkeypatch.setenv("REPLICAD_PURE_PYTHON", "1")
    prefix = f"h{uuid.uuid4().hex[:8]}"
    replicad = KafkaReplicad(
        tmp_path,
        server_id=7241,
        prefix=prefix,
        kafka=kafka,
        kafka_yaml=f"headers: {mode}\nproducer_processes: {processes}\n"
        f"exactly_once: {'true' if eos else 'false'}",
        start=f"{{file: {start[0]}, pos: {start[1]}}}",
        db=name,
    )
    replicad.start()
    wait_caught_up(replicad)
    assert replicad.stop() == 0
    records = consume_all(kafka, [f"{prefix}.{name}.h"], idle_s=3.0)
    assert len(records) == ROWS + 5 + 5  # inserts, deletes, their tombstones
    source: dict = {}
    for record in records:
        if record.value is not None:
            source = record.json()["source"]
        else:  # a tombstone carries its delete's headers
            assert record.key is not None and source["row"] is not None
        _check(record, source, mode, eos)


def test_true_and_false_still_mean_full_and_none() -> None:
    from replicad.config import KafkaSinkConfig

    assert KafkaSinkConfig(bootstrap_servers="x", headers=True).headers == "full"
    assert KafkaSinkConfig(bootstrap_servers="x", headers=False).headers == "none"
    assert KafkaSinkConfig(bootstrap_servers="x").headers == "full"
