"""`replicad run` into Kafka: the daemon under test, the `shop` tables (TABLES_SQL, the `shop`
fixture in tests/conftest.py), a random workload (also from a background thread) and the
oracle: the topics folded by key equal the tables' state, duplicates counted by source
coordinates."""

from __future__ import annotations

import base64
import datetime as dt
import os
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson
import pymysql

from tests.helpers.daemon_process import DaemonProcess, wait_for
from tests.helpers.kafka_helpers import Record, consume_all
from tests.helpers.mariadb import MARIADB_PORT, connect_root

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
        start: str = "latest",
    ) -> None:
        tmp.mkdir(parents=True, exist_ok=True)
        super().__init__(
            tmp,
            pipeline=pipeline,
            source_yaml=(
                f"  host: 127.0.0.1\n  port: {MARIADB_PORT}\n  user: repl\n"
                f"  server_id: {server_id}\n  start: {start}\n  heartbeat_s: 1\n"
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

    def __init__(
        self,
        db: str,
        seed: int,
        pause_s: float = 0.01,
        workload: Callable[[pymysql.connections.Connection, int], Any] = Workload,
    ) -> None:
        """`workload(conn, seed)`: anything with `transaction()` and a `statements` count
        (default: the shop tables' Workload)."""
        super().__init__(daemon=True)
        self.conn = connect_root(database=db)
        with self.conn.cursor() as cur:
            cur.execute("SET time_zone = '+00:00'")
        self.workload = workload(self.conn, seed)
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


def _time_text(value: dt.timedelta) -> str:
    sign = "-" if value < dt.timedelta(0) else ""
    value = abs(value)
    seconds = value.days * 86400 + value.seconds
    text = f"{sign}{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
    return text + (f".{value.microseconds:06d}" if value.microseconds else "")


def _expected_value(column: str, value: Any) -> Any:
    """The documented JSON mapping (docs/architecture.md, "Message format") of what PyMySQL
    returns."""
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
            state[key] = after_image(envelope)
    return out


def after_image(envelope: dict[str, Any]) -> dict[str, Any]:
    """A change's row after it, SET values normalised (order) as the oracle does."""
    after = dict(envelope["after"])
    if isinstance(after.get("flags"), str):
        after["flags"] = ",".join(sorted(filter(None, after["flags"].split(","))))
    return after


def producer_pids(replicad: DaemonProcess) -> list[int]:
    """The pids of the producer processes the last pipeline started (none with one)."""
    found = [e for e in replicad.log_events() if e["event"] == "kafka_producer_processes_started"]
    return list(found[-1]["pids"]) if found else []


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


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
    conn = connect_root()
    with conn.cursor() as cur:
        cur.execute("SELECT @@gtid_binlog_pos")
        (pos,) = cur.fetchone()
    conn.close()
    return str(pos)


def gtid_reached(position: str | None, target: str) -> bool:
    """Whether a MariaDB GTID position has reached `target` in every domain of `target`.
    Not equality: another test's writes on the shared server may have moved it further."""
    if position is None:
        return False
    reached = {}
    for gtid in filter(None, position.split(",")):
        domain, _server, seq = gtid.strip().split("-")
        reached[domain] = int(seq)
    for gtid in filter(None, target.split(",")):
        domain, _server, seq = gtid.strip().split("-")
        if reached.get(domain, -1) < int(seq):
            return False
    return True


def wait_caught_up(replicad: DaemonProcess, timeout: float = 60) -> None:
    target = master_gtid()
    wait_for(
        lambda: gtid_reached((replicad.position() or {}).get("mariadb_gtid"), target),
        timeout,
        f"the stored position to reach {target}: {replicad.position()}",
    )


def read_topics(kafka: str, prefix: str, db: str) -> list[Record]:
    # tansu (on the S3 emulator) can leave 2 s between two fetch responses once it holds a
    # lot of data: a shorter idle limit ends the read early, and the fold then misses rows.
    return consume_all(kafka, rf"{prefix}\.{db}\..*", idle_s=5.0, timeout_s=300)
