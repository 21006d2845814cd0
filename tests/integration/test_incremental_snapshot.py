"""On-demand incremental snapshots (`replicad snapshot request`), the DBLog watermark algorithm,
against the real server and broker: reads interleave with live changes, a killed process
resumes at the next chunk, and bad requests are refused before anything is emitted.

Oracle: SELECT. The topic folded (reads and changes in offset order) equals the table.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import orjson
import pytest

from tests.helpers.daemon_process import PASSWORD_ENV, ROOT, wait_for
from tests.helpers.ha import HaReplicad
from tests.helpers.kafka_helpers import consume_all
from tests.helpers.kafka_run import (
    BackgroundWriter,
    KafkaReplicad,
    gtid_reached,
    master_gtid,
    wait_caught_up,
)
from tests.helpers.snapshot_marks import assert_initial_marks, snapshot_order

pytestmark = pytest.mark.integration

# Enough chunks that a snapshot is still running when the tests kill its reader (a chunk
# goes out every few tens of milliseconds here).
ROWS = 100_000
CHUNK = 700


def _signal_yaml(db: str) -> str:
    return f"snapshot: {{signal: {{database: {db}, table: replicad_signal}}}}\n"


def _create_signal(cur, db: str) -> None:
    """The signal table and the grant docs/snapshots.md asks for."""
    cur.execute(
        "CREATE TABLE replicad_signal (id VARCHAR(128) NOT NULL PRIMARY KEY, "
        "kind VARCHAR(16) NOT NULL, window_id VARCHAR(64) NOT NULL, "
        "at TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3))"
    )
    cur.execute(f"GRANT INSERT, UPDATE, DELETE ON `{db}`.replicad_signal TO 'repl'@'127.0.0.1'")


def _cli(replicad: KafkaReplicad, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "replicad.cli", "snapshot", *args, "-c", str(replicad.config)],
        cwd=ROOT,
        env=replicad.env,
        capture_output=True,
        timeout=60,
    )


class BigTableWorkload:
    """One random update, delete or insert on `big` per transaction (autocommit)."""

    def __init__(self, conn, seed: int) -> None:
        self.conn = conn
        self.rng = random.Random(seed)
        self.statements = 0

    def transaction(self) -> None:
        rng = self.rng
        key = rng.randrange(1, ROWS + 2000)
        pick = rng.random()
        with self.conn.cursor() as cur:
            if pick < 0.6:
                cur.execute(
                    "UPDATE big SET v = v + 1, note = %s WHERE id = %s", (f"u{rng.random()}", key)
                )
            elif pick < 0.8:
                cur.execute("DELETE FROM big WHERE id = %s", (key,))
            else:
                cur.execute("REPLACE INTO big VALUES (%s, %s, %s)", (key, -1, "new"))
        self.conn.commit()
        self.statements += 1


def _writer(db: str) -> BackgroundWriter:
    return BackgroundWriter(db, seed=7, pause_s=0.001, workload=BigTableWorkload)


def _big_table(cur, db: str) -> None:
    """`big` with ROWS rows, and the signal table."""
    cur.execute("CREATE TABLE big (id INT PRIMARY KEY, v INT, note VARCHAR(40))")
    cur.execute(f"INSERT INTO big SELECT seq, seq, CONCAT('n', seq) FROM seq_1_to_{ROWS}")
    _create_signal(cur, db)


def _fold(records) -> dict[int, dict]:
    state: dict[int, dict] = {}
    for record in records:
        if record.value is None:
            continue
        message = orjson.loads(record.value)
        if message["op"] == "d":
            state.pop(message["before"]["id"], None)
        elif message["op"] != "t":
            state[message["after"]["id"]] = message["after"]
    return state


def _selected(conn, db: str) -> dict[int, dict]:
    with conn.cursor() as cur:
        cur.execute(f"SELECT id, v, note FROM `{db}`.big")
        return {i: {"id": i, "v": v, "note": note} for i, v, note in cur.fetchall()}


def _chunk_reads(replicad: KafkaReplicad) -> list[dict]:
    return [e for e in replicad.log_events() if e.get("event") == "snapshot_chunk_read"]


def test_incremental_snapshot_under_writes_resumes_at_the_next_chunk_after_a_kill(
    db, kafka, tmp_path
) -> None:
    conn, name = db
    with conn.cursor() as cur:
        _big_table(cur, name)
    prefix = f"i{uuid.uuid4().hex[:8]}"
    replicad = KafkaReplicad(
        tmp_path,
        server_id=7171,
        prefix=prefix,
        kafka=kafka,
        extra_yaml=_signal_yaml(name),
        db=name,
    )
    replicad.start()
    writer = _writer(name)
    writer.start()
    requested = _cli(replicad, "request", f"{name}.big", "--chunk-rows", str(CHUNK))
    assert requested.returncode == 0, requested.stderr.decode()
    # The progress stored with the position: the chunks a new process must not read again.
    wait_for(
        lambda: (
            (
                json.loads((replicad.position() or {}).get("snapshot") or "{}").get("active") or {}
            ).get("chunks", 0)
            >= 12
        ),
        120,
        "a dozen chunks stored with the position",
    )
    replicad.proc.send_signal(signal.SIGKILL)
    replicad.proc.wait(30)
    stored = json.loads(replicad.position()["snapshot"])["active"]
    before_kill = len(_chunk_reads(replicad))
    assert stored["chunks"] >= 1 and stored["after"] is not None
    replicad.start()
    wait_for(
        lambda: "done" in _cli(replicad, "status").stdout.decode(), 240, "the snapshot to finish"
    )
    assert writer.stop() > 0
    wait_caught_up(replicad)
    assert replicad.stop() == 0
    after_restart = _chunk_reads(replicad)[before_kill:]
    # Resumed after the last stored chunk's key, not from the start of the table.
    assert after_restart[0]["after"] == stored["after"]
    total_chunks = ROWS // CHUNK + 5
    assert stored["chunks"] + len(after_restart) <= total_chunks + 3
    records = consume_all(kafka, [f"{prefix}.{name}.big"], idle_s=5.0, timeout_s=300)
    reads = [r for r in records if r.value is not None and orjson.loads(r.value)["op"] == "r"]
    assert len(reads) > ROWS // 2  # most rows come as reads (the writes touch a few per chunk)
    assert not any(r.topic.endswith("replicad_signal") for r in records)
    assert _fold(records) == _selected(conn, name)
    marks = [orjson.loads(r.value)["source"]["snapshot"] for r in reads]
    assert set(marks) == {"incremental"}  # Debezium's mark for every incremental read


def test_bad_requests_are_refused_before_anything_is_queued(db, kafka, tmp_path) -> None:
    conn, name = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE big (id INT PRIMARY KEY, v INT, note VARCHAR(40))")
    replicad = KafkaReplicad(
        tmp_path,
        server_id=7172,
        prefix="unused",
        kafka=kafka,
        extra_yaml=_signal_yaml(name),
        db=name,
    )
    cases = [
        ((f"{name}.nope",), b"no such table", f"{name}.nope"),
        ((f"{name}.big", "--where", "v >>> 3"), b"condition", "v >>> 3"),
        ((f"{name}.big",), b"replicad_signal", "create it with: CREATE TABLE"),  # none yet
    ]
    for args, message, named in cases:
        result = _cli(replicad, "request", *args)
        assert result.returncode == 64, result.stderr.decode()
        assert message in result.stderr and named.encode() in result.stderr, result.stderr
    with conn.cursor() as cur:
        _create_signal(cur, name)
        cur.execute("CREATE USER IF NOT EXISTS 'snapro'@'127.0.0.1' IDENTIFIED BY 'snapro'")
        cur.execute(
            "GRANT REPLICATION SLAVE, REPLICATION CLIENT, SELECT ON *.* TO 'snapro'@'127.0.0.1'"
        )
    try:
        config = Path(replicad.config)
        config.write_text(config.read_text().replace("user: repl", "user: snapro"))
        denied = subprocess.run(
            [
                sys.executable,
                "-m",
                "replicad.cli",
                "snapshot",
                "request",
                f"{name}.big",
                "-c",
                str(config),
            ],
            cwd=ROOT,
            env={**replicad.env, PASSWORD_ENV: "snapro"},
            capture_output=True,
            timeout=60,
        )
    finally:
        with conn.cursor() as cur:
            cur.execute("DROP USER 'snapro'@'127.0.0.1'")
    assert denied.returncode == 64 and b"denied" in denied.stderr, denied.stderr
    assert not (tmp_path / "position.requests").exists() or not list(
        (tmp_path / "position.requests").glob("req-*.json")
    )


def _zk_position(zookeeper: str, root: str, pipeline: str) -> dict | None:
    from kazoo.client import KazooClient

    client = KazooClient(hosts=zookeeper)
    client.start(timeout=10)
    try:
        path = f"{root}/default/pipelines/{pipeline}/position"
        if not client.exists(path):
            return None
        return orjson.loads(client.get(path)[0])["position"]
    finally:
        client.stop()


def test_a_new_leader_resumes_an_incremental_snapshot_at_the_next_chunk(
    db, kafka, zookeeper, zk_root, tmp_path
) -> None:
    """Under ZooKeeper: the leader is SIGKILLed mid-snapshot while writes go on; the standby
    takes over and continues after the last chunk stored with the position."""
    conn, name = db
    with conn.cursor() as cur:
        _big_table(cur, name)
    pipeline = f"iz{uuid.uuid4().hex[:6]}"
    prefix = f"z{uuid.uuid4().hex[:8]}"
    zk_port = int(zookeeper.rsplit(":", 1)[1])
    workers = [
        HaReplicad(
            tmp_path,
            f"w{i}",
            zk_port,
            zk_root,
            server_id=7173,
            prefix=prefix,
            kafka=kafka,
            pipeline=pipeline,
            extra_yaml=_signal_yaml(name),
        )
        for i in range(2)
    ]
    for worker in workers:
        worker.start()

    def leading() -> list[HaReplicad]:
        return [w for w in workers if w.count("leading") and w.proc.poll() is None]

    wait_for(lambda: bool(leading()), 60, "a leader")
    leader = leading()[0]
    standby = next(w for w in workers if w is not leader)
    writer = _writer(name)
    writer.start()
    requested = _cli(standby, "request", f"{name}.big", "--chunk-rows", str(CHUNK))
    assert requested.returncode == 0, requested.stderr.decode()
    wait_for(lambda: len(_chunk_reads(leader)) >= 8, 120, "chunks read by the leader")

    def stored_progress() -> dict | None:
        position = _zk_position(zookeeper, zk_root, pipeline) or {}
        return json.loads(position.get("snapshot") or "{}").get("active")

    wait_for(lambda: (stored_progress() or {}).get("chunks", 0) >= 3, 60, "stored progress")
    leader.proc.send_signal(signal.SIGKILL)
    leader.proc.wait(30)
    stored = stored_progress()
    assert stored is not None and stored["after"] is not None
    wait_for(
        lambda: "done" in _cli(standby, "status").stdout.decode(), 240, "the snapshot to finish"
    )
    assert writer.stop() > 0
    target = master_gtid()
    wait_for(
        lambda: gtid_reached(
            (_zk_position(zookeeper, zk_root, pipeline) or {}).get("mariadb_gtid"), target
        ),
        60,
        "the new leader to catch up",
    )
    assert standby.stop() == 0
    resumed = _chunk_reads(standby)
    assert resumed and resumed[0]["after"] == stored["after"]
    records = consume_all(kafka, [f"{prefix}.{name}.big"], idle_s=5.0, timeout_s=300)
    assert _fold(records) == _selected(conn, name)


def test_an_interrupted_initial_snapshot_resumes_after_its_last_stored_key(
    db, kafka, tmp_path
) -> None:
    """snapshot.mode initial, consistent method, with the signal table there: the snapshot's
    progress is stored with its position chunk by chunk; stopped mid-table, the next start
    streams from the snapshot's position and reads the rest with watermarks, beginning after
    the stored key (not a new snapshot from zero); the topics fold to the tables.

    The stop is a SIGTERM: a SIGKILL leaves whatever the last checkpoint stored, and whether
    that holds progress depends on when the broker acknowledged the chunks. The restart
    reads only the stored position either way;
    the SIGKILL case of the same resume is test_..._resumes_at_the_next_chunk_after_a_kill."""
    conn, name = db
    rows, chunk = 400_000, 4000
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE big (id INT PRIMARY KEY, v INT, note VARCHAR(40))")
        cur.execute(f"INSERT INTO big SELECT seq, seq, CONCAT('n', seq) FROM seq_1_to_{rows}")
        cur.execute("CREATE TABLE other (id INT PRIMARY KEY, v INT, note VARCHAR(40))")
        cur.execute("INSERT INTO other SELECT seq, seq, 'o' FROM seq_1_to_3000")
        _create_signal(cur, name)
    writer = _writer(name)
    writer.start()
    prefix = f"r{uuid.uuid4().hex[:8]}"
    replicad = KafkaReplicad(
        tmp_path,
        server_id=7174,
        prefix=prefix,
        kafka=kafka,
        extra_yaml=(
            f"snapshot: {{mode: initial, chunk_rows: {chunk}, initial_method: consistent, "
            f"signal: {{database: {name}, table: replicad_signal}}}}\n"
            f"filters: {{include: ['{name}\\..*']}}\n"
        ),
    )
    replicad.spawn()  # (start() waits for the stream: after the snapshot)

    def stored() -> dict:
        return json.loads((replicad.position() or {}).get("snapshot") or "{}").get("active") or {}

    # Stopped once a position inside the big table is stored (checkpoints every 0.2 s; the
    # table takes a second or more to read over Kafka here): chunks read, not all.
    wait_for(
        lambda: stored().get("request", {}).get("table") == f"{name}.big",
        120,
        "a stored position inside the big table",
    )
    replicad.proc.send_signal(signal.SIGTERM)
    assert replicad.proc.wait(60) == 0
    assert replicad.count("snapshot_done") == 0, "read whole before the stop: use more rows"
    at_kill = stored()
    assert at_kill["request"]["table"] == f"{name}.big" and at_kill["after"] is not None
    replicad.start()
    wait_for(lambda: replicad.count("snapshot_request_done") == 2, 240, "both tables read")
    assert writer.stop() > 0
    wait_caught_up(replicad)
    assert replicad.stop() == 0
    assert replicad.count("snapshot_started") == 1  # resumed, not a new snapshot
    resumed = _chunk_reads(replicad)
    assert resumed[0]["table"] == f"{name}.big" and resumed[0]["after"] == at_kill["after"]
    assert (
        len([r for r in resumed if r["table"] == f"{name}.big"])
        <= (rows - int(at_kill["after"][0])) // chunk + 3
    )
    big = consume_all(kafka, [f"{prefix}.{name}.big"], idle_s=5.0, timeout_s=300)
    assert _fold(big) == _selected(conn, name)
    other = consume_all(kafka, [f"{prefix}.{name}.other"], idle_s=5.0, timeout_s=120)
    with conn.cursor() as cur:
        cur.execute(f"SELECT id, v, note FROM `{name}`.other")
        assert _fold(other) == {i: {"id": i, "v": v, "note": n} for i, v, n in cur.fetchall()}
    # Reads from the read view name the snapshot's position; those after the restart, their
    # window's high watermark. Across the restart the initial snapshot's marks hold: each
    # table starts and ends once (the resumed chunks keep the initial snapshot's marks).
    started = next(e for e in replicad.log_events() if e.get("event") == "snapshot_started")
    at = started["position"].split()[0]
    reads = [r for r in big + other if r.value is not None and orjson.loads(r.value)["op"] == "r"]
    sources = [orjson.loads(r.value)["source"] for r in reads]
    assert any(f"{s['file']}:{s['pos']}" != at for s in sources), "nothing read after the restart"
    assert_initial_marks(reads, snapshot_order(replicad))
