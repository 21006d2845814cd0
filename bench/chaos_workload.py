"""The workload of a campaign run, beside the continuous shop writer (tests/helpers/kafka_run.py:
items with fourteen column types, accounts with primary-key changes, audit without a key):
the all-types table `t` (tests/helpers/all_types.py) written in bursts, one transaction of
20k+ rows, an ALTER and a TRUNCATE, each at the moment the plan drew."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pymysql

from bench.chaos_plan import Plan, Step
from tests.helpers.all_types import ALL_TYPES, COLUMNS, insert_random
from tests.helpers.kafka_run import TABLES_SQL, Workload
from tests.helpers.mariadb import connect_root

BULK_FIRST_ID = 2_000_000_000  # above every id the shop writer draws (seed x 1e6)
ALTER_T = (
    "ALTER TABLE t ADD COLUMN added VARCHAR(10) DEFAULT 'n' AFTER id, MODIFY COLUMN vc TEXT, "
    "MODIFY COLUMN si BIGINT"
)


def create_tables(conn: pymysql.connections.Connection) -> None:
    with conn.cursor() as cur:
        for sql in (*TABLES_SQL, ALL_TYPES):
            cur.execute(sql)


@dataclass
class Writer:
    """A connection to the primary, and the restarts it has been through."""

    conn: pymysql.connections.Connection
    restarts_seen: int = 0


class PrimaryGate:
    """Each writer holds the gate for one transaction at a time; a primary restart holds it
    while the server is down, so that the restart cuts no transaction in half (the writers are
    drained, as before a planned restart), and each writer reconnects after it. A crash does
    not wait for the writers: a transaction it cuts fails, and the writer waits for the
    server, reconnects and goes on (whether that transaction committed is for the primary's
    recovery to decide and SELECT to show; a step it cuts is not run again)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._restarts = 0  # changed by the fault thread only
        self._up = threading.Event()
        self._up.set()

    @contextmanager
    def restarting(self) -> Iterator[None]:
        with self._lock:
            yield
            self._restarts += 1

    @contextmanager
    def crashing(self) -> Iterator[None]:
        self._up.clear()  # before the kill: every error from here on is the crash's
        try:
            yield
        finally:
            self._restarts += 1
            self._up.set()

    @contextmanager
    def writing(self, writer: Writer) -> Iterator[None]:
        with self._lock:
            try:
                self._reconnect(writer)
                yield
            except pymysql.err.MySQLError:
                if self._up.is_set():
                    raise  # not a crash: the workload's own error
                if not self._up.wait(120):
                    raise
                self._reconnect(writer)

    def reconnected(self, writer: Writer) -> None:
        with self._lock:
            self._reconnect(writer)

    def _reconnect(self, writer: Writer) -> None:
        if writer.restarts_seen != self._restarts:
            writer.conn.ping(reconnect=True)  # into conn.db again; the session's settings are gone
            _utc(writer.conn)
            writer.restarts_seen = self._restarts


def _utc(conn: pymysql.connections.Connection) -> None:
    with conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")


class GatedWorkload:
    """The shop writer's workload (tests/helpers/kafka_run.py), one transaction per hold of
    the gate."""

    def __init__(self, gate: PrimaryGate, conn: pymysql.connections.Connection, seed: int):
        self.gate, self.writer = gate, Writer(conn)
        self.inner = Workload(conn, seed)

    @property
    def statements(self) -> int:
        return self.inner.statements

    def transaction(self) -> None:
        with self.gate.writing(self.writer):
            self.inner.transaction()


class StepRunner(threading.Thread):
    """Runs the plan's steps at their moments, on a connection of its own."""

    def __init__(self, db: str, plan: Plan, gate: PrimaryGate) -> None:
        super().__init__(daemon=True)
        self.conn = connect_root(database=db)
        _utc(self.conn)
        self.gate, self.writer = gate, Writer(self.conn)
        self.plan = plan
        self.rnd = random.Random(f"{plan.seed}:{plan.run}:steps")
        self.next_id = 1
        self.halt = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        started = time.monotonic()
        try:
            for step in self.plan.steps:
                # finish() cuts the waits short: every step runs, the late ones at once
                self.halt.wait(max(0.0, started + step.at_s - time.monotonic()))
                with self.gate.writing(self.writer), self.conn.cursor() as cur:
                    self._step(cur, step)
        except BaseException as exc:  # reported by finish()
            self.error = exc

    def finish(self) -> None:
        """Run the steps not yet run at once, then close (the run's faults are over)."""
        self.halt.set()
        self.join(120)
        self.conn.close()
        if self.error is not None:
            raise self.error

    def _step(self, cur: Any, step: Step) -> None:
        if step.kind == "all-types":
            self._all_types(cur)
        elif step.kind == "bulk":  # one transaction: a unit in many parts
            cur.execute(
                "INSERT INTO accounts (id, email, balance) SELECT "
                f"{BULK_FIRST_ID} + seq, CONCAT('bulk', seq, '@example.com'), seq / 100 "
                f"FROM seq_1_to_{self.plan.bulk_rows}"
            )
        elif step.kind == "alter":
            cur.execute(ALTER_T)
            cur.execute("UPDATE t SET added = CONCAT('a', id)")  # every row in the new shape
            cur.execute("ALTER TABLE accounts MODIFY COLUMN email VARCHAR(120)")
        elif step.kind == "truncate":
            cur.execute("TRUNCATE TABLE t")
            self._all_types(cur)

    def _all_types(self, cur: Any) -> None:
        """Fifteen new rows, then updates, a primary-key change and a delete among them."""
        rnd = self.rnd
        ids = range(self.next_id, self.next_id + 15)
        self.next_id += 15
        cur.execute("BEGIN")
        insert_random(cur, rnd, ids, COLUMNS)
        cur.execute("COMMIT")
        picked = rnd.sample(list(ids), 4)
        cur.execute(f"UPDATE t SET vc = 'upd', de = -de WHERE id IN ({picked[0]}, {picked[1]})")
        cur.execute(f"UPDATE t SET id = id + 100000 WHERE id = {picked[2]}")
        cur.execute(f"DELETE FROM t WHERE id = {picked[3]}")
