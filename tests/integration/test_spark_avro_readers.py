"""The readers of the published stream on Avro topics (issue 35, item 1): the invalidator reads
an Avro copy of a change topic exactly as it reads the JSON original.

The JSON original is the daemon's own: MariaDB's all-types table (tests/helpers/all_types.py)
written by `replicad run` with `envelope.values: debezium`, `time_precision_mode: connect` and
`schemas_enable: true`, so that each message carries its Kafka Connect schema. The Avro copy is
what Confluent's AvroConverter would make of each message, built here independently of the
readers' code: the Avro schema from the message's Connect schema (sinks/avro_schema.py), the
values from its payload with Connect's base64 of bytes (BYTES fields and Decimal's unscaled
bytes) decoded (Date, Time and Timestamp are ints in both forms), serialized by confluent-kafka's
AvroSerializer into the registry (topic-name strategy) and produced at the same partition and
in the same order. The oracle: the invalidator's Redis effects (the keys it PUBLISHes, one
template per column so that every value kind shapes a key) are the same for both topics.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import random
import re
import struct
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pymysql
import pytest
import redis
from confluent_kafka import Producer, schema_registry, serialization
from confluent_kafka.schema_registry import avro  # the test extra: a missing one fails

from replicad.sinks.avro_schema import avro_from_connect
from tests.helpers.all_types import ALL_TYPES, COLUMNS, random_literal
from tests.helpers.daemon_process import wait_for
from tests.helpers.invalidate import (
    InvalidatorProcess,
    PrivateRedis,
    committed,
    execute,
    topic_ends,
)
from tests.helpers.kafka_helpers import Record, consume_all, create_topics
from tests.helpers.kafka_run import KafkaReplicad, wait_caught_up
from tests.helpers.spark_jars import spark_jars_dir
from tests.integration.test_spark_open_lake import _materialize_once

# serial: two of its tests run Spark (scripts/test.sh runs test_spark_*.py beside the rest)
pytestmark = [pytest.mark.integration, pytest.mark.serial]


ENVELOPE_YAML = (
    "envelope: {values: debezium, time_precision_mode: connect,"
    " bigint_unsigned_handling_mode: precise, schemas_enable: true}\n"
)
# time.precision.mode=connect holds a TIME of 00:00:00-24:00:00 only (the daemon refuses others)
TIMES = ["'00:00:00'", "'23:59:59.999999'", "'12:00:00.5'", "NULL"]
ROWS = 40


def _literal(column: str, rng: random.Random) -> str:
    return rng.choice(TIMES) if column == "tm" else str(random_literal(column, rng))


def _write(conn: Any, db: str, columns: list[str], rng: random.Random) -> None:
    """Inserts, updates of every column and deletes: before and after images of each kind."""
    statements = []
    for i in range(1, ROWS + 1):
        values = ", ".join(_literal(c, rng) for c in columns)
        statements.append(f"INSERT INTO `{db}`.t (id, {', '.join(columns)}) VALUES ({i}, {values})")
    for i in range(1, ROWS + 1, 3):
        sets = ", ".join(f"{c} = {_literal(c, rng)}" for c in columns)
        statements.append(f"UPDATE `{db}`.t SET {sets} WHERE id = {i}")
    statements.append(f"DELETE FROM `{db}`.t WHERE id > {ROWS - 5}")
    execute(conn, *statements)


# ---------------------------------------------------------------------- the Avro copy


def _named_records(schema: Any, found: dict[str, Any]) -> dict[str, Any]:
    """Every record the schema defines, by full name (later uses refer to it by that name)."""
    if isinstance(schema, list):
        for branch in schema:
            _named_records(branch, found)
    elif isinstance(schema, dict) and schema.get("type") == "record":
        space = schema.get("namespace")
        found[f"{space}.{schema['name']}" if space else schema["name"]] = schema
        for field in schema["fields"]:
            _named_records(field["type"], found)
    elif isinstance(schema, dict) and schema.get("type") == "array":
        _named_records(schema["items"], found)
    return found


def _avro_value(schema: Any, value: Any, named: dict[str, Any]) -> Any:
    """A Connect JSON payload value as AvroSerializer takes it: Connect's JSON writes a BYTES
    value (a Decimal's too: its unscaled bytes) as base64; every other value is the same in
    both forms (fastavro takes ints for the date and time logical types)."""
    if value is None:
        return None
    if isinstance(schema, list):
        return _avro_value(next(b for b in schema if b != "null"), value, named)
    if isinstance(schema, str):
        schema = named.get(schema, {"type": schema})
    kind = schema["type"]
    if kind == "record":
        return {
            f["name"]: _avro_value(f["type"], value.get(f["name"]), named) for f in schema["fields"]
        }
    if kind == "array":
        return [_avro_value(schema["items"], v, named) for v in value]
    if kind == "bytes":
        return base64.b64decode(value)
    return value


class AvroCopier:
    """Produces an Avro copy of JSON-with-schema messages, as the AvroConverter would."""

    def __init__(self, kafka: str, registry: str) -> None:
        self.client = schema_registry.SchemaRegistryClient({"url": registry})
        self.producer = Producer({"bootstrap.servers": kafka})
        self.serializers: dict[str, Any] = {}

    def _serialize(self, wrapped: bytes | None, topic: str, key: bool) -> bytes | None:
        if wrapped is None:
            return None
        message = json.loads(wrapped)
        schema = avro_from_connect(message["schema"])
        text = json.dumps(schema)
        serializer = self.serializers.get(text)
        if serializer is None:
            serializer = self.serializers[text] = avro.AvroSerializer(self.client, text)
        field = serialization.MessageField.KEY if key else serialization.MessageField.VALUE
        value = _avro_value(schema, message["payload"], _named_records(schema, {}))
        data: bytes = serializer(value, serialization.SerializationContext(topic, field))
        return data

    def copy(self, record: Record, topic: str) -> None:
        key = self._serialize(record.key, topic, key=True)
        value = self._serialize(record.value, topic, key=False)
        self.producer.produce(topic, value, key, partition=record.partition)

    def flush(self) -> None:
        assert self.producer.flush(30) == 0


# ---------------------------------------------------------------------- the invalidator


def _rules(db: str, channel: str) -> str:
    keys = ", ".join(f"'{c}:{{id}}:{{{c}}}'" for c in COLUMNS)
    return (
        "  rules:\n"
        f"    - table: '{db}\\.t'\n"
        f"      keys: [{keys}]\n"
        "      action: publish\n"
        f"      channel: '{channel}'\n"
    )


def _config(base: Path, into: Path, prefix: str, section: str) -> Path:
    """The daemon's config with another prefix and this invalidate section."""
    text = base.read_text()
    original = next(line for line in text.splitlines() if "prefix:" in line)
    into.write_text(
        text.replace(original, original.split("prefix:")[0] + f"prefix: {prefix}") + section
    )
    return into


class Notices(threading.Thread):
    """The keys of every PUBLISH on the test's channels, in order, by channel."""

    def __init__(self, port: int, pattern: str) -> None:
        super().__init__(daemon=True)
        self.pubsub = redis.Redis(port=port).pubsub(ignore_subscribe_messages=True)
        self.pubsub.psubscribe(pattern)
        self.seen: dict[str, list[str]] = {}
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            message = self.pubsub.get_message(timeout=0.2)
            if message is not None:
                channel = message["channel"].decode()
                keys = json.loads(message["data"])["keys"]  # one notice per batch
                self.seen.setdefault(channel, []).extend(keys)


def _all_committed(kafka: str, group: str, topic: str, ends: dict[int, int]) -> bool:
    return committed(kafka, group, topic, sorted(ends)) == ends


@dataclass
class Published:
    """The daemon's JSON-with-schema original and its copies, by kind: "json" (the original),
    "payload" (JSON without the schema, the form the Spark readers take) and "avro"."""

    config: Path  # the daemon's, for the readers' configs
    prefixes: dict[str, str]
    table_topics: dict[str, str]


def _create(conn: Any, db: str, without: str | None) -> list[str]:
    """The all-types table, `without` a column; its columns."""
    create = ALL_TYPES
    if without is not None:
        create = re.sub(rf"\b{without} [A-Z]+(\(\d+\))?,", "", ALL_TYPES)
    execute(conn, f"USE `{db}`", create)
    return [c for c in COLUMNS if c != without]


def _publish_and_copy(
    db: Any, kafka: str, registry: str, tmp_path: Path, without: str | None = None
) -> Published:
    """The all-types table published and copied; `without` a column."""
    conn, name = db
    columns = _create(conn, name, without)
    prefixes = {kind: f"a{kind[0]}{uuid.uuid4().hex[:8]}" for kind in ("json", "payload", "avro")}
    replicad = KafkaReplicad(
        tmp_path / "replicad",
        server_id=7431,
        prefix=prefixes["json"],
        kafka=kafka,
        db=name,
        extra_yaml=ENVELOPE_YAML,
    )
    replicad.start()
    try:
        _write(conn, name, columns, random.Random(35))
        wait_caught_up(replicad)
    finally:
        assert replicad.stop() == 0
    records = consume_all(kafka, f"^{prefixes['json']}\\..*")
    table_topic = f"{prefixes['json']}.{name}.t"
    assert len([r for r in records if r.topic == table_topic]) >= ROWS + ROWS // 3

    copier = AvroCopier(kafka, registry)
    partitions = max(r.partition for r in records) + 1
    topics = {"json": table_topic}
    for kind in ("payload", "avro"):
        names = {r.topic: prefixes[kind] + r.topic[len(prefixes["json"]) :] for r in records}
        create_topics(kafka, sorted(set(names.values())), partitions=partitions)
        topics[kind] = names[table_topic]
        for record in records:
            if record.topic != table_topic:  # the schema topic stays JSON
                copier.producer.produce(
                    names[record.topic], record.value, record.key, partition=record.partition
                )
            elif kind == "avro":
                copier.copy(record, names[record.topic])
            else:
                key, value = (_payload(x) for x in (record.key, record.value))
                copier.producer.produce(names[record.topic], value, key, partition=record.partition)
    copier.flush()
    first = consume_all(kafka, topics["avro"])[0]
    assert first.value is not None and first.value[0] == 0  # Confluent's wire format
    return Published(replicad.config, prefixes, topics)


def _payload(wrapped: bytes | None) -> bytes | None:
    return None if wrapped is None else orjson.dumps(orjson.loads(wrapped)["payload"])


def test_invalidator_applies_the_same_redis_effects_to_avro_as_to_json(
    db, kafka, registry, tmp_path
) -> None:
    name = db[1]
    published = _publish_and_copy(db, kafka, registry, tmp_path)
    cache = PrivateRedis(tmp_path / "redis")
    cache.up()
    notices = Notices(cache.port, "rows:*")
    notices.start()
    redis_yaml = f"  redis: {{url: 'redis://127.0.0.1:{cache.port}/0'}}\n"
    runs = {}
    try:
        for kind, extra in (("json", ""), ("avro", f"  schema_registry_url: '{registry}'\n")):
            prefix, topic = published.prefixes[kind], published.table_topics[kind]
            group = f"inv-{kind}-{prefix}"
            section = f"invalidate:\n  group_id: {group}\n{extra}{redis_yaml}" + _rules(
                name, f"rows:{kind}"
            )
            config = _config(published.config, tmp_path / f"{kind}.yaml", prefix, section)
            process = InvalidatorProcess(config, tmp_path / f"{kind}.log")
            process.start()
            runs[kind] = process
            ends = topic_ends(kafka, topic)
            wait_for(
                lambda g=group, t=topic, e=ends: _all_committed(kafka, g, t, e),
                60,
                f"{kind} committed",
            )
        time.sleep(0.5)  # the last notices reach the subscriber
    finally:
        for process in runs.values():
            assert process.stop() == 0, process.log.read_text()[-3000:]
        notices.done.set()
        notices.join(5)
        cache.down()
    from_json, from_avro = notices.seen.get("rows:json", []), notices.seen.get("rows:avro", [])
    assert len(from_json) > 10 * ROWS
    kinds = Counter(key.split(":")[0] for key in from_json)
    assert set(kinds) == set(COLUMNS)  # every column shaped keys
    assert from_avro == from_json


def test_an_avro_topic_without_a_registry_stops_the_invalidator_with_78(
    db, kafka, registry, tmp_path
) -> None:
    _conn, name = db
    prefix = f"an{uuid.uuid4().hex[:8]}"
    topic = f"{prefix}.{name}.t"
    create_topics(kafka, [topic])
    copier = AvroCopier(kafka, registry)
    schema = {
        "type": "struct",
        "name": "k.Key",
        "optional": False,
        "fields": [{"field": "id", "type": "int32", "optional": False}],
    }
    envelope = {"schema": schema, "payload": {"id": 7}}
    text = json.dumps(envelope).encode()
    copier.copy(Record(topic, 0, 0, None, text), topic)
    copier.flush()
    cache = PrivateRedis(tmp_path / "redis")
    cache.up()
    section = (
        f"invalidate:\n  group_id: inv-{prefix}\n"
        f"  redis: {{url: 'redis://127.0.0.1:{cache.port}/0'}}\n"
        f"  rules: [{{table: '{name}\\.t', keys: ['k:{{id}}']}}]\n"
    )
    daemon = KafkaReplicad(
        tmp_path / "r", server_id=7432, prefix=prefix, kafka=kafka, extra_yaml=section
    )
    config = daemon.config  # (the daemon itself is not started)
    process = InvalidatorProcess(config, tmp_path / "invalidate.log")
    process.start()
    assert process.proc is not None
    try:
        status = process.proc.wait(60)
    finally:
        cache.down()
    log = process.log.read_text()
    assert status == 78, log[-3000:]
    assert "invalidate.schema_registry_url" in log
    assert f"topic={topic}" in log and "partition=0" in log and "offset=0" in log


# ---------------------------------------------------------------------- the Delta lake

BOOKKEEPING = {"_replicad_file", "_replicad_pos", "_replicad_row"}


def _delta_rows(path: Path) -> dict[int, dict[str, Any]]:
    """The Delta table's rows as delta-rs (not Spark, not replicad) reads them."""
    from deltalake import DeltaTable

    rows = DeltaTable(str(path)).to_pyarrow_table().to_pylist()
    return {r["id"]: {k: v for k, v in r.items() if k not in BOOKKEEPING} for r in rows}


def _float32(value: float) -> float:
    return float(struct.unpack("<f", struct.pack("<f", value))[0])


def _select_value(column: str, value: Any) -> Any:
    """PyMySQL's value as the lake stores it (docs/spark.md, "Types")."""
    if value is None:
        return None
    if column == "bt":
        return int.from_bytes(value, "big")
    if column == "fl":
        return _float32(value)
    if column == "dt6":  # time.precision.mode connect: Connect's Timestamp, milliseconds
        return value.replace(microsecond=value.microsecond // 1000 * 1000)
    return value


def _lake_value(column: str, value: Any) -> Any:
    if value is None:
        return None
    if column == "bu":
        return int(value)  # DECIMAL(20,0)
    if column == "ts3":  # TIMESTAMP: UTC; PyMySQL gives the session's (UTC) wall time
        return value.astimezone(dt.UTC).replace(tzinfo=None)
    if column == "g":  # MySQL's internal form: the SRID, then the WKB
        return struct.pack("<I", value["srid"]) + bytes(value["wkb"])
    return value


def _selected(conn: Any, db: str) -> dict[int, dict[str, Any]]:
    with conn.cursor(pymysql.cursors.DictCursor) as cur:
        cur.execute(f"SELECT * FROM `{db}`.t")
        rows = cur.fetchall()
    conn.commit()
    return {r["id"]: {c: _select_value(c, v) for c, v in r.items()} for r in rows}


def _assert_equal_select(rows: dict[int, dict[str, Any]], selected: dict[int, Any]) -> None:
    lake = {i: {c: _lake_value(c, v) for c, v in row.items()} for i, row in rows.items()}
    differing = {
        (i, c): (lake[i].get(c), value)
        for i, row in selected.items()
        for c, value in row.items()
        if lake.get(i, {}).get(c) != value
    }
    assert not differing
    assert lake == selected


@pytest.mark.serial
def test_the_delta_lake_of_an_avro_topic_equals_the_json_topics(
    db, kafka, registry, spark, tmp_path
) -> None:
    conn, name = db
    published = _publish_and_copy(db, kafka, registry, tmp_path, without="tm")
    jars = spark_jars_dir()
    lakes = {}
    for kind, extra in (("payload", ""), ("avro", f"schema_registry_url: '{registry}', ")):
        lake, checkpoints = tmp_path / f"lake-{kind}", tmp_path / f"checkpoints-{kind}"
        section = (
            f"spark: {{{extra}lake_jars: '{jars}', lake_path: '{lake}', "
            f"checkpoint_path: '{checkpoints}'}}\n"
        )
        prefix = published.prefixes[kind]
        config = _config(published.config, tmp_path / f"spark-{kind}.yaml", prefix, section)
        _materialize_once(config, tmp_path / f"spark-{kind}.log")
        lakes[kind] = _delta_rows(lake / name / "t")
    selected = _selected(conn, name)
    assert sorted(lakes["avro"]) == sorted(selected) and len(selected) == ROWS - 5
    assert lakes["avro"] == lakes["payload"]
    _assert_equal_select(lakes["avro"], selected)

    # replicad-kafka (the Python data source) reads the same change rows from both topics
    read = {}
    for kind, extra in (("payload", {}), ("avro", {"schemaRegistryUrl": registry})):
        options = {
            "kafka.bootstrap.servers": kafka,
            "prefix": published.prefixes[kind],
            "table": f"{name}.t",
            "envelopeValues": "debezium",
            "debezium.time_precision_mode": "connect",
            "debezium.bigint_unsigned_handling_mode": "precise",
            **extra,
        }
        frame = spark.read.format("replicad-kafka").options(**options).load()
        rows = frame.drop("topic").orderBy("partition", "offset").collect()
        read[kind] = [r.asDict(recursive=True) for r in rows]
    assert len(read["avro"]) >= ROWS and read["avro"] == read["payload"]
    assert read["avro"][0]["key"] == '{"id":1}' and read["avro"][0]["after"]["de"] is not None


@pytest.mark.serial
def test_the_daemons_avro_topic_materializes_equal_to_select(db, kafka, registry, tmp_path) -> None:
    """End to end: `replicad run` with `envelope.format: avro` writes the topic, the Delta job
    reads it with the daemon's registry and value options from the same config."""
    conn, name = db
    columns = _create(conn, name, without="tm")  # Delta has no type for TIME
    prefix = f"ae{uuid.uuid4().hex[:8]}"
    lake, checkpoints = tmp_path / "lake", tmp_path / "checkpoints"
    replicad = KafkaReplicad(
        tmp_path / "replicad",
        server_id=7433,
        prefix=prefix,
        kafka=kafka,
        db=name,
        extra_yaml=(
            "envelope: {values: debezium, format: avro, time_precision_mode: connect,"
            f" bigint_unsigned_handling_mode: precise, schema_registry: {{url: '{registry}'}}}}\n"
            f"spark: {{lake_jars: '{spark_jars_dir()}', lake_path: '{lake}', "
            f"checkpoint_path: '{checkpoints}'}}\n"
        ),
    )
    replicad.start()
    try:
        _write(conn, name, columns, random.Random(36))
        wait_caught_up(replicad)
    finally:
        assert replicad.stop() == 0
    first = consume_all(kafka, f"{prefix}.{name}.t")[0]
    assert first.value is not None and first.value[0] == 0  # the daemon wrote Avro
    _materialize_once(replicad.config, tmp_path / "spark.log")
    selected = _selected(conn, name)
    assert len(selected) == ROWS - 5
    _assert_equal_select(_delta_rows(lake / name / "t"), selected)
