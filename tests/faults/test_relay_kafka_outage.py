"""The relay's reason to be: Kafka away while the primary keeps writing. With the relay the
replica reads on (the relay grows, the primary may purge its binlogs meanwhile), the stored
position stays put, and when Kafka returns publishing catches up from the relay, nothing
lost, and the relay is trimmed behind the checkpoint. A small `relay.max_bytes` turns into
back-pressure instead. REPLICAD_RELAY_OUTAGE_S sets the outage (default 35 s)."""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import pytest

from replicad.relay.manifest import load_manifest
from replicad.relay.reader import RelayReader
from tests.helpers.daemon_process import wait_for
from tests.helpers.kafka_helpers import PrivateKafka
from tests.helpers.kafka_run import (
    BackgroundWriter,
    KafkaReplicad,
    duplicated,
    fold,
    normalise_expected,
    read_topics,
    tables_state,
    wait_caught_up,
)
from tests.helpers.position_cli import master_status as binlog_end

pytestmark = [pytest.mark.faults, pytest.mark.serial]

OUTAGE_S = float(os.environ.get("REPLICAD_RELAY_OUTAGE_S", "35"))


def relay_replicad(
    tmp_path: Path, kafka: str, prefix: str, relay_yaml: str, server_id: int, db: str
):
    relay_dir = tmp_path / "relay" / "kt"  # <directory>/<pipeline>
    replicad = KafkaReplicad(
        tmp_path,
        server_id=server_id,
        prefix=prefix,
        kafka=kafka,
        db=db,
        kafka_yaml="max_in_flight: 300\nproducer: {linger.ms: 50}",
        extra_yaml=(
            f"relay:\n  enabled: true\n  directory: {relay_dir.parent}\n  segment_bytes: 65536\n"
            f"  fsync: interval\n{relay_yaml}"
        ),
    )
    return replicad, relay_dir


def test_kafka_outage_the_relay_reads_on_and_is_trimmed_after(
    shop, private_kafka: PrivateKafka, tmp_path
) -> None:
    conn, db = shop
    kafka = private_kafka.bootstrap
    prefix = f"r{uuid.uuid4().hex[:8]}"
    replicad, relay_dir = relay_replicad(tmp_path, kafka, prefix, "", 7301, db)
    replicad.start()
    writer = BackgroundWriter(db, seed=31)
    writer.start()
    try:
        wait_for(lambda: (replicad.position() or {}).get("pos") is not None, 20, "a checkpoint")
        time.sleep(1.0)
        private_kafka.stop()
        outage_started = time.monotonic()
        try:
            time.sleep(5.0)  # in-flight messages give up; no acknowledgement arrives anymore
            frozen = replicad.position()
            segments_at_start = len(load_manifest(relay_dir).segments)  # type: ignore[union-attr]
            time.sleep(max(0.0, OUTAGE_S - (time.monotonic() - outage_started)))
            # The replica read on: the relay holds what the primary wrote during the outage.
            target = binlog_end()
            wait_for(
                lambda: (relay_end(relay_dir) or ("", 0)) >= target,
                30,
                f"the relay to reach the primary's {target} while Kafka is down",
            )
            assert replicad.position() == frozen, "the position moved while Kafka was down"
            grown = len(load_manifest(relay_dir).segments)  # type: ignore[union-attr]
            assert grown > segments_at_start + 3, (segments_at_start, grown)
        finally:
            private_kafka.start()
        outage_s = time.monotonic() - outage_started
        time.sleep(2.0)
    finally:
        statements = writer.stop()
    wait_caught_up(replicad, timeout=180)
    # Trimmed: segments every checkpoint passed are gone (retention keep_s 0).
    wait_for(
        lambda: len(load_manifest(relay_dir).segments) <= 2,  # type: ignore[union-attr]
        30,
        "the relay to be trimmed behind the checkpoint",
    )
    assert replicad.stop() == 0
    records = read_topics(kafka, prefix, db)
    print(f"position 5 s into the outage: {frozen}")
    assert fold(records, prefix, db) == normalise_expected(tables_state(conn, db))
    assert duplicated(records) == [], "no crash, no restart: nothing may come twice"
    deleted = sum(
        len(e["segments"]) for e in replicad.log_events() if e["event"] == "relay_segments_deleted"
    )
    print(
        f"outage {outage_s:.1f} s, {statements} statements, {len(records)} messages, relay grew "
        f"to {grown} segments, {deleted} deleted after"
    )


def relay_end(relay_dir: Path) -> tuple[str, int] | None:
    """The binlog coordinates after the last whole transaction in the relay."""
    last = None
    for txn in RelayReader(relay_dir).transactions():
        last = txn.commit.position
    return None if last is None else (last.file, last.pos)


def test_a_full_relay_applies_back_pressure_and_loses_nothing(
    shop, private_kafka: PrivateKafka, tmp_path
) -> None:
    conn, db = shop
    kafka = private_kafka.bootstrap
    prefix = f"r{uuid.uuid4().hex[:8]}"
    replicad, relay_dir = relay_replicad(
        tmp_path, kafka, prefix, "  max_bytes: 1048576\n", 7302, db
    )
    replicad.start()
    writer = BackgroundWriter(db, seed=32, pause_s=0.0)
    writer.start()
    try:
        wait_for(lambda: (replicad.position() or {}).get("pos") is not None, 20, "a checkpoint")
        private_kafka.stop()
        try:
            wait_for(lambda: replicad.count("relay_full") > 0, 60, "the relay to fill up")
            time.sleep(2.0)
            manifest = load_manifest(relay_dir)
            assert manifest is not None
            size = sum((relay_dir / s.name).stat().st_size for s in manifest.segments)
            # Reading paused: the relay stays near its limit (one transaction may overshoot).
            assert size < 1048576 + 512 * 1024, size
        finally:
            private_kafka.start()
    finally:
        writer.stop()
    wait_caught_up(replicad, timeout=180)
    assert replicad.stop() == 0
    assert replicad.count("relay_resumed") > 0
    records = read_topics(kafka, prefix, db)
    assert fold(records, prefix, db) == normalise_expected(tables_state(conn, db))
    assert duplicated(records) == []
