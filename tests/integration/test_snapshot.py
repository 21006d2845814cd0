"""Initial snapshots (snapshot.mode: initial) against the real server and broker.

Oracles: the same rows decoded from the binlog by a second, streaming pipeline (a read must be
the very message value the binlog path gives for the row), and SELECT (the topics folded -
reads, then changes - equal the tables, with no change lost or repeated around the snapshot's
position).
"""

from __future__ import annotations

import random
import uuid

import orjson
import pytest

from replicad.source.schema import SchemaHistory, default_history_path
from tests.helpers.all_types import ALL_TYPES, COLUMNS, insert_random
from tests.helpers.daemon_process import wait_for
from tests.helpers.kafka_helpers import consume_all
from tests.helpers.kafka_run import (
    BackgroundWriter,
    KafkaReplicad,
    Workload,
    audit_messages,
    audit_rows,
    duplicated,
    fold,
    normalise_expected,
    read_topics,
    tables_state,
    wait_caught_up,
)
from tests.helpers.snapshot_marks import assert_initial_marks, snapshot_order

pytestmark = pytest.mark.integration


def _binlog_end(conn) -> tuple[str, int]:
    with conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        file, pos = cur.fetchone()[:2]
    return str(file), int(pos)


def test_snapshot_reads_equal_the_binlog_path_value_for_value(db, kafka, tmp_path) -> None:
    """Every column type: a row read by the snapshot is the same message value (and the same
    schema version) as the same row decoded from its INSERT in the binlog."""
    conn, name = db
    with conn.cursor() as cur:
        cur.execute(ALL_TYPES)
        cur.execute(
            "CREATE TABLE l1 (k VARCHAR(20) CHARACTER SET latin1 PRIMARY KEY, "
            "v TEXT CHARACTER SET latin1, f FLOAT) DEFAULT CHARSET=latin1"
        )
    file, pos = _binlog_end(conn)
    rng = random.Random(20261125)
    with conn.cursor() as cur:
        insert_random(cur, rng, range(1, 301), COLUMNS)
        for i, text in enumerate(["Ä", "é€", "ß", "a b", "A", "z"]):
            cur.execute(
                "INSERT INTO l1 VALUES (%s, %s, %s)",
                (f"{text}{i}", text * 3, [0.1, 3.4e38, -1.17549e-38, 16777217.0, 1e-45, 7.0][i]),
            )
    streamed = KafkaReplicad(
        tmp_path / "stream",
        server_id=7161,
        prefix=(stream_prefix := f"b{uuid.uuid4().hex[:8]}"),
        kafka=kafka,
        start=f"{{file: {file}, pos: {pos}}}",
        pipeline="stream",
        db=name,
    )
    snapshotted = KafkaReplicad(
        tmp_path / "snap",
        server_id=7162,
        prefix=(snap_prefix := f"a{uuid.uuid4().hex[:8]}"),
        kafka=kafka,
        extra_yaml="snapshot: {mode: initial, chunk_rows: 37}\n",
        pipeline="snap",
        db=name,
    )
    streamed.start()
    snapshotted.start()
    wait_caught_up(streamed)
    wait_caught_up(snapshotted)
    assert streamed.stop() == 0 and snapshotted.stop() == 0
    assert_initial_marks(
        consume_all(kafka, [f"{snap_prefix}.{name}.{t}" for t in ("t", "l1")]),
        snapshot_order(snapshotted),
    )
    for table, count in (("t", 300), ("l1", 6)):
        reads = [r.json() for r in consume_all(kafka, [f"{snap_prefix}.{name}.{table}"])]
        inserts = [r.json() for r in consume_all(kafka, [f"{stream_prefix}.{name}.{table}"])]
        assert [m["op"] for m in reads] == ["r"] * count
        assert [m["op"] for m in inserts] == ["c"] * count
        key = "id" if table == "t" else "k"
        by_key = {m["after"][key]: m for m in inserts}
        assert {m["after"][key] for m in reads} == set(by_key)
        for read in reads:
            insert = by_key[read["after"][key]]
            for column, value in insert["after"].items():
                assert read["after"][column] == value, (table, column, read["after"][key])
            assert read["after"] == insert["after"]
            assert read["source"]["schema_version"] == insert["source"]["schema_version"]
            assert read["before"] is None


@pytest.mark.parametrize("method", ["consistent", "watermarks"])
def test_initial_snapshot_under_writes_folds_to_the_tables(shop, kafka, tmp_path, method) -> None:
    """Three tables - one of 200k rows, one with a composite key, one without a key - while a
    workload writes to all three: reads then changes fold to exactly the tables, with no
    change lost or repeated between the snapshot and the stream. `consistent`: one read view
    at a known position (MariaDB); `watermarks`: the stream starts at once and each table is
    read as an incremental snapshot (the method for MySQL, run here against MariaDB)."""
    conn, db = shop
    with conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        cur.execute(
            "INSERT INTO accounts SELECT seq, CONCAT('user', seq, '@example.com'), seq / 100 "
            "FROM seq_1_to_200000"
        )
        if method == "watermarks":
            cur.execute(
                "CREATE TABLE replicad_signal (id VARCHAR(128) NOT NULL PRIMARY KEY, "
                "kind VARCHAR(16) NOT NULL, window_id VARCHAR(64) NOT NULL, "
                "at TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3))"
            )
            cur.execute(
                f"GRANT INSERT, UPDATE, DELETE ON `{db}`.replicad_signal TO 'repl'@'127.0.0.1'"
            )
    seed = Workload(conn, seed=31)
    while seed.statements < 600:  # items (composite key) and audit (no key) hold rows too
        seed.transaction()
    writer = BackgroundWriter(db, seed=32, pause_s=0.002)
    writer.start()
    prefix = f"s{uuid.uuid4().hex[:8]}"
    # Watermarked chunks go out one window at a time, each as its own small producer batches:
    # that method reads bigger chunks here to keep the test short (both still read accounts
    # in many chunks).
    chunk_rows = 150 if method == "consistent" else 4000
    replicad = KafkaReplicad(
        tmp_path,
        server_id=7163,
        prefix=prefix,
        kafka=kafka,
        extra_yaml=(
            f"snapshot: {{mode: initial, chunk_rows: {chunk_rows}, initial_method: {method}, "
            f"signal: {{database: {db}, table: replicad_signal}}}}\n"
            f"filters: {{include: ['{db}\\..*']}}\n"
        ),
    )
    replicad.start()
    if method == "consistent":
        wait_for(lambda: replicad.count("snapshot_done") == 1, 180, "the snapshot to end")
    else:
        wait_for(lambda: replicad.count("snapshot_request_done") == 3, 240, "three tables")
    wait_for(lambda: writer.workload.statements >= 1500, 120, "writes after the snapshot")
    assert writer.stop() > 0
    wait_caught_up(replicad)
    assert replicad.stop() == 0
    records = read_topics(kafka, prefix, db)
    reads = [r for r in records if r.value is not None and orjson.loads(r.value)["op"] == "r"]
    assert sum(1 for r in reads if r.topic.endswith(".accounts")) >= 200_000
    assert {r.topic.rsplit(".", 1)[1] for r in reads} == {"items", "accounts", "audit"}
    assert fold(records, prefix, db) == normalise_expected(tables_state(conn, db))
    if method == "consistent":
        # No key: reads + inserts count every row once. (With watermarks a row inserted
        # between the stream's start and its chunk's window comes as an insert and a read:
        # the algorithm needs a key to drop the repeat; docs/snapshots.md says so.)
        assert audit_messages(records) == audit_rows(conn, db)
    assert duplicated(records) == []
    assert_initial_marks(reads, snapshot_order(replicad))


def test_a_table_a_snapshot_cannot_read_stops_before_anything_is_emitted(
    db, kafka, tmp_path
) -> None:
    """A column type whose SELECT text is not the binlog's value (MariaDB's UUID): a clear
    error naming the column, exit 78, no message, no position."""
    conn, name = db
    with conn.cursor() as cur:
        cur.execute("SELECT VERSION()")
        version = cur.fetchone()[0]
        if tuple(int(x) for x in version.split("-")[0].split(".")[:2]) < (10, 7):
            pytest.fail(f"this test needs MariaDB >= 10.7 (UUID type); the server is {version}")
        cur.execute("CREATE TABLE u (id INT PRIMARY KEY, x UUID)")
        cur.execute("INSERT INTO u VALUES (1, UUID())")
    replicad = KafkaReplicad(
        tmp_path,
        server_id=7164,
        prefix=(prefix := f"e{uuid.uuid4().hex[:8]}"),
        kafka=kafka,
        extra_yaml=f"snapshot: {{mode: initial}}\nfilters: {{include: ['{name}\\..*']}}\n",
    )
    result = replicad.run_to_exit(timeout=60)
    assert result.returncode == 78, result.stderr[-2000:]
    assert b"column" in result.stderr and b"uuid" in result.stderr.lower()
    assert replicad.position() is None
    assert consume_all(kafka, rf"{prefix}\..*", idle_s=2.0) == []


def test_when_needed_takes_a_new_snapshot_once_the_stored_file_is_gone(db, kafka, tmp_path) -> None:
    """snapshot.mode when_needed: a stored position whose binlog file the primary no longer has
    (as after PURGE BINARY LOGS; a file name that never existed stands for it here, so that the
    shared test server keeps its logs) is replaced by a new snapshot; with `initial` the same
    start fails instead of silently skipping rows."""
    conn, name = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE k (id INT PRIMARY KEY, v VARCHAR(10))")
        cur.execute("INSERT INTO k VALUES (1, 'a'), (2, 'b')")
    gone = {"version": 1, "pipeline": "kt", "position": {"file": "mariadb-bin.999990", "pos": 4}}
    runs = {}
    for mode in ("initial", "when_needed"):
        replicad = KafkaReplicad(
            tmp_path / mode,
            server_id=7165,
            prefix=(prefix := f"w{uuid.uuid4().hex[:8]}"),
            kafka=kafka,
            extra_yaml=f"snapshot: {{mode: {mode}}}\nfilters: {{include: ['{name}\\..*']}}\n",
        )
        replicad.position_file.write_text(orjson.dumps(gone).decode())
        # A schema history for it (empty: no table is described), so that `initial` gets as
        # far as the dump; without one every mode but `recovery` stops before it (78).
        SchemaHistory().save(default_history_path(replicad.position_file))
        runs[mode] = (replicad, prefix)
    failing, failing_prefix = runs["initial"]
    result = failing.run_to_exit(timeout=60)
    assert result.returncode != 0 and b"999990" in result.stderr and b"purged" in result.stderr
    assert consume_all(kafka, rf"{failing_prefix}\..*", idle_s=2.0) == []
    replicad, prefix = runs["when_needed"]
    replicad.start()
    wait_caught_up(replicad)
    with conn.cursor() as cur:
        cur.execute("UPDATE k SET v = 'c' WHERE id = 2")
    wait_caught_up(replicad)
    assert replicad.stop() == 0
    assert replicad.count("position_purged") == 1
    messages = [r.json() for r in consume_all(kafka, [f"{prefix}.{name}.k"])]
    assert [(m["op"], m["after"]) for m in messages] == [
        ("r", {"id": 1, "v": "a"}),
        ("r", {"id": 2, "v": "b"}),
        ("u", {"id": 2, "v": "c"}),
    ]
    assert replicad.position()["file"] != "mariadb-bin.999990"
