"""Snapshots against the real MySQL 9.7 (GTIDs on) and broker: the initial snapshot (MySQL has
no binlog position for a consistent read view, so `auto` means watermarks, and `consistent`
takes the global read lock of `snapshot.locking: minimal` while the view opens) and an
incremental snapshot requested on a running pipeline, all under writes.

The MariaDB versions are tests/integration/test_snapshot.py and test_incremental_snapshot.py,
whose helpers and workloads these reuse; only row generation (no `seq_1_to_N` tables on MySQL)
and the catch-up check (MySQL GTID sets) differ. Oracle: SELECT - the topics folded (reads and
changes in offset order) equal the tables, with nothing lost or repeated.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from tests.helpers import mysql as mysql_helpers
from tests.helpers.daemon_process import DaemonProcess, wait_for
from tests.helpers.databases import fresh_database
from tests.helpers.delay_proxy import DelayProxy
from tests.helpers.kafka_helpers import consume_all
from tests.helpers.kafka_run import (
    TABLES_SQL,
    BackgroundWriter,
    KafkaReplicad,
    Workload,
    audit_messages,
    audit_rows,
    duplicated,
    fold,
    normalise_expected,
    read_topics,
    state_difference,
    tables_state,
)
from tests.helpers.mysql import (  # noqa: F401 (fixtures)
    MYSQL_PORT,
    MySQLServer,
    mysql,
    mysql_db,
)
from tests.helpers.snapshot_marks import assert_initial_marks, snapshot_order
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

# Large chunks: each window stays open over a quarter of the keys. With chunks of 5,000 a
# window lasted about 20 ms once snapshots read on the compiled path, and a run could see
# no write of MySQL's autocommit writer land inside one (the dropped reads checked below).
BIG_CHUNK = 25_000


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


def _replicad(
    tmp_path, server_id: int, prefix: str, kafka: str, extra_yaml: str, db: str, **source: Any
):
    """`source`: `user=..., password=...` of another account than repl, `port=` of a proxy."""
    return KafkaReplicad(
        tmp_path,
        server_id=server_id,
        prefix=prefix,
        kafka=kafka,
        extra_yaml=extra_yaml,
        db=db,
        **{"port": MYSQL_PORT, **source},
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
    writes = writer.stop()
    assert writes > 0
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
    assert_initial_marks(reads, snapshot_order(replicad))


@pytest.fixture
def reload_user(mysql: MySQLServer) -> Iterator[dict[str, str]]:  # noqa: F811
    """An account with repl's privileges plus RELOAD (FLUSH TABLES WITH READ LOCK), as
    docs/snapshots.md asks for `snapshot.locking: minimal`; repl itself has no RELOAD."""
    user, password = f"lock_{uuid.uuid4().hex[:10]}", "Lock-Secret-7"
    root = mysql_helpers.connect_root()
    try:
        with root.cursor() as cur:
            cur.execute(f"CREATE USER '{user}'@'127.0.0.1' IDENTIFIED BY '{password}'")
            cur.execute(
                "GRANT RELOAD, REPLICATION SLAVE, REPLICATION CLIENT, SELECT ON *.* "
                f"TO '{user}'@'127.0.0.1'"
            )
        yield {"user": user, "password": password}
    finally:
        with root.cursor() as cur:
            cur.execute(f"DROP USER IF EXISTS '{user}'@'127.0.0.1'")
        root.close()


class InsertProbe(threading.Thread):
    """Single-row autocommit INSERTs one after another, each timed: how long a writer was
    blocked (by the snapshot's global read lock) is the longest of them."""

    def __init__(self, db: str) -> None:
        super().__init__(daemon=True)
        self.conn = mysql_helpers.connect_root(database=db)
        with self.conn.cursor() as cur:
            cur.execute("CREATE TABLE probe (id INT AUTO_INCREMENT PRIMARY KEY, v INT)")
        self.latencies: list[float] = []
        self.halt = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with self.conn.cursor() as cur:
                while not self.halt.is_set():
                    began = time.monotonic()
                    cur.execute("INSERT INTO probe (v) VALUES (1)")
                    self.latencies.append(time.monotonic() - began)
                    time.sleep(0.002)
        except BaseException as exc:  # reported by stop()
            self.error = exc

    def stop(self) -> list[float]:
        self.halt.set()
        self.join(60)
        self.conn.close()
        assert self.error is None, self.error
        return self.latencies


class CommitHammer(threading.Thread):
    """A stored procedure committing one INSERT into `accounts` and one into `audit` after
    another, as fast as the server goes (thousands a second; a Python client manages far
    fewer): so commits are queued on the snapshot's lock and land right after it goes, and a
    position read a round trip too late would miss some. Runs in `home` (a database the
    pipeline does not read) until stop()."""

    def __init__(self, home: str, db: str) -> None:
        super().__init__(daemon=True)
        self.home = home
        self.conn = mysql_helpers.connect_root(database=home)
        with self.conn.cursor() as cur:
            cur.execute("CREATE TABLE halt (id INT PRIMARY KEY)")
            cur.execute(
                "CREATE PROCEDURE hammer() BEGIN DECLARE i INT DEFAULT 0; "
                "WHILE NOT EXISTS (SELECT 1 FROM halt) DO SET i = i + 1; "
                f"INSERT INTO `{db}`.accounts VALUES (800000000 + i, CONCAT('h', i), i / 100); "
                f"INSERT INTO `{db}`.audit VALUES (CONCAT('h', i), NOW(3)); "
                "END WHILE; SELECT i; END"
            )
        self.commits = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with self.conn.cursor() as cur:
                cur.execute("CALL hammer()")
                self.commits = 2 * int(cur.fetchone()[0])
        except BaseException as exc:  # reported by stop()
            self.error = exc

    def stop(self) -> int:
        halt = mysql_helpers.connect_root(database=self.home)
        with halt.cursor() as cur:
            cur.execute("INSERT INTO halt VALUES (1)")
        halt.close()
        self.join(60)
        self.conn.close()
        assert self.error is None, self.error
        return self.commits


@pytest.mark.serial  # a global read lock on the shared server, and a timing measured on it
def test_consistent_initial_snapshot_of_mysql_with_minimal_locking_under_writes(
    mysql_db,  # noqa: F811
    kafka,
    tmp_path,
    reload_user,
) -> None:
    """`initial_method: consistent` + `locking: minimal` while a stored procedure commits
    thousands of rows a second (some queued on the lock, committed the moment it goes) and two
    clients run the random workload (updates, deletes, key changes): reads then changes fold
    to exactly the tables, the keyless one counted row for row, and the stream then starts by
    GTID. A fourth writer, timing single INSERTs throughout, was never blocked for more than a
    small part of the time the rows took to read: the lock went before the rows.

    replicad reaches the primary through a proxy that delays its statements by 20 ms (a
    primary a network link away): the lock is then held for a few round trips, so writes
    surely queue on it, and a position read one statement too late (after UNLOCK TABLES, or
    without the lock) surely misses the dozens of commits of that round trip."""
    conn, db = mysql_db
    accounts = 150_000
    with conn.cursor() as cur:
        for sql in TABLES_SQL:
            cur.execute(sql)
        _fill(
            cur,
            "INSERT INTO accounts SELECT n, CONCAT('user', n, '@example.com'), n / 100 "
            f"FROM {_sequence(accounts)}",
        )
    seed = Workload(conn, seed=51)
    while seed.statements < 600:
        seed.transaction()
    writers = [
        BackgroundWriter(db, seed=52 + i, pause_s=0, connect=mysql_helpers.connect_root)
        for i in range(2)
    ]
    with fresh_database(mysql_helpers.connect_root) as (_, home):
        hammer, probe = CommitHammer(home, db), InsertProbe(home)
        for thread in [hammer, *writers, probe]:
            thread.start()
        prefix = f"c{uuid.uuid4().hex[:8]}"
        with DelayProxy("127.0.0.1", MYSQL_PORT, 0.02) as proxy:
            replicad = _replicad(
                tmp_path,
                7464,
                prefix,
                kafka,
                "snapshot: {mode: initial, initial_method: consistent, locking: minimal, "
                "chunk_rows: 2000}\n",
                db,
                port=proxy.port,
                **reload_user,
            )
            replicad.start()
            wait_for(lambda: replicad.count("snapshot_started") == 1, 60, "the read view")
            assert hammer.stop() > 0  # it committed through the lock; rows for the stream
            wait_for(lambda: replicad.count("snapshot_done") == 1, 240, "the snapshot to end")
            written = sum(w.workload.statements for w in writers)
            wait_for(
                lambda: sum(w.workload.statements for w in writers) >= written + 300,
                120,
                "writes after it",
            )
            assert all(w.stop() > 0 for w in writers)
            latencies = probe.stop()
            _wait_caught_up(replicad)
            assert replicad.stop() == 0
    events = replicad.log_events()
    (done,) = [e for e in events if e.get("event") == "snapshot_done"]
    assert len(latencies) > 100 and max(latencies) < done["seconds"] / 10, (
        f"an INSERT waited {max(latencies):.3f} s; the snapshot read for {done['seconds']} s"
    )
    # The stream after the snapshot was asked for by GTID (COM_BINLOG_DUMP_GTID).
    dumps = [e["dump"] for e in events if e.get("event") == "source_connected"]
    assert dumps and set(dumps) == {"gtid"}, dumps
    records = read_topics(kafka, prefix, db)
    reads = _reads(records)
    assert sum(1 for r in reads if r.topic.endswith(".accounts")) >= accounts
    folded, expected = fold(records, prefix, db), _expected_shop(conn, db)
    assert folded == expected, state_difference(folded, expected)
    # No key: one read view at its exact position counts every row once, reads + inserts.
    assert audit_messages(records) == audit_rows(conn, db)
    assert duplicated(records) == []


def test_a_consistent_initial_snapshot_of_mysql_needs_the_lock_and_its_privilege(
    mysql_db,  # noqa: F811
    kafka,
    tmp_path,
) -> None:
    """MySQL names no binlog position for a consistent read view: `initial_method:
    consistent` without `locking: minimal` stops with a configuration error (78), and so does
    `locking: minimal` for a user without RELOAD (repl), naming the privilege and the option,
    before anything is published or stored."""
    conn, db = mysql_db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE k (id INT PRIMARY KEY, v INT)")
        cur.execute("INSERT INTO k VALUES (1, 1), (2, 2)")
    cases = [
        ("", [b"needs snapshot.locking: minimal"]),
        (", locking: minimal", [b"RELOAD privilege", b"key=snapshot.locking"]),
    ]
    for i, (locking, fragments) in enumerate(cases):
        prefix = f"n{uuid.uuid4().hex[:8]}"
        replicad = _replicad(
            tmp_path / str(i),
            7462,
            prefix,
            kafka,
            f"snapshot: {{mode: initial, initial_method: consistent{locking}}}\n",
            db,
        )
        result = replicad.run_to_exit(timeout=60)
        assert result.returncode == 78, result.stderr[-2000:]
        for fragment in fragments:
            assert fragment in result.stderr, result.stderr[-2000:]
        assert replicad.position() is None
        assert consume_all(kafka, rf"{prefix}\..*", idle_s=2.0) == []


@pytest.mark.serial  # holds off a global read lock on the shared server for a second
def test_a_global_read_lock_held_off_times_out_instead_of_hanging(
    mysql_db,  # noqa: F811
    kafka,
    tmp_path,
    reload_user,
) -> None:
    """A long statement keeps FLUSH TABLES WITH READ LOCK from being granted: the start fails
    after `lock_timeout_s` with a transient error (75) naming it while the statement still
    runs (not a hang), and nothing is stored. (Writers of `k` itself wait for that statement
    anyway: the flush marked the table; docs/snapshots.md says so.)"""
    conn, db = mysql_db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE k (id INT PRIMARY KEY, v INT)")
        cur.execute("INSERT INTO k VALUES (1, 1)")
    slow = mysql_helpers.connect_root(database=db)
    holder = threading.Thread(
        target=lambda: slow.cursor().execute("SELECT SLEEP(8) FROM k"), daemon=True
    )
    holder.start()
    prefix = f"l{uuid.uuid4().hex[:8]}"
    replicad = _replicad(
        tmp_path,
        7465,
        prefix,
        kafka,
        "snapshot: {mode: initial, initial_method: consistent, locking: minimal, "
        "lock_timeout_s: 1}\n",
        db,
        **reload_user,
    )
    began = time.monotonic()
    result = replicad.run_to_exit(timeout=60)
    took = time.monotonic() - began
    assert result.returncode == 75, result.stderr[-2000:]
    assert b"lock_timeout_s" in result.stderr, result.stderr[-2000:]
    assert holder.is_alive(), f"the lock was awaited until the statement ended ({took:.1f} s)"
    holder.join(30)
    slow.close()
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
    requested = _cli(replicad, "request", f"{db}.big", "--chunk-rows", str(BIG_CHUNK))
    assert requested.returncode == 0, requested.stderr.decode()
    wait_for(lambda: "done" in _cli(replicad, "status").stdout.decode(), 240, "the snapshot")
    writes = writer.stop()
    assert writes > 0
    _wait_caught_up(replicad)
    assert replicad.stop() == 0
    assert len(_chunk_reads(replicad)) >= ROWS // BIG_CHUNK
    # Writes hit rows of a chunk while its window was open: the read rows they superseded
    # were dropped (else a read older than the change could land after it).
    emitted = [e for e in replicad.log_events() if e.get("event") == "snapshot_chunk_emitted"]
    assert sum(e["dropped"] for e in emitted) > 0, (
        f"no write fell inside a window ({writes} writes, {len(emitted)} windows)"
    )
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
    assert set(marks) == {"incremental"}  # Debezium's mark for every incremental read
