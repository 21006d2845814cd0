"""replicad.consumers.debezium_exact: Debezium-mode values read back in the exact mode's form.

Oracles, both the JSON path's own encoders and not the code under test: for a value the binlog
decoder gives, `sinks.debezium_values.value_encoder` writes the Debezium form (the input) and
the exact envelope's mapping (`sinks.envelope`, as orjson writes it) the exact form; both are
compared after `consumers.typed.TypedSchema` types them, as a consumer of exact values would."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import orjson
import pytest

from replicad.binlog.column_types import SqlType
from replicad.binlog.values import Geometry
from replicad.consumers.debezium_exact import DebeziumForm, EnvelopeToExact, image_converter
from replicad.consumers.typed import TypedSchema
from replicad.sinks.debezium_values import DebeziumOptions, value_encoder
from replicad.sinks.envelope import _default as exact_mapping

pytestmark = pytest.mark.unit

CASES: list[tuple[SqlType, list[Any]]] = [
    (
        SqlType("decimal", precision=20, scale=6),
        [Decimal("-1.500000"), Decimal("0.000000"), Decimal("12345678901234.000001")],
    ),
    (SqlType("decimal", precision=65, scale=30), [Decimal("-" + "9" * 35 + "." + "1" * 30)]),
    (SqlType("decimal", precision=5, scale=0), [Decimal(-129)]),
    (SqlType("bigint", unsigned=True), [2**64 - 1, 0, 2**63]),
    (SqlType("bit", precision=1), [1, 0]),
    (SqlType("bit", precision=12), [4095, 1, 0]),
    (SqlType("date"), [dt.date(1969, 12, 31), dt.date(1000, 1, 1), dt.date(9999, 12, 31)]),
    (SqlType("datetime", fsp=3), [dt.datetime(1960, 5, 6, 7, 8, 9, 123000)]),
    (SqlType("datetime", fsp=0), [dt.datetime(9999, 12, 31, 23, 59, 59)]),
    (SqlType("varbinary", length=8), [b"\x00\xff\xfe", b""]),
    (SqlType("json"), [{"a": [1, "x", None]}, [], "s"]),
    (SqlType("geometry"), [Geometry(0, b"\x01\x02"), Geometry(4326, b"\x01")]),
    (SqlType("varchar", length=10, charset="utf8mb4"), ["日本"]),
    (SqlType("year"), [2155]),
]
# Outside what time.precision.mode=connect holds (TIME beyond a day, DATETIME microseconds)
ADAPTIVE_ONLY: list[tuple[SqlType, list[Any]]] = [
    (
        SqlType("time", fsp=6),
        [dt.timedelta(hours=-838, minutes=-59, seconds=-59), dt.timedelta(microseconds=-500000)],
    ),
    (SqlType("time", fsp=6), [dt.timedelta(hours=838, minutes=59, seconds=59, microseconds=1)]),
    (SqlType("datetime", fsp=6), [dt.datetime(2021, 3, 4, 5, 6, 7, 123456)]),
]
CONNECT_ONLY: list[tuple[SqlType, list[Any]]] = [
    (SqlType("time", fsp=3), [dt.timedelta(hours=23, minutes=59, seconds=59, milliseconds=999)]),
]
FORMS = {
    "connect, precise": DebeziumOptions(
        time_precision_mode="connect", bigint_unsigned_handling_mode="precise"
    ),
    "adaptive, long, hex": DebeziumOptions(binary_handling_mode="hex"),
    "adaptive, url-safe": DebeziumOptions(binary_handling_mode="base64-url-safe"),
}


def _columns(cases: list[tuple[SqlType, list[Any]]]) -> list[dict[str, Any]]:
    return [{"name": f"c{i}", **sql.to_json()} for i, (sql, _) in enumerate(cases)]


def _typed(columns: list[dict[str, Any]]) -> TypedSchema:
    record = {"db": "d", "table": "t", "version": "v1", "columns": columns, "primary_key": []}
    return TypedSchema.from_record(record)


def _form(options: DebeziumOptions) -> DebeziumForm:
    return DebeziumForm(
        options.decimal_handling_mode,
        options.time_precision_mode,
        options.binary_handling_mode,
        options.bigint_unsigned_handling_mode,
    )


@pytest.mark.parametrize("form", sorted(FORMS))
def test_every_kind_reads_back_as_the_exact_mode_writes_it(form: str) -> None:
    options = FORMS[form]
    cases = CASES + (CONNECT_ONLY if options.time_precision_mode == "connect" else ADAPTIVE_ONLY)
    columns = _columns(cases)
    typed = _typed(columns)
    convert = image_converter(columns, _form(options))
    for case in range(max(len(values) for _, values in cases)):
        binlog = {
            c["name"]: values[case % len(values)]
            for c, (_, values) in zip(columns, cases, strict=True)
        }
        debezium = {
            c["name"]: value_encoder(sql, options, nullable=True)(binlog[c["name"]])
            for c, (sql, _) in zip(columns, cases, strict=True)
        }
        exact = orjson.loads(orjson.dumps(binlog, default=exact_mapping))
        got = convert(orjson.loads(orjson.dumps(debezium)))
        assert typed.decode(got) == typed.decode(exact), (form, case)


def test_nulls_and_other_versions_stay() -> None:
    columns = _columns(CASES)
    typed = _typed(columns)
    to_exact = EnvelopeToExact([typed], DebeziumForm(time_precision_mode="connect"))
    nulls = {c["name"]: None for c in columns}
    envelope = {"source": {"schema_version": "v1"}, "before": None, "after": nulls, "op": "c"}
    assert to_exact(envelope) == envelope
    other = {"source": {"schema_version": "v2"}, "before": None, "after": {"c6": -1}, "op": "c"}
    assert to_exact(other) == other  # not among the versions: the reader refuses it
    dated = {**envelope, "after": {**nulls, "c6": -1}}
    assert to_exact(dated)["after"]["c6"] == "1969-12-31"
