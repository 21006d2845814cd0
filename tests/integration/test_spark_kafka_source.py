"""`replicad-kafka` (replicad/spark/kafka_source.py) against the Apache Kafka broker of
scripts/services.sh: a range ends at the last stable offset (before a transaction still open)
and never yields aborted records, batch and streaming; the schema topic replicad creates is
compacted, and after the log cleaner ran it holds the newest record per key and still types
the changes; a streaming checkpoint past the end of a recreated topic fails naming it.

The change and schema messages of the first and last test are written here, shaped as
replicad writes them (a few columns); the schema-topic test runs replicad itself.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pymysql
import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)
from pyspark.errors import StreamingQueryException

from replicad.spark.jobs import _failure
from replicad.spark.kafka_source import ReplicadKafkaSource, Settings, topic_ranges
from tests.helpers.kafka_helpers import consume_all
from tests.helpers.kafka_run import KafkaReplicad, wait_caught_up

pytestmark = [pytest.mark.integration, pytest.mark.serial]

DB, TABLE, VERSION = "shop", "t", "v1"
COLUMNS = [{"name": "id", "type": "int"}, {"name": "v", "type": "varchar", "length": 20}]


# ---------------------------------------------------------------- topics and messages


@pytest.fixture
def admin(kafka: str) -> Iterator[AdminClient]:
    yield AdminClient({"bootstrap.servers": kafka})


def create_topic(admin: AdminClient, topic: str, partitions: int = 1, **config: str) -> None:
    """Created, retried while a deleted topic of the same name is still being removed."""
    deadline = time.monotonic() + 60
    while True:
        future = admin.create_topics([NewTopic(topic, partitions, 1, config=config)])[topic]
        try:
            future.result(timeout=30)
            return
        except KafkaException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def producer(kafka: str, transactional_id: str | None = None) -> Producer:
    conf = {"bootstrap.servers": kafka, "enable.idempotence": True}
    if transactional_id is None:
        return Producer(conf)
    made = Producer({**conf, "transactional.id": transactional_id})
    made.init_transactions(30)
    return made


def change(row_id: int, value: str) -> tuple[bytes, bytes]:
    """An insert's key and envelope, as replicad writes them (the fields the reader uses)."""
    source = {
        "db": DB,
        "table": TABLE,
        "schema_version": VERSION,
        "file": "b.000001",
        "pos": 1000 + row_id,
        "row": 0,
        "ts_ms": 1_700_000_000_000,
    }
    envelope = {"op": "c", "before": None, "after": {"id": row_id, "v": value}, "source": source}
    return orjson.dumps({"id": row_id}), orjson.dumps(envelope)


def write_schema(kafka: str, topic: str) -> None:
    record = {
        "type": "table",
        "db": DB,
        "table": TABLE,
        "version": VERSION,
        "columns": COLUMNS,
        "primary_key": ["id"],
        "source": {"file": "b.000001", "pos": 4, "row": 0},
    }
    made = producer(kafka)
    key = {"db": DB, "table": TABLE, "version": VERSION}
    made.produce(topic, orjson.dumps(record), orjson.dumps(key))
    assert made.flush(30) == 0


def send(made: Producer, topic: str, ids: list[int], partition: int = 0) -> list[int]:
    """Sends inserts of `ids` to one partition, flushed; their offsets."""
    offsets: list[int] = []

    def delivered(err: Any, msg: Any) -> None:
        assert err is None, err
        offsets.append(msg.offset())

    for row_id in ids:
        key, value = change(row_id, f"v{row_id}")
        made.produce(topic, value, key, partition=partition, on_delivery=delivered)
    assert made.flush(30) == 0
    return offsets


def topics(admin: AdminClient, kafka: str, partitions: int = 1) -> dict[str, str]:
    """A fresh change topic and schema topic holding the table's schema; the reader's options."""
    prefix = f"sk{uuid.uuid4().hex[:8]}"
    change_topic, schema_topic = f"{prefix}.{DB}.{TABLE}", f"{prefix}.schema"
    create_topic(admin, change_topic, partitions)
    create_topic(admin, schema_topic, 1, **{"cleanup.policy": "compact"})
    write_schema(kafka, schema_topic)
    return {"kafka.bootstrap.servers": kafka, "table": f"{DB}.{TABLE}", "prefix": prefix}


def ids_read(spark: Any, options: dict[str, str]) -> list[int]:
    rows = spark.read.format("replicad-kafka").options(**options).load().select("after.id")
    return sorted(r.id for r in rows.collect())


def stream(spark: Any, options: dict[str, str], out: Path) -> Any:
    """A streaming query of the table's ids into Parquet files under `out` (a file sink: a
    memory sink cannot be started again on its checkpoint)."""
    return (
        spark.readStream.format("replicad-kafka")
        .options(**options)
        .load()
        .select("after.id")
        .writeStream.format("parquet")
        .option("path", str(out / "data"))
        .option("checkpointLocation", str(out / "ckpt"))
        .trigger(processingTime="500 milliseconds")
        .start()
    )


def ids_streamed(spark: Any, out: Path) -> list[int]:
    return sorted(r.id for r in spark.read.parquet(str(out / "data")).collect())


# ---------------------------------------------------------------- transactions


def test_a_range_ends_before_an_open_transaction_and_skips_aborted_records(
    kafka, spark, admin, tmp_path
) -> None:
    """Committed, aborted and still-open transactions on two partitions: partition 0 ends at
    the first record of its open transaction (its last stable offset) although a later
    transaction of another producer committed on partition 1; neither batch nor stream
    yields an aborted or uncommitted record, and the stream reads the open one once it commits.
    Read read_uncommitted, the aborted and open records would be rows."""
    options = topics(admin, kafka, partitions=2)
    topic = f"{options['prefix']}.{DB}.{TABLE}"
    first = producer(kafka, f"{topic}-a")
    first.begin_transaction()
    send(first, topic, [1, 2], partition=0)
    send(first, topic, [3], partition=1)
    first.commit_transaction(30)
    first.begin_transaction()
    send(first, topic, [101], partition=0)
    send(first, topic, [102], partition=1)
    first.abort_transaction(30)
    first.begin_transaction()
    send(first, topic, [4], partition=0)
    first.commit_transaction(30)
    first.begin_transaction()
    open_at = send(first, topic, [201, 202], partition=0)[0]
    second = producer(kafka, f"{topic}-b")
    second.begin_transaction()
    send(second, topic, [5], partition=1)
    second.commit_transaction(30)

    ranges = {r.partition: r for r in topic_ranges(Settings.of(options), None)}
    assert ranges[0].end == open_at
    # partition 1: 3, its commit marker, 102, the abort marker, 5, its commit marker
    assert (ranges[1].start, ranges[1].end) == (0, 6)
    assert ids_read(spark, options) == [1, 2, 3, 4, 5]

    query = stream(spark, options, tmp_path)
    try:
        query.processAllAvailable()
        assert ids_streamed(spark, tmp_path) == [1, 2, 3, 4, 5]
        first.commit_transaction(30)
        query.processAllAvailable()
        assert ids_streamed(spark, tmp_path) == [1, 2, 3, 4, 5, 201, 202]
    finally:
        query.stop()
    assert ids_read(spark, options) == [1, 2, 3, 4, 5, 201, 202]


# ---------------------------------------------------------------- the schema topic


def test_the_schema_topic_is_compacted_to_the_newest_record_per_key(
    db, kafka, spark, admin, tmp_path
) -> None:
    """replicad creates the schema topic with cleanup.policy=compact. Its records are sent
    again three times (as restarts do); once the log cleaner ran, each key has one record left,
    the newest copy, and the reader still types the table's changes across its ALTER."""
    conn, name = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20))")
    prefix = f"sc{uuid.uuid4().hex[:8]}"
    replicad = KafkaReplicad(tmp_path / "replicad", server_id=7194, prefix=prefix, kafka=kafka)
    replicad.start()
    with conn.cursor() as cur:
        cur.execute("INSERT INTO t VALUES (1, 'a'), (2, 'b'), (3, 'c')")
        cur.execute("ALTER TABLE t ADD COLUMN w INT")
        cur.execute("INSERT INTO t VALUES (4, 'd', 40)")
        cur.execute("UPDATE t SET w = 10 WHERE id = 1")
    conn.commit()
    wait_caught_up(replicad)
    assert replicad.stop() == 0  # a graceful stop: no transaction left open in the topics

    schema_topic = f"{prefix}.schema"
    assert topic_config(admin, schema_topic)["cleanup.policy"] == "compact"
    options = {"kafka.bootstrap.servers": kafka, "table": f"{name}.t", "prefix": prefix}
    written = ReplicadKafkaSource(options).versions
    assert [v.column_names for v in written] == [["id", "v"], ["id", "v", "w"]]

    newest = send_copies(admin, kafka, schema_topic, copies=3)
    left = wait_compacted(kafka, schema_topic, len(newest))
    assert left == newest  # one record per key, at the offset of its newest copy

    assert ReplicadKafkaSource(options).versions == written
    rows = spark.read.format("replicad-kafka").options(**options).load()
    folded = {}
    for row in rows.orderBy("offset").collect():  # one partition per key: offset order
        folded[row.key] = row.after.asDict()
    assert sorted(folded.values(), key=lambda r: r["id"]) == selected(conn, name)


def topic_config(admin: AdminClient, topic: str) -> dict[str, str]:
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    entries = admin.describe_configs([resource])[resource].result(timeout=30)
    return {key: entry.value for key, entry in entries.items()}


def send_copies(admin: AdminClient, kafka: str, topic: str, copies: int) -> dict[bytes, int]:
    """Every record of `topic` sent again `copies` times, then one more record after a segment
    roll so that the copies leave the active segment (which the cleaner never touches); the
    offset of each key's newest record."""
    resource = ConfigResource(
        ConfigResource.Type.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
            for name, value in (
                ("segment.ms", "300"),
                ("min.cleanable.dirty.ratio", "0.01"),
                ("min.compaction.lag.ms", "0"),
            )
        ],
    )
    admin.incremental_alter_configs([resource])[resource].result(timeout=30)
    records = consume_all(kafka, [topic], idle_s=0.5)
    assert records, "replicad wrote no schema record"
    newest: dict[bytes, int] = {}

    def delivered(err: Any, msg: Any) -> None:
        assert err is None, err
        newest[msg.key()] = msg.offset()

    made = producer(kafka)
    for _ in range(copies):
        for record in records:
            made.produce(topic, record.value, record.key, on_delivery=delivered)
        assert made.flush(30) == 0
        time.sleep(0.4)  # > segment.ms: the next record starts a new segment
    filler = orjson.dumps({"test": "a record of no table, to roll the last copies' segment"})
    made.produce(topic, filler, filler, on_delivery=delivered)
    assert made.flush(30) == 0
    return newest


def wait_compacted(kafka: str, topic: str, keys: int) -> dict[bytes, int]:
    """The offset of each key's record once the topic holds one record per key (fails after
    60 s: a topic that is not compacted keeps every copy)."""
    deadline = time.monotonic() + 60
    while True:
        records = consume_all(kafka, [topic], idle_s=0.5)
        if len(records) == keys or time.monotonic() > deadline:
            break
        time.sleep(1.0)
    offsets = {r.key: r.offset for r in records if r.key is not None}
    assert len(records) == len(offsets) == keys, f"{len(records)} records for {keys} keys"
    return offsets


def selected(conn: Any, db: str) -> list[dict[str, Any]]:
    with conn.cursor(pymysql.cursors.DictCursor) as cur:
        cur.execute(f"SELECT * FROM `{db}`.t ORDER BY id")
        return list(cur.fetchall())


# ---------------------------------------------------------------- the checkpoint's offsets


def test_a_checkpoint_past_the_end_of_a_recreated_topic_fails_naming_it(
    kafka, spark, admin, tmp_path
) -> None:
    """A stream reads 5 records and stops; the topic is deleted and created again with 2: the
    query started again on its checkpoint (offset 5) fails naming the topic and partition
    instead of waiting silently for offsets 5 and up."""
    options = topics(admin, kafka)
    topic = f"{options['prefix']}.{DB}.{TABLE}"
    send(producer(kafka), topic, [1, 2, 3, 4, 5])
    query = stream(spark, options, tmp_path)
    try:
        query.processAllAvailable()
        assert ids_streamed(spark, tmp_path) == [1, 2, 3, 4, 5]
    finally:
        query.stop()

    admin.delete_topics([topic])[topic].result(timeout=30)
    create_topic(admin, topic)
    send(producer(kafka), topic, [6, 7])

    query = stream(spark, options, tmp_path)  # the same checkpoint
    try:
        with pytest.raises(StreamingQueryException, match="checkpoint is past the end") as failed:
            assert query.awaitTermination(30), "the query stalled without an error"
    finally:
        query.stop()
    where = f"topic={topic}, partition=0, checkpoint_offset=5, end=2"
    assert where in str(failed.value)
    assert where in str(_failure(f"{DB}.{TABLE}", failed.value))  # as the materialize job says
