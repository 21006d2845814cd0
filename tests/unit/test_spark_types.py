"""Spark types from the schema topic (replicad/spark/types.py): one Spark type per MySQL type,
a struct that evolves across versions, and the `exact` JSON values turned into Spark's."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

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
from replicad.spark.types import GEOMETRY, column_type, row_converter, row_struct

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
    old = _version("a", [{"name": "id", "type": "int"}, {"name": "gone", "type": "text"},
                         {"name": "n", "type": "int"}])  # fmt: skip
    new = _version("b", [{"name": "id", "type": "int"}, {"name": "n", "type": "bigint"},
                         {"name": "added", "type": "varchar"}])  # fmt: skip
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
    row = convert({
        "de": "-12345678901234.000001", "bu": 18446744073709551615, "d": "1000-01-01",
        "zero": "0000-00-00", "dt6": "2021-03-04T05:06:07.000123", "ts": "2038-01-19T03:14:07.5Z",
        "tm": "-838:59:59.000000", "b": "AAH/", "j": {"a": [1, 2.5]},
        "g": {"srid": 4326, "wkb": "AQE="},
    })  # fmt: skip
    assert row == (
        Decimal("-12345678901234.000001"),
        Decimal(2**64 - 1),
        dt.date(1000, 1, 1),
        None,  # a zero date has no Spark value
        dt.datetime(2021, 3, 4, 5, 6, 7, 123),
        dt.datetime(2038, 1, 19, 3, 14, 7, 500000, tzinfo=dt.UTC),
        -dt.timedelta(hours=838, minutes=59, seconds=59),
        b"\x00\x01\xff",
        '{"a":[1,2.5]}',
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
        2, -(2**31), Decimal("12345678.90"),
    )  # fmt: skip
    assert convert({"id": 3, "n": 2**31, "d": "123456789.00"}) == (3, None, None)
    assert convert({"id": 4, "n": 7, "d": "1.5"}) == (4, 7, Decimal("1.50"))
