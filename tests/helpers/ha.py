"""HA workers (`replicad run` with ZooKeeper, on a short session timeout) and the oracle of
the failover tests: messages folded per key in binlog order, as an at-least-once consumer
dedupes them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from tests.helpers.daemon_process import wait_for
from tests.helpers.kafka_helpers import Record
from tests.helpers.kafka_run import (
    KafkaReplicad,
    after_image,
)

SESSION_TIMEOUT_S = 3.0

STARTUP_WAIT_S = SESSION_TIMEOUT_S * 4 + 30


class HaReplicad(KafkaReplicad):
    """A worker of the pipeline: Kafka sink, ZooKeeper through its own fault proxy."""

    def __init__(self, tmp: Path, name: str, zk_port: int, root: str, **kwargs: Any) -> None:
        super().__init__(tmp / name, **kwargs)
        self.name = name
        self.zk_env = {
            "REPLICAD_COORDINATION__ZOOKEEPER__HOSTS": f"127.0.0.1:{zk_port}",
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
