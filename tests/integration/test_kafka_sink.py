"""`replicad run` publishing to Apache Kafka (scripts/services.sh) from the real MariaDB: a
random workload over many column types folded back to the tables' state, a broker outage with
a SIGKILL in the middle of it, exactly-once batches, fencing and oversized rows.

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
    assert_read_committed_view,
    coordinates,
    duplicated,
    fold,
    master_gtid,
    normalise_expected,
    read_exactly_once,
    read_topics,
    sink_instance,
    stop_inside_open_batch,
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
    assert set(envelope) == {
        "before",
        "after",
        "source",
        "op",
        "ts_ms",
        "ts_us",
        "ts_ns",
        "transaction",
    }
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
    records = consume_all(kafka, [f"{prefix}.replicad-positions"], idle_s=1.0)
    mine = [r.value for r in records if r.key == pipeline.encode() and r.value is not None]
    assert mine, "no position record"
    return dict(orjson.loads(mine[-1])["position"])


def _loaded_position(replicad: DaemonProcess) -> str:
    loaded = [e for e in replicad.log_events() if e.get("event") == "kafka_position_loaded"]
    assert loaded, "no position loaded from Kafka"
    return str(loaded[0]["position"])


def test_exactly_once_position_record_and_restart_from_kafka(shop, kafka, tmp_path) -> None:
    """Batches commit with a position record. The daemon is SIGKILLed while its open Kafka
    transaction has messages on the broker; a second daemon without the local position file
    aborts that transaction (init_transactions fences the dead producer) and continues from
    Kafka's last committed position record. Read as users read (read_committed): nothing of
    the aborted batch, every committed batch with its position record, every change once,
    none lost; the read_uncommitted audit agrees."""
    conn, db = shop
    prefix = f"k{uuid.uuid4().hex[:8]}"
    pipeline = f"eos{uuid.uuid4().hex[:6]}"

    def daemon(name: str) -> KafkaReplicad:
        return KafkaReplicad(
            tmp_path / name,
            server_id=7103,
            prefix=prefix,
            kafka=kafka,
            kafka_yaml="exactly_once: true",
            pipeline=pipeline,
            log_level="debug",  # kafka_batch_committed
        )

    first = daemon("a")
    first.start()
    writer = BackgroundWriter(db, seed=6, pause_s=0.005)
    writer.start()
    try:
        # Several batches first: a restart from any but the last record would repeat some.
        wait_for(lambda: first.count("kafka_batch_committed") >= 3, 30, "committed batches")
        open_batches = stop_inside_open_batch(first, kafka, prefix, db, pipeline)
        assert first.stop(signal.SIGKILL) == -signal.SIGKILL
    finally:
        writer.stop()
    record = _last_position_record(kafka, prefix, pipeline)
    workload = Workload(conn, seed=9)
    for _ in range(100):  # written while no daemon runs
        workload.transaction()
    second = daemon("b")  # no local state: the position comes from Kafka
    second.start()
    assert _loaded_position(second).endswith(f"gtid={record['mariadb_gtid']}"), record
    for _ in range(100):
        workload.transaction()
    wait_caught_up(second)
    assert second.stop() == 0
    view = read_exactly_once(kafka, prefix, db, pipeline)
    summary = assert_read_committed_view(view, conn, db, prefix, aborted_batches=open_batches)
    assert _last_position_record(kafka, prefix, pipeline) == second.position()
    print(f"killed inside {sorted(open_batches)}: {summary}")


def test_exactly_once_second_producer_fences_the_first(shop, kafka, tmp_path) -> None:
    """A zombie: the first daemon is stopped (SIGSTOP) while its open Kafka transaction has
    messages on the broker. A second daemon with the same transactional id fences it (its
    init_transactions aborts that transaction) and continues from the first's last committed
    position record. Woken (SIGCONT), the zombie finds itself fenced and exits 75
    (ProducerFencedError: a restart resumes) without committing anything more; read
    committed, nothing of its open transaction ever shows, and the topics hold every change
    once."""
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
    writer = BackgroundWriter(db, seed=7, pause_s=0.005)
    writer.start()
    try:
        wait_for(lambda: first.count("kafka_batch_committed") >= 3, 30, "committed batches")
        open_batches = stop_inside_open_batch(first, kafka, prefix, db, pipeline)
        handed_over = _last_position_record(kafka, prefix, pipeline)
        second = KafkaReplicad(
            tmp_path / "b",
            server_id=7105,
            prefix=prefix,
            kafka=kafka,
            kafka_yaml=eos,
            pipeline=pipeline,
        )
        second.start()
        assert _loaded_position(second).endswith(f"gtid={handed_over['mariadb_gtid']}")
        took_over = next(
            e["timestamp"]
            for e in second.log_events()
            if e.get("event") == "kafka_transactions_ready"
        )
        assert first.proc is not None
        first.proc.send_signal(signal.SIGCONT)
        assert first.proc.wait(timeout=60) == 75  # EX_TEMPFAIL: restartable
    finally:
        writer.stop()
    ended = [e for e in first.log_events() if e.get("event") in ("fatal", "failed")]
    assert ended and ended[-1]["kind"] == "ProducerFencedError", ended
    commits = [e for e in first.log_events() if e.get("event") == "kafka_batch_committed"]
    assert commits and all(e["timestamp"] < took_over for e in commits), "the zombie committed"
    wait_caught_up(second)
    assert second.stop() == 0
    view = read_exactly_once(kafka, prefix, db, pipeline)
    summary = assert_read_committed_view(view, conn, db, prefix, aborted_batches=open_batches)
    # Every transaction the zombie's producer committed is one it logged before the stop.
    zombie = sink_instance(first)
    assert len(commits) == sum(1 for p in view.positions if p["batch"].startswith(f"{zombie}:"))
    print(f"zombie stopped inside {sorted(open_batches)}, fenced: {summary}")


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
    assert good.returncode == 0 and "PASS  kafka" in good.stdout, good.stdout
    bad = check("127.0.0.1:1")  # nothing listens there
    assert bad.returncode == 1 and "FAIL  kafka" in bad.stdout and "127.0.0.1:1" in bad.stdout
