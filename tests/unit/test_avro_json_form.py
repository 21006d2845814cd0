"""replicad.published: Avro change messages read back in the JSON payload's form.

Oracles, not taken from the code under test: the JSON path's own encoders
(`sinks.debezium_values.value_encoder`, what `envelope.values: debezium` writes for a value the
binlog decoder gives) and, for a few values, the encoding Kafka Connect documents, worked out by
hand (Decimal: BigInteger.toByteArray of the unscaled value, base64; Date: days since the
epoch; Time: milliseconds of the day; Timestamp: epoch milliseconds). The Avro side is written
by fastavro from each value's natural Avro form (a Decimal, bytes, a date, a time, a UTC
datetime) under the schemas of `sinks.avro_schema`, and read back by fastavro."""

from __future__ import annotations

import datetime as dt
import io
from decimal import Decimal
from typing import Any

import orjson
import pytest

from replicad.binlog.column_types import ColumnDescription, SqlType, table_description
from replicad.binlog.values import Geometry, float32_shortest
from replicad.exit_codes import EXIT_CONFIG, EXIT_DATA_ERROR
from replicad.published.avro_json import json_form
from replicad.published.message_values import (
    AvroMessageError,
    AvroWithoutRegistryError,
    MessageDecoder,
    is_avro,
)
from replicad.sinks.avro_schema import key_schema, value_schema
from replicad.sinks.debezium_values import DebeziumOptions, value_encoder

pytestmark = pytest.mark.unit

fastavro = pytest.importorskip("fastavro", reason="the test extra (confluent-kafka[avro])")

CONNECT = DebeziumOptions(time_precision_mode="connect", bigint_unsigned_handling_mode="precise")
UTC = dt.UTC


def _time(value: dt.timedelta) -> dt.time:
    return (dt.datetime(2000, 1, 1) + value).time()


# column, its type, (binlog value, the same value in its natural Avro form) per case
CASES: list[tuple[str, SqlType, list[tuple[Any, Any]]]] = [
    (
        "price",
        SqlType("decimal", precision=20, scale=6),
        [
            (Decimal(v), Decimal(v))
            for v in ("0.000000", "-1.500000", "12345678901234.999999", "-0.000001")
        ],
    ),
    ("whole", SqlType("decimal", precision=5, scale=0), [(Decimal(-129), Decimal(-129))]),
    (
        "wide",
        SqlType("decimal", precision=65, scale=30),
        [(Decimal("-" + "9" * 35 + "." + "1" * 30),) * 2],
    ),
    ("big_u", SqlType("bigint", unsigned=True), [(2**64 - 1, Decimal(2**64 - 1)), (0, Decimal(0))]),
    (
        "fl",
        SqlType("float"),
        [(float32_shortest(v), float32_shortest(v)) for v in (1.1, -3.25, 3.4e38, 1e-30)],
    ),
    ("dbl", SqlType("double"), [(0.1, 0.1), (-1e300, -1e300)]),
    ("mask", SqlType("bit", precision=12), [(4095, b"\xff\x0f"), (1, b"\x01\x00")]),
    (
        "born",
        SqlType("date"),
        [(d, d) for d in (dt.date(1969, 12, 31), dt.date(1000, 1, 1), dt.date(9999, 12, 31))],
    ),
    (
        "at",
        SqlType("time", fsp=6),
        [
            (t, _time(t))
            for t in (
                dt.timedelta(0),
                dt.timedelta(hours=23, minutes=59, seconds=59, milliseconds=999),
            )
        ],
    ),
    (
        "made",
        SqlType("datetime", fsp=6),
        [
            (d, d.replace(tzinfo=UTC))
            for d in (
                dt.datetime(1960, 5, 6, 7, 8, 9, 123000),
                dt.datetime(9999, 12, 31, 23, 59, 59),
            )
        ],
    ),
    ("raw", SqlType("varbinary", length=16), [(b"", b""), (b"\x00\xff\x00", b"\x00\xff\x00")]),
    ("code", SqlType("binary", length=4), [(b"\x01\x02\x00\x00", b"\x01\x02\x00\x00")]),
    ("name", SqlType("varchar", length=40, charset="utf8mb4"), [("日本語", "日本語")]),
    ("tiny", SqlType("tinyint"), [(-128, -128)]),
    ("size", SqlType("enum", members=("S", "M,L")), [("M,L", "M,L")]),
    ("doc", SqlType("json"), [({"a": [1, "x"]}, '{"a":[1,"x"]}')]),
    (
        "spot",
        SqlType("geometry"),
        [(Geometry(4326, b"\x01\x01\x00"), {"wkb": b"\x01\x01\x00", "srid": 4326})],
    ),
    ("vec", SqlType("vector", dimensions=2), [([1.1, -2.5], [1.1, -2.5])]),
]


def _table(cases: list[tuple[str, SqlType, list[Any]]]) -> Any:
    columns = [ColumnDescription("id", SqlType("int"), False)]
    columns += [ColumnDescription(name, sql, True) for name, sql, _ in cases]
    return table_description("shop", "things", tuple(columns), ("id",))


def _round_trip(schema: Any, value: Any) -> Any:
    parsed = fastavro.parse_schema(schema)
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, parsed, value)
    buffer.seek(0)
    return fastavro.schemaless_reader(buffer, parsed)


def _envelope(row: dict[str, Any] | None, before: dict[str, Any] | None = None) -> dict[str, Any]:
    source = {"version": "1", "connector": "mysql", "name": "srv", "ts_ms": 1, "db": "shop"}
    return {
        "before": before,
        "after": row,
        "source": {**source, "server_id": 1, "row": 0},
        "op": "c",
        "ts_ms": 2,
        "transaction": None,
    }


@pytest.mark.parametrize("case", range(max(len(c[2]) for c in CASES)))
def test_every_value_kind_reads_back_as_the_json_path_writes_it(case: int) -> None:
    table = _table(CASES)
    row_avro: dict[str, Any] = {"id": 1}
    expected: dict[str, Any] = {"id": 1}
    for name, sql, values in CASES:
        binlog_value, avro_value = values[case % len(values)]
        row_avro[name] = avro_value
        expected[name] = value_encoder(sql, CONNECT, nullable=True)(binlog_value)
    schema = value_schema(table, "srv", CONNECT)
    back = _round_trip(schema, _envelope(row_avro))
    converted = json_form(schema)(back)  # type: ignore[misc]
    assert converted["after"] == expected
    # the JSON text the reader would have parsed: same after orjson round trip
    assert orjson.loads(orjson.dumps(converted["after"])) == expected


def test_nulls_stay_null_and_before_is_converted_through_the_named_record() -> None:
    table = _table(CASES)
    nulls = {name: None for name, _, _ in CASES}
    before = {"id": 2, **nulls, "price": Decimal("-1.500000"), "born": dt.date(1969, 12, 31)}
    schema = value_schema(table, "srv", CONNECT)
    back = _round_trip(schema, _envelope({"id": 3, **nulls}, before))
    converted = json_form(schema)(back)  # type: ignore[misc]
    assert converted["after"] == {"id": 3, **nulls}
    # by hand: -1500000 = 0xe91ca0 in three bytes; 1969-12-31 is day -1
    assert converted["before"] == {**before, "price": "6Ryg", "born": -1}


def test_connect_encodings_worked_out_by_hand() -> None:
    cases = [
        ("d", SqlType("decimal", precision=10, scale=2), Decimal("-1.29"), "/38="),  # -129
        ("z", SqlType("decimal", precision=10, scale=2), Decimal("1.28"), "AIA="),  # 128
        ("o", SqlType("decimal", precision=10, scale=2), Decimal("0.00"), "AA=="),
        ("day", SqlType("date"), dt.date(1000, 1, 1), -354285),
        ("ms", SqlType("time", fsp=3), dt.time(1, 2, 3, 456000), 3723456),
        ("ts", SqlType("datetime", fsp=3), dt.datetime(1969, 12, 31, 23, 59, 59, 999000, UTC), -1),
        ("b", SqlType("blob"), b"\xfb\xff", "+/8="),
    ]
    table = _table([(name, sql, []) for name, sql, _, _ in cases])
    row = {"id": 1, **{name: value for name, _, value, _ in cases}}
    schema = value_schema(table, "srv", CONNECT)
    converted = json_form(schema)(_round_trip(schema, _envelope(row)))  # type: ignore[misc]
    assert converted["after"] == {"id": 1, **{name: text for name, _, _, text in cases}}


def test_adaptive_time_mode_values_are_plain_numbers_already() -> None:
    cases = [
        ("d", SqlType("date")),
        ("t", SqlType("time", fsp=6)),
        ("w", SqlType("datetime", fsp=6)),
    ]
    table = _table([(name, sql, []) for name, sql in cases])
    schema = value_schema(table, "srv", DebeziumOptions())
    row = {"id": 1, "d": -1, "t": -3020399000000, "w": 1_700_000_000_000_123}
    assert json_form(schema) is None  # nothing to convert: read as fastavro gives it
    assert _round_trip(schema, _envelope(row))["after"] == row


def test_a_decimal_key_reads_back_as_its_json_text() -> None:
    sql = SqlType("decimal", precision=8, scale=3)
    table = table_description("shop", "k", (ColumnDescription("k", sql, False),), ("k",))
    schema = key_schema(table, "srv", CONNECT)
    back = _round_trip(schema, {"k": Decimal("-0.001")})
    assert json_form(schema)(back) == {
        "k": value_encoder(sql, CONNECT, nullable=False)(Decimal("-0.001"))
    }  # type: ignore[misc]


# ---------------------------------------------------------------------- the decoder


def test_json_messages_are_what_orjson_gives() -> None:
    decoder = MessageDecoder(None, "invalidate.schema_registry_url")
    text = b'{"before":null,"after":{"id":1,"p":"AA=="},"op":"c"}'
    assert decoder.value(text, "t", 0, 5) == orjson.loads(text)
    assert decoder.value(bytearray(text), "t", 0, 5) == orjson.loads(text)
    assert decoder.key_text(b'{"id":1}', "t", 0, 5) == '{"id":1}'
    with pytest.raises(orjson.JSONDecodeError):
        decoder.value(b"{not json", "t", 0, 5)
    assert not is_avro(b"") and not is_avro(b"{") and is_avro(b"\x00\x00\x00\x00\x01\x02")


def test_avro_without_a_registry_names_the_message_and_exits_78() -> None:
    decoder = MessageDecoder(None, "invalidate.schema_registry_url")
    with pytest.raises(AvroWithoutRegistryError) as caught:
        decoder.value(b"\x00\x00\x00\x00\x07\x02", "srv.shop.t", 2, 41)
    assert caught.value.exit_code == EXIT_CONFIG
    assert caught.value.context == {
        "key": "invalidate.schema_registry_url",
        "topic": "srv.shop.t",
        "partition": 2,
        "offset": 41,
    }


def test_a_truncated_avro_message_is_a_data_error() -> None:
    decoder = MessageDecoder({"url": "http://127.0.0.1:1"}, "spark.schema_registry_url")
    with pytest.raises(AvroMessageError) as caught:
        decoder.value(b"\x00\x00\x00", "t", 0, 1)
    assert caught.value.exit_code == EXIT_DATA_ERROR


def test_the_decoder_pickles_without_its_clients() -> None:
    import pickle

    decoder = MessageDecoder({"url": "http://127.0.0.1:1"}, "spark.schema_registry_url")
    decoder._client = object()  # as after a first Avro message
    copy = pickle.loads(pickle.dumps(decoder))
    assert copy.registry_url == "http://127.0.0.1:1" and copy._client is None


def test_a_reader_takes_its_own_registry_else_the_daemons(tmp_path: Any, monkeypatch: Any) -> None:
    from replicad.config import load_config
    from replicad.published.message_values import reader_registry

    path = tmp_path / "c.yaml"
    path.write_text(
        "envelope:\n  values: debezium\n  format: avro\n"
        "  schema_registry: {url: 'http://daemon:8081', username: u, password_env: REG_PW}\n"
    )
    config = load_config(path, {})
    monkeypatch.setenv("REG_PW", "secret")
    daemons = reader_registry(None, config)
    assert daemons is not None and daemons["url"] == "http://daemon:8081"
    assert daemons["basic.auth.user.info"] == "u:secret"
    assert reader_registry("http://own:8081", config) == {"url": "http://own:8081"}
    assert reader_registry(None, load_config(None, {})) is None
