"""Exactly-once: SIGTERM at any moment while `replicad run` streams a backlog.

A backlog of ~50k row changes (small binlog transactions, so that Kafka transactions commit
every `batch_ms`) is written to a fresh database first; then an exactly-once daemon starts
from before it and is stopped with SIGTERM at random moments, again and again: during
start-up, while a batch is open, while one commits. Each stop must end the process with
exit 0 (the open Kafka transaction committed at a mark or aborted), and each restart must
continue from the position committed in Kafka: read as users read (read_committed) the
topics hold every change once, none lost, every batch with its position record.
"""

from __future__ import annotations

import random
import time
import uuid
from decimal import Decimal
from pathlib import Path

import pymysql
import pytest

from tests.helpers.daemon_process import wait_for
from tests.helpers.kafka_run import (
    KafkaReplicad,
    Workload,
    assert_read_committed_view,
    read_exactly_once,
    wait_caught_up,
)

pytestmark = pytest.mark.integration

TRANSACTIONS = 4_000
ROWS_PER_TRANSACTION = 20  # 80k row changes in all
STOPS = 18
# Short batches: commits follow each other closely, a stop often lands inside one.
KAFKA_YAML = "exactly_once: true\nbatch_ms: 10"


def _binlog_position(conn: pymysql.connections.Connection) -> tuple[str, int]:
    with conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        file, pos = cur.fetchone()[:2]
    return str(file), int(pos)


def _write_backlog(conn: pymysql.connections.Connection, seed: int) -> None:
    """Inserts, updates and deletes of `items` and `accounts` in small transactions."""
    rnd = random.Random(seed)
    with conn.cursor() as cur:
        for txn in range(TRANSACTIONS):
            cur.execute("BEGIN")
            base = txn * ROWS_PER_TRANSACTION
            cur.executemany(
                "INSERT INTO items (id, region, qty, price, name) VALUES (%s, %s, %s, %s, %s)",
                [
                    (base + i, rnd.choice(["eu", "us", "ap"]), i, Decimal(txn) / 8, f"n{txn}")
                    for i in range(ROWS_PER_TRANSACTION - 2)
                ],
            )
            cur.execute(
                "INSERT INTO accounts VALUES (%s, %s, %s)", (txn, f"u{txn}@x.test", Decimal(txn))
            )
            if txn % 3:
                cur.execute("UPDATE accounts SET balance = balance + 1 WHERE id = %s", (txn - 1,))
            else:
                cur.execute("DELETE FROM items WHERE id = %s", (base - 1,))
            cur.execute("COMMIT")


def _daemon(
    directory: Path, kafka: str, prefix: str, pipeline: str, db: str, start: str
) -> KafkaReplicad:
    return KafkaReplicad(
        directory,
        server_id=7131,
        prefix=prefix,
        kafka=kafka,
        kafka_yaml=KAFKA_YAML,
        pipeline=pipeline,
        start=start,
        db=db,
    )


def _wait_to_stop(daemon: KafkaReplicad, streaming: bool) -> None:
    """Until the daemon logs (its signal handlers are installed by then); with `streaming`,
    until it publishes its first row (or a few seconds: the backlog may be done)."""
    proc = daemon.proc
    assert proc is not None
    wait_for(lambda: bool(daemon.log_events()), 30, "the daemon's first log line")
    deadline = time.monotonic() + 5
    while streaming and time.monotonic() < deadline:
        if daemon.count("first_row_published") or proc.poll() is not None:
            return
        time.sleep(0.02)


def test_sigterm_at_random_moments_exits_0_and_loses_nothing(shop, kafka, tmp_path) -> None:
    conn, db = shop
    file, pos = _binlog_position(conn)
    start = f"{{file: {file}, pos: {pos}}}"
    _write_backlog(conn, seed=31)
    prefix = f"k{uuid.uuid4().hex[:8]}"
    pipeline = f"eosstop{uuid.uuid4().hex[:6]}"
    rnd = random.Random()
    delays = []
    for attempt in range(STOPS):
        # A directory each: no local position, the restart reads Kafka's committed one.
        daemon = _daemon(tmp_path / f"run{attempt}", kafka, prefix, pipeline, db, start)
        daemon.spawn()
        _wait_to_stop(daemon, streaming=attempt % 3 != 0)
        delay = rnd.uniform(0.0, 0.5)
        delays.append(round(delay, 2))
        time.sleep(delay)
        code = daemon.stop()
        events = daemon.log_events()
        failed = [e for e in events if e.get("event") == "failed"]
        where = f"stop {attempt + 1} of {STOPS}"
        assert code == 0 and not failed, (where, code, failed, events[-4:])
    final = _daemon(tmp_path / "final", kafka, prefix, pipeline, db, start)
    final.start()
    # One change after the stops: the last of them may have committed everything, and an
    # exactly-once daemon stores a position only when it commits a batch of its own.
    Workload(conn, seed=32).transaction()
    wait_caught_up(final, timeout=240)
    assert final.stop() == 0
    view = read_exactly_once(kafka, prefix, db, pipeline)
    summary = assert_read_committed_view(view, conn, db, prefix)
    print(f"stopped after {delays} s: {summary}")
