"""The `envelope` value modes (replicad/sinks/value_modes.py): `debezium` converts row images
before keys, filters and the envelope see them; `schemas_enable` wraps keys and values in
Kafka Connect JSON. Expected values are worked out by hand from Debezium's documented
encodings (tests/unit/test_debezium_values.py holds the per-type goldens)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import orjson
import pytest

from replicad.binlog.changes import RowChange
from replicad.binlog.column_types import ColumnDescription, SqlType, TableDescription
from replicad.config import EnvelopeConfig
from replicad.errors import ConfigError
from replicad.sinks.envelope import EnvelopeLines
from replicad.sinks.value_modes import ValueMode

pytestmark = pytest.mark.unit

SCHEMA = TableDescription(
    "shop",
    "orders",
    (
        ColumnDescription("id", SqlType("int"), False),
        ColumnDescription("total", SqlType("decimal", precision=10, scale=2), True),
        ColumnDescription("day", SqlType("date"), True),
        ColumnDescription("doc", SqlType("json"), True),
    ),
    ("id",),
    "v1",
)


def change(after: dict) -> RowChange:
    return RowChange(
        "c",
        "shop",
        "orders",
        None,
        after,
        "bin.000001",
        4,
        0,
        None,
        1,
        0,
        ("id",),
        frozenset({"doc"}),
        SCHEMA,
    )


def test_exact_mode_leaves_values_alone() -> None:
    c = change({"id": 1, "total": Decimal("1.50"), "day": dt.date(2020, 1, 2), "doc": [1]})
    assert ValueMode(EnvelopeConfig()).convert(c) is c


def test_debezium_mode_converts_each_column() -> None:
    mode = ValueMode(EnvelopeConfig(values="debezium"))
    c = change({"id": 1, "total": Decimal("1.50"), "day": dt.date(2020, 1, 2), "doc": [1]})
    after = mode.convert(c).after
    # unscaled 150 = 0x96: two's complement needs a leading 0x00 -> b"\x00\x96" -> "AJY="
    # 2020-01-02 is 18263 days after 1970-01-01; JSON is its compact text
    assert after == {"id": 1, "total": "AJY=", "day": 18263, "doc": "[1]"}
    line = orjson.loads(EnvelopeLines("p").row(mode.convert(c)))
    assert line["after"] == after


def test_debezium_mode_takes_the_commit_time_in_microseconds() -> None:
    # MySQL's GTID event: commit at 1795845569.490296 s; the event header says 1795845569.
    c = change({"id": 1})
    c.ts_ms, c.commit_us = 1_795_845_569_000, 1_795_845_569_490_296
    source = orjson.loads(
        EnvelopeLines("p").row(ValueMode(EnvelopeConfig(values="debezium")).convert(c))
    )["source"]
    assert (source["ts_ms"], source["ts_us"], source["ts_ns"]) == (
        1_795_845_569_490,
        1_795_845_569_490_296,
        1_795_845_569_490_296_000,
    )
    # exact mode keeps the header's seconds (the compiled path's, which has no GTID event)
    exact = orjson.loads(EnvelopeLines("p").row(ValueMode(EnvelopeConfig()).convert(c)))
    assert (exact["source"]["ts_ms"], exact["source"]["ts_us"]) == (
        1_795_845_569_000,
        1_795_845_569_000_000,
    )


def test_snapshot_read_json_is_mysqls_text() -> None:
    mode = ValueMode(EnvelopeConfig(values="debezium"))
    c = change({"id": 1, "doc": {"a": [1, 2]}})
    assert mode.convert(c).after["doc"] == '{"a":[1,2]}'
    c.op = "r"
    assert mode.convert(c).after["doc"] == '{"a": [1, 2]}'


def test_decimal_string_mode() -> None:
    mode = ValueMode(EnvelopeConfig(values="debezium", decimal_handling_mode="string"))
    assert mode.convert(change({"id": 1, "total": Decimal("-0.05")})).after == {
        "id": 1,
        "total": "-0.05",
    }


def test_schemas_enable_wraps_values_with_the_row_fields() -> None:
    mode = ValueMode(EnvelopeConfig(values="debezium", schemas_enable=True))
    c = mode.convert(change({"id": 7, "total": None, "day": None, "doc": None}))
    message = orjson.loads(EnvelopeLines("p", mode.connect).row(c))
    assert set(message) == {"schema", "payload"}
    assert message["payload"]["after"]["id"] == 7
    envelope = message["schema"]
    assert envelope["name"] == "p.shop.orders.Envelope"
    after = next(f for f in envelope["fields"] if f["field"] == "after")
    total = next(f for f in after["fields"] if f["field"] == "total")
    assert total["name"] == "org.apache.kafka.connect.data.Decimal"
    assert total["parameters"] == {"scale": "2", "connect.decimal.precision": "10"}
    assert [f["field"] for f in after["fields"]] == ["id", "total", "day", "doc"]


def test_bad_debezium_options_are_config_errors() -> None:
    with pytest.raises(ConfigError):
        ValueMode(EnvelopeConfig(values="debezium", decimal_handling_mode="exactish"))
    with pytest.raises(ValueError):
        EnvelopeConfig(values="exact", schemas_enable=True)


def test_snapshot_read_as_debeziums_snapshot_writes_it() -> None:
    # Debezium 3.5/3.6's snapshot reads (test_debezium_contract): server_id 0, and a
    # TIMESTAMP(6)'s fraction with only the digits needed (07.5Z; its binlog reader: 07.500000Z).
    table = TableDescription(
        "shop",
        "orders",
        (
            ColumnDescription("id", SqlType("int"), False),
            ColumnDescription("at", SqlType("timestamp", fsp=6), True),
        ),
        ("id",),
        "v2",
    )
    at = dt.datetime(2038, 1, 19, 3, 14, 7, 500000, tzinfo=dt.UTC)
    c = RowChange(
        "r",
        "shop",
        "orders",
        None,
        {"id": 1, "at": at},
        "bin.000001",
        4,
        0,
        None,
        7,
        0,
        ("id",),
        frozenset(),
        table,
    )
    mode = ValueMode(EnvelopeConfig(values="debezium"))
    read = mode.convert(c)
    assert (read.server_id, read.after) == (0, {"id": 1, "at": "2038-01-19T03:14:07.5Z"})
    c.snapshot = "incremental"  # read at a binlog position: its server (the contract's test)
    assert mode.convert(c).server_id == 7
    c.op, c.snapshot = "c", "false"
    change = mode.convert(c)
    assert (change.server_id, change.after["at"]) == (7, "2038-01-19T03:14:07.500000Z")


def test_truncate_schema_has_the_tables_last_row_fields() -> None:
    # Debezium's op "t" message carries its table's envelope schema, row fields included.
    from replicad.binlog.changes import TableChange

    mode = ValueMode(EnvelopeConfig(values="debezium", schemas_enable=True))
    lines = EnvelopeLines("p", mode.connect)
    truncate = TableChange(
        "truncate", "shop", "orders", "TRUNCATE orders", None, None, "bin.000001", 9, None, 1, 0
    )

    def row_fields(message: bytes) -> list[str]:
        schema = orjson.loads(message)["schema"]
        after = next(f for f in schema["fields"] if f["field"] == "after")
        return [f["field"] for f in after["fields"]]

    assert row_fields(lines.table(truncate)) == []  # no row of the table seen yet
    lines.row(mode.convert(change({"id": 1, "total": None, "day": None, "doc": None})))
    assert row_fields(lines.table(truncate)) == ["id", "total", "day", "doc"]
