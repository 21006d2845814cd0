"""replicad.sinks.avro_values: the JSON path's Debezium values in the Avro form of their
fields, written and read back by fastavro with the schemas of `avro_schema`.

Oracles, written here from the documentation rather than from the code under test: the
SQL value of each column as Debezium's MySQL data type mapping defines its Connect value
(DECIMAL precise: the decimal itself; binary and BIT(>1) (little-endian): the bytes; DATE:
days since 1970; DATETIME(0-3)/(4-6): epoch milliseconds/microseconds; TIME: microseconds;
TIMESTAMP: ISO-8601 in UTC), and Avro's logical types as fastavro reads them back (decimal
-> Decimal, date -> date, time-millis -> time, timestamp-millis -> datetime in UTC)."""

from __future__ import annotations

import datetime as dt
import io
from decimal import Decimal
from typing import Any

import pytest

from replicad.binlog.column_types import ColumnDescription, SqlType, table_description
from replicad.binlog.values import Geometry
from replicad.sinks.avro_schema import value_schema
from replicad.sinks.avro_values import avro_envelope, row_converter
from replicad.sinks.debezium_values import DebeziumOptions, value_encoder

pytestmark = pytest.mark.unit

fastavro = pytest.importorskip("fastavro", reason="the test extra (confluent-kafka[avro])")

UTC = dt.UTC
COLUMNS = (
    ColumnDescription("id", SqlType("int", unsigned=True), False),
    ColumnDescription("tiny", SqlType("tinyint"), True),
    ColumnDescription("small_u", SqlType("smallint", unsigned=True), True),
    ColumnDescription("big_u", SqlType("bigint", unsigned=True), True),
    ColumnDescription("price", SqlType("decimal", precision=10, scale=2), False),
    ColumnDescription("wide", SqlType("decimal", precision=65, scale=30), True),
    ColumnDescription("ratio", SqlType("float"), True),
    ColumnDescription("amount", SqlType("double"), True),
    ColumnDescription("flag", SqlType("bit", precision=1), True),
    ColumnDescription("mask", SqlType("bit", precision=12), True),
    ColumnDescription("born", SqlType("date"), True),
    ColumnDescription("at", SqlType("time", fsp=6), True),
    ColumnDescription("made", SqlType("datetime", fsp=0), True),
    ColumnDescription("made_us", SqlType("datetime", fsp=6), True),
    ColumnDescription("seen", SqlType("timestamp", fsp=3), True),
    ColumnDescription("yr", SqlType("year"), True),
    ColumnDescription("order-name", SqlType("varchar", length=40, charset="utf8mb4"), True),
    ColumnDescription("fixed", SqlType("binary", length=4), True),
    ColumnDescription("raw", SqlType("varbinary", length=16), True),
    ColumnDescription("size", SqlType("enum", members=("S", "M,L")), True),
    ColumnDescription("tags", SqlType("set", members=("a", "b")), True),
    ColumnDescription("doc", SqlType("json"), True),
    ColumnDescription("spot", SqlType("geometry"), True),
    ColumnDescription("area", SqlType("geometry"), False),
    ColumnDescription("embedding", SqlType("vector", dimensions=3), True),
)
TABLE = table_description("shop", "orders", COLUMNS, ("id",))
WIDE = Decimal("-12345678901234567890123456789012345.123456789012345678901234567891")
WKB = b"\x01\x01\x00\x00\x00" + bytes(16)

# Decoded binlog values (what the decoder gives each column).
DECODED: dict[str, Any] = {
    "id": 4_000_000_000,
    "tiny": -5,
    "small_u": 65535,
    "big_u": 2**64 - 1,
    "price": Decimal("-12345678.90"),
    "wide": WIDE,
    "ratio": 0.5,
    "amount": 1e300,
    "flag": 1,
    "mask": 0xF01,
    "born": dt.date(2022, 1, 8),
    "at": dt.timedelta(hours=1, microseconds=5),
    "made": dt.datetime(2023, 11, 14, 22, 13, 20),
    "made_us": dt.datetime(2023, 11, 14, 22, 13, 20, 123456),
    "seen": dt.datetime(2024, 1, 2, 3, 4, 5, 678000, tzinfo=UTC),
    "yr": 2024,
    "order-name": "héllo",
    "fixed": b"ab",  # BINARY(4): the binlog drops the trailing zeros
    "raw": b"\x00\x01",
    "size": 2,
    "tags": 3,
    "doc": {"k": [1, 2]},
    "spot": Geometry(4326, WKB),
    "area": Geometry(0, WKB),
    "embedding": [0.5, -1.0, 2.0],
}
# The same row in Avro, as fastavro reads it back (default Debezium options).
EXPECTED: dict[str, Any] = {
    "id": 4_000_000_000,
    "tiny": -5,
    "small_u": 65535,
    "big_u": -1,  # bigint.unsigned.handling.mode=long
    "price": Decimal("-12345678.90"),
    "wide": WIDE,
    "ratio": 0.5,
    "amount": 1e300,
    "flag": True,
    "mask": b"\x01\x0f",  # little-endian
    "born": 19_000,
    "at": 3_600_000_005,
    "made": 1_700_000_000_000,
    "made_us": 1_700_000_000_123_456,
    "seen": "2024-01-02T03:04:05.678Z",
    "yr": 2024,
    "order_name": "héllo",
    "fixed": b"ab\x00\x00",
    "raw": b"\x00\x01",
    "size": "M,L",
    "tags": "a,b",
    "doc": '{"k":[1,2]}',
    "spot": {"wkb": WKB, "srid": 4326},
    "area": {"wkb": WKB, "srid": None},
    "embedding": [0.5, -1.0, 2.0],
}


def _debezium_row(options: DebeziumOptions, row: dict[str, Any]) -> dict[str, Any]:
    """The row as the JSON path holds it (`ValueMode.convert`'s encoders)."""
    encoders = {c.name: value_encoder(c.type, options, nullable=c.nullable) for c in COLUMNS}
    return {name: encoders[name](value) for name, value in row.items()}


def _round_trip(options: DebeziumOptions, before: Any, after: Any) -> dict[str, Any]:
    payload = {
        "before": None if before is None else _debezium_row(options, before),
        "after": None if after is None else _debezium_row(options, after),
        "source": {"version": "1", "connector": "replicad", "name": "srv", "ts_ms": 1},
        "op": "u",
        "ts_ms": 2,
        "ts_us": 2000,
        "ts_ns": 2_000_000,
        "transaction": None,
        "absent": {"before": [], "after": []},  # a note of the JSON envelope: not in Avro
    }
    payload["source"].update(db="shop", server_id=1, row=0)
    record = avro_envelope(payload, row_converter(TABLE, options))
    parsed = fastavro.parse_schema(value_schema(TABLE, "srv", options))
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, parsed, record)
    buffer.seek(0)
    back: dict[str, Any] = fastavro.schemaless_reader(buffer, parsed)
    return back


def test_every_column_type_in_its_avro_form_and_nulls() -> None:
    nulls = {name: None for name in DECODED if name not in ("id", "price", "area")}
    back = _round_trip(DebeziumOptions(), {**DECODED, **nulls}, DECODED)
    assert back["after"] == EXPECTED
    # The NOT NULL GEOMETRY is still optional (its Connect struct is); a NULL one is null.
    assert back["before"] == {**EXPECTED, **{k.replace("-", "_"): None for k in nulls}}
    assert (back["op"], back["ts_ms"]) == ("u", 2)


def test_decimal_string_and_double_modes() -> None:
    row = {"id": 1, "price": Decimal("-0.05"), "wide": WIDE, "area": None}
    string = _round_trip(DebeziumOptions(decimal_handling_mode="string"), None, row)["after"]
    assert (string["price"], string["wide"]) == ("-0.05", str(WIDE))
    double = _round_trip(DebeziumOptions(decimal_handling_mode="double"), None, row)["after"]
    assert (double["price"], double["wide"]) == (-0.05, float(WIDE))
    precise = _round_trip(DebeziumOptions(), None, row)["after"]
    assert (precise["price"], precise["wide"]) == (Decimal("-0.05"), WIDE)
    assert precise["wide"].as_tuple().exponent == -30  # every digit kept, past 28


def test_bigint_unsigned_precise_is_a_decimal() -> None:
    options = DebeziumOptions(bigint_unsigned_handling_mode="precise")
    after = _round_trip(options, None, {"id": 1, "price": Decimal(0), "big_u": 2**64 - 1})
    assert after["after"]["big_u"] == Decimal(2**64 - 1)


def test_connect_time_mode_uses_avro_logical_types() -> None:
    options = DebeziumOptions(time_precision_mode="connect")
    row = {k: DECODED[k] for k in ("id", "price", "born", "at", "made", "made_us")}
    after = _round_trip(options, None, {**row, "at": dt.timedelta(hours=1, milliseconds=7)})
    assert after["after"]["born"] == dt.date(2022, 1, 8)
    assert after["after"]["at"] == dt.time(1, 0, 0, 7000)
    assert after["after"]["made"] == dt.datetime(2023, 11, 14, 22, 13, 20, tzinfo=UTC)
    assert after["after"]["made_us"] == dt.datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=UTC)


def test_binary_text_modes_stay_text() -> None:
    options = DebeziumOptions(binary_handling_mode="hex")
    after = _round_trip(options, None, {"id": 1, "price": Decimal(0), "raw": b"\x00\xff"})
    assert after["after"]["raw"] == "00ff"
    assert after["after"]["mask"] is None  # absent from the image: the field's default
