"""The compiled envelope path (`_writer.encode_rows`) against the pure one, byte for byte.

For random layouts of every column type (the strategies of test_accel.py: valid values,
raw bytes for the fixed-size types, invalid UTF-8, zero dates, corrupt DECIMAL groups ...)
and random ROWS events of one to four rows (inserts, updates, deletes), the messages the C
encoder writes must equal what the pure path writes for the same rows: the generated
Python decoder's dicts, `row_messages` (an update of a key column is a delete and a create)
and the envelope's JSON (`_dumps_row` with MySQL JSON columns as MySQL prints them); the
keys must equal the JSON of the key columns the Kafka sink writes. Where the pure decoder
refuses an image, the encoder must refuse the event too (the caller then takes the
row-by-row path, which raises the error that names it).

Text in the single-byte character sets (MySQL's latin1, cp1251 ...), which the compiled path
writes through a 256-entry table, is checked on every byte value of each of them and on
random bytes: messages, decoded rows and `charsets.decode_text` agree.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replicad.binlog.changes import RowChange
from replicad.binlog.charsets import SINGLE_BYTE_CODECS
from replicad.binlog.codegen import CompiledColumn, compile_python_decoder
from replicad.binlog.values import ColumnType
from replicad.sinks import writer_choice
from replicad.sinks.envelope import _dumps_row, _row, dumps, row_messages
from replicad.sinks.event_envelope import KEY_COLUMNS, KEY_CONSTANT, KEY_NONE, column_prefixes
from tests.unit.test_accel import ANY_COLUMN, NAMES, le

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
HEAD = b',"source":{"h":1,"row":'
TAILS = (b',"op":"c"}', b',"op":"u"}', b',"op":"d"}')
# Keys made of columns whose equal values may print differently (-0.0, 0.0) are compared in
# Python by the caller (event_envelope refuses them); MySQL has no JSON or GEOMETRY keys.
_NOT_KEYS = {
    ColumnType.FLOAT,
    ColumnType.DOUBLE,
    ColumnType.VECTOR,
    ColumnType.JSON,
    ColumnType.GEOMETRY,
}

if writer_choice.available():
    from replicad.binlog import _speedups
    from replicad.binlog.decoder_choice import build_compiled_decoder
    from replicad.sinks.writer_choice import encode_rows, event_layout


def _image(draw, columns) -> bytes:
    nulls = draw(st.lists(st.booleans(), min_size=len(columns), max_size=len(columns)))
    out = bytearray(le(sum(1 << i for i, n in enumerate(nulls) if n), (len(columns) + 7) // 8))
    for null, (_, values) in zip(nulls, columns, strict=True):
        if not null:
            out += draw(values)
    return bytes(out)


@st.composite
def events(draw, max_columns: int = 14):
    """(columns, body, pos, kind, rows, key, mariadb): a layout, a ROWS event body of 1-4
    rows after a random prefix, the op (0 insert, 1 update, 2 delete) and key columns."""
    layout = draw(st.lists(ANY_COLUMN, min_size=1, max_size=max_columns))
    names = draw(st.lists(NAMES, min_size=len(layout), max_size=len(layout)))
    columns = [
        CompiledColumn(f"{n}{i}", spec)
        for i, (n, (spec, _)) in enumerate(zip(names, layout, strict=True))
    ]
    kind = draw(st.integers(0, 2))
    rows = draw(st.integers(1, 4))
    # Updates often rewrite a row with itself (a key that did not change).
    prefix = draw(st.binary(max_size=4))
    body = bytearray(prefix)
    for _ in range(rows):
        first = _image(draw, layout)
        body += first
        if kind == 1:
            body += first if draw(st.booleans()) else _image(draw, layout)
    candidates = [c.name for c in columns if c.spec.type_code not in _NOT_KEYS]
    key = (
        tuple(draw(st.lists(st.sampled_from(candidates), unique=True, max_size=3)))
        if (candidates)
        else ()
    )
    return columns, bytes(body), len(prefix), kind, rows, key, draw(st.booleans())


def _compiled(columns, mariadb: bool) -> Any:
    """The compiled writer of a layout (its compiled decoder, readied for encode_rows)."""
    decode = build_compiled_decoder(columns, mariadb=mariadb)
    flags = tuple(c.spec.type_code == ColumnType.JSON for c in columns)
    from replicad.sinks.envelope import value_json

    prefixes = column_prefixes([c.name for c in columns])
    return writer_choice.image_writer(decode, prefixes, lambda i, v: value_json(v, flags[i]))


def pure_pairs(columns, body: bytes, pos: int, kind: int, mariadb: bool) -> list | None:
    """The (before, after) pairs the generated pure decoder gives, image after image, or
    None where it refuses the bytes or an image runs past the end (test_decode_rows too)."""
    pure = compile_python_decoder(columns, mariadb=mariadb)
    out: list[tuple[Any, Any]] = []
    try:
        while pos < len(body):
            first, pos = pure(body, pos)
            second = None
            if kind == 1:
                second, pos = pure(body, pos)
            if pos > len(body):
                return None
            out.append((None, first) if kind == 0 else (first, second))
    except Exception:  # the pure decoder refuses these bytes
        return None
    return out


def _expected(columns, body: bytes, pos: int, kind: int, key: tuple[str, ...], mariadb: bool):
    """The pure path's messages, or None where it refuses the event."""
    pairs = pure_pairs(columns, body, pos, kind, mariadb)
    if pairs is None:
        return None
    json_columns = frozenset(c.name for c in columns if c.spec.type_code == ColumnType.JSON)
    op = "cud"[kind]
    out = []
    try:
        for row, (before, after) in enumerate(pairs):
            change = RowChange(op, "db", "t", before, after, "f", 4, row, None, 1, 0, key)
            for message_op, b, a in row_messages(change):
                image = b if message_op == "d" else a
                key_bytes = dumps({k: image.get(k) for k in key}) if key else None
                value = b'{"before":%b,"after":%b%b%d%b' % (
                    _dumps_row(_row(b, json_columns)),
                    _dumps_row(_row(a, json_columns)),
                    HEAD,
                    row,
                    TAILS["cud".index(message_op)],
                )
                out.append((message_op, row, key_bytes, value))
    except Exception:  # the pure path refuses these rows
        return None
    return out


def _encode(columns, body, pos, kind, key, mariadb, *, lines=False, row0=0):
    first = _compiled(columns, mariadb)
    names = [c.name for c in columns]
    index = tuple(names.index(k) for k in key)
    second, split = (first, bool(key)) if kind == 1 else (None, False)
    layout = event_layout(
        first, second, split, column_prefixes(key), index, index if second else ()
    )
    key_mode = KEY_COLUMNS if key else KEY_NONE
    return encode_rows(layout, body, pos, kind, HEAD, TAILS, row0, key_mode, None, lines)


@pytest.mark.skipif(not writer_choice.available(), reason="_writer is not built")
@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events())
def test_compiled_messages_equal_the_pure_path(event) -> None:
    columns, body, pos, kind, rows, key, mariadb = event
    expected = _expected(columns, body, pos, kind, key, mariadb)
    if expected is None:
        with pytest.raises(Exception):  # noqa: B017 - any refusal sends the event row by row
            _encode(columns, body, pos, kind, key, mariadb)
        return
    messages, count = _encode(columns, body, pos, kind, key, mariadb)
    assert count == rows
    assert messages == expected
    # the JSON-lines form is the same messages, each followed by a newline
    joined, count = _encode(columns, body, pos, kind, key, mariadb, lines=True)
    assert joined == b"".join(value + b"\n" for *_, value in expected)


@pytest.mark.skipif(not writer_choice.available(), reason="_writer is not built")
def test_constant_key_and_row_numbers() -> None:
    from replicad.binlog.values import ColumnSpec

    columns = [CompiledColumn("id", ColumnSpec(ColumnType.LONG, 0))]
    body = b"\x00" + le(7, 4) + b"\x00" + le(8, 4)
    layout = event_layout(_compiled(columns, False), None, False, (), (), ())
    messages, count = encode_rows(layout, body, 0, 0, HEAD, TAILS, 41, KEY_CONSTANT, b"K", False)
    assert count == 2
    assert [(m[0], m[1], m[2]) for m in messages] == [("c", 41, b"K"), ("c", 42, b"K")]
    assert messages[1][3] == b'{"before":null,"after":{"id":8}' + HEAD + b"42" + TAILS[0]
    # a row that runs past the event refuses the whole event
    with pytest.raises(IndexError):
        encode_rows(layout, body[:-1], 0, 0, HEAD, TAILS, 0, KEY_NONE, None, False)


@pytest.mark.skipif(not writer_choice.available(), reason="_writer is not built")
def test_integer_sizes_follow_the_opcodes() -> None:
    """`int_size` and `unsigned_int` in _speedups.pxd compute from the opcode number: the
    integer opcodes must keep their order."""
    order = ["i8", "u8", "i16", "u16", "i24", "u24", "i32", "u32", "i64", "u64"]
    assert [_speedups.OPCODES[n] for n in order] == list(range(1, 11))


@pytest.mark.skipif(not writer_choice.available(), reason="_writer is not built")
def test_edge_values_print_as_the_pure_path() -> None:
    """Values random layouts rarely reach: every ASCII control character and escapes in
    text, every byte in base64, the doubles where orjson and repr() differ (exponents -5,
    -6, +16, subnormals, -0.0), DECIMALs at the edge of exponent notation, DATETIME and
    TIMESTAMP with and without fractions."""
    from decimal import Decimal

    from replicad.binlog.values import ColumnSpec
    from tests.unit.test_accel import (
        encode_datetime2,
        encode_decimal,
        encode_timestamp2,
        string_meta,
    )

    text = "".join(map(chr, range(128))) + 'é😀"\\/\u2028'
    varchar = ColumnSpec(ColumnType.VARCHAR, 2000, codec="utf-8", charset_known=True)
    blob = ColumnSpec(ColumnType.BLOB, 2, charset_known=True)
    binary = ColumnSpec(ColumnType.STRING, string_meta(ColumnType.STRING, 8), charset_known=True)
    double = ColumnSpec(ColumnType.DOUBLE, 8)
    columns = [
        CompiledColumn("t", varchar),
        CompiledColumn("b", blob),
        CompiledColumn("p", binary),
        CompiledColumn("f", double),
        CompiledColumn("d", ColumnSpec(ColumnType.NEWDECIMAL, 10 << 8 | 20)),
        CompiledColumn("d0", ColumnSpec(ColumnType.NEWDECIMAL, 0 << 8 | 5)),
        CompiledColumn("at", ColumnSpec(ColumnType.DATETIME2, 6)),
        CompiledColumn("ts", ColumnSpec(ColumnType.TIMESTAMP2, 3)),
    ]
    floats = [
        1e-5,
        1.5e-5,
        9.99e-6,
        1e-6,
        1e-7,
        1e16,
        1e15,
        123.0,
        -0.0,
        5e-324,
        1.7e308,
        0.1,
        -2.5e-5,
        1e22,
    ]
    decimals = [
        "0.000001",
        "0.0000001",
        "-0.0000001",
        "0",
        "-1.5",
        "1234567890.0123456789",
        "0.00000000001",
        "-0.000010",
    ]
    body = bytearray()
    for i in range(max(len(floats), len(decimals), 3)):
        body += b"\x00"  # no NULLs
        raw = text.encode()
        body += le(len(raw), 2) + raw
        blob_bytes = bytes(range(256))[i:] + bytes(range(i))
        body += le(len(blob_bytes), 2) + blob_bytes
        short = bytes([0, 1, 2])[: i % 4]  # BINARY(8) pads to 8 with zero bytes
        body += le(len(short), 1) + short
        body += struct.pack("<d", floats[i % len(floats)])
        unscaled = Decimal(decimals[i % len(decimals)]).scaleb(10)
        body += encode_decimal(int(unscaled), 20, 10)
        body += encode_decimal(i * 7 - 20, 5, 0)
        body += encode_datetime2(6, 2024, 2, 29, 23, 59, 58, (i % 3) * 1000)
        body += encode_timestamp2(3, 1700000000 + i, (i % 2) * 123000)
    for kind in (0, 2):
        expected = _expected(columns, bytes(body), 0, kind, (), False)
        assert expected is not None
        messages, _ = _encode(columns, bytes(body), 0, kind, (), False)
        assert messages == expected


# --------------------------------------------------------------------- single-byte charsets


def _single_byte_columns(codec: str) -> list[CompiledColumn]:
    from replicad.binlog.values import ColumnSpec
    from tests.unit.test_accel import string_meta

    def spec(t: int, meta: int) -> ColumnSpec:
        return ColumnSpec(t, meta, codec=codec, charset_known=True)

    return [
        CompiledColumn("v", spec(ColumnType.VARCHAR, 300)),  # 2-byte length
        CompiledColumn("c", spec(ColumnType.STRING, string_meta(ColumnType.STRING, 3))),
        CompiledColumn("tx", spec(ColumnType.BLOB, 2)),  # TEXT
    ]


def _text_rows(values: list[tuple[bytes, bytes, bytes]]) -> bytes:
    body = bytearray()
    for v, c, tx in values:
        body += b"\x00" + le(len(v), 2) + v + le(len(c), 1) + c + le(len(tx), 2) + tx
    return bytes(body)


def _assert_text_paths_equal(codec: str, values: list[tuple[bytes, bytes, bytes]]) -> None:
    """Compiled rows and messages of these values equal the pure path's, and each value is
    what charsets.decode_text gives (str, or the bytes when the charset rejects one)."""
    from replicad.binlog.charsets import decode_text

    columns = _single_byte_columns(codec)
    body = _text_rows(values)
    for kind in (0, 1, 2):  # an update pairs each image with itself
        update_body = b"".join(_text_rows([v]) * 2 for v in values)
        event_body = update_body if kind == 1 else body
        expected = _expected(columns, event_body, 0, kind, ("v",), True)
        assert expected is not None
        messages, count = _encode(columns, event_body, 0, kind, ("v",), True)
        assert count == len(values)
        assert messages == expected
    compiled = build_compiled_decoder(columns, mariadb=True)
    pure = compile_python_decoder(columns, mariadb=True)
    pos = 0
    for v, c, tx in values:
        row, end = compiled(body, pos)
        assert (row, end) == pure(body, pos)
        assert [row["v"], row["c"], row["tx"]] == [decode_text(x, codec) for x in (v, c, tx)]
        pos = end


SINGLE_BYTE = sorted(SINGLE_BYTE_CODECS)


@pytest.mark.skipif(not writer_choice.available(), reason="_writer is not built")
@pytest.mark.parametrize("codec", SINGLE_BYTE)
def test_every_byte_of_single_byte_charsets(codec: str) -> None:
    """Each byte 0x00-0xFF alone, after a letter and around one, and all 256 in one value
    (forwards and backwards), in a VARCHAR, a CHAR and a TEXT of each single-byte charset
    the compiled path writes through its table (MySQL's latin1 and 18 others)."""
    every = bytes(range(256))
    values = [(bytes([b]), b"A" + bytes([b]), bytes([b, 0x42, b])) for b in range(256)]
    _assert_text_paths_equal(codec, [*values, (every, b"xyz", every[::-1])])


@pytest.mark.skipif(not writer_choice.available(), reason="_writer is not built")
@settings(max_examples=400, deadline=None)
@given(
    codec=st.sampled_from(SINGLE_BYTE),
    values=st.lists(
        st.tuples(st.binary(max_size=300), st.binary(max_size=3), st.binary(max_size=300)),
        min_size=1,
        max_size=4,
    ),
)
def test_single_byte_text_random(codec: str, values: list[tuple[bytes, bytes, bytes]]) -> None:
    _assert_text_paths_equal(codec, values)


# UTF-8 text heavy in what JSON escapes, around the compiled writer's eight-byte steps
_ESCAPED_TEXT = st.text(
    alphabet=st.sampled_from(['"', "\\", "\n", "\x00", "\x1f", "\x7f", " ", "a", "é", "€", "😀"]),
    max_size=40,
).map(lambda text: text.encode())


@pytest.mark.skipif(not writer_choice.available(), reason="_writer is not built")
@settings(max_examples=400, deadline=None)
@given(
    values=st.lists(
        st.tuples(_ESCAPED_TEXT, st.sampled_from([b"", b"a", b'"', b"\x01"]), _ESCAPED_TEXT),
        min_size=1,
        max_size=4,
    ),
)
def test_utf8_text_with_escapes_random(values: list[tuple[bytes, bytes, bytes]]) -> None:
    """UTF-8 values (utf8mb4 columns) where quotes, backslashes and control characters fall
    at every offset of the writer's eight-byte copies: the same JSON as the pure path."""
    _assert_text_paths_equal("utf-8", values)


def test_without_the_compiled_writer_every_event_goes_row_by_row(monkeypatch) -> None:
    """The pure-Python fallbacks: decoders switched off (REPLICAD_PURE_PYTHON=1,
    `decoder_choice.set_enabled(False)`) or no compiled writer (REPLICAD_NO_EXTENSIONS=1)."""
    from replicad.binlog import decoder_choice
    from replicad.sinks.event_envelope import EventEncoder

    monkeypatch.setattr(decoder_choice, "_enabled", False)
    assert not EventEncoder.available()
    monkeypatch.setattr(decoder_choice, "_enabled", True)
    monkeypatch.setattr(writer_choice, "_writer", None)
    assert not EventEncoder.available()
    decode = compile_python_decoder([], mariadb=False)
    assert writer_choice.image_writer(decode, (), lambda i, v: b"") is None
    with pytest.raises(RuntimeError, match="not built"):
        writer_choice.event_layout(None, None, False, (), (), ())
    with pytest.raises(RuntimeError, match="not built"):
        writer_choice.encode_rows(None, b"", 0, 0, b"", (), 0, KEY_NONE, None, False)
