"""The heartbeat and transaction-metadata topics (issue 35), from `replicad run` into the
shared Apache Kafka, with the real MariaDB.

Oracles, each computed here from what the test wrote, not from replicad's code:
- heartbeat: while only a filtered-out table is written, heartbeat messages keep coming
  (consecutive ones no further apart than the interval plus the pipeline's tick) and carry a
  source position that reaches the primary's GTID position after those writes, and the
  stored position reaches it too; no change message of the filtered table appears;
- transactions: every transaction the workload committed (its GTID read back with
  @@last_gtid) has BEGIN and END events; END's event_count and per-table counts equal what
  the transaction wrote (an update of the key counted as a delete and a create, as Debezium
  does); the change messages of that transaction carry total_order 1..event_count and
  data_collection_order 1..n per table. This holds through a SIGKILL inside a 30,000-row
  transaction after a row mark was stored (the restart skips the delivered rows but still
  counts them); in exactly-once mode a read_committed consumer sees exactly one BEGIN and one
  END per transaction.
"""

from __future__ import annotations

import itertools
import signal
import time
import uuid
from collections import Counter, defaultdict
from typing import Any

import pymysql
import pytest

from tests.helpers.daemon_process import wait_for
from tests.helpers.kafka_helpers import Record, consume_all
from tests.helpers.kafka_run import KafkaReplicad, gtid_reached, master_gtid, wait_caught_up

pytestmark = pytest.mark.integration

HEARTBEAT_S = 0.5
TICK_S = 0.5  # the pipeline's ticker period, at most (service/daemon.py `_tick`)


def _heartbeats(kafka: str, prefix: str) -> list[dict[str, Any]]:
    records = consume_all(kafka, [f"{prefix}.heartbeat"], idle_s=0.5)
    for record in records:
        assert record.key == b'{"serverName":"%s"}' % prefix.encode(), record.key
    return [r.json() for r in records]


def test_heartbeats_move_with_a_filtered_source(shop, kafka, tmp_path) -> None:
    conn, db = shop
    prefix = f"hb{uuid.uuid4().hex[:8]}"
    replicad = KafkaReplicad(
        tmp_path,
        server_id=7301,
        prefix=prefix,
        kafka=kafka,
        extra_yaml=(
            f"heartbeat: {{publish: true, interval_s: {HEARTBEAT_S}}}\n"
            f"filters: {{include: ['{db}\\..*'], exclude: ['{db}\\.audit']}}\n"
        ),
    )
    replicad.start()
    try:
        wait_for(lambda: len(_heartbeats(kafka, prefix)) >= 4, 30, "four heartbeats")
        with conn.cursor() as cur:
            for n in range(20):
                cur.execute("INSERT INTO audit (note) VALUES (%s)", (f"filtered {n}",))
        target = master_gtid()
        wait_for(
            lambda: any(
                gtid_reached(h["source"].get("mariadb_gtid"), target)
                for h in _heartbeats(kafka, prefix)
            ),
            30,
            f"a heartbeat at or after {target}",
        )
        wait_caught_up(replicad)
        time.sleep(4 * HEARTBEAT_S)
    finally:
        replicad.stop()
    beats = _heartbeats(kafka, prefix)
    times = [b["ts_ms"] for b in beats]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert len(beats) >= 8, beats
    assert times == sorted(times)
    assert max(gaps) <= (HEARTBEAT_S + TICK_S + 1.0) * 1000, gaps
    files = {(b["source"]["file"], b["source"]["pos"]) for b in beats}
    assert len(files) > 1, "the heartbeats' position moved with the filtered writes"
    audit = consume_all(kafka, rf"{prefix}\.{db}\.audit", idle_s=0.5)
    assert audit == [], "the filtered table published nothing"


# ------------------------------------------------------------------ transaction metadata

BIG_ROWS = 30_000


class Ledger:
    """What each committed transaction wrote, by GTID: change messages per table."""

    def __init__(self, conn: pymysql.connections.Connection, db: str) -> None:
        self.conn, self.db = conn, db
        self.counts: dict[str, Counter[str]] = {}

    def commit(self, counts: Counter[str]) -> None:
        with self.conn.cursor() as cur:
            cur.execute("COMMIT")
            cur.execute("SELECT @@last_gtid")
            (gtid,) = cur.fetchone()
        self.counts[gtid] = counts

    def small(self, n: int) -> None:
        """Two tables in one transaction, an update of a key column among them."""
        a, b = f"{self.db}.accounts", f"{self.db}.audit"
        with self.conn.cursor() as cur:
            cur.execute("BEGIN")
            cur.execute(
                "INSERT INTO accounts (id, email, balance) VALUES (%s, 'x', 1), (%s, 'y', 2)",
                (n * 10 + 1, n * 10 + 2),
            )
            cur.execute("INSERT INTO audit (note) VALUES ('t')")
            # a key change: a delete and a create message
            cur.execute("UPDATE accounts SET id = %s WHERE id = %s", (n * 10 + 3, n * 10 + 1))
            cur.execute("UPDATE accounts SET balance = balance + 1 WHERE id = %s", (n * 10 + 2,))
        self.commit(Counter({a: 2 + 2 + 1, b: 1}))

    def big(self) -> None:
        with self.conn.cursor() as cur:
            cur.execute("BEGIN")
            cur.execute(
                f"INSERT INTO audit (note) SELECT CONCAT('big ', seq) FROM seq_1_to_{BIG_ROWS}"
            )
            cur.execute(
                "INSERT INTO accounts (id, email, balance) "
                f"SELECT 1000000 + seq, 'big', seq FROM seq_1_to_{BIG_ROWS}"
            )
        self.commit(Counter({f"{self.db}.audit": BIG_ROWS, f"{self.db}.accounts": BIG_ROWS}))


def _kill_inside_the_big_transaction(replicad: KafkaReplicad, ledger: Ledger) -> None:
    """SIGKILL once a row mark inside the big transaction is stored (position `row` > 0);
    a fresh big transaction is tried when the pipeline got past one too quickly."""
    for _ in range(4):
        ledger.big()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            position = replicad.position() or {}
            if position.get("row", 0) > 0:
                replicad.stop(signal.SIGKILL)
                return
            if gtid_reached(position.get("mariadb_gtid"), master_gtid()):
                break  # through it already: try a larger window with the next one
            time.sleep(0.005)
    pytest.fail("never caught the pipeline inside a big transaction with a row mark stored")


def _by_transaction(records: list[Record]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for record in records:
        value = record.json()
        if value is not None and value.get("transaction") is not None:
            out[value["transaction"]["id"]].append(value)
    return out


def _check_transaction(gtid: str, want: Counter[str], events, changes, exactly_once) -> None:
    begins = [e for e in events if e["status"] == "BEGIN"]
    ends = [e for e in events if e["status"] == "END"]
    assert begins and ends, f"{gtid}: BEGIN {len(begins)}, END {len(ends)}"
    if exactly_once:
        assert (len(begins), len(ends)) == (1, 1), f"{gtid}: {events}"
    total = sum(want.values())
    for end in ends:
        assert end["event_count"] == total, (gtid, end, want)
        got = {c["data_collection"]: c["event_count"] for c in end["data_collections"]}
        assert got == dict(want), (gtid, got, want)
    orders = {c["transaction"]["total_order"] for c in changes}
    assert orders == set(range(1, total + 1)), f"{gtid}: total_order gaps"
    per_table: dict[str, set[int]] = defaultdict(set)
    for change in changes:
        table = f"{change['source']['db']}.{change['source']['table']}"
        per_table[table].add(change["transaction"]["data_collection_order"])
    assert per_table == {t: set(range(1, n + 1)) for t, n in want.items()}, gtid


@pytest.mark.parametrize("exactly_once", [False, True], ids=["at-least-once", "exactly-once"])
def test_transaction_events_frame_every_transaction_through_a_kill(
    shop, kafka, tmp_path, exactly_once
) -> None:
    conn, db = shop
    prefix = f"tx{uuid.uuid4().hex[:8]}"
    kafka_yaml = "transaction_metadata: true\n" + ("exactly_once: true\n" if exactly_once else "")
    replicad = KafkaReplicad(
        tmp_path,
        server_id=7302 + exactly_once,
        prefix=prefix,
        kafka=kafka,
        db=db,
        kafka_yaml=kafka_yaml,
    )
    # Row marks every 2,000 rows, stored often: the kill lands after one inside the big one.
    config = replicad.config.read_text()
    assert "checkpoint: {interval_s: 0.2}\n" in config
    replicad.config.write_text(
        config.replace(
            "checkpoint: {interval_s: 0.2}", "checkpoint: {interval_s: 0.05, rows: 2000}"
        )
    )
    ledger = Ledger(conn, db)
    replicad.start()
    try:
        for n in range(30):
            ledger.small(n)
        _kill_inside_the_big_transaction(replicad, ledger)
        for n in range(30, 40):
            ledger.small(n)
        replicad.start()
        wait_caught_up(replicad, timeout=120)
    finally:
        replicad.stop()
    events: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for record in consume_all(kafka, [f"{prefix}.transaction"], idle_s=0.5):
        value = record.json()
        assert record.key == b'{"id":"%s"}' % value["id"].encode()
        events[value["id"]].append(value)
    changes = _by_transaction(consume_all(kafka, rf"{prefix}\.{db}\..*", idle_s=0.5))
    for gtid, want in ledger.counts.items():
        _check_transaction(gtid, want, events[gtid], changes[gtid], exactly_once)
    assert set(events) == set(changes), "BEGIN/END only for transactions with changes"
