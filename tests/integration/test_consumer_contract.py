"""What consumers read (issue 15): the schema topic types every change message, TRUNCATE is
op "t" on the table's topic and other DDL a schema-change event, all in binlog order.

Oracle: the tables as PyMySQL's SELECT returns them (its own Python types), compared with the
change messages typed by `replicad.consumers.typed` from the schema topic alone — the test
never tells the consumer a column type.
"""

from __future__ import annotations

import random
import signal
import uuid
from typing import Any

import orjson
import pytest

from replicad.consumers.typed import SchemaCatalog
from tests.helpers.all_types import ALL_TYPES, COLUMNS, fold_typed, insert_random, selected_rows
from tests.helpers.daemon_process import wait_for
from tests.helpers.kafka_helpers import Record, consume_all
from tests.helpers.kafka_run import KafkaReplicad, wait_caught_up

pytestmark = pytest.mark.integration


def _changes(records: list[Record]) -> list[dict[str, Any]]:
    return [r.json() for r in records if r.value is not None]


def _coordinates(message: dict[str, Any]) -> tuple[str, int]:
    return message["source"]["file"], message["source"]["pos"]


def test_a_consumer_typed_by_the_schema_topic_alone_reproduces_select_across_an_alter(
    db, kafka, tmp_path
) -> None:
    conn, name = db
    rng = random.Random(15)
    prefix = f"s{uuid.uuid4().hex[:8]}"
    with conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        cur.execute(ALL_TYPES)
    replicad = KafkaReplicad(tmp_path, server_id=7151, prefix=prefix, kafka=kafka, db=name)
    replicad.start()
    with conn.cursor() as cur:
        insert_random(cur, rng, range(1, 41), COLUMNS)
        for i in rng.sample(range(1, 41), 10):
            cur.execute(f"UPDATE t SET vc = 'upd', de = -de, tm = '01:02:03.4' WHERE id = {i}")
        cur.execute("DELETE FROM t WHERE id IN (3, 4)")
    before_alter = selected_rows(conn, name)
    with conn.cursor() as cur:
        # adds, drops and retypes columns; then every row is written in the new shape
        cur.execute(
            "ALTER TABLE t ADD COLUMN added VARCHAR(10) DEFAULT 'n' AFTER id, DROP COLUMN tx, "
            "MODIFY COLUMN si BIGINT, MODIFY COLUMN de DECIMAL(30,10), MODIFY COLUMN vc TEXT"
        )
        cur.execute("UPDATE t SET added = CONCAT('a', id), si = si * 1000000")
        new_columns = ["added", *[c for c in COLUMNS if c != "tx"]]
        insert_random(cur, rng, range(41, 61), new_columns)
        cur.execute("UPDATE t SET id = id + 1000 WHERE id = 5")  # a primary-key change
    after_alter = selected_rows(conn, name)
    wait_caught_up(replicad)
    assert replicad.stop() == 0

    topic = f"{prefix}.{name}.t"
    messages = _changes(consume_all(kafka, [topic], idle_s=3.0))
    schema_records = _changes(consume_all(kafka, [f"{prefix}.schema"], idle_s=3.0))
    catalog = SchemaCatalog()
    for record in schema_records:
        catalog.add(record)

    # The ALTER is a schema-change event with the columns before and after it.
    alters = [d for d in catalog.ddl if d["db"] == name and d["table"] == "t"]
    assert [d["kind"] for d in alters] == ["alter"], alters  # CREATE was before the start
    alter = alters[0]
    assert "ADD COLUMN added" in alter["ddl"]
    assert "tx" in [c["name"] for c in alter["before"]["columns"]]
    assert "tx" not in [c["name"] for c in alter["after"]["columns"]]
    at = (alter["source"]["file"], alter["source"]["pos"])

    # Two versions of the row image, each written once, each with exact types.
    versions = {m["source"]["schema_version"] for m in messages}
    assert len(versions) == 2, versions
    tables = [r for r in schema_records if r["type"] == "table" and r["table"] == "t"]
    assert sorted(r["version"] for r in tables) == sorted(versions)
    old = next(r for r in tables if "tx" in [c["name"] for c in r["columns"]])
    de = next(c for c in old["columns"] if c["name"] == "de")
    assert (de["sql"], de["precision"], de["scale"]) == ("decimal(20,6)", 20, 6)
    assert next(c for c in old["columns"] if c["name"] == "dt6")["sql"] == "datetime(6)"
    assert next(c for c in old["columns"] if c["name"] == "bu")["sql"] == "bigint unsigned"

    early = [m for m in messages if _coordinates(m) < at]
    assert fold_typed(early, catalog) == before_alter
    assert fold_typed(messages, catalog) == after_alter


def test_truncate_and_drop_arrive_in_order_through_the_relay_and_a_sigkill(
    db, kafka, tmp_path
) -> None:
    conn, name = db
    prefix = f"s{uuid.uuid4().hex[:8]}"
    topic = f"{prefix}.{name}.t"
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(10))")
        cur.execute("CREATE TABLE other (id INT PRIMARY KEY)")
    replicad = KafkaReplicad(
        tmp_path,
        server_id=7152,
        prefix=prefix,
        kafka=kafka,
        kafka_yaml="topics: {partitions: 3}",
        extra_yaml=f"relay: {{enabled: true, directory: '{tmp_path / 'relay'}'}}\n",
        db=name,
    )
    replicad.start()
    with conn.cursor() as cur:
        cur.execute("INSERT INTO t VALUES (1, 'a'), (2, 'b'), (3, 'c')")
        cur.execute("TRUNCATE TABLE t")

    def truncated() -> bool:
        return any(m.get("op") == "t" for m in _changes(consume_all(kafka, [topic], idle_s=1.0)))

    wait_for(truncated, 60, "the TRUNCATE message")
    replicad.stop(signal.SIGKILL)  # right after the DDL: its position may not be stored yet
    with conn.cursor() as cur:
        cur.execute("INSERT INTO t VALUES (4, 'd')")
        cur.execute("INSERT INTO other VALUES (1)")
        cur.execute("DROP TABLE other")
        cur.execute("INSERT INTO t VALUES (5, 'e')")
    replicad.start()
    wait_caught_up(replicad)
    assert replicad.stop() == 0

    records = consume_all(kafka, [topic], idle_s=3.0)
    # Every partition has the TRUNCATE, after every message of the rows it removed and before
    # those of the rows written after it (a restart may send a run of messages again).
    truncates = [r for r in records if r.value is not None and r.json()["op"] == "t"]
    assert {r.partition for r in truncates} == {0, 1, 2}
    rows: dict[int, Any] = {}
    for partition in range(3):
        mine = [r.json() for r in records if r.partition == partition and r.value is not None]
        ops = [(m["op"], (m["after"] or m["before"] or {}).get("id")) for m in mine]
        last_t = len(ops) - 1 - ops[::-1].index(("t", None))
        assert all(i in (1, 2, 3) for op, i in ops[:last_t] if op != "t"), ops
        assert all(i in (4, 5) for _, i in ops[last_t + 1 :]), ops
        partition_rows: dict[int, Any] = {}
        for m in mine:  # a consumer of this partition, in offset order
            if m["op"] == "t":
                partition_rows.clear()
            elif m["after"] is not None:
                partition_rows[m["after"]["id"]] = m["after"]
        rows.update(partition_rows)
    assert sorted(rows) == [4, 5]
    assert all(r.key is not None for r in records if r.value is not None and r.json()["op"] != "t")
    t_message = truncates[0].json()
    assert t_message["before"] is None and t_message["after"] is None
    assert t_message["source"]["query"].upper().startswith("TRUNCATE")

    # DROP is a schema-change event between the rows around it (binlog coordinates).
    schema = _changes(consume_all(kafka, [f"{prefix}.schema"], idle_s=3.0))
    drops = [s for s in schema if s["type"] == "ddl" and s["kind"] == "drop"]
    assert [(d["db"], d["table"]) for d in drops[:1]] == [(name, "other")]
    drop = drops[0]
    assert drop["after"] is None and drop["before"]["columns"][0]["name"] == "id"
    row4 = next(r.json() for r in records if r.value and (r.json()["after"] or {}).get("id") == 4)
    row5 = next(r.json() for r in records if r.value and (r.json()["after"] or {}).get("id") == 5)
    assert _coordinates(row4) < _coordinates(drop) < _coordinates(row5)
    assert orjson.loads(orjson.dumps(drop))["ddl"].upper().startswith("DROP TABLE")


def test_filters_apply_to_table_level_events(db, kafka, tmp_path) -> None:
    conn, name = db
    prefix = f"s{uuid.uuid4().hex[:8]}"
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE kept (id INT PRIMARY KEY)")
        cur.execute("CREATE TABLE skipped (id INT PRIMARY KEY)")
    replicad = KafkaReplicad(
        tmp_path,
        server_id=7153,
        prefix=prefix,
        kafka=kafka,
        # include: only this test's database (other tests write beside it on the primary)
        extra_yaml=f"filters:\n  include: ['{name}\\..*']\n  exclude: ['{name}\\.skipped']\n",
    )
    replicad.start()
    with conn.cursor() as cur:
        cur.execute("INSERT INTO kept VALUES (1)")
        cur.execute("INSERT INTO skipped VALUES (1)")
        cur.execute("TRUNCATE TABLE kept")
        cur.execute("TRUNCATE TABLE skipped")
        cur.execute("ALTER TABLE skipped ADD COLUMN x INT")
        cur.execute("ALTER TABLE kept ADD COLUMN x INT")
    wait_caught_up(replicad)
    assert replicad.stop() == 0
    records = consume_all(kafka, rf"{prefix}\..*", idle_s=3.0)
    assert {r.topic for r in records} == {f"{prefix}.{name}.kept", f"{prefix}.schema"}
    schema = [r.json() for r in records if r.topic.endswith(".schema") and r.value]
    ddl = [(s["table"], s["kind"]) for s in schema if s["type"] == "ddl" and s["db"] == name]
    assert ddl == [("kept", "alter")]
    ops = [r.json()["op"] for r in records if r.topic.endswith(".kept") and r.value]
    assert ops == ["c", "t"]


def test_a_hashed_primary_key_never_appears_in_clear(db, kafka, tmp_path, monkeypatch) -> None:
    """Hashed columns (a primary key among them) are hashed in keys and values, and the
    statements MariaDB annotates the rows with (source.query) are dropped for that table:
    no byte of any message holds a secret."""
    conn, name = db
    prefix = f"s{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("REPLICAD_MASK_SALT", "test-salt")
    secrets = [f"secret-{uuid.uuid4().hex[:12]}@example.com" for _ in range(6)]
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE users (email VARCHAR(80) PRIMARY KEY, n INT, note VARCHAR(80))")
        cur.execute("CREATE TABLE events (who VARCHAR(80), what VARCHAR(20))")  # no key
    replicad = KafkaReplicad(
        tmp_path,
        server_id=7154,
        prefix=prefix,
        kafka=kafka,
        extra_yaml=(
            "filters:\n"
            f"  columns: {{hash: ['{name}\\.(users\\.(email|note)|events\\.who)']}}\n"
            f"  key_columns: {{'{name}\\.events': [who]}}\n"
        ),
    )
    replicad.start()
    with conn.cursor() as cur:
        for i, secret in enumerate(secrets):
            cur.execute("INSERT INTO users VALUES (%s, %s, %s)", (secret, i, f"note {secret}"))
            cur.execute("INSERT INTO events VALUES (%s, 'login')", (secret,))
        cur.execute("UPDATE users SET email = CONCAT('x', email) WHERE n = 0")  # a key change
        cur.execute("DELETE FROM users WHERE n = 1")
    wait_caught_up(replicad)
    assert replicad.stop() == 0
    records = consume_all(kafka, rf"{prefix}\..*", idle_s=3.0)
    users = [r for r in records if r.topic.endswith(".users")]
    events = [r for r in records if r.topic.endswith(".events")]
    # 6 inserts, the key change as delete + tombstone + create, the delete + tombstone
    assert len(users) == 6 + 3 + 2 and len(events) == 6
    for record in records:
        blob = (record.key or b"") + (record.value or b"")
        for secret in secrets:
            assert secret.encode() not in blob, (record.topic, blob[:200])
            assert secret.split("@")[0].encode() not in blob
    keys = {r.key for r in users if r.value is not None and r.json()["op"] == "c"}
    assert len(keys) == 7  # hashed keys stay distinct
    assert all(r.key is not None for r in events)  # key_columns gives the keyless table a key
    assert all(r.json()["source"]["query"] is None for r in users + events if r.value)


def test_debezium_values_through_kafka(db, kafka, tmp_path) -> None:
    """envelope.values: debezium on the real server: the encodings Debezium documents (the
    values worked out by hand here; every type is in tests/unit/test_debezium_values.py)."""
    conn, name = db
    prefix = f"s{uuid.uuid4().hex[:8]}"
    with conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        cur.execute(
            "CREATE TABLE v (id INT PRIMARY KEY, de DECIMAL(10,2), d DATE, dt6 DATETIME(6), "
            "dt0 DATETIME, ts TIMESTAMP(3) NULL, tm TIME(6), b1 BIT(1), vb VARBINARY(8), "
            "bu BIGINT UNSIGNED)"
        )
    replicad = KafkaReplicad(
        tmp_path,
        server_id=7155,
        prefix=prefix,
        kafka=kafka,
        extra_yaml="envelope: {values: debezium, schemas_enable: true}\n",
        db=name,
    )
    replicad.start()
    with conn.cursor() as cur:
        cur.execute(
            "INSERT INTO v VALUES (1, -1.50, '2020-01-02', '1969-12-31 23:59:59.999999', "
            "'2021-03-04 05:06:07', '2038-01-19 03:14:07.500', '-01:00:00.000001', b'1', "
            "x'00ff', 18446744073709551615)"
        )
    wait_caught_up(replicad)
    assert replicad.stop() == 0
    (record,) = consume_all(kafka, [f"{prefix}.{name}.v"], idle_s=3.0)
    message = record.json()
    after = message["payload"]["after"]
    assert after == {
        "id": 1,
        # unscaled -150: two's complement 0xff6a -> base64 "/2o="
        "de": "/2o=",
        "d": 18263,  # days from 1970-01-01
        "dt6": -1,  # microseconds before the epoch
        "dt0": 1614834367000,  # 2021-03-04T05:06:07Z in ms
        "ts": "2038-01-19T03:14:07.500Z",
        "tm": -3600000001,  # microseconds
        "b1": True,
        "vb": "AP8=",
        "bu": -1,  # bigint.unsigned.handling.mode long: 2^64-1 wraps to -1 (documented)
    }
    fields = {f["field"]: f for f in message["schema"]["fields"]}
    de = next(f for f in fields["after"]["fields"] if f["field"] == "de")
    assert de["name"] == "org.apache.kafka.connect.data.Decimal"
    assert orjson.loads(record.key) == {
        "schema": {
            "type": "struct",
            "fields": [{"type": "int32", "optional": False, "field": "id"}],
            "optional": False,
            "name": f"kt.{name}.v.Key",
        },
        "payload": {"id": 1},
    }
