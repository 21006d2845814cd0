"""Spark types from the schema topic (replicad/spark/types.py): one Spark type per MySQL type,
a struct that evolves across versions, and the `exact` JSON values turned into Spark's."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import orjson
import pytest
from pyspark.sql.types import (
    BinaryType,
    DateType,
    DayTimeIntervalType,
    DecimalType,
    FloatType,
    IntegerType,
    LongType,
    StringType,
    TimestampNTZType,
    TimestampType,
)

from replicad.consumers.typed import TypedSchema
from replicad.spark.types import (
    GEOMETRY,
    change_row,
    column_type,
    row_converter,
    row_struct,
)

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("column", "expected"),
    [
        ({"type": "tinyint", "unsigned": True}, IntegerType()),
        ({"type": "int"}, IntegerType()),
        ({"type": "int", "unsigned": True}, LongType()),
        ({"type": "bigint"}, LongType()),
        ({"type": "bigint", "unsigned": True}, DecimalType(20, 0)),
        ({"type": "decimal", "precision": 12, "scale": 2}, DecimalType(12, 2)),
        ({"type": "decimal", "precision": 65, "scale": 30}, StringType()),
        ({"type": "float"}, FloatType()),
        ({"type": "bit", "precision": 12}, LongType()),
        ({"type": "bit", "precision": 64}, DecimalType(20, 0)),
        ({"type": "date"}, DateType()),
        ({"type": "datetime", "fsp": 6}, TimestampNTZType()),
        ({"type": "timestamp"}, TimestampType()),
        ({"type": "time"}, DayTimeIntervalType(0, 3)),
        ({"type": "varbinary", "length": 16}, BinaryType()),
        ({"type": "json"}, StringType()),
        ({"type": "set", "set": ["a", "b"]}, StringType()),
        ({"type": "geometry"}, GEOMETRY),
    ],
)
def test_each_mysql_type_has_its_spark_type(column, expected) -> None:
    assert column_type({"name": "c", **column}) == expected


def _version(version: str, columns: list[dict]) -> TypedSchema:
    return TypedSchema.from_record(
        {"db": "d", "table": "t", "version": version, "columns": columns, "primary_key": ["id"]}
    )


def test_the_struct_is_the_union_of_versions_with_the_newest_types() -> None:
    old = _version(
        "a",
        [
            {"name": "id", "type": "int"},
            {"name": "gone", "type": "text"},
            {"name": "n", "type": "int"},
        ],
    )
    new = _version(
        "b",
        [
            {"name": "id", "type": "int"},
            {"name": "n", "type": "bigint"},
            {"name": "added", "type": "varchar"},
        ],
    )
    struct = row_struct([old, new])
    assert struct.names == ["id", "gone", "n", "added"]
    assert struct["n"].dataType == LongType() and all(f.nullable for f in struct.fields)
    convert = row_converter(struct)
    assert convert({"id": 1, "gone": "x", "n": 5}) == (1, "x", 5, None)
    assert convert(None) is None


def test_exact_values_become_spark_values() -> None:
    columns = [
        {"name": "de", "type": "decimal", "precision": 20, "scale": 6},
        {"name": "bu", "type": "bigint", "unsigned": True},
        {"name": "d", "type": "date"},
        {"name": "zero", "type": "date"},
        {"name": "dt6", "type": "datetime", "fsp": 6},
        {"name": "ts", "type": "timestamp"},
        {"name": "tm", "type": "time"},
        {"name": "b", "type": "blob"},
        {"name": "j", "type": "json"},
        {"name": "g", "type": "geometry"},
    ]
    convert = row_converter(row_struct([_version("a", columns)]))
    row = convert(
        {
            "de": "-12345678901234.000001",
            "bu": 18446744073709551615,
            "d": "1000-01-01",
            "zero": "0000-00-00",
            "dt6": "2021-03-04T05:06:07.000123",
            "ts": "2038-01-19T03:14:07.5Z",
            "tm": "-838:59:59.000000",
            "b": "AAH/",
            "j": {"a": [1, 2.5]},
            "g": {"srid": 4326, "wkb": "AQE="},
        }
    )
    assert row == (
        Decimal("-12345678901234.000001"),
        Decimal(2**64 - 1),
        dt.date(1000, 1, 1),
        None,  # a zero date has no Spark value
        dt.datetime(2021, 3, 4, 5, 6, 7, 123),
        dt.datetime(2038, 1, 19, 3, 14, 7, 500000, tzinfo=dt.UTC),
        -dt.timedelta(hours=838, minutes=59, seconds=59),
        b"\x00\x01\xff",
        '{"a": [1, 2.5]}',  # MySQL's text of the document
        (4326, b"\x01\x01"),
    )


def test_an_older_value_the_newest_type_cannot_hold_is_null() -> None:
    """After ALTER ... MODIFY narrows a column, values written before it that do not fit are
    null (not a failed task): an out-of-range integer, a decimal with more digits."""
    key = {"name": "id", "type": "int"}
    wide = {"name": "d", "type": "decimal", "precision": 12, "scale": 4}
    narrow = {"name": "d", "type": "decimal", "precision": 10, "scale": 2}
    old = _version("a", [key, {"name": "n", "type": "bigint"}, wide])
    new = _version("b", [key, {"name": "n", "type": "int"}, narrow])
    convert = row_converter(row_struct([old, new]))
    assert convert({"id": 1, "n": 5_000_000_000, "d": "1.2345"}) == (1, None, None)
    assert convert({"id": 2, "n": -(2**31), "d": "12345678.90"}) == (
        2,
        -(2**31),
        Decimal("12345678.90"),
    )
    assert convert({"id": 3, "n": 2**31, "d": "123456789.00"}) == (3, None, None)
    assert convert({"id": 4, "n": 7, "d": "1.5"}) == (4, 7, Decimal("1.50"))


# What MySQL 9.7 printed (`SELECT CAST(CAST(<text> AS JSON) AS CHAR)`) for documents written
# as '{"bb": 1, "a": 2, "ab": {"c": [], "b": {}}}', '-0.0', '1e2', '18446744073709551616',
# '3.0e-5', '1e300', '"\u0001é\u2028\/x"', '"x\ty"', '18446744073709551615', '-0'.
MYSQL_PRINTED = [
    '{"a": 2, "ab": {"b": {}, "c": []}, "bb": 1}',
    "-0.0",
    "100.0",
    "1.8446744073709552e19",
    "0.00003",
    "1e300",
    '"\\u0001é\u2028/x"',
    '"x\\ty"',
    "18446744073709551615",
    "0",
]


@pytest.mark.parametrize("printed", MYSQL_PRINTED)
def test_a_mysql_json_document_is_kept_as_mysql_prints_it(printed: str) -> None:
    """The `exact` envelope carries the document as MySQL prints it; the reader parses the
    message: the lake keeps MySQL's text again (a string document with its quotes)."""
    columns = [{"name": "j", "type": "json"}, {"name": "t", "type": "longtext"}]
    convert = row_converter(row_struct([_version("a", columns)]))
    value = orjson.loads(printed)
    assert convert({"j": value, "t": value if isinstance(value, str) else None}) == (
        printed,
        value if isinstance(value, str) else None,
    )


def test_a_json_null_document_is_the_text_null_and_sql_null_stays_null() -> None:
    columns = [
        {"name": "id", "type": "int"},
        {"name": "j", "type": "json"},
        {"name": "t", "type": "text"},
    ]
    struct = row_struct([_version("a", columns)])
    assert [f.metadata for f in struct.fields] == [{}, {"mysql_type": "json"}, {}]
    convert = row_converter(struct)
    envelope = {
        "op": "u",
        "source": {"db": "d", "table": "x"},
        "before": {"id": 1, "j": None, "t": None},
        "after": {"id": 1, "j": None, "t": None},
        "json_null": {"after": ["j", "t"]},  # (t is no JSON column: never listed by replicad)
    }
    row = change_row(envelope, None, convert, None, None, None)
    assert (row[4], row[5]) == ((1, None, None), (1, "null", None))
