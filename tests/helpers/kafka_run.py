"""`replicad run` into Kafka: the daemon under test, the `shop` tables (TABLES_SQL, the `shop`
fixture in tests/conftest.py), a random workload (also from a background thread) and the
oracle: the topics folded by key equal the tables' state, duplicates counted by source
coordinates. Exactly-once pipelines are judged on what read_committed consumers see
(`read_exactly_once`, `assert_read_committed_view`), read_uncommitted serving as the witness
of what was aborted."""

from __future__ import annotations

import base64
import datetime as dt
import os
import random
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Collection
from dataclasses import dataclass
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
        db: str | None = None,
        port: int = MARIADB_PORT,
        user: str = "repl",
        password: str = "repl",
    ) -> None:
        """`db`: publish only that database's tables (filters.include), so that what tests
        running beside this one write on the shared primary stays out of its topics.
        `port`/`user`/`password`: another primary than the shared MariaDB (the MySQL one)."""
        tmp.mkdir(parents=True, exist_ok=True)
        if db is not None:
            extra_yaml = f"filters: {{include: ['{db}\\..*']}}\n" + extra_yaml
        super().__init__(
            tmp,
            pipeline=pipeline,
            source_yaml=(
                f"  host: 127.0.0.1\n  port: {port}\n  user: {user}\n"
                f"  server_id: {server_id}\n  start: {start}\n  heartbeat_s: 1\n"
                "  reconnect: {initial_s: 0.05, max_s: 0.5}\n"
            ),
            password=password,
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
            account = self.next_id
            self.next_id += 1
            cur.execute(
                "INSERT INTO accounts VALUES (%s, %s, %s)",
                (account, f"user{account}@example.com", Decimal(r.randrange(10**6)) / 100),
            )
            self.accounts.add(account)
        elif choice < 0.88:
            account = r.choice(sorted(self.accounts))
            if r.random() < 0.5:  # a primary-key change
                new = self.next_id
                self.next_id += 1
                cur.execute("UPDATE accounts SET id = %s WHERE id = %s", (new, account))
                self.accounts.discard(account)
                self.accounts.add(new)
            else:
                cur.execute(
                    "UPDATE accounts SET balance = balance + 1, email = NULL WHERE id = %s",
                    (account,),
                )
        elif choice < 0.94:
            account = r.choice(sorted(self.accounts))
            cur.execute("DELETE FROM accounts WHERE id = %s", (account,))
            self.accounts.discard(account)
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
        connect: Callable[..., pymysql.connections.Connection] = connect_root,
    ) -> None:
        """`workload(conn, seed)`: anything with `transaction()` and a `statements` count
        (default: the shop tables' Workload); `connect`: the primary's root connection
        (default the shared MariaDB)."""
        super().__init__(daemon=True)
        self.conn = connect(database=db)
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


def read_topics(
    kafka: str, prefix: str, db: str, isolation: str = "read_committed"
) -> list[Record]:
    """The data topics of `db` as a consumer reads them (read_committed by default)."""
    return consume_all(
        kafka, rf"{prefix}\.{db}\..*", idle_s=1.0, timeout_s=300, isolation=isolation
    )


# ------------------------------------------------------------------ exactly-once oracle


def batch_of(record: Record) -> str:
    """The Kafka transaction a data message belongs to (header `replicad.batch`,
    `<sink instance>:<n>`); "" when it has none (a defect the oracle reports)."""
    return record.headers.get("replicad.batch", b"").decode()


def _where(record: Record) -> tuple[str, int, int]:
    return record.topic, record.partition, record.offset


@dataclass(frozen=True)
class ExactlyOnceView:
    """An exactly-once pipeline's topics read twice: `committed` as its users read them
    (read_committed), `written` as the broker holds them (read_uncommitted: aborted and still
    open transactions too); likewise its position records (values, in offset order)."""

    committed: list[Record]
    written: list[Record]
    positions: list[dict[str, Any]]
    positions_written: list[dict[str, Any]]

    @property
    def aborted(self) -> list[Record]:
        """Data messages on the broker that read_committed does not show (aborted, or in a
        transaction still open)."""
        shown = {_where(r) for r in self.committed}
        return [r for r in self.written if _where(r) not in shown]

    def open_batches(self, instance: str) -> set[str]:
        """The batches of sink `instance` with messages on the broker, none visible, and no
        position record written, not even uncommitted: the sink writes that record before it
        asks to commit, so such a transaction never asked and can only end aborted."""
        asked = {p["batch"] for p in self.positions_written}
        return {
            b
            for r in self.aborted
            if (b := batch_of(r)).startswith(f"{instance}:") and b not in asked
        }


def read_exactly_once(
    kafka: str, prefix: str, db: str, pipeline: str, idle_s: float = 1.0
) -> ExactlyOnceView:
    """Read the data topics of `db` and the pipeline's position records in both isolation
    levels. Committed first: a transaction committing meanwhile then shows in both."""

    def positions(isolation: str) -> list[dict[str, Any]]:
        records = consume_all(
            kafka, [f"{prefix}.replicad-positions"], idle_s=idle_s, isolation=isolation
        )
        mine = [r for r in records if r.key == pipeline.encode() and r.value is not None]
        return [orjson.loads(r.value) for r in mine if r.value is not None]

    def data(isolation: str) -> list[Record]:
        pattern = rf"{prefix}\.{db}\..*"
        return consume_all(kafka, pattern, idle_s=idle_s, timeout_s=300, isolation=isolation)

    committed, positions_committed = data("read_committed"), positions("read_committed")
    written, positions_written = data("read_uncommitted"), positions("read_uncommitted")
    return ExactlyOnceView(committed, written, positions_committed, positions_written)


def assert_read_committed_view(
    view: ExactlyOnceView,
    conn: pymysql.connections.Connection,
    db: str,
    prefix: str,
    aborted_batches: Collection[str] = (),
    expected: dict[str, dict[str, Any]] | None = None,
) -> str:
    """What a read_committed consumer of an exactly-once pipeline must see: no message of an
    aborted transaction (`aborted_batches`: batches known to have been open when their
    producer died or was fenced), every committed batch with its position record, every
    change once and none lost. A second oracle, from the read_uncommitted view, agrees.
    `expected`: the tables' state in the message mapping (default: `tables_state` of
    `conn`, as MariaDB's columns map; MySQL's JSON columns map to JSON values).
    Returns a summary for the test's report."""
    _assert_aborted_hidden(view, aborted_batches)
    batches = _assert_batches_have_position_records(view)
    dups = duplicated(view.committed)
    assert not dups, f"{len(dups)} changes visible more than once: {dups[:5]}"
    folded = fold(view.committed, prefix, db)
    if expected is None:
        expected = normalise_expected(tables_state(conn, db))
    assert folded == expected, state_difference(folded, expected)
    audit = audit_messages(view.committed), audit_rows(conn, db)  # the table without a key
    assert audit[0] == audit[1], f"{audit[0]} messages of the {audit[1]} audit rows"
    _assert_audit_agrees(view)
    aborted = view.aborted
    return (
        f"{len(view.committed)} messages in {len(batches)} committed batches, "
        f"{len(aborted)} messages of {len({batch_of(r) for r in aborted})} aborted batches "
        "hidden, 0 duplicated, 0 lost"
    )


def state_difference(got: dict[str, dict[str, Any]], want: dict[str, dict[str, Any]]) -> str:
    """The first keys whose folded row differs from the table's (for a failure message)."""
    lines = []
    for table in sorted(set(got) | set(want)):
        rows, expected = got.get(table, {}), want.get(table, {})
        for key in sorted(set(rows) | set(expected)):
            if rows.get(key) != expected.get(key):
                lines.append(f"{table} {key}: folded {rows.get(key)} != table {expected.get(key)}")
    return f"{len(lines)} keys differ:\n" + "\n".join(lines[:20])


def _assert_aborted_hidden(view: ExactlyOnceView, aborted_batches: Collection[str]) -> None:
    """Each batch known to have been left open is on the broker (the check is not vacuous)
    and nothing of it, data or position record, is visible."""
    on_broker = {batch_of(r) for r in view.written}
    missing = [b for b in aborted_batches if b not in on_broker]
    assert not missing, f"open batches {missing} left no message on the broker"
    visible = [_where(r) for r in view.committed if batch_of(r) in aborted_batches]
    assert not visible, f"{len(visible)} messages of aborted batches are visible: {visible[:5]}"
    recorded = [p for p in view.positions if p["batch"] in aborted_batches]
    assert not recorded, f"position records of aborted batches are visible: {recorded}"


def _assert_batches_have_position_records(view: ExactlyOnceView) -> set[str]:
    """Every visible data message names a batch that committed exactly one position record,
    and that record's position is past the batch's messages: a consumer (or a restart)
    resuming from it neither misses nor repeats one of them."""
    records = Counter(p["batch"] for p in view.positions)
    twice = [b for b, n in records.items() if n > 1]
    assert not twice, f"batches with more than one position record: {twice[:5]}"
    position = {p["batch"]: p["position"] for p in view.positions}
    batches: dict[str, tuple[str, int]] = {}
    for record in view.committed:
        batch = batch_of(record)
        assert batch in position, (
            f"{_where(record)}: visible, but its batch {batch!r} has no committed position record"
        )
        where = (record.headers["replicad.file"].decode(), int(record.headers["replicad.pos"]))
        batches[batch] = max(batches.get(batch, where), where)
    for batch, last in batches.items():
        at = position[batch]
        if "row" not in at:  # a mark inside a huge transaction points at its beginning
            assert last < (at["file"], at["pos"]), (batch, last, at)
    return set(batches)


def _assert_audit_agrees(view: ExactlyOnceView) -> None:
    """The second oracle, which does not trust the broker's isolation: of everything written,
    keep the batches with a committed position record. That must be exactly what
    read_committed shows."""
    committed = {p["batch"] for p in view.positions}
    kept = {_where(r) for r in view.written if batch_of(r) in committed}
    shown = {_where(r) for r in view.committed}
    assert kept == shown, (
        f"read_uncommitted minus batches without a position record: {len(kept)} messages; "
        f"read_committed: {len(shown)}; only kept {sorted(kept - shown)[:5]}, "
        f"only shown {sorted(shown - kept)[:5]}"
    )


def sink_instance(replicad: DaemonProcess) -> str:
    """The instance id (first part of its `replicad.batch` ids) of the Kafka sink the daemon
    started last."""
    ready = [e for e in replicad.log_events() if e.get("event") == "kafka_transactions_ready"]
    assert ready, "the daemon never initialised Kafka transactions"
    return str(ready[-1]["instance"])


def stop_inside_open_batch(
    replicad: DaemonProcess, kafka: str, prefix: str, db: str, pipeline: str, tries: int = 40
) -> set[str]:
    """SIGSTOP the (publishing) daemon at a moment its open Kafka transaction already has
    messages on the broker; returns that transaction's batch id(s), the daemon left stopped.
    A stop between two batches is undone (SIGCONT) and tried again a little later."""
    instance = sink_instance(replicad)
    rnd = random.Random(replicad.pid)
    for _ in range(tries):
        os.kill(replicad.pid, signal.SIGSTOP)
        open_batches = read_exactly_once(kafka, prefix, db, pipeline, 0.3).open_batches(instance)
        if open_batches:
            return open_batches
        os.kill(replicad.pid, signal.SIGCONT)
        time.sleep(rnd.uniform(0.05, 0.3))
    raise AssertionError(f"no stop in {tries} found a Kafka transaction open on the broker")
