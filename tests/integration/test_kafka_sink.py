"""`replicad run` publishing to the Kafka-API broker (tansu, scripts/services.sh) from the real
MariaDB: a random workload over many column types folded back to the tables' state, a broker
outage with a SIGKILL in the middle of it, exactly-once batches, fencing and oversized rows.

Oracle: every topic is read from its first offset and folded by key (c/u create, d and
tombstones remove); the result must equal the tables as SELECT returns them, converted to the
documented JSON mapping by this file's own code (not the envelope's). Duplicates are counted
by source coordinates (topic, file, pos, row, op).
"""

from __future__ import annotations

import base64
import datetime as dt
import random
import signal
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson
import pymysql
import pytest

from tests.conftest import MARIADB_PORT, _connect
from tests.helpers.daemon_process import DaemonProcess, wait_for
from tests.helpers.kafka_helpers import Record, consume_all, start_broker, stop_broker

pytestmark = pytest.mark.integration

TABLES_SQL = [
    """CREATE TABLE items (
        id INT NOT NULL, region CHAR(2) NOT NULL,
        qty BIGINT UNSIGNED, price DECIMAL(12,3), name VARCHAR(60), seen DATETIME(6),
        day DATE, dur TIME(3), raw VARBINARY(32), ratio DOUBLE,
        state ENUM('new','paid','gone'), flags SET('a','b','c'), bits BIT(10), doc JSON,
        PRIMARY KEY (id, region))""",
    "CREATE TABLE accounts (id INT PRIMARY KEY, email VARCHAR(80), balance DECIMAL(10,2))",
    "CREATE TABLE audit (note VARCHAR(40), at TIMESTAMP(3) NULL)",  # no primary key
]
REGIONS = ["eu", "us", "ap"]


class KafkaReplicad(DaemonProcess):
    def __init__(
        self,
        tmp: Path,
        *,
        server_id: int,
        prefix: str,
        kafka: str,
        kafka_yaml: str = "",
        extra_yaml: str = "",
        log_level: str = "info",
        pipeline: str = "kt",
    ) -> None:
        tmp.mkdir(parents=True, exist_ok=True)
        super().__init__(
            tmp,
            pipeline=pipeline,
            source_yaml=(
                f"  host: 127.0.0.1\n  port: {MARIADB_PORT}\n  user: repl\n"
                f"  server_id: {server_id}\n  start: latest\n  heartbeat_s: 1\n"
                "  reconnect: {initial_s: 0.05, max_s: 0.5}\n"
            ),
            password="repl",
            sinks_yaml=(
                f"  kafka:\n    bootstrap_servers: '{kafka}'\n    prefix: {prefix}\n"
                + "".join(f"    {line}\n" for line in kafka_yaml.splitlines() if line)
            ),
            extra_yaml="checkpoint: {interval_s: 0.2}\n" + extra_yaml,
            log_level=log_level,
        )


@pytest.fixture
def shop(db) -> Iterator[tuple[pymysql.connections.Connection, str]]:
    conn, name = db
    with conn.cursor() as cur:
        for sql in TABLES_SQL:
            cur.execute(sql)
    yield conn, name


# ------------------------------------------------------------------ workload


class Workload:
    """Random DML in transactions of 1-8 statements; remembers which keys exist."""

    def __init__(self, conn: pymysql.connections.Connection, seed: int) -> None:
        self.conn = conn
        self.rnd = random.Random(seed)
        self.items: set[tuple[int, str]] = set()
        self.accounts: set[int] = set()
        self.next_id = seed * 1_000_000 + 1  # workloads with other seeds never collide
        self.statements = 0

    def _item_values(self) -> tuple[Any, ...]:
        r = self.rnd
        return (
            r.choice([None, 0, r.randrange(2**64)]),
            Decimal(r.randrange(-(10**11), 10**11)) / 1000,
            r.choice([None, "", "plain", "naïve café ☕", "😀 emoji", "x" * 60]),
            dt.datetime(
                r.randrange(1971, 2037),
                r.randrange(1, 13),
                r.randrange(1, 29),
                r.randrange(24),
                r.randrange(60),
                r.randrange(60),
                r.randrange(10**6),
            ),
            r.choice([None, dt.date(r.randrange(1, 9999), r.randrange(1, 13), r.randrange(1, 29))]),
            dt.timedelta(milliseconds=r.randrange(-838 * 3600 * 1000, 838 * 3600 * 1000)),
            r.choice([None, b"", bytes(r.randrange(256) for _ in range(r.randrange(33)))]),
            r.choice([None, 0.0, -1.5e-300, r.uniform(-1e6, 1e6)]),
            r.choice([None, "new", "paid", "gone"]),
            r.choice(["", "a", "a,c", "a,b,c"]),
            r.randrange(1024),
            r.choice([None, '{"a": [1, 2.5, null], "b": "ü"}', "[]", '"text"']),
        )

    def transaction(self) -> None:
        r = self.rnd
        with self.conn.cursor() as cur:
            cur.execute("BEGIN")
            for _ in range(r.randrange(1, 9)):
                self.statements += 1
                self._statement(cur)
            cur.execute("COMMIT")

    def _statement(self, cur: Any) -> None:
        r = self.rnd
        choice = r.random()
        cols = "qty, price, name, seen, day, dur, raw, ratio, state, flags, bits, doc"
        if choice < 0.35 or not self.items:
            key = (self.next_id, r.choice(REGIONS))
            self.next_id += 1
            cur.execute(
                f"INSERT INTO items (id, region, {cols}) VALUES (%s, %s, {', '.join(['%s'] * 12)})",
                (*key, *self._item_values()),
            )
            self.items.add(key)
        elif choice < 0.55:
            key = r.choice(sorted(self.items))
            values = self._item_values()
            sets = ", ".join(f"{c.strip()} = %s" for c in cols.split(","))
            cur.execute(f"UPDATE items SET {sets} WHERE id = %s AND region = %s", (*values, *key))
        elif choice < 0.65:
            key = r.choice(sorted(self.items))
            cur.execute("DELETE FROM items WHERE id = %s AND region = %s", key)
            self.items.discard(key)
        elif choice < 0.8 or not self.accounts:
            key = self.next_id
            self.next_id += 1
            cur.execute(
                "INSERT INTO accounts VALUES (%s, %s, %s)",
                (key, f"user{key}@example.com", Decimal(r.randrange(10**6)) / 100),
            )
            self.accounts.add(key)
        elif choice < 0.88:
            key = r.choice(sorted(self.accounts))
            if r.random() < 0.5:  # a primary-key change
                new = self.next_id
                self.next_id += 1
                cur.execute("UPDATE accounts SET id = %s WHERE id = %s", (new, key))
                self.accounts.discard(key)
                self.accounts.add(new)
            else:
                cur.execute(
                    "UPDATE accounts SET balance = balance + 1, email = NULL WHERE id = %s", (key,)
                )
        elif choice < 0.94:
            key = r.choice(sorted(self.accounts))
            cur.execute("DELETE FROM accounts WHERE id = %s", (key,))
            self.accounts.discard(key)
        else:
            cur.execute("INSERT INTO audit VALUES (%s, NOW(3))", (f"note {r.random()}",))


class BackgroundWriter(threading.Thread):
    """Keeps writing transactions until stopped (for outages and failovers)."""

    def __init__(self, db: str, seed: int, pause_s: float = 0.01) -> None:
        super().__init__(daemon=True)
        self.conn = _connect(database=db)
        with self.conn.cursor() as cur:
            cur.execute("SET time_zone = '+00:00'")
        self.workload = Workload(self.conn, seed)
        self.pause_s = pause_s
        self.halt = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.halt.is_set():
                self.workload.transaction()
                time.sleep(self.pause_s)
        except BaseException as exc:  # reported by stop()
            self.error = exc

    def stop(self) -> int:
        self.halt.set()
        self.join(30)
        self.conn.close()
        assert self.error is None, self.error
        return self.workload.statements


# ------------------------------------------------------------------ oracle


def _time_text(value: dt.timedelta) -> str:
    sign = "-" if value < dt.timedelta(0) else ""
    value = abs(value)
    seconds = value.days * 86400 + value.seconds
    text = f"{sign}{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
    return text + (f".{value.microseconds:06d}" if value.microseconds else "")


def _expected_value(column: str, value: Any) -> Any:
    """The documented JSON mapping (ARCHITECTURE §6) of what PyMySQL returns."""
    if value is None:
        return None
    if column == "bits":
        return int.from_bytes(value, "big")
    if column == "flags":
        return ",".join(sorted(value)) if isinstance(value, set) else value
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, dt.datetime):
        text = value.strftime("%Y-%m-%dT%H:%M:%S")
        return text + (f".{value.microsecond:06d}" if value.microsecond else "")
    if isinstance(value, dt.date):
        return f"{value.year:04d}-{value.month:02d}-{value.day:02d}"
    if isinstance(value, dt.timedelta):
        return _time_text(value)
    return value


def tables_state(
    conn: pymysql.connections.Connection, db: str, mask: frozenset[str] = frozenset()
) -> dict[str, dict[str, Any]]:
    """{table: {key JSON text: row}} for the tables with a primary key."""
    out: dict[str, dict[str, Any]] = {}
    for table, key_columns in (("items", ("id", "region")), ("accounts", ("id",))):
        with conn.cursor(pymysql.cursors.DictCursor) as cur:
            cur.execute(f"SELECT * FROM `{db}`.`{table}`")
            rows = cur.fetchall()
        state = out[table] = {}
        for row in rows:
            converted = {c: _expected_value(c, v) for c, v in row.items()}
            for c in mask:
                if converted.get(c) is not None:
                    converted[c] = "***"
            key = orjson.dumps({c: row[c] for c in key_columns}).decode()
            state[key] = converted
    return out


def fold(records: list[Record], prefix: str, db: str) -> dict[str, dict[str, Any]]:
    """Replay per key in offset order; normalises SET values (order) as the oracle does.
    Only tables with a primary key fold (`audit` has none: it is counted by `audit_rows`)."""
    out: dict[str, dict[str, Any]] = {}
    for record in records:
        table = record.topic[len(f"{prefix}.{db}.") :]
        if table == "audit":
            continue
        state = out.setdefault(table, {})
        key = "" if record.key is None else record.key.decode()
        if record.value is None:
            state.pop(key, None)
            continue
        envelope = orjson.loads(record.value)
        if envelope["op"] == "d":
            state.pop(key, None)
        else:
            after = dict(envelope["after"])
            if isinstance(after.get("flags"), str):
                after["flags"] = ",".join(sorted(filter(None, after["flags"].split(","))))
            state[key] = after
    return out


def normalise_expected(state: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    for rows in state.values():
        for row in rows.values():
            if isinstance(row.get("flags"), str):
                row["flags"] = ",".join(sorted(filter(None, row["flags"].split(","))))
    return state


def coordinates(record: Record) -> tuple[Any, ...]:
    headers = record.headers
    return (
        record.topic,
        headers["replicad.file"].decode(),
        int(headers["replicad.pos"]),
        int(headers["replicad.row"]),
        record.value is None,
        None if record.value is None else orjson.loads(record.value)["op"],
    )


def duplicated(records: list[Record]) -> list[tuple[Any, ...]]:
    counts = Counter(coordinates(r) for r in records)
    return [c for c, n in counts.items() if n > 1]


def audit_rows(conn: pymysql.connections.Connection, db: str) -> int:
    with conn.cursor() as cur:
        cur.execute(f"SELECT COUNT(*) FROM `{db}`.audit")
        return int(cur.fetchone()[0])


def audit_messages(records: list[Record]) -> int:
    return sum(1 for r in records if r.topic.endswith(".audit") and r.value is not None)


def master_gtid() -> str:
    conn = _connect()
    with conn.cursor() as cur:
        cur.execute("SELECT @@gtid_binlog_pos")
        (pos,) = cur.fetchone()
    conn.close()
    return str(pos)


def wait_caught_up(replicad: DaemonProcess, timeout: float = 60) -> None:
    target = master_gtid()
    wait_for(
        lambda: (replicad.position() or {}).get("mariadb_gtid") == target,
        timeout,
        f"the stored position to reach {target}: {replicad.position()}",
    )


def read_topics(kafka: str, prefix: str, db: str) -> list[Record]:
    # tansu (on the S3 emulator) can leave 2 s between two fetch responses once it holds a
    # lot of data: a shorter idle limit ends the read early, and the fold then misses rows.
    return consume_all(kafka, rf"{prefix}\.{db}\..*", idle_s=5.0, timeout_s=300)


def _rss_mb(replicad: DaemonProcess) -> float:
    assert replicad.proc is not None
    status = Path(f"/proc/{replicad.proc.pid}/status").read_text()
    kb = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:"))
    return kb / 1024


def _position_key(position: dict[str, Any]) -> tuple[str, int]:
    return position["file"], position["pos"]


# ------------------------------------------------------------------ tests


def test_random_workload_folds_to_the_tables(shop, kafka, tmp_path) -> None:
    """>= 10k random changes over many column types; filters exclude a table and mask a
    column; the topics fold to exactly the tables, without a duplicate."""
    conn, db = shop
    prefix = f"k{uuid.uuid4().hex[:8]}"
    replicad = KafkaReplicad(
        tmp_path,
        server_id=7101,
        prefix=prefix,
        kafka=kafka,
        extra_yaml=(
            f"filters:\n  exclude: ['{db}\\.audit']\n"
            f"  columns: {{mask: ['{db}\\.accounts\\.email']}}\n"
        ),
    )
    replicad.start()
    workload = Workload(conn, seed=4)
    with conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
    while workload.statements < 10_000:
        workload.transaction()
    wait_caught_up(replicad)
    assert replicad.stop() == 0
    records = read_topics(kafka, prefix, db)
    topics = {r.topic for r in records}
    assert topics == {f"{prefix}.{db}.items", f"{prefix}.{db}.accounts"}, topics
    assert fold(records, prefix, db) == normalise_expected(
        tables_state(conn, db, mask=frozenset({"email"}))
    )
    assert duplicated(records) == []
    # The value is the Debezium-style envelope; a PK change is a delete + tombstone + create.
    some = next(r for r in records if r.value is not None)
    envelope = orjson.loads(some.value)
    assert set(envelope) == {"before", "after", "source", "op", "ts_ms", "transaction"}
    assert {"db", "table", "gtid", "file", "pos", "row", "ts_ms", "server"} <= set(
        envelope["source"]
    )
    accounts = [r for r in records if r.topic.endswith(".accounts") and r.value is not None]
    pk_changes = Counter(coordinates(r)[1:4] for r in accounts)
    assert any(n == 2 for n in pk_changes.values()), "no primary-key change was published"


def test_kafka_outage_and_sigkill_lose_nothing(shop, kafka, tmp_path) -> None:
    """The broker stopped for >= 30 s while MariaDB keeps writing: reading pauses on a full
    producer queue, the stored position does not move; replicad SIGKILLed during the outage
    and restarted; nothing is lost and duplicates come only from the unacknowledged window."""
    conn, db = shop
    prefix = f"k{uuid.uuid4().hex[:8]}"
    replicad = KafkaReplicad(
        tmp_path, server_id=7102, prefix=prefix, kafka=kafka, kafka_yaml="max_in_flight: 300"
    )
    replicad.start()
    writer = BackgroundWriter(db, seed=5)
    writer.start()
    try:
        wait_for(lambda: (replicad.position() or {}).get("pos") is not None, 20, "a checkpoint")
        time.sleep(1.0)
        stop_broker()
        outage_started = time.monotonic()
        try:
            time.sleep(5.0)  # in-flight messages give up their retries; no ack arrives anymore
            frozen = replicad.position()
            wait_for(
                lambda: replicad.count("kafka_backpressure") > 0,
                30,
                "reading to pause on a full producer queue",
            )
            time.sleep(3.0)
            assert replicad.position() == frozen, "the position moved while Kafka was down"
            # Reading is paused, not buffering: memory stays bounded while MariaDB writes on.
            assert _rss_mb(replicad) < 300
            assert replicad.stop(signal.SIGKILL) == -signal.SIGKILL
            at_kill = replicad.position()
            assert at_kill == frozen
            replicad.start()  # still during the outage
            time.sleep(max(0.0, 32.0 - (time.monotonic() - outage_started)))
            assert replicad.position() == frozen, "the restarted daemon moved the position"
        finally:
            start_broker()
        outage_s = time.monotonic() - outage_started
        time.sleep(3.0)
    finally:
        statements = writer.stop()
    wait_caught_up(replicad, timeout=120)
    assert replicad.stop() == 0
    assert outage_s >= 30.0
    records = read_topics(kafka, prefix, db)
    assert fold(records, prefix, db) == normalise_expected(tables_state(conn, db))
    dups = duplicated(records)
    # Only messages after the position stored at the kill may come twice, and at most twice.
    assert all((c[1], c[2]) > _position_key(at_kill) for c in dups), (dups[:5], at_kill)
    counts = Counter(coordinates(r) for r in records)
    assert max(counts.values()) <= 2
    print(
        f"outage {outage_s:.1f} s, {statements} statements, {len(records)} messages, "
        f"{len(dups)} duplicated after the SIGKILL (window after {at_kill})"
    )


def _last_position_record(kafka: str, prefix: str, pipeline: str) -> dict[str, Any]:
    records = consume_all(kafka, [f"{prefix}.replicad-positions"], idle_s=1.5)
    mine = [r for r in records if r.key == pipeline.encode() and r.value is not None]
    assert mine, "no position record"
    return orjson.loads(mine[-1].value)["position"]


def test_exactly_once_position_record_and_restart_from_kafka(shop, kafka, tmp_path) -> None:
    """Batches commit with a position record; a restart without the local position file
    continues from Kafka's record: the topics fold to the tables with no duplicate."""
    conn, db = shop
    prefix = f"k{uuid.uuid4().hex[:8]}"
    pipeline = f"eos{uuid.uuid4().hex[:6]}"
    first = KafkaReplicad(
        tmp_path / "a",
        server_id=7103,
        prefix=prefix,
        kafka=kafka,
        kafka_yaml="exactly_once: true",
        pipeline=pipeline,
    )
    first.start()
    workload = Workload(conn, seed=6)
    for _ in range(200):
        workload.transaction()
    wait_caught_up(first)
    assert first.stop() == 0
    record = _last_position_record(kafka, prefix, pipeline)
    assert record == first.position(), "Kafka's position record is not the last committed batch"
    # A second daemon with no local state: the position comes from Kafka.
    second = KafkaReplicad(
        tmp_path / "b",
        server_id=7103,
        prefix=prefix,
        kafka=kafka,
        kafka_yaml="exactly_once: true",
        pipeline=pipeline,
    )
    for _ in range(100):  # written while no daemon runs
        workload.transaction()
    second.start()
    loaded = [e for e in second.log_events() if e.get("event") == "kafka_position_loaded"]
    assert loaded and loaded[0]["position"].endswith(f"gtid={record['mariadb_gtid']}"), loaded
    for _ in range(100):
        workload.transaction()
    wait_caught_up(second)
    assert second.stop() == 0
    records = read_topics(kafka, prefix, db)
    assert fold(records, prefix, db) == normalise_expected(tables_state(conn, db))
    assert duplicated(records) == []
    assert audit_messages(records) == audit_rows(conn, db)
    assert _last_position_record(kafka, prefix, pipeline) == second.position()


def test_exactly_once_second_producer_fences_the_first(shop, kafka, tmp_path) -> None:
    """A second daemon with the same transactional id fences the first; when the first (a
    zombie now) reads new changes it stops without committing anything more, and the second
    continues from the first's last committed position record.

    The zombie's next request is answered "fenced" (exit 75, ProducerFencedError). Broker
    differences (services.md): Apache Kafka also hides aborted records from read_committed
    readers; tansu shows them, and answers a fenced EndTxn by closing the connection, so a
    takeover in the middle of a commit could read an aborted position record there (the
    zombie then exits 75 when its commit times out). That is why the takeover here happens
    while the first daemon is idle. Checked on our side: no commit of the zombie after the
    takeover, the typed exit, the position handed over exactly, the topics fold to the
    tables."""
    conn, db = shop
    prefix = f"k{uuid.uuid4().hex[:8]}"
    pipeline = f"eos{uuid.uuid4().hex[:6]}"
    eos = "exactly_once: true\nproducer: {transaction.timeout.ms: 8000}"
    first = KafkaReplicad(
        tmp_path / "a",
        server_id=7104,
        prefix=prefix,
        kafka=kafka,
        kafka_yaml=eos,
        pipeline=pipeline,
        log_level="debug",
    )
    first.start()
    writer = BackgroundWriter(db, seed=7, pause_s=0.02)
    writer.start()
    try:
        wait_for(lambda: first.count("kafka_batch_committed") >= 3, 30, "committed batches")
    finally:
        writer.stop()
    wait_caught_up(first)
    handed_over = first.position()
    second = KafkaReplicad(
        tmp_path / "b",
        server_id=7105,
        prefix=prefix,
        kafka=kafka,
        kafka_yaml=eos,
        pipeline=pipeline,
    )
    second.start()
    loaded = [e for e in second.log_events() if e.get("event") == "kafka_position_loaded"]
    assert loaded and loaded[0]["position"].endswith(f"gtid={handed_over['mariadb_gtid']}")
    took_over = next(
        e["timestamp"] for e in second.log_events() if e.get("event") == "kafka_transactions_ready"
    )
    writer = BackgroundWriter(db, seed=8, pause_s=0.02)
    writer.start()
    try:
        assert first.proc is not None
        assert first.proc.wait(timeout=60) == 75  # restartable: a restart resumes
        time.sleep(1.0)
    finally:
        writer.stop()
    ended = [e for e in first.log_events() if e.get("event") in ("fatal", "failed")]
    assert ended and ended[-1]["kind"] == "ProducerFencedError", ended
    commits = [e for e in first.log_events() if e.get("event") == "kafka_batch_committed"]
    assert commits and all(e["timestamp"] < took_over for e in commits), "the zombie committed"
    assert first.position() == handed_over, "the zombie moved its position"
    wait_caught_up(second)
    assert second.stop() == 0
    records = read_topics(kafka, prefix, db)
    assert fold(records, prefix, db) == normalise_expected(tables_state(conn, db))
    assert audit_messages(records) >= audit_rows(conn, db)
    dups = duplicated(records)
    # Only the zombie's aborted attempts (visible on tansu) may repeat a change.
    assert all((c[1], c[2]) > _position_key(handed_over) for c in dups), (dups[:5], handed_over)


def test_oversized_message_stops_at_its_position_or_is_routed(shop, kafka, tmp_path) -> None:
    conn, db = shop
    prefix = f"k{uuid.uuid4().hex[:8]}"
    replicad = KafkaReplicad(
        tmp_path / "a",
        server_id=7106,
        prefix=prefix,
        kafka=kafka,
        kafka_yaml="max_message_bytes: 2048",
    )
    replicad.start()
    with conn.cursor() as cur:
        cur.execute("INSERT INTO accounts VALUES (1, 'small@example.com', 1)")
    wait_caught_up(replicad)
    before_big = replicad.position()
    with conn.cursor() as cur:
        cur.execute("INSERT INTO accounts VALUES (2, %s, 2)", ("x" * 80,))  # still small
        cur.execute("ALTER TABLE accounts MODIFY email TEXT")
        cur.execute("INSERT INTO accounts VALUES (3, %s, 3)", ("y" * 5000,))
    assert replicad.proc is not None
    assert replicad.proc.wait(timeout=30) == 78
    fatal = [e for e in replicad.log_events() if e.get("event") == "fatal"][-1]
    assert "max_message_bytes" in fatal["error"] and f"{prefix}.{db}.accounts" in fatal["error"]
    assert '{"id":3}' in fatal["error"] and "source=mariadb-bin." in fatal["error"]
    stopped_at = replicad.position()
    assert stopped_at is not None and before_big is not None
    assert stopped_at["mariadb_gtid"] != master_gtid(), "the position passed the big row"
    # Routed instead: the pipeline goes on and the big row lands in the oversized topic.
    routed = KafkaReplicad(
        tmp_path / "a",
        server_id=7106,
        prefix=prefix,
        kafka=kafka,
        kafka_yaml="max_message_bytes: 2048\noversized: route",
    )
    routed.start()
    wait_caught_up(routed)
    assert routed.stop() == 0
    big = consume_all(kafka, [f"{prefix}.oversized"], idle_s=1.5)
    assert [orjson.loads(r.value)["after"]["id"] for r in big] == [3]
    ids = [
        orjson.loads(r.value)["after"]["id"]
        for r in read_topics(kafka, prefix, db)
        if r.value is not None
    ]
    assert ids == [1, 2]


def test_check_reports_kafka(kafka, mariadb, tmp_path) -> None:
    import subprocess
    import sys

    def check(bootstrap: str) -> subprocess.CompletedProcess[str]:
        config = tmp_path / "c.yaml"
        config.write_text(
            f"source: {{port: {MARIADB_PORT}, password: repl, server_id: 7107}}\n"
            f"sinks: {{kafka: {{bootstrap_servers: '{bootstrap}'}}}}\n"
        )
        return subprocess.run(
            [sys.executable, "-m", "replicad.cli", "check", "-c", str(config)],
            capture_output=True,
            text=True,
            timeout=60,
        )

    good = check(kafka)
    assert good.returncode == 0 and "OK    kafka" in good.stdout, good.stdout
    bad = check("127.0.0.1:1")  # nothing listens there
    assert bad.returncode == 1 and "FAIL  kafka" in bad.stdout and "127.0.0.1:1" in bad.stdout
