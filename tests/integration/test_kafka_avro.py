"""`envelope.format: avro` (issue 35, item 1) on the real MariaDB, Kafka and schema registry
(Apicurio with its Confluent-compatible API, scripts/services.sh).

Oracles: the tables as PyMySQL's SELECT returns them, compared with what a consumer that
knows only the registry rebuilds: confluent-kafka's AvroDeserializer by the schema id in
each message, every value typed by this file's own reading of the Avro writer schema's
`connect.name` (Debezium's MySQL data type mapping), folded by key. Compatibility is the
registry's: each subject is set to BACKWARD before the daemon writes to it, so an added
nullable column is a second version and an INT column turned VARCHAR is refused (Avro cannot
read an int as a string), which must stop the daemon with exit 78 before the change.
"""

from __future__ import annotations

import datetime as dt
import json
import random
import struct
import uuid
from pathlib import Path
from typing import Any

import pymysql
import pytest
from confluent_kafka import schema_registry, serialization
from confluent_kafka.schema_registry import avro  # the test extra: a missing one fails

from tests.helpers.all_types import ALL_TYPES, COLUMNS, insert_random
from tests.helpers.kafka_helpers import Record, consume_all
from tests.helpers.kafka_run import KafkaReplicad, gtid_reached, wait_caught_up

pytestmark = pytest.mark.integration


_EPOCH = dt.datetime(1970, 1, 1)
# Debezium's semantic types (connect.name) -> the SQL value, from the Avro value.
_SEMANTIC: dict[str, Any] = {
    "io.debezium.time.Date": lambda v: _EPOCH.date() + dt.timedelta(days=v),
    "io.debezium.time.Timestamp": lambda v: _EPOCH + dt.timedelta(milliseconds=v),
    "io.debezium.time.MicroTimestamp": lambda v: _EPOCH + dt.timedelta(microseconds=v),
    # TIMESTAMP: UTC in the message; the session zone of these tests is UTC too.
    "io.debezium.time.ZonedTimestamp": lambda v: dt.datetime.fromisoformat(v).replace(tzinfo=None),
    "io.debezium.time.MicroTime": lambda v: dt.timedelta(microseconds=v),
    "io.debezium.data.Bits": lambda v: int.from_bytes(v, "little"),
    "io.debezium.data.Json": json.loads,
    # (srid, WKB) in the message; SRID + WKB in MariaDB's own format from SELECT
    "io.debezium.data.geometry.Geometry": lambda v: struct.pack("<I", v["srid"] or 0) + v["wkb"],
}


def _float32(value: float) -> float:
    return float(struct.unpack("<f", struct.pack("<f", value))[0])


def _field_types(schema: dict[str, Any]) -> dict[str, Any]:
    """column -> Avro type (optional unions unwrapped) of an envelope's row record."""
    before = next(f for f in schema["fields"] if f["name"] == "before")
    record = next(t for t in before["type"] if isinstance(t, dict))
    return {
        f["name"]: next(t for t in f["type"] if t != "null")
        if isinstance(f["type"], list)
        else f["type"]
        for f in record["fields"]
    }


def _typed(avro_type: Any, value: Any) -> Any:
    """One column from its Avro value and writer type, in the form SELECT gives it."""
    if value is None or not isinstance(avro_type, dict):
        return _float32(value) if avro_type == "float" and value is not None else value
    name = avro_type.get("connect.name")
    if name in _SEMANTIC:
        return _SEMANTIC[name](value)
    if avro_type.get("logicalType") == "decimal" and avro_type["scale"] == 0:
        return int(value)  # BIGINT UNSIGNED, precise
    return value


def _selected(conn: pymysql.connections.Connection, db: str) -> dict[int, dict[str, Any]]:
    with conn.cursor(pymysql.cursors.DictCursor) as cur:
        cur.execute(f"SELECT * FROM `{db}`.t")
        rows = cur.fetchall()
    out = {}
    for row in rows:
        row["fl"] = None if row["fl"] is None else _float32(row["fl"])
        row["bt"] = None if row["bt"] is None else int.from_bytes(row["bt"], "big")
        out[row["id"]] = row
    return out


def _differences(
    got: dict[int, dict[str, Any]], want: dict[int, dict[str, Any]]
) -> list[tuple[Any, ...]]:
    """(id, column, rebuilt, selected) of every value that differs; rows only one side has."""
    out: list[tuple[Any, ...]] = [
        (i, "row", got.get(i), want.get(i)) for i in got.keys() ^ want.keys()
    ]
    for i in sorted(got.keys() & want.keys()):
        row, expected = got[i], want[i]
        out += [(i, c, row.get(c), v) for c, v in expected.items() if row.get(c) != v]
        out += [(i, c, v, None) for c, v in row.items() if c not in expected]
    return out


class _AvroConsumer:
    """Reads a topic's records through the registry only."""

    def __init__(self, url: str, topic: str) -> None:
        self.client = schema_registry.SchemaRegistryClient({"url": url})
        self.read = avro.AvroDeserializer(self.client)
        self.values = serialization.SerializationContext(topic, serialization.MessageField.VALUE)
        self.keys = serialization.SerializationContext(topic, serialization.MessageField.KEY)

    def schema_id(self, blob: bytes) -> int:
        magic, schema_id = struct.unpack(">bI", blob[:5])
        assert magic == 0, blob[:5]
        return int(schema_id)

    def row_types(self, schema_id: int) -> dict[str, Any]:
        schema = json.loads(self.client.get_schema(schema_id).schema_str)
        return _field_types(schema)

    def fold(self, records: list[Record]) -> dict[int, dict[str, Any]]:
        rows: dict[int, dict[str, Any]] = {}
        for record in records:
            if record.value is None:
                continue  # a tombstone: the delete came before it
            assert record.key is not None
            key = self.read(record.key, self.keys)
            message = self.read(record.value, self.values)
            op = message["op"]
            if op == "d":
                assert key == {"id": message["before"]["id"]}
                rows.pop(key["id"], None)
                continue
            types = self.row_types(self.schema_id(record.value))
            after = message["after"]
            rows[after["id"]] = {c: _typed(types[c], v) for c, v in after.items()}
        return rows


def _strict(url: str, topic: str) -> None:
    """BACKWARD compatibility on the topic's subjects (Apicurio's global default is NONE)."""
    client = schema_registry.SchemaRegistryClient({"url": url})
    for suffix in ("key", "value"):
        client.set_compatibility(f"{topic}-{suffix}", "BACKWARD")


def _avro_replicad(tmp: Path, server_id: int, prefix: str, kafka: str, url: str, db: str):
    return KafkaReplicad(
        tmp,
        server_id=server_id,
        prefix=prefix,
        kafka=kafka,
        db=db,
        extra_yaml=(
            "envelope: {values: debezium, bigint_unsigned_handling_mode: precise, "
            f"format: avro, schema_registry: {{url: '{url}'}}}}\n"
        ),
    )


def test_avro_consumer_rebuilds_every_column_across_an_added_column(
    db, kafka, registry, tmp_path
) -> None:
    conn, name = db
    rng = random.Random(35)
    prefix = f"a{uuid.uuid4().hex[:8]}"
    topic = f"{prefix}.{name}.t"
    _strict(registry, topic)
    with conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        cur.execute(ALL_TYPES)
    replicad = _avro_replicad(tmp_path, 7351, prefix, kafka, registry, name)
    replicad.start()
    with conn.cursor() as cur:
        insert_random(cur, rng, range(1, 41), COLUMNS)
        for i in rng.sample(range(1, 41), 10):
            cur.execute(f"UPDATE t SET vc = 'upd', de = -de, tm = '01:02:03.4' WHERE id = {i}")
        cur.execute("DELETE FROM t WHERE id IN (3, 4)")
    before_alter = _selected(conn, name)
    with conn.cursor() as cur:
        cur.execute("ALTER TABLE t ADD COLUMN added VARCHAR(10) DEFAULT 'n' AFTER id")
        cur.execute("UPDATE t SET added = CONCAT('a', id)")
        insert_random(cur, rng, range(41, 61), ["added", *COLUMNS])
    after_alter = _selected(conn, name)
    wait_caught_up(replicad)
    assert replicad.stop() == 0

    records = consume_all(kafka, [topic], idle_s=3.0)
    consumer = _AvroConsumer(registry, topic)
    ids = [consumer.schema_id(r.value) for r in records if r.value is not None]
    first, second = ids[0], ids[-1]
    assert first != second and sorted(set(ids)) == sorted({first, second})
    assert consumer.client.get_versions(f"{topic}-value") == [1, 2]
    assert consumer.client.get_versions(f"{topic}-key") == [1]
    # The registry was asked once per subject and table version, not per message.
    registered = [
        e["subject"] for e in replicad.log_events() if e["event"] == "avro_schema_registered"
    ]
    assert sorted(registered) == sorted([f"{topic}-key", f"{topic}-value"] * 2), registered
    assert "added" not in consumer.row_types(first)
    assert "added" in consumer.row_types(second)
    # Both versions read back, each equal to the table as it was.
    early = [r for r in records if r.value is None or consumer.schema_id(r.value) == first]
    assert _differences(consumer.fold(early), before_alter) == []
    assert _differences(consumer.fold(records), after_alter) == []
    # A delete is followed by its tombstone, keyed like it.
    tombstones = [r for r in records if r.value is None]
    assert len(tombstones) == 2 and all(consumer.schema_id(r.key) for r in tombstones)


def test_a_refused_schema_stops_the_daemon_before_the_change(db, kafka, registry, tmp_path) -> None:
    conn, name = db
    prefix = f"a{uuid.uuid4().hex[:8]}"
    topic = f"{prefix}.{name}.t"
    _strict(registry, topic)
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, qty INT NOT NULL, note TEXT)")
    replicad = _avro_replicad(tmp_path, 7352, prefix, kafka, registry, name)
    replicad.start()
    with conn.cursor() as cur:
        cur.execute("INSERT INTO t VALUES (1, 5, 'one')")
    wait_caught_up(replicad)
    with conn.cursor() as cur:
        cur.execute("ALTER TABLE t MODIFY qty VARCHAR(20) NOT NULL")
        cur.execute("INSERT INTO t VALUES (2, 'six', 'two')")
        cur.execute("SELECT @@last_gtid")
        (refused_gtid,) = cur.fetchone()
    assert replicad.proc is not None
    assert replicad.proc.wait(timeout=60) == 78
    fatal = [e for e in replicad.log_events() if e.get("event") == "fatal"][-1]
    error = fatal["error"]
    assert f"{name}.t" in error and f"{topic}-value" in error, error
    assert "qty (int -> string)" in error and "note" not in error, error
    stored = (replicad.position() or {}).get("mariadb_gtid")
    assert stored is not None and not gtid_reached(stored, refused_gtid), (stored, refused_gtid)
    # The registry kept the first version only; a restart refuses the change again.
    client = schema_registry.SchemaRegistryClient({"url": registry})
    assert client.get_versions(f"{topic}-value") == [1]
    assert replicad.run_to_exit(timeout=60).returncode == 78
    assert replicad.position() is not None
    assert not gtid_reached(replicad.position()["mariadb_gtid"], refused_gtid)
    (record,) = consume_all(kafka, [topic], idle_s=2.0)  # the first row only
    assert record.value is not None and record.value[0] == 0  # Confluent's magic byte


def test_truncate_after_a_restart_uses_the_registered_schema(db, kafka, registry, tmp_path) -> None:
    """A TRUNCATE names no row: its op "t" message takes the table's envelope schema, after a
    restart the subject's latest version (nothing of the table was published by this run)."""
    conn, name = db
    prefix = f"a{uuid.uuid4().hex[:8]}"
    topic = f"{prefix}.{name}.t"
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, note TEXT)")
    replicad = _avro_replicad(tmp_path, 7353, prefix, kafka, registry, name)
    replicad.start()
    with conn.cursor() as cur:
        cur.execute("INSERT INTO t VALUES (1, 'one'), (2, 'two')")
    wait_caught_up(replicad)
    assert replicad.stop() == 0
    replicad.start()
    with conn.cursor() as cur:
        cur.execute("TRUNCATE TABLE t")
    wait_caught_up(replicad)
    assert replicad.stop() == 0
    records = consume_all(kafka, [topic], idle_s=2.0)
    consumer = _AvroConsumer(registry, topic)
    assert [consumer.read(r.value, consumer.values)["op"] for r in records] == ["c", "c", "t"]
    assert {consumer.schema_id(r.value) for r in records if r.value is not None} == {
        consumer.client.get_latest_version(f"{topic}-value").schema_id
    }
    assert records[-1].key is None


def test_an_unreachable_registry_is_transient(db, kafka, registry, tmp_path) -> None:
    """Exit 75 (a restart tries again), the stored position before the unsent row (other
    tests' writes on the shared server, filtered out, may move it up to there)."""
    conn, name = db
    prefix = f"a{uuid.uuid4().hex[:8]}"
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY)")
    replicad = _avro_replicad(tmp_path, 7354, prefix, kafka, registry, name)
    replicad.start()
    with conn.cursor() as cur:
        cur.execute("INSERT INTO t VALUES (1)")
    wait_caught_up(replicad)
    assert replicad.stop() == 0
    unreachable = "http://127.0.0.1:9/apis/ccompat/v7"  # the discard port: nothing listens
    replicad = _avro_replicad(tmp_path, 7354, prefix, kafka, unreachable, name)
    replicad.start()
    with conn.cursor() as cur:
        cur.execute("INSERT INTO t VALUES (2)")
        cur.execute("SELECT @@last_gtid")
        (unsent,) = cur.fetchone()
    assert replicad.proc is not None
    assert replicad.proc.wait(timeout=60) == 75
    failed = [e for e in replicad.log_events() if e.get("event") == "failed"][-1]
    assert failed["kind"] == "SchemaRegistryUnavailableError", failed
    assert "schema registry" in failed["error"] and f"{prefix}.{name}.t-key" in failed["error"]
    stored = (replicad.position() or {}).get("mariadb_gtid")
    assert stored is not None and not gtid_reached(stored, unsent), (stored, unsent)
