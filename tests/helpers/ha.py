"""HA workers (`replicad run` with ZooKeeper, on a short session timeout), the primary they
replicate (MariaDB or MySQL: its binlog end and executed GTIDs, each server asked in its own
terms) and the oracle of the failover tests: messages folded per key in binlog order, as an
at-least-once consumer dedupes them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson
import pymysql

from tests.helpers import mariadb, mysql
from tests.helpers.daemon_process import wait_for
from tests.helpers.kafka_helpers import Record
from tests.helpers.kafka_run import (
    KafkaReplicad,
    after_image,
    gtid_reached,
    normalise_expected,
    tables_state,
)

SESSION_TIMEOUT_S = 3.0

STARTUP_WAIT_S = SESSION_TIMEOUT_S * 4 + 30


class HaReplicad(KafkaReplicad):
    """A worker of the pipeline: Kafka sink, ZooKeeper through its own fault proxy."""

    def __init__(
        self,
        tmp: Path,
        name: str,
        zk_port: int,
        root: str,
        *,
        zk_hosts: str | None = None,
        **kwargs: Any,
    ) -> None:
        """`zk_hosts`: a whole connect string (an ensemble) instead of 127.0.0.1:`zk_port`."""
        super().__init__(tmp / name, **kwargs)
        self.name = name
        self.zk_env = {
            "REPLICAD_COORDINATION__ZOOKEEPER__HOSTS": zk_hosts or f"127.0.0.1:{zk_port}",
            "REPLICAD_COORDINATION__ZOOKEEPER__ROOT": root,
            "REPLICAD_COORDINATION__ZOOKEEPER__SESSION_TIMEOUT_S": str(SESSION_TIMEOUT_S),
            "REPLICAD_COORDINATION__ZOOKEEPER__WORKER_ID": name,
        }

    @property
    def env(self) -> dict[str, str]:
        return {**super().env, **self.zk_env}

    def start(self) -> None:  # a standby never connects to MariaDB: wait for its candidacy
        before = self.count("zk_candidate_created")
        proc = self.spawn()
        wait_for(
            lambda: self.count("zk_candidate_created") > before or proc.poll() is not None,
            STARTUP_WAIT_S,
            f"{self.name} to become a candidate",
        )
        assert proc.poll() is None, self.err.read_text()[-3000:]


@dataclass(frozen=True)
class HaPrimary:
    """The primary of a failover run. `executed()` is its executed GTIDs now; `reached(p, t)`
    whether a stored position `p` (the pipeline's position in ZooKeeper) covers every
    transaction of `t`. Other tests may write to the same server meanwhile: both checks hold
    with their transactions too (a set or a position past the target), so the comparison
    needs no quiet server."""

    name: str
    port: int
    connect_root: Callable[..., pymysql.connections.Connection]

    def _scalar(self, sql: str) -> Any:
        conn = self.connect_root()
        try:
            with conn.cursor() as cur:
                cur.execute(sql)
                return cur.fetchone()
        finally:
            conn.close()

    def binlog_end(self) -> tuple[str, int]:
        """The current binlog file and offset (MySQL 8.4 removed SHOW MASTER STATUS)."""
        sql = "SHOW BINARY LOG STATUS" if self.name == "mysql" else "SHOW MASTER STATUS"
        file, pos = self._scalar(sql)[:2]
        return str(file), int(pos)

    def executed(self) -> str:
        """MariaDB's @@gtid_binlog_pos, or MySQL's @@gtid_executed (a GTID set)."""
        if self.name == "mysql":
            return str(self._scalar("SELECT @@GLOBAL.gtid_executed")[0]).replace("\n", "")
        return str(self._scalar("SELECT @@gtid_binlog_pos")[0])

    def expected_state(
        self, conn: pymysql.connections.Connection, db: str
    ) -> dict[str, dict[str, Any]]:
        """The shop tables as SELECT shows them, in the documented message mapping
        (docs/architecture.md): on MySQL a JSON column is published as the JSON value, on
        MariaDB (where JSON is LONGTEXT) as its text."""
        state = normalise_expected(tables_state(conn, db))
        if self.name == "mysql":
            for row in state.get("items", {}).values():
                if row.get("doc") is not None:
                    row["doc"] = orjson.loads(row["doc"])
        return state

    def reached(self, position: dict[str, Any] | None, target: str) -> bool:
        """MariaDB: the position's GTID is at or past `target` in each of its domains. MySQL:
        `target` is a subset of the position's executed set, as the server's GTID_SUBSET
        says."""
        if self.name != "mysql":
            return gtid_reached((position or {}).get("mariadb_gtid"), target)
        have = (position or {}).get("gtid_set")
        if have is None:
            return False
        conn = self.connect_root()
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT GTID_SUBSET(%s, %s)", (target, have))
                return bool(cur.fetchone()[0])
        finally:
            conn.close()


MARIADB = HaPrimary("mariadb", mariadb.MARIADB_PORT, mariadb.connect_root)
MYSQL = HaPrimary("mysql", mysql.MYSQL_PORT, mysql.connect_root)


def event_time(event: dict[str, Any]) -> float:
    """The wall time of a structured log line (its ISO `timestamp`)."""
    return datetime.fromisoformat(event["timestamp"].replace("Z", "+00:00")).timestamp()


def events_after(worker: HaReplicad, t: float, *names: str) -> list[dict[str, Any]]:
    """The worker's log lines named `names` written after wall time `t`."""
    return [e for e in worker.log_events() if e.get("event") in names and event_time(e) > t]


def coordinate(record: Record) -> tuple[str, int, int]:
    h = record.headers
    return h["replicad.file"].decode(), int(h["replicad.pos"]), int(h["replicad.row"])


def fold_in_binlog_order(records: list[Record], prefix: str, db: str) -> dict[str, Any]:
    """Per key, apply a message only if it is not older (by source coordinates) than the
    last one applied: the dedupe an at-least-once consumer does. A delete and its tombstone,
    or a repeat, share coordinates and apply idempotently."""
    out: dict[str, dict[str, Any]] = {}
    newest: dict[tuple[str, str], tuple[str, int, int]] = {}
    for record in records:
        table = record.topic[len(f"{prefix}.{db}.") :]
        if table == "audit":
            continue
        key = "" if record.key is None else record.key.decode()
        where = coordinate(record)
        if where < newest.get((table, key), ("", 0, -1)):
            continue  # an older copy arriving late (a deposed leader's in-flight message)
        newest[(table, key)] = where
        state = out.setdefault(table, {})
        envelope = None if record.value is None else orjson.loads(record.value)
        if envelope is None or envelope["op"] == "d":
            state.pop(key, None)
            continue
        state[key] = after_image(envelope)
    return out
