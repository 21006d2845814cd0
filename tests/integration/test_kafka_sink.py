"""`replicad run` publishing to the Kafka-API broker (tansu, scripts/services.sh) from the real
MariaDB: a random workload over many column types folded back to the tables' state, a broker
outage with a SIGKILL in the middle of it, exactly-once batches, fencing and oversized rows.

Oracle: every topic is read from its first offset and folded by key (c/u create, d and
tombstones remove); the result must equal the tables as SELECT returns them, converted to the
documented JSON mapping by this file's own code (not the envelope's). Duplicates are counted
by source coordinates (topic, file, pos, row, op).
"""

from __future__ import annotations

import signal
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.helpers.daemon_process import DaemonProcess, wait_for
from tests.helpers.kafka_helpers import PrivateKafka, consume_all
from tests.helpers.kafka_run import (
    BackgroundWriter,
    KafkaReplicad,
    Workload,
    audit_messages,
    audit_rows,
    coordinates,
    duplicated,
    fold,
    master_gtid,
    normalise_expected,
    read_topics,
    tables_state,
    wait_caught_up,
)
from tests.helpers.mariadb import MARIADB_PORT

pytestmark = pytest.mark.integration


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
    assert {
        "db",
        "table",
        "gtid",
        "file",
        "pos",
        "row",
        "ts_ms",
        "name",
        "snapshot",
        "thread",
        "query",
    } <= set(envelope["source"])
    accounts = [r for r in records if r.topic.endswith(".accounts") and r.value is not None]
    pk_changes = Counter(coordinates(r)[1:4] for r in accounts)
    assert any(n == 2 for n in pk_changes.values()), "no primary-key change was published"


def test_kafka_outage_and_sigkill_lose_nothing(shop, private_kafka: PrivateKafka, tmp_path) -> None:
    """The broker stopped for >= 30 s while MariaDB keeps writing: reading pauses on a full
    producer queue, the stored position does not move; replicad SIGKILLed during the outage
    and restarted; nothing is lost and duplicates come only from the unacknowledged window."""
    conn, db = shop
    kafka = private_kafka.bootstrap
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
        private_kafka.stop()
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
            private_kafka.start()
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
