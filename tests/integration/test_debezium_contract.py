"""replicad's `envelope.values: debezium` against the real Debezium (issue 32): the same
changes on the same MariaDB or MySQL 9.7, read from Debezium's topic (its MariaDB or MySQL
connector in Kafka Connect standalone, bench/peers/debezium) and from replicad's, compared
message by message: key, `before`, `after`, `op`, the `source` fields both define, and the
Connect schemas of keys and row columns. The oracle is Debezium's own output.

Each run: an initial snapshot of three rows (op "r"), then inserts, updates, deletes, NULLs,
a primary-key change, an ALTER TABLE ADD COLUMN and rows after it, a TRUNCATE (op "t") and a
row after it, over 35 column types. Runs: the default value modes with schemas on both
servers; every other mode both support once, `schemas.enable=false` on MariaDB
(string/connect/hex/precise) and with schemas on MySQL (double/connect/base64/precise). In
the default runs a consumer written for Debezium (tests/helpers/debezium_consumer.py)
rebuilds the table from replicad's topic equal to SELECT, before the TRUNCATE and after it.
And an incremental snapshot requested while both stream (MariaDB; Debezium's execute-snapshot
signal, `replicad snapshot request`), its reads compared the same way.

Any difference fails the test unless ALLOWED lists it (where, column or field) with the reason
(each is in docs/consumers.md, "Differences from Debezium"); an ALLOWED entry that no longer
differs fails too, so that the list stays the exact set of known differences.

Not serial: Debezium reads only this test's database, with `snapshot.locking.mode=none` (no
FLUSH TABLES WITH READ LOCK on the shared server) and a per-worker server id."""

from __future__ import annotations

import datetime as dt
import json
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from pymysql.constants import FIELD_TYPE

from bench.peers.debezium import DebeziumConnect, DebeziumOptions, fetch
from tests.helpers.daemon_process import worker_server_id
from tests.helpers.debezium_compare import (
    Difference,
    compare_topics,
    differences_by_kind,
    table,
)
from tests.helpers.debezium_consumer import fold as consumer_fold
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
    1,
    -2147483648,
    4294967295,
    18446744073709551615,
    "-123456789.125",
    1.5,
    -2.25e-300,
    "naïve café ☕ 😀",
    b"\x00\xff\x10",
    "2020-02-29",
    "1969-12-31 23:59:59.999999",
    "2038-01-19 03:14:07.500000",
    "-838:59:58.999999",
    '{"a": [1, 2.5, null], "b": "ü"}',
    "paid",
    "a,c",
    1,
    1023,
    2155,
    -128,
    65535,
    -8388608,
    "ab",
    "long text ✓",
    "ÄÖÜß",
    b"\x01\x02",
    b"\xfe",
    99999,
    "2021-03-04 05:06:07",
    "2001-02-03 04:05:06",
    "838:59:59",
    255,
    1,
    -32768,
    16777215,
)
ROW_3 = (
    3,
    7,
    0,
    9223372036854775808,
    "0.001",
    -3.4e38,
    1e308,
    "",
    b"",
    "1000-01-01",
    "9999-12-31 23:59:59.999999",
    "1970-01-01 00:00:01.000001",
    "23:59:59.000001",
    "[]",
    "new",
    "",
    0,
    0,
    1901,
    127,
    0,
    8388607,
    "",
    "",
    "",
    b"",
    b"\x00\x00\x00\x00",
    0,
    "1000-01-01 00:00:00",
    "1970-01-01 00:00:01",
    "-00:00:01",
    0,
    0,
    32767,
    0,
)

# (where, column or field) -> why replicad differs from Debezium there. Each is listed in
# docs/consumers.md, "Differences from Debezium", with its reason; each must still differ.
_SEE = "docs/consumers.md, Differences from Debezium: "
ALLOWED: dict[tuple[str, str], str] = {
    ("source", "schema_version"): _SEE + "replicad's own field, naming the schema-topic record.",
    ("source", "row"): _SEE + "a snapshot read's row is its index in the table's snapshot "
    "(Debezium: 0), so that (file, pos, row, op) names each message.",
    ("source", "thread"): _SEE + "a TRUNCATE carries the session id of its QUERY event.",
    ("source", "query"): _SEE + "a TRUNCATE always carries its statement.",
}
ALLOWED_MYSQL: dict[tuple[str, str], str] = {
    ("source", "ts_ms"): _SEE + "a TRUNCATE's time is its QUERY event's header (seconds); "
    "Debezium takes the GTID event's commit microseconds there too (rows match).",
    ("source", "ts_us"): "as (source, ts_ms)",
    ("source", "ts_ns"): "as (source, ts_ms)",
}


# Rows there before both connectors start: their initial snapshots read them (op "r").
SNAPSHOT_ROWS = (
    (11, *ROW_1[1:]),
    (12,) + (None,) * (len(COLUMNS) - 1),
    (13, *ROW_3[1:]),
)
# time.precision.mode=connect holds only 00:00:00-24:00:00 (Debezium writes null outside it,
# replicad refuses the value): the runs in that mode write these instead.
IN_DAY_TIMES = {"tm": "12:34:56.789012", "tm0": "23:59:59"}


def _in_day(row: tuple) -> tuple:
    names = list(COLUMNS)
    return tuple(
        IN_DAY_TIMES[n] if n in IN_DAY_TIMES and v is not None else v
        for n, v in zip(names, row, strict=True)
    )


@dataclass(frozen=True)
class Run:
    """One side-by-side run: Debezium's value-mode properties (replicad's envelope options
    of the same names) and `schemas.enable` on both."""

    schemas: bool = True
    modes: dict[str, str] = field(default_factory=dict)

    @property
    def in_day(self) -> bool:
        return self.modes.get("time.precision.mode") == "connect"

    def envelope_yaml(self) -> str:
        options = "".join(f", {k.replace('.', '_')}: {v}" for k, v in self.modes.items())
        schemas = "true" if self.schemas else "false"
        return (
            f"envelope: {{values: debezium, schemas_enable: {schemas}, include_query: true"
            f"{options}}}\n"
        )


DEFAULT_RUN = Run()
# The other value of every mode both support; one run with schemas, one without.
STRING_HEX_RUN = Run(
    schemas=False,
    modes={
        "decimal.handling.mode": "string",
        "time.precision.mode": "connect",
        "binary.handling.mode": "hex",
        "bigint.unsigned.handling.mode": "precise",
    },
)
DOUBLE_BASE64_RUN = Run(
    schemas=True,
    modes={
        "decimal.handling.mode": "double",
        "time.precision.mode": "connect",
        "binary.handling.mode": "base64",
        "bigint.unsigned.handling.mode": "precise",
    },
)

# A MySQL JSON document with what a compact writer must get right: a double outside Java's
# plain range (1e7, 0.0001), a negative zero, escapes, a DATETIME and a DECIMAL inside. (A
# DATETIME fraction with trailing zeros, which Debezium drops and MySQL prints, is in
# tests/unit/test_debezium_values.py: here the consumer's SELECT comparison needs equal text.)
JSON_UPDATE = (
    "JSON_OBJECT('k', 'v', 'big', 1e7, 'small', 0.0001, 'nz', -0.0,"
    " 's', CONCAT('t', CHAR(9 USING utf8mb4), '\"q\"'),"
    " 'dt', CAST('2020-01-02 03:04:05.123456' AS DATETIME(6)),"
    " 'dc', CAST(1.50 AS DECIMAL(4,2)))"
)


def _changes(conn, name: str, run: Run) -> tuple[dict, dict]:
    """The changes; the table as SELECT gives it just before the TRUNCATE and at the end."""
    placeholders = ", ".join(["%s"] * len(COLUMNS))
    fix = _in_day if run.in_day else (lambda row: row)
    with conn.cursor() as cur:
        cur.execute(f"INSERT INTO `{name}`.ct VALUES ({placeholders})", fix(ROW_1))
        cur.execute(f"INSERT INTO `{name}`.ct (id) VALUES (2)")  # every other column NULL
        cur.execute(f"INSERT INTO `{name}`.ct VALUES ({placeholders})", fix(ROW_3))
        cur.execute(
            f"UPDATE `{name}`.ct SET vc = 'x', de = de + 1, j = {JSON_UPDATE}, "
            "s = 'b', e = NULL, tm = '00:00:00' WHERE id = 1"
        )
        cur.execute(f"UPDATE `{name}`.ct SET id = 4 WHERE id = 3")  # a primary-key change
        cur.execute(f"DELETE FROM `{name}`.ct WHERE id = 2")
        # DDL: the rows after it carry the new column, in their images and their schema.
        cur.execute(f"ALTER TABLE `{name}`.ct ADD COLUMN extra VARCHAR(10) NULL")
        cur.execute(f"INSERT INTO `{name}`.ct (id, extra) VALUES (5, 'new')")
        cur.execute(f"UPDATE `{name}`.ct SET extra = 'set' WHERE id = 1")
        before_truncate = _selected(conn, name)
        cur.execute(f"TRUNCATE TABLE `{name}`.ct")
        cur.execute(f"INSERT INTO `{name}`.ct (id, vc) VALUES (6, 'after')")
    return before_truncate, _selected(conn, name)


def _selected(conn, name: str) -> dict[str, dict]:
    """The table by SELECT, keyed as the consumer keys it, in the Python types a Debezium
    consumer reads (tests/helpers/debezium_consumer.py) under the default modes: BIT as its
    integer, TIMESTAMP in UTC, MySQL JSON parsed, BIGINT UNSIGNED as the Java long Debezium's
    documented `long` mode makes of it (two's complement)."""
    with conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        cur.execute(f"SELECT * FROM `{name}`.ct ORDER BY id")
        names = [d[0] for d in cur.description]
        codes = [d[1] for d in cur.description]
        out = {}
        for row in cur.fetchall():
            typed = {n: _typed(n, code, v) for n, code, v in zip(names, codes, row, strict=True)}
            out[json.dumps({"id": typed["id"]}, sort_keys=True)] = typed
    return out


def _typed(column: str, code: int, value):
    if value is None:
        return None
    if code == FIELD_TYPE.BIT:
        return int.from_bytes(value, "big")
    if code == FIELD_TYPE.TIMESTAMP:
        return value.replace(tzinfo=dt.UTC)
    if code == FIELD_TYPE.JSON:
        return json.loads(value)
    if COLUMNS.get(column) == "BIGINT UNSIGNED" and value >= 1 << 63:
        return value - (1 << 64)
    return value


# r r r | c c c u  d+tombstone c (the key change)  d+tombstone | c u (after the ALTER) | t | c
EXPECTED_MESSAGES = 3 + 9 + 2 + 1 + 1


@pytest.fixture(scope="session")
def debezium_dist() -> Path:
    """Kafka Connect and Debezium from Maven Central (a no-op once fetched)."""
    started = time.monotonic()
    dist = fetch()
    print(f"debezium fetch: {time.monotonic() - started:.1f} s")
    return dist


def _create_table(conn, name: str, run: Run) -> None:
    """The table with its snapshot rows, and replicad's signal table (its initial snapshot
    on MySQL reads with watermarks; docs/snapshots.md)."""
    columns = ", ".join(f"`{c}` {t}" for c, t in COLUMNS.items())
    placeholders = ", ".join(["%s"] * len(COLUMNS))
    fix = _in_day if run.in_day else (lambda row: row)
    with conn.cursor() as cur:
        cur.execute(f"CREATE TABLE `{name}`.ct ({columns}, PRIMARY KEY (id))")
        for row in SNAPSHOT_ROWS:
            cur.execute(f"INSERT INTO `{name}`.ct VALUES ({placeholders})", fix(row))
        cur.execute(
            f"CREATE TABLE `{name}`.replicad_signal (id VARCHAR(128) NOT NULL PRIMARY KEY, "
            "kind VARCHAR(16) NOT NULL, window_id VARCHAR(64) NOT NULL, "
            "at TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3))"
        )
        cur.execute(
            f"GRANT INSERT, UPDATE, DELETE ON `{name}`.replicad_signal TO 'repl'@'127.0.0.1'"
        )


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
    server: str, conn, name: str, kafka: str, tmp: Path, port: int, server_id: int, run: Run
) -> tuple[list[Record], list[Record]]:
    """Both connectors on `name`.ct, each with its initial snapshot, then the changes; both
    topics once complete."""
    pipeline = f"dbz{uuid.uuid4().hex[:8]}"
    replicad = KafkaReplicad(
        tmp / "replicad",
        server_id=server_id + 1,
        prefix=f"r{pipeline}",
        pipeline=pipeline,  # Debezium's topic.prefix: the same source.name and schema names
        kafka=kafka,
        extra_yaml=run.envelope_yaml()
        + f"snapshot: {{mode: initial, signal: {{database: {name}, table: replicad_signal}}}}\n",
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
        schemas_enable=run.schemas,
        extra={
            "snapshot.locking.mode": "none",  # no global read lock on the shared server
            "include.query": "true",  # as replicad's include_query: source.query compared
            "skipped.operations": "none",  # Debezium skips TRUNCATE ("t") by default
            **run.modes,
        },
    )
    ours_topic, theirs_topic = f"r{pipeline}.{name}.ct", f"{pipeline}.{name}.ct"
    tables: tuple[dict, dict] = ({}, {})
    replicad.start()
    try:
        with DebeziumConnect(options, tmp / "debezium") as connect:
            print(f"debezium start ({server}): {connect.timings}")
            # replicad's snapshot reads first: on MySQL (watermarks) the stream runs beside it.
            _read_until(kafka, ours_topic, len(SNAPSHOT_ROWS))
            tables = _changes(conn, name, run)
            theirs = _read_until(kafka, theirs_topic, EXPECTED_MESSAGES)
            ours = _read_until(kafka, ours_topic, EXPECTED_MESSAGES)
    finally:
        replicad.stop()
    assert len(theirs) == EXPECTED_MESSAGES, [r.value for r in theirs]
    assert len(ours) == EXPECTED_MESSAGES, [r.value for r in ours]
    if run == DEFAULT_RUN:
        _consumer_rebuilds(theirs, ours, *tables)
    return theirs, ours


def _consumer_rebuilds(theirs: list[Record], ours: list[Record], before: dict, end: dict) -> None:
    """Deliverable 3: a consumer written for Debezium (debezium_consumer.fold) rebuilds the
    table from replicad's topic equal to SELECT, before the TRUNCATE and at the end; on
    Debezium's own topic too (else the consumer, not replicad, would be wrong)."""
    for side, records in (("debezium", theirs), ("replicad", ours)):
        cut = next(i for i, r in enumerate(records) if r.value and b'"op":"t"' in r.value)
        for rebuilt, selected in (
            (consumer_fold(records[:cut]), before),
            (consumer_fold(records), end),
        ):
            assert rebuilt == selected, (side, _cells(rebuilt, selected))


def _cells(rebuilt: dict[str, dict], selected: dict[str, dict]) -> list[tuple]:
    """The cells that differ, (key, column, rebuilt, selected), for a failure message."""
    keys = sorted(set(rebuilt) | set(selected))
    return [
        (k, c, (rebuilt.get(k) or {}).get(c), (selected.get(k) or {}).get(c))
        for k in keys
        for c in sorted(set(rebuilt.get(k) or {}) | set(selected.get(k) or {}))
        if (rebuilt.get(k) or {}).get(c) != (selected.get(k) or {}).get(c)
    ]


@pytest.mark.parametrize("run", [DEFAULT_RUN, STRING_HEX_RUN], ids=["default", "string-hex"])
def test_mariadb_matches_debezium(debezium_dist, db, kafka, tmp_path, run: Run) -> None:
    conn, name = db
    _create_table(conn, name, run)
    theirs, ours = _side_by_side("mariadb", conn, name, kafka, tmp_path, MARIADB_PORT, 7970, run)
    _check(compare_topics(theirs, ours, schemas=run.schemas), ALLOWED)


@pytest.mark.parametrize("run", [DEFAULT_RUN, DOUBLE_BASE64_RUN], ids=["default", "double-base64"])
def test_mysql_matches_debezium(
    debezium_dist,
    mysql_db,  # noqa: F811
    kafka,
    tmp_path,
    run: Run,
) -> None:
    conn, name = mysql_db
    _create_table(conn, name, run)
    theirs, ours = _side_by_side("mysql", conn, name, kafka, tmp_path, MYSQL_PORT, 7972, run)
    _check(compare_topics(theirs, ours, schemas=run.schemas), ALLOWED | ALLOWED_MYSQL)


# An incremental snapshot requested while both stream: Debezium's through its signal table
# (execute-snapshot), replicad's through `replicad snapshot request`; chunks of two rows. Each
# read's time and binlog position are the connector's own (compare_topics checks presence).
def test_incremental_snapshot_matches_debezium(debezium_dist, db, kafka, tmp_path) -> None:
    from tests.integration.test_incremental_snapshot import _cli

    conn, name = db
    _create_table(conn, name, DEFAULT_RUN)
    with conn.cursor() as cur:  # Debezium's signal table, in the layout its docs give
        cur.execute(
            f"CREATE TABLE `{name}`.debezium_signal (id VARCHAR(64) PRIMARY KEY, "
            "type VARCHAR(32) NOT NULL, data VARCHAR(2048) NULL)"
        )
    pipeline = f"dbz{uuid.uuid4().hex[:8]}"
    replicad = KafkaReplicad(
        tmp_path / "replicad",
        server_id=7975,
        prefix=f"r{pipeline}",
        pipeline=pipeline,
        kafka=kafka,
        extra_yaml=DEFAULT_RUN.envelope_yaml()
        + f"snapshot: {{mode: never, signal: {{database: {name}, table: replicad_signal}}}}\n",
        db=name,
        port=MARIADB_PORT,
    )
    options = DebeziumOptions(
        server="mariadb",
        database=name,
        tables=("ct", "debezium_signal"),  # the signal table captured, as its docs say
        topic_prefix=pipeline,
        server_id=worker_server_id(7976),
        kafka=kafka,
        port=MARIADB_PORT,
        schemas_enable=True,
        snapshot_mode="no_data",
        extra={
            "snapshot.locking.mode": "none",
            "include.query": "true",
            "signal.data.collection": f"{name}.debezium_signal",
            "incremental.snapshot.chunk.size": "2",
        },
    )
    ours_topic, theirs_topic = f"r{pipeline}.{name}.ct", f"{pipeline}.{name}.ct"
    replicad.start()
    try:
        with DebeziumConnect(options, tmp_path / "debezium"):
            requested = _cli(replicad, "request", f"{name}.ct", "--chunk-rows", "2")
            assert requested.returncode == 0, requested.stderr.decode()
            with conn.cursor() as cur:
                data = json.dumps({"data-collections": [f"{name}.ct"], "type": "incremental"})
                cur.execute(
                    f"INSERT INTO `{name}`.debezium_signal VALUES ('s1', 'execute-snapshot', %s)",
                    (data,),
                )
            theirs = _read_until(kafka, theirs_topic, len(SNAPSHOT_ROWS))
            ours = _read_until(kafka, ours_topic, len(SNAPSHOT_ROWS))
    finally:
        replicad.stop()
    for records in (theirs, ours):
        payloads = [json.loads(r.value or b"{}")["payload"] for r in records]
        assert [(p["op"], p["source"]["snapshot"]) for p in payloads] == [("r", "incremental")] * 3
    reads = {k: ALLOWED[k] for k in (("source", "schema_version"), ("source", "row"))}
    _check(compare_topics(theirs, ours, schemas=True), reads)
