"""Snapshot columns (replicad/snapshot/columns.py): SELECT text -> the value the binlog decoders
give, and read values back as key-range literals. Expected values are written from the
server's documented text formats, not taken from the implementation; the differential check
against the binlog path is tests/integration/test_snapshot.py."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from replicad.binlog.values import Geometry
from replicad.service.status_view import render_status
from replicad.snapshot.columns import SnapshotColumn, SnapshotError, column_of
from replicad.snapshot.reader import range_after

pytestmark = pytest.mark.unit


def col(data_type: str, column_type: str | None = None, **kw) -> SnapshotColumn:
    return SnapshotColumn("c", data_type, column_type or data_type, True, **kw)


@pytest.mark.parametrize(
    ("column", "raw", "value"),
    [
        (col("bigint", "bigint unsigned"), b"18446744073709551615", 2**64 - 1),
        (col("tinyint"), b"-128", -128),
        (col("decimal", precision=20, scale=6), b"-12.500000", Decimal("-12.500000")),
        (col("double"), b"-1e300", -1e300),
        (col("double"), b"0.30000000000000004", 0.30000000000000004),
        # FLOAT is read as a DOUBLE (+0e0): the exact float32, then its shortest decimal
        (col("float"), b"0.10000000149011612", 0.1),
        (col("float"), b"16777216", 16777216.0),
        (col("bit", precision=12), b"\x0f\xff", 4095),
        (col("year"), b"0", 0),
        (col("date"), b"2024-02-29", dt.date(2024, 2, 29)),
        (col("date"), b"0000-00-00", "0000-00-00"),  # as the server prints it
        (col("date"), b"2021-02-30", "2021-02-30"),
        (
            col("datetime", fsp=6),
            b"2021-03-04 05:06:07.000120",
            dt.datetime(2021, 3, 4, 5, 6, 7, 120),
        ),
        (col("datetime", fsp=0), b"1000-01-01 00:00:00", dt.datetime(1000, 1, 1)),
        (col("datetime", fsp=2), b"0000-00-00 00:00:00.00", "0000-00-00 00:00:00.00"),
        (
            col("timestamp", fsp=3),
            b"2038-01-19 03:14:07.500",
            dt.datetime(2038, 1, 19, 3, 14, 7, 500000, tzinfo=dt.UTC),
        ),
        (col("timestamp", fsp=3), b"0000-00-00 00:00:00.000", "0000-00-00 00:00:00.000"),
        (
            col("time", fsp=6),
            b"-838:59:59.000000",
            -dt.timedelta(hours=838, minutes=59, seconds=59),
        ),
        (col("time", fsp=1), b"-00:00:00.5", -dt.timedelta(microseconds=500000)),
        (col("binary", octet_length=4), b"\x01\x02", b"\x01\x02\x00\x00"),
        (col("varbinary", octet_length=8), b"\x00\xff", b"\x00\xff"),
        (col("varchar", charset="latin1"), "Ä€".encode("cp1252"), "Ä€"),
        (col("text", charset="utf8mb4"), "日本".encode(), "日本"),
        (col("varchar", charset="utf8mb4"), b"\xff\xfe", b"\xff\xfe"),  # not UTF-8: bytes
        (col("enum", "enum('x','y')", charset="utf8mb4", members=("x", "y")), b"y", "y"),
        (col("point"), b"\xe6\x10\x00\x00\x01\x01", Geometry(4326, b"\x01\x01")),
    ],
)
def test_select_text_becomes_the_binlog_value(column, raw, value) -> None:
    parsed = column.parser()(raw)
    assert parsed == value and type(parsed) is type(value)


def test_a_column_type_without_an_exact_reading_is_refused_with_its_name() -> None:
    with pytest.raises(SnapshotError) as caught:
        col("uuid").parser()
    assert "uuid" in str(caught.value) and "c" in str(caught.value)
    with pytest.raises(SnapshotError):
        col("varchar", charset="filename").parser()


@pytest.mark.parametrize(
    ("column", "value", "literal"),
    [
        (col("int"), 42, "42"),
        (col("decimal", precision=5, scale=2), Decimal("-1.50"), "-1.50"),
        (col("date"), dt.date(2020, 1, 2), "'2020-01-02'"),
        (
            col("datetime", fsp=6),
            dt.datetime(2021, 3, 4, 5, 6, 7, 120),
            "'2021-03-04 05:06:07.000120'",
        ),
        (
            col("timestamp"),
            dt.datetime(2038, 1, 19, 3, 14, 7, tzinfo=dt.UTC),
            "'2038-01-19 03:14:07'",
        ),
        (col("time", fsp=6), -dt.timedelta(hours=100, microseconds=1), "'-100:00:00.000001'"),
        (
            col("varchar", charset="utf8mb4", collation="utf8mb4_general_ci"),
            "a'b",
            "_utf8mb4 X'612762' COLLATE utf8mb4_general_ci",
        ),
        (
            col("varchar", charset="latin1", collation="latin1_swedish_ci"),
            "Ä",
            "_latin1 X'c4' COLLATE latin1_swedish_ci",
        ),
        # MySQL's latin1 is cp1252 with C1 controls in its gaps (MySQL's ctype-latin1.c):
        # the euro sign is 0x80 and U+0081 is 0x81, which Python's latin-1 or cp1252 cannot give
        (
            col("varchar", charset="latin1", collation="latin1_swedish_ci"),
            "€\x81",
            "_latin1 X'8081' COLLATE latin1_swedish_ci",
        ),
        # greek: the servers read 0xA1 as U+02BD where Python's iso8859_7 has U+2018
        (
            col("varchar", charset="greek", collation="greek_general_ci"),
            "\u02bd",
            "_greek X'a1' COLLATE greek_general_ci",
        ),
        (col("varbinary"), b"\x00\xff", "X'00ff'"),
        (col("enum", members=("new", "paid")), "paid", "2"),  # ENUM sorts by index
        (col("set", members=("a", "b", "c")), "a,c", "5"),
    ],
)
def test_key_literals_compare_as_the_index_orders(column, value, literal) -> None:
    assert column.literal(value) == literal


def test_the_next_chunk_starts_after_the_last_key_of_a_composite_key() -> None:
    columns = {"a": col("int"), "b": col("varbinary")}
    literals = [columns["a"].literal(7), columns["b"].literal(b"\x01")]
    assert range_after(["a", "b"], literals) == ("((`a` > 7) OR (`a` = 7 AND `b` > X'01'))")


def test_information_schema_rows_become_columns() -> None:
    row = {
        "COLUMN_NAME": "price",
        "DATA_TYPE": "decimal",
        "COLUMN_TYPE": "decimal(12,3) unsigned",
        "IS_NULLABLE": "NO",
        "NUMERIC_PRECISION": "12",
        "NUMERIC_SCALE": "3",
        "DATETIME_PRECISION": None,
        "CHARACTER_OCTET_LENGTH": None,
        "CHARACTER_SET_NAME": None,
        "COLLATION_NAME": None,
    }
    column = column_of(row, mariadb=True)
    assert (column.unsigned, column.nullable, column.precision, column.scale) == (
        True,
        False,
        12,
        3,
    )
    assert column.sql_type().sql() == "decimal(12,3) unsigned"
    members = column_of(
        {
            **row,
            "DATA_TYPE": "set",
            "COLUMN_TYPE": "set('a','it''s')",
            "NUMERIC_PRECISION": None,
            "NUMERIC_SCALE": None,
            "CHARACTER_SET_NAME": "utf8mb4",
        },
        mariadb=True,
    )
    assert members.members == ("a", "it's")


def test_status_shows_snapshot_progress() -> None:
    text = render_status(
        {
            "pipeline": "p",
            "store": "file x",
            "leader": {"pid": 1},
            "position": None,
            "snapshot": [
                {"table": "d.a", "rows": 10, "chunks": 1, "done": True, "rows_per_s": 5},
                {"table": "d.b", "rows": 4, "chunks": 2, "done": False, "rows_per_s": 3},
                {"table": "d.c", "rows": 0, "chunks": 0, "done": False, "rows_per_s": 0},
            ],
        }
    )
    assert "snapshot  1/3 tables done" in text
    assert "d.a  10 rows, 1 chunks, done" in text
    assert "d.b  4 rows, 2 chunks, 3 rows/s" in text
    assert "d.c" not in text
