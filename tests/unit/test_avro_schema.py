"""replicad.sinks.avro_schema: the Avro schemas of the change events.

Oracles, written here from the documentation rather than from the code under test: Debezium's
MySQL data type mapping (the Connect types) and Confluent's AvroConverter conversion of those
(int16 as "int" with connect.type, Decimal as bytes/decimal with precision and scale, optional
as a ["null", T] union defaulting to null, records named by the Connect name); fastavro checks
that every schema is valid Avro and that sample rows survive a write and read."""

from __future__ import annotations

import io
from decimal import Decimal
from typing import Any

import pytest

from replicad.binlog.column_types import (
    ColumnDescription,
    SqlType,
    TableDescription,
    table_description,
)
from replicad.sinks.avro_schema import (
    AvroSchemaError,
    avro_from_connect,
    avro_name,
    key_schema,
    value_schema,
)
from replicad.sinks.debezium_values import DebeziumOptions

pytestmark = pytest.mark.unit

fastavro = pytest.importorskip("fastavro", reason="the test extra (confluent-kafka[avro])")

DEFAULTS = DebeziumOptions()
COLUMNS = (
    ColumnDescription("id", SqlType("int", unsigned=True), False),
    ColumnDescription("tiny", SqlType("tinyint"), True),
    ColumnDescription("small_u", SqlType("smallint", unsigned=True), True),
    ColumnDescription("big_u", SqlType("bigint", unsigned=True), True),
    ColumnDescription("price", SqlType("decimal", precision=10, scale=2), False),
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
    ColumnDescription("raw", SqlType("varbinary", length=16), True),
    ColumnDescription("size", SqlType("enum", members=("S", "M,L")), True),
    ColumnDescription("tags", SqlType("set", members=("a", "b")), True),
    ColumnDescription("doc", SqlType("json"), True),
    ColumnDescription("spot", SqlType("geometry"), True),
    ColumnDescription("area", SqlType("geometry"), False),
    ColumnDescription("embedding", SqlType("vector", dimensions=3), True),
)


def _table(db: str = "shop", columns: tuple[ColumnDescription, ...] = COLUMNS) -> TableDescription:
    return table_description(db, "orders", columns, ("id",))


def _fields(record: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f["name"]: f for f in record["fields"]}


def _row_record(envelope: Any) -> dict[str, Any]:
    before = _fields(envelope)["before"]
    assert before["type"][0] == "null" and before["default"] is None
    record: dict[str, Any] = before["type"][1]
    return record


def test_envelope_is_valid_avro_with_debezium_fields() -> None:
    envelope = value_schema(_table(), "srv", DEFAULTS)
    fastavro.parse_schema(envelope)
    assert isinstance(envelope, dict)
    assert (envelope["name"], envelope["namespace"]) == ("Envelope", "srv.shop.orders")
    fields = _fields(envelope)
    assert list(fields)[:4] == ["before", "after", "source", "op"]
    assert {"ts_ms", "transaction"} <= set(fields)
    # `after` refers to the row record `before` defined: Avro names a type once.
    assert fields["after"]["type"] == ["null", "srv.shop.orders.Value"]
    assert fields["op"]["type"] == "string"
    transaction = fields["transaction"]["type"][1]
    assert [f["name"] for f in transaction["fields"]] == [
        "id",
        "total_order",
        "data_collection_order",
    ]


def test_column_types_follow_debezium_and_the_avro_converter() -> None:
    row = _fields(_row_record(value_schema(_table(), "srv", DEFAULTS)))
    assert row["id"]["type"] == "long"  # INT UNSIGNED: INT64
    assert "default" not in row["id"]
    assert row["tiny"]["type"] == ["null", {"type": "int", "connect.type": "int16"}]
    assert row["tiny"]["default"] is None
    assert row["small_u"]["type"] == ["null", "int"]  # SMALLINT UNSIGNED: INT32
    assert row["big_u"]["type"] == ["null", "long"]  # bigint.unsigned.handling.mode=long
    price = row["price"]["type"]
    assert (price["type"], price["logicalType"], price["precision"], price["scale"]) == (
        "bytes",
        "decimal",
        10,
        2,
    )
    assert price["connect.name"] == "org.apache.kafka.connect.data.Decimal"
    assert row["ratio"]["type"] == ["null", "float"]
    assert row["amount"]["type"] == ["null", "double"]
    assert row["flag"]["type"] == ["null", "boolean"]
    mask = row["mask"]["type"][1]
    assert (mask["type"], mask["connect.name"]) == ("bytes", "io.debezium.data.Bits")
    assert mask["connect.parameters"] == {"length": "12"}
    expect_named = {
        "born": ("int", "io.debezium.time.Date"),
        "at": ("long", "io.debezium.time.MicroTime"),
        "made": ("long", "io.debezium.time.Timestamp"),
        "made_us": ("long", "io.debezium.time.MicroTimestamp"),
        "seen": ("string", "io.debezium.time.ZonedTimestamp"),
        "yr": ("int", "io.debezium.time.Year"),
        "doc": ("string", "io.debezium.data.Json"),
        "size": ("string", "io.debezium.data.Enum"),
        "tags": ("string", "io.debezium.data.EnumSet"),
    }
    for name, (avro_type, connect_name) in expect_named.items():
        schema = row[name]["type"][1]
        assert (schema["type"], schema["connect.name"]) == (avro_type, connect_name), name
        assert "logicalType" not in schema, name  # Debezium's types are no Avro logical types
    assert row["size"]["type"][1]["connect.parameters"] == {"allowed": "S,M\\,L"}
    assert row["order_name"]["type"] == ["null", "string"]  # the name adjusted for Avro
    assert row["raw"]["type"] == ["null", "bytes"]
    spot = row["spot"]["type"][1]
    assert (spot["type"], spot["name"], spot["namespace"]) == (
        "record",
        "Geometry",
        "io.debezium.data.geometry",
    )
    # A GEOMETRY field is optional even for NOT NULL, and the second refers to the first.
    assert row["area"]["type"] == ["null", "io.debezium.data.geometry.Geometry"]
    vector = row["embedding"]["type"][1]
    assert (vector["type"], vector["items"]) == ("array", "float")


def test_connect_time_precision_uses_avro_logical_types() -> None:
    options = DebeziumOptions(time_precision_mode="connect")
    row = _fields(_row_record(value_schema(_table(), "srv", options)))
    logical = {name: row[name]["type"][1]["logicalType"] for name in ("born", "at", "made_us")}
    assert logical == {"born": "date", "at": "time-millis", "made_us": "timestamp-millis"}


def test_decimal_and_binary_modes_change_the_types() -> None:
    options = DebeziumOptions(decimal_handling_mode="string", binary_handling_mode="base64")
    row = _fields(_row_record(value_schema(_table(), "srv", options)))
    assert row["price"]["type"] == "string"
    assert row["raw"]["type"] == ["null", "string"]
    precise = DebeziumOptions(bigint_unsigned_handling_mode="precise")
    big_u = _fields(_row_record(value_schema(_table(), "srv", precise)))["big_u"]["type"][1]
    assert (big_u["logicalType"], big_u["precision"], big_u["scale"]) == ("decimal", 20, 0)


def test_key_schema_has_the_primary_key_and_none_without_one() -> None:
    key = key_schema(_table(), "srv", DEFAULTS)
    fastavro.parse_schema(key)
    assert key == {
        "type": "record",
        "name": "Key",
        "namespace": "srv.shop.orders",
        "fields": [{"name": "id", "type": "long"}],
        "connect.name": "srv.shop.orders.Key",
    }
    keyless = TableDescription("shop", "log", COLUMNS[1:3], (), "v")
    assert key_schema(keyless, "srv", DEFAULTS) is None


def test_invalid_avro_names_are_adjusted() -> None:
    assert avro_name("order-id") == "order_id"
    assert avro_name("2024sales") == "_2024sales"
    assert avro_name("ok_Name1") == "ok_Name1"
    envelope = value_schema(_table(db="my-shop"), "srv.1", DEFAULTS)
    fastavro.parse_schema(envelope)
    assert isinstance(envelope, dict)
    assert envelope["namespace"] == "srv._1.my_shop.orders"
    assert envelope["connect.name"] == "srv.1.my-shop.orders.Envelope"  # Connect's own name


def test_a_connect_type_without_avro_form_is_refused() -> None:
    with pytest.raises(AvroSchemaError, match="map"):
        avro_from_connect({"type": "map", "keys": {"type": "string"}, "optional": False})
    with pytest.raises(AvroSchemaError, match="name"):
        avro_from_connect({"type": "struct", "fields": [], "optional": False})


def test_sample_rows_round_trip_through_fastavro() -> None:
    parsed = fastavro.parse_schema(value_schema(_table(), "srv", DEFAULTS))
    row = {
        "id": 4_000_000_000,
        "tiny": -5,
        "small_u": 65535,
        "big_u": -1,  # 2^64-1 in long mode
        "price": Decimal("-12345678.90"),
        "ratio": 0.5,
        "amount": 1e300,
        "flag": True,
        "mask": b"\xff\x0f",
        "born": 19_000,
        "at": 86_399_999_999,
        "made": 1_700_000_000_000,
        "made_us": 1_700_000_000_000_123,
        "seen": "2024-01-02T03:04:05.678Z",
        "yr": 2024,
        "order_name": "héllo",
        "raw": b"\x00\x01",
        "size": "M,L",
        "tags": "a,b",
        "doc": '{"k": [1, 2]}',
        "spot": {"wkb": b"\x01\x01\x00\x00\x00", "srid": 4326},
        "area": {"wkb": b"\x01", "srid": None},
        "embedding": [0.5, -1.0, 2.0],
    }
    nulls = {name: None for name in row if name not in ("id", "price")}
    event = {
        "before": {**row, **nulls},
        "after": row,
        "source": {
            "version": "0.1.0",
            "connector": "mysql",
            "name": "srv",
            "ts_ms": 1,
            "db": "shop",
            "server_id": 1,
            "row": 0,
        },
        "op": "u",
        "ts_ms": 2,
        "transaction": {"id": "0-1-7", "total_order": 1, "data_collection_order": 1},
    }
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, parsed, event)
    buffer.seek(0)
    back = fastavro.schemaless_reader(buffer, parsed)
    expected_source = {
        **event["source"],
        **{k: None for k in back["source"] if k not in event["source"]},
    }
    assert back == {**event, "source": expected_source, "ts_us": None, "ts_ns": None}
