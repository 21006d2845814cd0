"""The compiled read path (sinks/read_envelope.py, _writer.encode_text_rows) against the row
path: for snapshot rows given as the server's text-protocol row packets, the messages written
in C must be the bytes the envelope writes for `ReadRows.changes()` (each row parsed by the
snapshot's own parsers), on every column type, on the values the C writers leave to Python
(zero and invalid dates, short BINARY, bytes not valid in the charset, ZEROFILL), and on
random rows (hypothesis). The row path itself is held to the server's text by
tests/unit/test_snapshot_columns.py and to the binlog path by
tests/integration/test_snapshot.py."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replicad.binlog.changes import ReadRows
from replicad.binlog.values import decimal_text
from replicad.sinks import writer_choice
from replicad.sinks.envelope import EnvelopeLines, dumps
from replicad.sinks.event_envelope import KEY_COLUMNS
from replicad.sinks.read_envelope import ReadEncoder
from replicad.snapshot.columns import SnapshotColumn, description_of
from replicad.snapshot.reader import TablePlan, row_parser

pytestmark = [
    pytest.mark.unit,
    pytest.mark.skipif(not writer_choice.active(), reason="the compiled writer is not built"),
]


def col(name: str, data_type: str, column_type: str | None = None, **kw) -> SnapshotColumn:
    return SnapshotColumn(name, data_type, column_type or data_type, True, **kw)


COLUMNS = (
    col("id", "bigint"),
    col("u64", "bigint", "bigint unsigned"),
    col("i8", "tinyint"),
    col("zf", "int", "int(6) unsigned zerofill"),
    col("yr", "year"),
    col("d", "double"),
    col("f", "float"),
    col("dec", "decimal", precision=20, scale=6),
    col("wide", "decimal", precision=65, scale=30),
    col("day", "date"),
    col("dt0", "datetime", fsp=0),
    col("dt6", "datetime", fsp=6),
    col("dt2", "datetime", fsp=2),
    col("ts3", "timestamp", fsp=3),
    col("tm", "time", fsp=6),
    col("utf", "varchar", octet_length=400, charset="utf8mb4"),
    col("mb3", "text", charset="utf8mb3"),
    col("l1", "varchar", octet_length=100, charset="latin1"),
    col("greek", "char", octet_length=10, charset="greek"),
    col("sj", "varchar", octet_length=40, charset="sjis"),
    col("bin", "binary", octet_length=4),
    col("vb", "varbinary", octet_length=10),
    col("blob", "blob"),
    col("e", "enum", "enum('a','b c')", charset="utf8mb4", members=("a", "b c")),
    col("s", "set", "set('x','y')", charset="latin1", members=("x", "y")),
    col("bits", "bit", precision=12),
    col("g", "geometry"),
    col("j", "json", mysql_json=True),
)
NAMES = tuple(c.name for c in COLUMNS)


def plan(columns=COLUMNS, key=("id",)) -> TablePlan:
    return TablePlan("db", "t", columns, key, key, description_of("db", "t", columns, key))


def packet(values: list[bytes | None]) -> bytes:
    """A text-protocol row: NULL, or a length-encoded string."""
    out = bytearray()
    for value in values:
        if value is None:
            out += b"\xfb"
        elif len(value) < 251:
            out += bytes([len(value)]) + value
        else:
            out += b"\xfc" + len(value).to_bytes(2, "little") + value
    return bytes(out)


def reads(table: TablePlan, packets: list[bytes], marker: str = "true") -> ReadRows:
    return ReadRows(
        table.description,
        table.primary_key,
        packets,
        row_parser(table),
        tuple(table.parsers),
        "mysql-bin.000007",
        1234,
        42,
        1_700_000_000_000,
        17,
        marker,
    )


def both_paths(read: ReadRows) -> tuple[bytes, bytes]:
    lines = EnvelopeLines("pipe", replay=True)  # ts_ms of the row path: the change's
    compiled = ReadEncoder(lines.writer).encode(read, read.ts_ms, lines=True)
    assert compiled is not None, "the compiled path declined"
    messages, template, count = compiled
    assert count == len(read.packets) and template.row == read.first_row
    return messages, b"".join(lines.row(change) for change in read.changes())


ROW = [
    b"9223372036854775807",
    b"18446744073709551615",
    b"-128",
    b"000042",
    b"2024",
    b"-1.7976931348623157e308",
    b"0.10000000149011612",
    b"-0.500000",
    b"-12345678901234567890123456789012345.123456789012345678901234567890",
    b"2024-02-29",
    b"1000-01-01 00:00:00",
    b"2021-03-04 05:06:07.000120",
    b"9999-12-31 23:59:59.99",
    b"2038-01-19 03:14:07.500",
    b"-838:59:59.000000",
    'a "quoted" \\ \n\t\x01 é 𝄞 ✓'.encode(),
    "three-byte ü".encode(),
    bytes(range(0x20, 0x100)),
    b"\xe1\xe2\xe3 ",
    "日本".encode("shift_jis"),
    b"\x01\x02\x03\x04",
    b"\x00\xff",
    bytes(range(256)) * 2,
    b"b c",
    b"x,y",
    b"\x0f\xff",
    b"\x00\x00\x00\x00\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\xf0?\x00\x00\x00\x00\x00\x00\x00@",
    b'{"a": [1, 2.5, "x"], "b": null}',
]

# What the C writers leave to the parsers (the fallback): zero and invalid dates, a BINARY
# shorter than its width, text not valid in its charset, an unterminated fraction.
ODD_ROW = [
    b"-9223372036854775808",
    b"0",
    b"0",
    b"0000000",
    b"0000",
    b"1e-5",
    b"-3.4028234663852886e38",
    b"0.000001",
    b"0.000000000000000000000000000001",
    b"0000-00-00",
    b"0000-00-00 00:00:00",
    b"2021-02-30 00:00:00.000000",
    b"0000-00-00 00:00:00.00",
    b"0000-00-00 00:00:00.000",
    b"00:00:00.000000",
    b"\xff\xfe invalid utf-8",
    b"\xed\xa0\x80",  # a surrogate: not UTF-8 for Python's strict decoder
    b"",
    b"\xff",  # undefined in greek? (the table decides: text or bytes)
    b"\x82\xa0",
    b"\x01",
    b"",
    b"",
    b"",
    b"",
    b"\x00\x00",
    b"\x00\x00\x00\x00",
    b"null",
]


def test_every_type_is_written_as_the_row_path_writes_it() -> None:
    table = plan()
    rows = [ROW, ODD_ROW, [b"7"] + [None] * (len(NAMES) - 1)]
    assert all(len(row) == len(NAMES) for row in rows)
    compiled, expected = both_paths(reads(table, [packet(r) for r in rows]))
    assert compiled == expected
    assert compiled.count(b"\n") == 3
    first = orjson.loads(compiled.splitlines()[0])
    # Spot checks written from the server's text, not from either path:
    assert first["after"]["zf"] == 42 and first["after"]["dec"] == "-0.500000"
    assert first["after"]["dt6"] == "2021-03-04T05:06:07.000120"
    assert first["after"]["ts3"] == "2038-01-19T03:14:07.500000Z"
    assert first["op"] == "r" and first["source"]["row"] == 17
    assert first["source"]["snapshot"] == "true" and first["before"] is None


@pytest.mark.parametrize("marker", ["first", "last", "last_in_data_collection", "true"])
def test_the_marker_and_numbering_follow_the_reads(marker: str) -> None:
    table = plan()
    packets = [packet([str(i).encode()] + [None] * (len(NAMES) - 1)) for i in range(5)]
    compiled, expected = both_paths(reads(table, packets, marker))
    assert compiled == expected
    sources = [orjson.loads(line)["source"] for line in compiled.splitlines()]
    assert [s["row"] for s in sources] == [17, 18, 19, 20, 21]
    assert {s["snapshot"] for s in sources} == {marker}


def test_keys_are_the_primary_key_columns() -> None:
    columns = (col("a", "int"), col("b", "varchar", charset="utf8mb4"), col("v", "double"))
    table = plan(columns, key=("b", "a"))
    read = reads(table, [packet([b"1", b'x"y', b"2.5"]), packet([b"-3", "é".encode(), None])])
    lines = EnvelopeLines("pipe", replay=True)
    encoded = ReadEncoder(lines.writer).encode(
        read, read.ts_ms, lines=False, key=(KEY_COLUMNS, None)
    )
    assert encoded is not None
    messages, _, _ = encoded
    changes = read.changes()
    assert [(op, row) for op, row, _, _ in messages] == [("r", 17), ("r", 18)]
    for (_, _, key, value), change in zip(messages, changes, strict=True):
        assert key == dumps({"b": change.after["b"], "a": change.after["a"]})
        assert value + b"\n" == lines.row(change)


@pytest.mark.parametrize(
    "bad",
    [
        b"\x01",  # ends before its second value
        b"\x011\x05ab",  # a value longer than what is left
        b"\x011\x01x\x01y",  # a value more than the table has
        b"\x011\xff",  # not a length
    ],
)
def test_a_packet_that_is_not_a_row_is_declined(bad: bytes) -> None:
    columns = (col("a", "int"), col("b", "varchar", charset="utf8mb4"))
    read = reads(plan(columns, key=("a",)), [packet([b"1", b"x"]), bad])
    assert ReadEncoder(EnvelopeLines("pipe").writer).encode(read, 0, lines=True) is None


def _server_text(column: SnapshotColumn, draw) -> bytes | None:
    """A random value as the server prints it for the column."""
    kind = column.data_type
    if draw(st.integers(0, 9)) == 0:
        return None
    if kind == "bigint":
        return str(draw(st.integers(-(2**63), 2**63 - 1))).encode()
    if kind == "double":
        value = draw(st.floats(allow_nan=False, allow_infinity=False))
        return repr(value).encode()
    if kind == "decimal":
        scale = column.scale or 0
        digits = draw(st.integers(0, 10 ** ((column.precision or 10) - 1)))
        value = Decimal(digits).scaleb(-scale) * draw(st.sampled_from([1, -1]))
        return decimal_text(value.quantize(Decimal(1).scaleb(-scale))).encode()
    if kind == "datetime":
        moment = draw(st.datetimes(min_value=dt.datetime(1000, 1, 1)))
        text = moment.strftime("%Y-%m-%d %H:%M:%S")
        if column.fsp:
            text += "." + f"{moment.microsecond:06d}"[: column.fsp]
        return text.encode()
    if kind == "date":
        return draw(st.dates(min_value=dt.date(1000, 1, 1))).isoformat().encode()
    if column.charset == "latin1":
        return draw(st.binary(max_size=30))
    if draw(st.booleans()):  # bytes a utf8mb4 column may hold that are not UTF-8 (or are)
        lead = st.integers(0xC0, 0xFF) | st.integers(0, 0xFF)
        tail = st.lists(st.integers(0x80, 0xBF) | st.integers(0, 0xFF), max_size=4)
        return bytes([draw(lead), *draw(tail)]) + draw(st.text(max_size=3)).encode()
    return draw(st.text(max_size=30)).encode()


RANDOM_COLUMNS = (
    col("id", "bigint"),
    col("d", "double"),
    col("dec", "decimal", precision=18, scale=4),
    col("day", "date"),
    col("at", "datetime", fsp=3),
    col("txt", "varchar", charset="utf8mb4"),
    col("l1", "text", charset="latin1"),
)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_random_rows_are_written_as_the_row_path_writes_them(data) -> None:
    rows = data.draw(st.integers(1, 6))
    packets = [packet([_server_text(c, data.draw) for c in RANDOM_COLUMNS]) for _ in range(rows)]
    compiled, expected = both_paths(reads(plan(RANDOM_COLUMNS), packets))
    assert compiled == expected


@pytest.mark.parametrize(
    "text",
    [
        b"\xc0\x80",  # overlong NUL
        b"\xc1\xbf",
        b"\xe0\x80\x80",  # overlong three-byte
        b"\xe0\xa0\x80",  # the first three-byte form
        b"\xed\x9f\xbf",  # the last before the surrogates
        b"\xed\xa0\x80",  # a surrogate
        b"\xf0\x8f\xbf\xbf",  # overlong four-byte
        b"\xf0\x90\x80\x80",  # the first four-byte form
        b"\xf4\x8f\xbf\xbf",  # U+10FFFF
        b"\xf4\x90\x80\x80",  # above U+10FFFF
        b"\xf5\x80\x80\x80",
        b"\xe2\x82",  # cut short
        b"\x80",  # a continuation byte alone
        b"a\xe2\x82\xacb",  # a euro sign between ASCII
        b"\xf0\x9f\x99\x82\xf0\x9f",  # an emoji, then a cut one
    ],
)
def test_utf8_text_is_valid_exactly_where_python_says(text: bytes) -> None:
    columns = (col("id", "int"), col("t", "varchar", charset="utf8mb4"))
    compiled, expected = both_paths(reads(plan(columns), [packet([b"1", text])]))
    assert compiled == expected
