"""Snapshots against the real MySQL 9.7 (GTIDs on) and broker: the initial snapshot (MySQL has
no binlog position for a consistent read view, so `auto` means watermarks and `consistent` is
refused) and an incremental snapshot requested on a running pipeline, both under writes.

The MariaDB versions are tests/integration/test_snapshot.py and test_incremental_snapshot.py,
whose helpers and workloads these reuse; only row generation (no `seq_1_to_N` tables on MySQL)
and the catch-up check (MySQL GTID sets) differ. Oracle: SELECT - the topics folded (reads and
changes in offset order) equal the tables, with nothing lost or repeated.
"""

from __future__ import annotations

import uuid

import orjson
import pytest

from tests.helpers import mysql as mysql_helpers
from tests.helpers.daemon_process import DaemonProcess, wait_for
from tests.helpers.kafka_helpers import consume_all
from tests.helpers.kafka_run import (
    TABLES_SQL,
    BackgroundWriter,
    KafkaReplicad,
    Workload,
    duplicated,
    fold,
    normalise_expected,
    read_topics,
    state_difference,
    tables_state,
)
from tests.helpers.mysql import MYSQL_PORT, mysql, mysql_db  # noqa: F401 (fixtures)
from tests.integration.test_incremental_snapshot import (
    ROWS,
    BigTableWorkload,
    _chunk_reads,
    _cli,
    _create_signal,
    _fold,
    _selected,
    _signal_yaml,
)

pytestmark = pytest.mark.integration

BIG_CHUNK = 5000


def _sequence(n: int) -> str:
    """A derived table `seq(n)` of 1..n: MySQL's stand-in for MariaDB's seq_1_to_N."""
    return (
        f"(WITH RECURSIVE s(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s WHERE n < {n}) "
        "SELECT n FROM s) AS seq"
    )


def _fill(cur, sql: str) -> None:
    # The recursion depth limit (1000 by default) would stop the CTE long before n rows.
    cur.execute("SET SESSION cte_max_recursion_depth = 10000000")
    cur.execute(sql)


def _wait_caught_up(replicad: DaemonProcess, timeout: float = 60) -> None:
    """Until the stored GTID set holds everything the primary has executed so far (a
    superset, not equality: other tests write on the shared server too)."""
    conn = mysql_helpers.connect_root()
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT @@GLOBAL.gtid_executed")
            target = cur.fetchone()[0]

            def reached() -> bool:
                stored = (replicad.position() or {}).get("gtid_set")
                if stored is None:
                    return False
                cur.execute("SELECT GTID_SUBSET(%s, %s)", (target, stored))
                return bool(cur.fetchone()[0])

            wait_for(reached, timeout, f"the stored GTID set to reach {target}")
    finally:
        conn.close()


def _replicad(tmp_path, server_id: int, prefix: str, kafka: str, extra_yaml: str, db: str):
    return KafkaReplicad(
        tmp_path,
        server_id=server_id,
        prefix=prefix,
        kafka=kafka,
        extra_yaml=extra_yaml,
        db=db,
        port=MYSQL_PORT,
    )


def _expected_shop(conn, db: str) -> dict:
    """The oracle's view of the shop tables, JSON as a MySQL message carries it: a JSON value
    (docs/consumers.md), where the MariaDB oracle expects JSON columns' text."""
    state = normalise_expected(tables_state(conn, db))
    for row in state["items"].values():
        if row["doc"] is not None:
            row["doc"] = orjson.loads(row["doc"])
    return state


def _reads(records) -> list:
    return [r for r in records if r.value is not None and orjson.loads(r.value)["op"] == "r"]


@pytest.mark.parametrize("method", ["auto", "watermarks"])
def test_initial_snapshot_of_mysql_under_writes_folds_to_the_tables(
    mysql_db,  # noqa: F811
    kafka,
    tmp_path,
    method,
) -> None:
    """The shop tables (composite key, plain key, no key) while a workload writes to all
    three: `auto` must pick watermarks on MySQL, and either way reads then changes fold to
    exactly the keyed tables with no change repeated."""
    conn, db = mysql_db
    accounts = 20_000
    with conn.cursor() as cur:
        for sql in TABLES_SQL:
            cur.execute(sql)
        _fill(
            cur,
            "INSERT INTO accounts SELECT n, CONCAT('user', n, '@example.com'), n / 100 "
            f"FROM {_sequence(accounts)}",
        )
        _create_signal(cur, db)
    seed = Workload(conn, seed=41)
    while seed.statements < 600:  # items and audit hold rows before the snapshot too
        seed.transaction()
    writer = BackgroundWriter(db, seed=42, pause_s=0.002, connect=mysql_helpers.connect_root)
    writer.start()
    prefix = f"m{uuid.uuid4().hex[:8]}"
    replicad = _replicad(
        tmp_path,
        7461,
        prefix,
        kafka,
        f"snapshot: {{mode: initial, chunk_rows: 1000, initial_method: {method}, "
        f"signal: {{database: {db}, table: replicad_signal}}}}\n",
        db,
    )
    replicad.start()
    wait_for(lambda: replicad.count("snapshot_request_done") == 3, 240, "three tables read")
    written = writer.workload.statements
    wait_for(lambda: writer.workload.statements >= written + 300, 120, "writes after it")
    assert writer.stop() > 0
    _wait_caught_up(replicad)
    assert replicad.stop() == 0
    started = [e for e in replicad.log_events() if e.get("event") == "snapshot_started"]
    assert [e.get("method") for e in started] == ["watermarks"]
    records = read_topics(kafka, prefix, db)
    reads = _reads(records)
    assert sum(1 for r in reads if r.topic.endswith(".accounts")) >= accounts
    folded, expected = fold(records, prefix, db), _expected_shop(conn, db)
    assert folded == expected, state_difference(folded, expected)
    assert duplicated(records) == []
    lasts = [r for r in reads if orjson.loads(r.value)["source"]["snapshot"] == "last"]
    assert sorted(r.topic.rsplit(".", 1)[1] for r in lasts) == ["accounts", "audit", "items"]


def test_a_consistent_initial_snapshot_of_mysql_is_refused(
    mysql_db,  # noqa: F811
    kafka,
    tmp_path,
) -> None:
    """MySQL names no binlog position for a consistent read view: `initial_method:
    consistent` stops with a configuration error (78) before anything is published or
    stored, rather than start the stream at a position the read view does not match."""
    conn, db = mysql_db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE k (id INT PRIMARY KEY, v INT)")
        cur.execute("INSERT INTO k VALUES (1, 1), (2, 2)")
    prefix = f"n{uuid.uuid4().hex[:8]}"
    replicad = _replicad(
        tmp_path, 7462, prefix, kafka, "snapshot: {mode: initial, initial_method: consistent}\n", db
    )
    result = replicad.run_to_exit(timeout=60)
    assert result.returncode == 78, result.stderr[-2000:]
    assert b"consistent needs MariaDB" in result.stderr, result.stderr[-2000:]
    assert replicad.position() is None
    assert consume_all(kafka, rf"{prefix}\..*", idle_s=2.0) == []


def test_incremental_snapshot_of_mysql_interleaves_with_writes(
    mysql_db,  # noqa: F811
    kafka,
    tmp_path,
) -> None:
    """`replicad snapshot request` on a running MySQL pipeline while updates, deletes and
    REPLACEs hit the table: every existing row comes (as a read, or as the change that
    superseded it), changes land between the reads, and the topic folds to the table."""
    conn, db = mysql_db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE big (id INT PRIMARY KEY, v INT, note VARCHAR(40))")
        _fill(cur, f"INSERT INTO big SELECT n, n, CONCAT('n', n) FROM {_sequence(ROWS)}")
        _create_signal(cur, db)
    prefix = f"q{uuid.uuid4().hex[:8]}"
    replicad = _replicad(tmp_path, 7463, prefix, kafka, _signal_yaml(db), db)
    replicad.start()
    writer = BackgroundWriter(
        db, seed=7, pause_s=0.001, workload=BigTableWorkload, connect=mysql_helpers.connect_root
    )
    writer.start()
    # Chunks bigger than the MariaDB test's: longer windows over more keys, so that many
    # writes fall inside them (the dropped reads checked below).
    requested = _cli(replicad, "request", f"{db}.big", "--chunk-rows", str(BIG_CHUNK))
    assert requested.returncode == 0, requested.stderr.decode()
    wait_for(lambda: "done" in _cli(replicad, "status").stdout.decode(), 240, "the snapshot")
    assert writer.stop() > 0
    _wait_caught_up(replicad)
    assert replicad.stop() == 0
    assert len(_chunk_reads(replicad)) >= ROWS // BIG_CHUNK
    # Writes hit rows of a chunk while its window was open: the read rows they superseded
    # were dropped (else a read older than the change could land after it).
    emitted = [e for e in replicad.log_events() if e.get("event") == "snapshot_chunk_emitted"]
    assert sum(e["dropped"] for e in emitted) > 0, "no write fell inside a window"
    records = consume_all(kafka, [f"{prefix}.{db}.big"], idle_s=5.0, timeout_s=300)
    assert not any(r.topic.endswith("replicad_signal") for r in records)
    reads = _reads(records)
    # The writes touch a few rows per chunk: most rows come as reads, each at most once.
    assert len(reads) > ROWS // 2
    read_ids = [orjson.loads(r.value)["after"]["id"] for r in reads]
    assert len(read_ids) == len(set(read_ids))
    # Interleaved: within one partition (a key's order), changes sit between the reads.
    part = reads[0].partition
    read_offsets = {r.offset for r in reads if r.partition == part}
    first, last = min(read_offsets), max(read_offsets)
    between = [
        r
        for r in records
        if r.partition == part and first < r.offset < last and r.offset not in read_offsets
    ]
    assert between, "no change was published while the snapshot read the table"
    assert _fold(records) == _selected(conn, db)
    marks = [orjson.loads(r.value)["source"]["snapshot"] for r in reads]
    assert marks.count("last") == 1 and set(marks) == {"true", "last"}
