"""Broker faults on a private 3-node Apache Kafka cluster (RF 3, min.insync.replicas 2, acks
all) under a running `replicad run` and a MariaDB writer that does not stop for them: the
partition leader SIGKILLed, every broker down for 30 s, a change topic deleted, the transaction
coordinator SIGKILLed during exactly-once commits.

Oracle (tests/helpers/kafka_run.py): the topics, read read_committed to their end and folded by
key, equal the tables; `audit` (no primary key) is counted by distinct source coordinates;
duplicates are counted by source coordinates (topic, file, pos, row, op). Measured recovery
times are printed (pytest -s shows them).
"""

from __future__ import annotations

import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.helpers.daemon_process import wait_for
from tests.helpers.kafka_cluster import KafkaCluster
from tests.helpers.kafka_helpers import Record, delete_topics
from tests.helpers.kafka_run import (
    BackgroundWriter,
    KafkaReplicad,
    coordinates,
    duplicated,
    fold,
    normalise_expected,
    read_topics,
    tables_state,
    wait_caught_up,
)

pytestmark = pytest.mark.faults

# Topics replicated on every broker, so that one broker's death loses no acknowledged write.
TOPICS_YAML = "topics: {partitions: 3, replication_factor: 3}\n"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    """One cluster for the module (starting one takes ~20 s); each test starts from all three
    members up (`healthy_cluster`). Killed at the end: nothing of it is kept."""
    kafka = KafkaCluster(tmp_path_factory.mktemp("kafka-cluster"))
    kafka.up()
    try:
        yield kafka
    finally:
        for member in (1, 2, 3):
            kafka.kill(member)


@pytest.fixture
def healthy_cluster(cluster: KafkaCluster) -> KafkaCluster:
    cluster.start()  # a no-op for members up; waits until each lists all three brokers
    return cluster


def _replicad(tmp: Path, server_id: int, prefix: str, kafka: str, **kw: Any) -> KafkaReplicad:
    yaml = TOPICS_YAML + kw.pop("kafka_yaml", "")
    return KafkaReplicad(
        tmp, server_id=server_id, prefix=prefix, kafka=kafka, kafka_yaml=yaml, **kw
    )


def _wait_topic(cluster: KafkaCluster, topic: str) -> None:
    wait_for(lambda: topic in cluster.metadata().topics, 30, f"topic {topic}")


def _assert_complete(records: list[Record], conn: Any, prefix: str, db: str) -> None:
    """Nothing lost: the fold equals the tables, every audit row arrived (once or more)."""
    assert fold(records, prefix, db) == normalise_expected(tables_state(conn, db))
    audit = {coordinates(r) for r in records if r.topic.endswith(".audit") and r.value}
    with conn.cursor() as cur:
        cur.execute(f"SELECT COUNT(*) FROM `{db}`.audit")
        assert len(audit) == cur.fetchone()[0]


def _position_key(position: dict[str, Any]) -> tuple[str, int]:
    return position["file"], position["pos"]


def test_partition_leader_killed_then_replicad_sigkilled(shop, healthy_cluster, tmp_path) -> None:
    """The leader of the items topic's partition SIGKILLed mid-stream; replicad SIGKILLed while
    that partition has no leader (its messages unacknowledged) and restarted: nothing lost,
    the position stored at the kill not past an acknowledged write (what came after it is
    sent again, at most twice)."""
    conn, db = shop
    cluster = healthy_cluster
    prefix = f"k{uuid.uuid4().hex[:8]}"
    replicad = _replicad(tmp_path, 7301, prefix, cluster.bootstrap, db=db)
    replicad.start()
    writer = BackgroundWriter(db, seed=31)
    writer.start()
    topic = f"{prefix}.{db}.items"
    try:
        wait_for(lambda: (replicad.position() or {}).get("pos") is not None, 30, "a checkpoint")
        _wait_topic(cluster, topic)
        time.sleep(2.0)
        old = cluster.leader(topic)
        cluster.kill(old)
        time.sleep(1.5)  # the controller fences the dead broker after ~9 s: messages wait
        assert replicad.stop(signal.SIGKILL) == -signal.SIGKILL
        at_kill = replicad.position()
        assert at_kill is not None
        new, elected_s = cluster.wait_leader_other_than(topic, old)
        replicad.start()
        time.sleep(3.0)
    finally:
        statements = writer.stop()
    wait_caught_up(replicad, timeout=120)
    assert replicad.stop() == 0
    cluster.start(old)
    records = read_topics(cluster.bootstrap, prefix, db)
    _assert_complete(records, conn, prefix, db)
    dups = duplicated(records)
    assert all((c[1], c[2]) > _position_key(at_kill) for c in dups), (dups[:5], at_kill)
    print(
        f"leader {old} killed; new leader {new} after {elected_s + 1.5:.1f} s; "
        f"{statements} statements, {len(records)} messages, {len(dups)} re-sent after {at_kill}"
    )


def _per_key_out_of_order(records: list[Record]) -> list[tuple[str, bytes | None]]:
    """Keys whose messages, in offset order, go back in the binlog (file, pos, row)."""
    last: dict[tuple[str, bytes | None], tuple[str, int, int]] = {}
    bad: list[tuple[str, bytes | None]] = []
    for r in sorted(records, key=lambda r: (r.topic, r.partition, r.offset)):
        if r.key is None:
            continue
        h = r.headers
        where = (h["replicad.file"].decode(), int(h["replicad.pos"]), int(h["replicad.row"]))
        if where < last.get((r.topic, r.key), where):
            bad.append((r.topic, r.key))
        last[(r.topic, r.key)] = where
    return bad


def _extra_state(conn: Any, db: str) -> dict[str, Any]:
    with conn.cursor() as cur:
        cur.execute(f"SELECT id, note FROM `{db}`.extra")
        rows = cur.fetchall()
    return {orjson.dumps({"id": i}).decode(): {"id": i, "note": note} for i, note in rows}


def test_all_brokers_down_30s_daemon_waits(shop, healthy_cluster, tmp_path) -> None:
    """Every broker stopped for 30 s: replicad neither exits nor moves its position; a table
    created meanwhile needs a topic while the cluster comes back (KRaft refuses creations
    while its brokers are fenced); it resumes; nothing lost, repeated or reordered per key."""
    conn, db = shop
    cluster = healthy_cluster
    prefix = f"k{uuid.uuid4().hex[:8]}"
    replicad = _replicad(tmp_path, 7302, prefix, cluster.bootstrap, db=db)
    replicad.start()
    writer = BackgroundWriter(db, seed=32, pause_s=0.02)
    writer.start()
    try:
        wait_for(lambda: (replicad.position() or {}).get("pos") is not None, 30, "a checkpoint")
        _wait_topic(cluster, f"{prefix}.{db}.items")
        time.sleep(1.0)
        cluster.down()
        down_at = time.monotonic()
        with conn.cursor() as cur:
            cur.execute("CREATE TABLE extra (id INT PRIMARY KEY, note VARCHAR(20))")
            cur.execute("INSERT INTO extra VALUES (1, 'during'), (2, 'outage')")
        time.sleep(5.0)  # acknowledgements of the last in-flight messages have settled
        frozen = replicad.position()
        while time.monotonic() - down_at < 30.0:
            assert replicad.proc is not None and replicad.proc.poll() is None, "replicad exited"
            assert replicad.position() == frozen, "the position moved while Kafka was down"
            time.sleep(0.5)
        cluster.start()
        back_at = time.monotonic()
        outage_s = back_at - down_at
        wait_for(lambda: replicad.position() != frozen, 120, "the position to move again")
        resumed_s = time.monotonic() - back_at
        time.sleep(2.0)
    finally:
        statements = writer.stop()
    wait_caught_up(replicad, timeout=120)
    assert replicad.stop() == 0
    records = read_topics(cluster.bootstrap, prefix, db)
    expected = normalise_expected(tables_state(conn, db))
    expected["extra"] = _extra_state(conn, db)
    assert fold(records, prefix, db) == expected
    assert duplicated(records) == []
    assert _per_key_out_of_order(records) == []
    retries = replicad.count("kafka_topic_create_retry")
    print(
        f"outage {outage_s:.1f} s; resumed {resumed_s:.1f} s after the brokers were back; "
        f"{statements} statements, {len(records)} messages, {retries} topic-creation retries"
    )


def test_change_topic_deleted_under_the_pipeline(shop, healthy_cluster, tmp_path) -> None:
    """A change topic deleted while replicad writes to it: exit 78 with `kafka_topic_deleted`
    naming the topic, which stays deleted (re-creating it would hide the consumers' loss)."""
    _conn, db = shop
    cluster = healthy_cluster
    prefix = f"k{uuid.uuid4().hex[:8]}"
    replicad = _replicad(tmp_path, 7303, prefix, cluster.bootstrap, db=db)
    replicad.start()
    writer = BackgroundWriter(db, seed=33, pause_s=0.05)
    writer.start()
    topic = f"{prefix}.{db}.items"
    try:
        wait_for(lambda: (replicad.position() or {}).get("pos") is not None, 30, "a checkpoint")
        _wait_topic(cluster, topic)
        delete_topics(cluster.bootstrap, [topic])
        deleted_at = time.monotonic()
        proc = replicad.proc
        assert proc is not None
        wait_for(lambda: proc.poll() is not None, 120, "replicad to stop")
        detected_s = time.monotonic() - deleted_at
    finally:
        writer.stop()
    assert proc.returncode == 78, replicad.err.read_text()[-3000:]
    named = [e for e in replicad.log_events() if e["event"] == "kafka_topic_deleted"]
    assert named and {e["topic"] for e in named} == {topic}, named
    assert topic not in cluster.metadata().topics, "the deleted topic was re-created"
    print(f"topic deletion detected after {detected_s:.1f} s")


def test_exactly_once_coordinator_killed_during_commits(shop, healthy_cluster, tmp_path) -> None:
    """Exactly-once batches committing continuously; the broker coordinating the pipeline's
    transactional id SIGKILLed: commits resume on the new coordinator, a SIGTERM while they go
    on exits 0, and read_committed shows no duplicate and nothing missing."""
    conn, db = shop
    cluster = healthy_cluster
    prefix = f"k{uuid.uuid4().hex[:8]}"
    pipeline = f"eos{uuid.uuid4().hex[:6]}"
    replicad = _replicad(
        tmp_path,
        7304,
        prefix,
        cluster.bootstrap,
        kafka_yaml="exactly_once: true\n",
        pipeline=pipeline,
        db=db,
    )
    replicad.start()
    writer = BackgroundWriter(db, seed=34)
    writer.start()
    try:
        wait_for(lambda: (replicad.position() or {}).get("pos") is not None, 60, "a commit")
        coordinator = cluster.transaction_coordinator(f"replicad-{pipeline}")
        cluster.kill(coordinator)
        killed_at, at_kill = time.monotonic(), replicad.position()
        wait_for(lambda: replicad.position() != at_kill, 120, "a commit after the kill")
        resumed_s = time.monotonic() - killed_at
        time.sleep(2.0)
        assert replicad.proc is not None and replicad.proc.poll() is None, "replicad exited"
        assert replicad.stop() == 0, "SIGTERM during exactly-once commits"
        replicad.start()  # the rest of the writer's changes, from the committed position
        time.sleep(2.0)
    finally:
        statements = writer.stop()
    wait_caught_up(replicad, timeout=120)
    assert replicad.stop() == 0
    new = cluster.transaction_coordinator(f"replicad-{pipeline}")
    cluster.start(coordinator)
    records = read_topics(cluster.bootstrap, prefix, db)
    assert duplicated(records) == []
    _assert_complete(records, conn, prefix, db)
    print(
        f"coordinator {coordinator} killed; commits resumed after {resumed_s:.1f} s "
        f"(coordinator now {new}); {statements} statements, {len(records)} messages"
    )
