"""Two `replicad run` workers on a private 3-node ZooKeeper ensemble under a continuous
workload: every member killed (-9) and restarted in turn, then the quorum lost (two members
down for longer than the session timeout) and restored.

Oracles: during the quorum loss nothing reaches Kafka once the leader's lease has run out
(ZooKeeper unavailable = no publishing); afterwards a leader resumes, the topics fold to the
tables (nothing lost) and every repeated change lies in the window a fault left open (after
the position ZooKeeper held before the fault, no later than the binlog end when the fault was
repaired).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from replicad.binlog.gtid import MariaGtidPosition
from tests.helpers.daemon_process import wait_for
from tests.helpers.ha import (
    SESSION_TIMEOUT_S,
    HaReplicad,
    coordinate,
    event_time,
    fold_in_binlog_order,
)
from tests.helpers.kafka_helpers import consume_all
from tests.helpers.kafka_run import (
    BackgroundWriter,
    master_gtid,
    normalise_expected,
    read_topics,
    tables_state,
)
from tests.helpers.position_cli import master_status as binlog_end
from tests.helpers.zk_helpers import ZkEnsemble, raw_client

pytestmark = pytest.mark.faults


@pytest.fixture(scope="module")
def ensemble(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZkEnsemble]:
    group = ZkEnsemble(tmp_path_factory.mktemp("zk-ensemble-ha"))
    try:
        group.up()
        yield group
    finally:
        group.down()


def stored_position(hosts: str, root: str, pipeline: str) -> dict[str, Any] | None:
    with raw_client(hosts) as client:
        path = f"{root}/default/pipelines/{pipeline}/position"
        if not client.exists(path):
            return None
        return orjson.loads(client.get(path)[0])["position"]


def stable_count(kafka: str, topics: str) -> int:
    """The number of messages in `topics`, read until two reads agree (a read from the
    broker's S3 storage can come back short)."""
    last = -1
    for _ in range(6):
        count = len(consume_all(kafka, topics, idle_s=2.0))
        if count == last:
            return count
        last = count
    raise AssertionError(f"the message count of {topics} does not settle")


def test_member_restarts_and_quorum_loss(
    shop,
    kafka: str,
    ensemble: ZkEnsemble,
    tmp_path: Path,
) -> None:
    conn, db = shop
    prefix = f"hz{uuid.uuid4().hex[:8]}"
    root = f"/replicad-hz-{uuid.uuid4().hex[:8]}"
    pipeline = "hz"
    workers = []
    for i in range(2):
        worker = HaReplicad(
            tmp_path,
            f"z{i}",
            0,
            root,
            server_id=7420,
            prefix=prefix,
            kafka=kafka,
            pipeline=pipeline,
        )
        worker.zk_env["REPLICAD_COORDINATION__ZOOKEEPER__HOSTS"] = ensemble.hosts
        workers.append(worker)
    windows: list[tuple[tuple[str, int], tuple[str, int]]] = []
    writer = BackgroundWriter(db, seed=61, pause_s=0.02)
    try:
        for worker in workers:
            worker.start()
        writer.start()
        wait_for(lambda: stored_position(ensemble.hosts, root, pipeline), 30, "a position")
        for member in (1, 2, 3):  # rolling restart
            before = stored_position(ensemble.hosts, root, pipeline)
            assert before is not None
            ensemble.kill(member)
            time.sleep(1.0)
            ensemble.start(member)
            windows.append(((before["file"], before["pos"]), binlog_end()))
            time.sleep(1.0)
        # Quorum loss: members 2 and 3 down for well over the session timeout.
        before = stored_position(ensemble.hosts, root, pipeline)
        assert before is not None
        ensemble.kill(2)
        ensemble.kill(3)
        lost_at = time.time()
        time.sleep(SESSION_TIMEOUT_S + 2.0)  # every lease has run out by now
        frozen = stable_count(kafka, rf"{prefix}\.{db}\..*")
        time.sleep(3.0)  # MariaDB keeps writing meanwhile
        assert stable_count(kafka, rf"{prefix}\.{db}\..*") == frozen, (
            "something was published while ZooKeeper had no quorum"
        )
        paused = [
            e
            for w in workers
            for e in w.log_events()
            if e.get("event") in ("publishing_paused", "pipeline_abandoned")
            and event_time(e) > lost_at
        ]
        assert paused, "no leader noticed the quorum loss"
        ensemble.start(2)
        ensemble.start(3)
        windows.append(((before["file"], before["pos"]), binlog_end()))
        time.sleep(2.0)
    finally:
        statements = writer.stop()
    target = MariaGtidPosition.parse(master_gtid())

    def caught_up() -> bool:  # at or past the target (other tests may write meanwhile)
        stored = (stored_position(ensemble.hosts, root, pipeline) or {}).get("mariadb_gtid")
        if not stored:
            return False
        return all(MariaGtidPosition.parse(stored).covers(g) for g in target)

    wait_for(caught_up, 90, "a leader to resume and catch up after the quorum came back")
    for worker in workers:
        assert worker.proc is not None and worker.proc.poll() is None, worker.err.read_text()
        assert worker.stop() == 0
    records = read_topics(kafka, prefix, db)
    assert fold_in_binlog_order(records, prefix, db) == normalise_expected(tables_state(conn, db))
    counts: dict[tuple[Any, ...], int] = {}
    for record in records:
        op = None if record.value is None else orjson.loads(record.value)["op"]
        key = (record.topic, *coordinate(record), op)
        counts[key] = counts.get(key, 0) + 1
    dups = [k for k, n in counts.items() if n > 1]
    for dup in dups:
        assert any(low < (dup[1], dup[2]) <= high for low, high in windows), (dup, windows)
    print(
        f"ensemble: 3 member restarts + quorum loss, {statements} statements, "
        f"{len(records)} messages, {len(dups)} duplicated"
    )
