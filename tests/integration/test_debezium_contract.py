"""replicad's `envelope.values: debezium` against the real Debezium (issue 32): the same
changes on the same MariaDB, read from Debezium's topic (MariaDB connector in Kafka Connect
standalone, bench/peers/debezium) and from replicad's, compared message by message: key,
`before`, `after`, `op`, the `source` fields both define, and the Connect schemas of keys and
row columns (`schemas.enable` true on both). The oracle is Debezium's own output.

Any difference fails the test unless ALLOWED lists it (where, column or field) with the reason;
an ALLOWED entry that no longer differs fails too, so that the list stays the exact set of
known differences (later work fixes each or documents it in docs/consumers.md).

Not serial: Debezium reads only this test's database, with `snapshot.locking.mode=none` (no
FLUSH TABLES WITH READ LOCK on the shared server) and a per-worker server id."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.peers.debezium import DebeziumConnect, DebeziumOptions, fetch
from tests.helpers.daemon_process import worker_server_id
from tests.helpers.debezium_compare import (
    Difference,
    compare_topics,
    differences_by_kind,
    table,
)
from tests.helpers.kafka_helpers import Record, consume_all
from tests.helpers.kafka_run import KafkaReplicad
from tests.helpers.mariadb import MARIADB_PORT
from tests.helpers.mysql import MYSQL_PORT, mysql, mysql_db  # noqa: F401  (fixtures)

pytestmark = [pytest.mark.integration]

COLUMNS = {
    "id": "INT NOT NULL",
    "i": "INT",
    "iu": "INT UNSIGNED",
    "bu": "BIGINT UNSIGNED",
    "de": "DECIMAL(12,3)",
    "f": "FLOAT",
    "d": "DOUBLE",
    "vc": "VARCHAR(40)",
    "bl": "BLOB",
    "dt": "DATE",
    "dtm": "DATETIME(6)",
    "ts": "TIMESTAMP(6) NULL",
    "tm": "TIME(6)",
    "j": "JSON",
    "e": "ENUM('new','paid','gone')",
    "s": "SET('a','b','c')",
    "b1": "BIT(1)",
    "b10": "BIT(10)",
    "y": "YEAR",
    "ti": "TINYINT",
    "su": "SMALLINT UNSIGNED",
    "mi": "MEDIUMINT",
    "ch": "CHAR(3)",
    "tx": "TEXT",
    "l1": "VARCHAR(10) CHARACTER SET latin1",
    "vb": "VARBINARY(8)",
    "bn": "BINARY(4)",
    "deu": "DECIMAL(5,0) UNSIGNED",
    "dtm0": "DATETIME",
    "ts0": "TIMESTAMP NULL",
    "tm0": "TIME",
    "tu": "TINYINT UNSIGNED",
    "t1": "TINYINT(1)",
    "si": "SMALLINT",
    "mu": "MEDIUMINT UNSIGNED",
}

ROW_1 = (
    1, -2147483648, 4294967295, 18446744073709551615, "-123456789.125", 1.5, -2.25e-300,
    "naïve café ☕ 😀", b"\x00\xff\x10", "2020-02-29", "1969-12-31 23:59:59.999999",
    "2038-01-19 03:14:07.500000", "-838:59:58.999999", '{"a": [1, 2.5, null], "b": "ü"}',
    "paid", "a,c", 1, 1023, 2155, -128, 65535, -8388608, "ab", "long text ✓", "ÄÖÜß",
    b"\x01\x02", b"\xfe", 99999, "2021-03-04 05:06:07", "2001-02-03 04:05:06", "838:59:59",
    255, 1, -32768, 16777215,
)  # fmt: skip
ROW_3 = (
    3, 7, 0, 9223372036854775808, "0.001", -3.4e38, 1e308, "", b"", "1000-01-01",
    "9999-12-31 23:59:59.999999", "1970-01-01 00:00:01.000001", "23:59:59.000001", "[]",
    "new", "", 0, 0, 1901, 127, 0, 8388607, "", "", "", b"", b"\x00\x00\x00\x00", 0,
    "1000-01-01 00:00:00", "1970-01-01 00:00:01", "-00:00:01",
    0, 0, 32767, 0,
)  # fmt: skip

# (where, column or field) -> why replicad differs from Debezium here. Each must still differ.
_TINYINT = (
    "replicad types a signed TINYINT (so TINYINT(1)/BOOLEAN too) as Connect int8 "
    "(replicad/sinks/debezium_values.py _INT_TYPES); Debezium types every TINYINT int16. "
    "Values equal; a schema-aware reader gets a Byte instead of a Short. To fix in the encoder."
)
_TS_FINE = (
    "Debezium 2.6+ adds microsecond and nanosecond twins of ts_ms; replicad writes only "
    "ts_ms. Not implemented yet."
)
ALLOWED: dict[tuple[str, str], str] = {
    ("schema.row", "ti"): _TINYINT,
    ("schema.row", "t1"): _TINYINT,
    ("source", "ts_us"): _TS_FINE,
    ("source", "ts_ns"): _TS_FINE,
    ("fields", "ts_us"): _TS_FINE,
    ("fields", "ts_ns"): _TS_FINE,
    ("source", "sequence"): (
        "Debezium's binlog connectors always write source.sequence null; replicad omits it. "
        "A JsonConverter reader gets null either way (optional field)."
    ),
    ("source", "schema_version"): (
        "replicad's own field naming the row's schema record in the schema topic "
        "(docs/consumers.md); deliberate, Debezium has no schema topic of that kind."
    ),
}
ALLOWED_MYSQL: dict[tuple[str, str], str] = {
    ("after", "j"): (
        'MySQL JSON: Debezium writes the document compact ({"a":[1,...]}), replicad as MySQL '
        'prints it ({"a": [1, ...]}): same document, other text. To fix or document.'
    ),
    ("before", "j"): "as (after, j)",
    ("source", "ts_ms"): (
        "MySQL 8+: Debezium takes the GTID event's commit timestamp (microseconds; here ms "
        "precision), replicad the event header's seconds (x1000). To fix in replicad."
    ),
}


def _changes(conn, name: str) -> None:
    placeholders = ", ".join(["%s"] * len(COLUMNS))
    with conn.cursor() as cur:
        cur.execute(f"INSERT INTO `{name}`.ct VALUES ({placeholders})", ROW_1)
        cur.execute(f"INSERT INTO `{name}`.ct (id) VALUES (2)")  # every other column NULL
        cur.execute(f"INSERT INTO `{name}`.ct VALUES ({placeholders})", ROW_3)
        cur.execute(
            f"UPDATE `{name}`.ct SET vc = 'x', de = de + 1, j = JSON_OBJECT('k', 'v'), "
            "s = 'b', e = NULL, tm = '00:00:00' WHERE id = 1"
        )
        cur.execute(f"UPDATE `{name}`.ct SET id = 4 WHERE id = 3")  # a primary-key change
        cur.execute(f"DELETE FROM `{name}`.ct WHERE id = 2")


# c c c u  d+tombstone c (the key change)  d+tombstone
EXPECTED_MESSAGES = 9


@pytest.fixture(scope="session")
def debezium_dist() -> Path:
    """Kafka Connect and Debezium from Maven Central (a no-op once fetched)."""
    started = time.monotonic()
    dist = fetch()
    print(f"debezium fetch: {time.monotonic() - started:.1f} s")
    return dist


def _create_table(conn, name: str) -> None:
    columns = ", ".join(f"`{c}` {t}" for c, t in COLUMNS.items())
    with conn.cursor() as cur:
        cur.execute(f"CREATE TABLE `{name}`.ct ({columns}, PRIMARY KEY (id))")


@pytest.fixture
def contract_db(db) -> Iterator[tuple[object, str]]:
    conn, name = db
    _create_table(conn, name)
    yield conn, name


def _read_until(kafka: str, topic: str, count: int, timeout: float = 60) -> list[Record]:
    deadline = time.monotonic() + timeout
    while True:
        records = consume_all(kafka, [topic], idle_s=0.5)
        if len(records) >= count or time.monotonic() > deadline:
            return records
        time.sleep(0.3)


def _check(differences: list[Difference], allowed: dict[tuple[str, str], str]) -> None:
    found = differences_by_kind(differences)
    unexpected = {k: d for k, d in found.items() if k not in allowed}
    stale = sorted(set(allowed) - set(found))
    report = table(differences, COLUMNS)
    print("\ndifferences from Debezium:\n" + report)
    assert not unexpected, f"{len(unexpected)} differences from Debezium not in ALLOWED:\n" + table(
        list(unexpected.values()), COLUMNS
    )
    assert not stale, f"ALLOWED entries that no longer differ (remove them): {stale}"


def _side_by_side(
    server: str, conn, name: str, kafka: str, tmp: Path, port: int, server_id: int
) -> tuple[list[Record], list[Record]]:
    """Both connectors on `name`.ct, then the changes; both topics once complete."""
    pipeline = f"dbz{uuid.uuid4().hex[:8]}"
    replicad = KafkaReplicad(
        tmp / "replicad",
        server_id=server_id + 1,
        prefix=f"r{pipeline}",
        pipeline=pipeline,  # Debezium's topic.prefix: the same source.name and schema names
        kafka=kafka,
        extra_yaml="envelope: {values: debezium, schemas_enable: true, include_query: true}\n",
        db=name,
        port=port,
    )
    options = DebeziumOptions(
        server=server,  # type: ignore[arg-type]
        database=name,
        tables=("ct",),
        topic_prefix=pipeline,
        server_id=worker_server_id(server_id),
        kafka=kafka,
        port=port,
        schemas_enable=True,
        extra={
            "snapshot.locking.mode": "none",  # no global read lock on the shared server
            "include.query": "true",  # as replicad's include_query: source.query compared
        },
    )
    replicad.start()
    try:
        with DebeziumConnect(options, tmp / "debezium") as connect:
            print(f"debezium start ({server}): {connect.timings}")
            _changes(conn, name)
            theirs = _read_until(kafka, f"{pipeline}.{name}.ct", EXPECTED_MESSAGES)
            ours = _read_until(kafka, f"r{pipeline}.{name}.ct", EXPECTED_MESSAGES)
    finally:
        replicad.stop()
    assert len(theirs) == EXPECTED_MESSAGES, [r.value for r in theirs]
    assert len(ours) == EXPECTED_MESSAGES, [r.value for r in ours]
    return theirs, ours


def test_mariadb_streaming_matches_debezium(debezium_dist, contract_db, kafka, tmp_path) -> None:
    conn, name = contract_db
    theirs, ours = _side_by_side("mariadb", conn, name, kafka, tmp_path, MARIADB_PORT, 7970)
    _check(compare_topics(theirs, ours), ALLOWED)


def test_mysql_streaming_matches_debezium(
    debezium_dist,
    mysql_db,  # noqa: F811
    kafka,
    tmp_path,
) -> None:
    conn, name = mysql_db
    _create_table(conn, name)
    theirs, ours = _side_by_side("mysql", conn, name, kafka, tmp_path, MYSQL_PORT, 7972)
    _check(compare_topics(theirs, ours), ALLOWED | ALLOWED_MYSQL)
