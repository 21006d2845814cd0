"""The compiled row decoder (`_speedups` via `accel`) against the generated Python decoder,
and the switch between them (`decoder_choice`).

Row images are built by a small encoder written here from the documented binlog layouts
(values well-formed, plus raw bytes for the fixed-size types so that invalid dates, huge
fractions, corrupt DECIMAL groups ... are covered). For every random layout both decoders
must return identical rows - same keys in the same order, same type and value for every
cell (floats bit for bit, Decimals digit and exponent for exponent) - or both raise. Random
bytes must never crash the accelerated decoder: it returns, or raises one of the errors
`RowsEvent.rows()` turns into a MalformedEventError.
"""

from __future__ import annotations

import datetime as dt
import os
import struct
import subprocess
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replicad.binlog import accel, decoder_choice
from replicad.binlog.codegen import CompiledColumn, compile_python_decoder
from replicad.binlog.values import ColumnSpec, ColumnType, Geometry
from replicad.errors import BinlogError
from tests.helpers import events as ev
from tests.unit.test_jsonb import plain_documents

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
needs_extension = pytest.mark.skipif(
    not decoder_choice.available(), reason="replicad.binlog._speedups is not built"
)
T = ColumnType
DIG2BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)
# errors RowsEvent.rows() turns into MalformedEventError (or re-raises with context)
ROW_ERRORS = (IndexError, ValueError, OverflowError, TypeError, struct.error, BinlogError)


# --------------------------------------------------------------------------- comparison


def same(a: Any, b: Any) -> bool:
    """Identical for the decoder's purposes: same type, same value, same representation."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return struct.pack("<d", a) == struct.pack("<d", b)
    if isinstance(a, Decimal):
        return a.as_tuple() == b.as_tuple()
    if isinstance(a, dt.datetime):
        return a == b and a.tzinfo is b.tzinfo and a.fold == b.fold
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    return a == b


def outcome(decode, body: Any, pos: int) -> tuple[str, Any]:
    try:
        return "ok", decode(body, pos)
    except Exception as exc:  # compared by the caller
        return "error", exc


# --------------------------------------------------------------------------- encoder


def le(value: int, n: int) -> bytes:
    return (value % (1 << (8 * n))).to_bytes(n, "little")


def be(value: int, n: int) -> bytes:
    return (value % (1 << (8 * n))).to_bytes(n, "big")


def fraction(fsp: int) -> tuple[int, int]:
    if fsp <= 0:
        return 0, 1
    return ((1, 10000), (1, 10000), (2, 100), (2, 100), (3, 1), (3, 1))[min(fsp, 6) - 1]


def encode_decimal(unscaled: int, precision: int, scale: int) -> bytes:
    """decimal2bin: groups of 9 digits in 4 bytes, partial groups in DIG2BYTES bytes, the
    leading one of the integer part and the trailing one of the fraction; sign bit set for
    positive values, every bit inverted for negative ones."""
    intg = precision - scale
    digits = str(abs(unscaled)).rjust(precision, "0")
    ip, fp = digits[:intg], digits[intg:]
    out = bytearray()
    lead = intg % 9
    if lead:
        out += be(int(ip[:lead]), DIG2BYTES[lead])
    for i in range(lead, intg, 9):
        out += be(int(ip[i : i + 9]), 4)
    full = scale - scale % 9
    for i in range(0, full, 9):
        out += be(int(fp[i : i + 9]), 4)
    if scale % 9:
        out += be(int(fp[full:]), DIG2BYTES[scale % 9])
    out[0] |= 0x80
    if unscaled < 0:
        out = bytearray(b ^ 0xFF for b in out)
    return bytes(out)


def decimal_size(precision: int, scale: int) -> int:
    intg = precision - scale
    return (intg // 9) * 4 + DIG2BYTES[intg % 9] + (scale // 9) * 4 + DIG2BYTES[scale % 9]


def encode_datetime2(fsp: int, y: int, mo: int, d: int, h: int, mi: int, s: int, us: int) -> bytes:
    ymd = ((y * 13 + mo) << 5) | d
    hms = (h << 12) | (mi << 6) | s
    nbytes, div = fraction(fsp)
    return be((ymd << 17 | hms) + 0x8000000000, 5) + (be(us // div, nbytes) if nbytes else b"")


def encode_timestamp2(fsp: int, seconds: int, us: int) -> bytes:
    nbytes, div = fraction(fsp)
    return be(seconds, 4) + (be(us // div, nbytes) if nbytes else b"")


def _c_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


def encode_time2(fsp: int, negative: bool, h: int, mi: int, s: int, us: int) -> bytes:
    """my_time_packed_to_binary (MySQL my_time.cc), C integer semantics included."""
    packed = ((h << 12 | mi << 6 | s) << 24) + us
    if negative:
        packed = -packed
    int_part = packed >> 24
    frac_part = packed - _c_div(packed, 1 << 24) * (1 << 24)  # C's %: sign of the dividend
    nbytes, div = fraction(fsp)
    if nbytes == 3:
        return be(packed + 0x800000000000, 6)
    head = be(int_part + 0x800000, 3)
    if nbytes == 0:
        return head
    return head + be(_c_div(frac_part, div), nbytes)


def encode_date(y: int, mo: int, d: int) -> bytes:
    return le(y << 9 | mo << 5 | d, 3)


def string_meta(real: int, length: int) -> int:
    """The STRING metadata packing (real type, byte length) that real_type_and_length undoes."""
    hi = length >> 8
    return (((real & 0xCF) | ((hi << 4) ^ 0x30)) << 8) | (length & 0xFF)


# --------------------------------------------------------------------------- strategies

CHARSETS = [
    (False, None),  # no charset in the metadata: UTF-8 if valid
    (True, None),  # binary collation
    (True, "utf-8"),
    (True, "mysql_latin1"),
    (True, "utf_16_be"),
    (True, "utf_32_be"),
    (True, "cp1251"),
    (True, "iso8859_2"),
    (True, "iso8859_7"),  # single-byte, with bytes the server leaves undefined
    (True, "ascii"),
    (True, "utf8"),  # another spelling of a codec: goes through the codec path
]
TRICKY_UTF8 = [
    b"",
    b"\xc0\x80",  # overlong
    b"\xed\xa0\x80",  # surrogate
    b"\xf4\x90\x80\x80",  # > U+10FFFF
    b"\xe2\x82",  # truncated
    b"caf\xc3\xa9",
    "😀x東".encode(),
    b"\xff\xfe",
    b"\x81\x8d\x8f\x90\x9d",  # the five bytes cp1252 leaves undefined
]


def text_bytes(max_size: int) -> st.SearchStrategy[bytes]:
    return st.one_of(
        st.text(max_size=max_size // 4).map(lambda s: s.encode("utf-8", "surrogatepass")),
        st.binary(max_size=max_size),
        st.sampled_from(TRICKY_UTF8),
        st.text(max_size=max_size // 4).map(lambda s: s.encode("utf-16-be", "surrogatepass")),
    ).map(lambda b: b[:max_size])


def names_strategy(max_size: int = 12) -> st.SearchStrategy[tuple[str, ...] | None]:
    return st.one_of(
        st.none(),
        st.lists(st.text(max_size=4), max_size=max_size).map(tuple),
    )


Column = tuple[ColumnSpec, st.SearchStrategy[bytes]]


def _fixed(n: int, valid: st.SearchStrategy[bytes] | None = None) -> st.SearchStrategy[bytes]:
    raw = st.binary(min_size=n, max_size=n)
    return raw if valid is None else st.one_of(valid, raw)


@st.composite
def integer_column(draw) -> Column:
    t, size = draw(
        st.sampled_from([(T.TINY, 1), (T.SHORT, 2), (T.INT24, 3), (T.LONG, 4), (T.LONGLONG, 8)])
    )
    unsigned = draw(st.booleans())
    lo, hi = (0, (1 << 8 * size) - 1) if unsigned else (-(1 << 8 * size - 1), (1 << 8 * size - 1))
    valid = st.one_of(st.integers(lo, hi), st.sampled_from([lo, hi, 0, -1 if lo else 1]))
    return ColumnSpec(t, 0, unsigned=unsigned), _fixed(size, valid.map(lambda v: le(v, size)))


@st.composite
def float_column(draw) -> Column:
    if draw(st.booleans()):
        floats = st.floats(width=32).map(lambda v: struct.pack("<f", v))
        return ColumnSpec(T.FLOAT, 4), _fixed(4, floats)
    return ColumnSpec(T.DOUBLE, 8), _fixed(8, st.floats().map(lambda v: struct.pack("<d", v)))


@st.composite
def decimal_column(draw) -> Column:
    if draw(st.integers(0, 9)) == 0:  # metadata the generated code does not inline
        precision, scale = draw(st.sampled_from([(66, 2), (70, 31), (10, 31), (5, 6)]))
    else:
        precision = draw(st.integers(1, 65))
        scale = draw(st.integers(0, min(30, precision)))
    spec = ColumnSpec(T.NEWDECIMAL, scale << 8 | precision)
    if precision > 65 or scale > 30 or scale > precision:
        return spec, st.binary(min_size=0, max_size=40)
    size = decimal_size(precision, scale)
    limit = 10**precision - 1
    valid = st.one_of(
        st.integers(-limit, limit),
        st.sampled_from([0, limit, -limit, 1, -1, 10**scale, -(10**scale)]),
    ).map(lambda n: encode_decimal(n, precision, scale))
    return spec, _fixed(size, valid)


@st.composite
def text_column(draw) -> Column:
    known, codec = draw(st.sampled_from(CHARSETS))
    kind = draw(st.sampled_from(["varchar", "var_string", "char", "blob", "blobtype"]))
    if kind in ("varchar", "var_string"):
        meta = draw(st.one_of(st.integers(1, 255), st.integers(256, 65535)))
        prefix = 1 if meta < 256 else 2
        t = T.VARCHAR if kind == "varchar" else T.VAR_STRING
        max_size = 300 if prefix == 2 else 255
    elif kind == "char":
        length = draw(st.one_of(st.integers(0, 255), st.integers(256, 1023)))
        meta = string_meta(T.STRING, length)
        prefix = 1 if length < 256 else 2
        t = T.STRING
        max_size = 300 if prefix == 2 else 255
    else:
        t = T.BLOB if kind == "blob" else draw(st.sampled_from([T.TINY_BLOB, T.MEDIUM_BLOB]))
        meta = draw(st.sampled_from([1, 2, 3, 4]))
        prefix = meta
        max_size = 255 if prefix == 1 else 400
    spec = ColumnSpec(t, meta, codec=codec, charset_known=known)
    data = text_bytes(max_size).map(lambda b: le(len(b), prefix) + b)
    return spec, data


@st.composite
def enum_set_column(draw) -> Column:
    is_enum = draw(st.booleans())
    direct = draw(st.integers(0, 4)) == 0  # type 247/248 instead of STRING-packed metadata
    size = draw(st.sampled_from([1, 2])) if is_enum else draw(st.integers(1, 8))
    real = T.ENUM if is_enum else T.SET
    t, meta = (real, size) if direct else (T.STRING, real << 8 | size)
    names = draw(names_strategy(70 if not is_enum and size == 8 else 12))
    spec = ColumnSpec(
        t,
        meta,
        enum_values=list(names) if is_enum and names is not None else None,
        set_values=list(names) if not is_enum and names is not None else None,
    )
    return spec, st.binary(min_size=size, max_size=size)


@st.composite
def temporal_column(draw) -> Column:
    kind = draw(st.sampled_from(["date", "datetime2", "timestamp2", "time2", "year"]))
    fsp = draw(st.one_of(st.integers(0, 6), st.integers(7, 255)))
    if kind == "year":
        return ColumnSpec(T.YEAR, 0), st.binary(min_size=1, max_size=1)
    if kind == "date":
        valid = st.one_of(
            st.dates().map(lambda d: encode_date(d.year, d.month, d.day)),
            st.tuples(st.integers(0, 9999), st.integers(0, 12), st.integers(0, 31)).map(
                lambda t: encode_date(*t)
            ),
        )
        return ColumnSpec(draw(st.sampled_from([T.DATE, T.NEWDATE])), 0), _fixed(3, valid)
    nbytes, _ = fraction(fsp)
    if kind == "datetime2":
        valid = st.one_of(
            st.datetimes().map(
                lambda v: encode_datetime2(
                    fsp, v.year, v.month, v.day, v.hour, v.minute, v.second, v.microsecond
                )
            ),
            st.tuples(
                st.integers(0, 9999),
                st.integers(0, 12),
                st.integers(0, 31),
                st.integers(0, 23),
                st.integers(0, 59),
                st.integers(0, 59),
                st.integers(0, 999999),
            ).map(lambda t: encode_datetime2(fsp, *t)),
        )
        return ColumnSpec(T.DATETIME2, fsp), _fixed(5 + nbytes, valid)
    if kind == "timestamp2":
        valid = st.tuples(st.integers(0, 2**32 - 1), st.integers(0, 999999)).map(
            lambda t: encode_timestamp2(fsp, *t)
        )
        zero = st.just(encode_timestamp2(fsp, 0, 0))
        return ColumnSpec(T.TIMESTAMP2, fsp), _fixed(4 + nbytes, st.one_of(valid, zero))
    keep = 10 ** (6 - min(fsp, 6))  # the digits this precision stores
    valid = st.tuples(
        st.booleans(),
        st.integers(0, 838),
        st.integers(0, 59),
        st.integers(0, 59),
        st.integers(0, 999999).map(lambda us: us // keep * keep),
    ).map(lambda t: encode_time2(fsp, *t))
    return ColumnSpec(T.TIME2, fsp), _fixed(3 + nbytes, valid)


@st.composite
def bit_column(draw) -> Column:
    meta = draw(st.one_of(st.integers(0, 8 << 8 | 7), st.integers(0, 0xFFFF)))
    nbytes = (meta >> 8) + (1 if meta & 0xFF else 0)
    return ColumnSpec(T.BIT, meta), st.binary(min_size=nbytes, max_size=nbytes)


def _geometry(srid_wkb: tuple[int, bytes]) -> bytes:
    return struct.pack("<I", srid_wkb[0]) + srid_wkb[1]


@st.composite
def fallback_column(draw) -> Column:
    """Types decoded by the values.py closure inside the compiled decoder."""
    kind = draw(
        st.sampled_from(["datetime", "timestamp", "time", "geometry", "json", "vector", "null"])
    )
    if kind == "datetime":
        return ColumnSpec(T.DATETIME, 0), st.binary(min_size=8, max_size=8)
    if kind == "timestamp":
        return ColumnSpec(T.TIMESTAMP, 0), st.binary(min_size=4, max_size=4)
    if kind == "time":
        return ColumnSpec(T.TIME, 0), st.binary(min_size=3, max_size=3)
    if kind == "null":
        return ColumnSpec(T.NULL, 0), st.just(b"")
    meta = draw(st.sampled_from([1, 2, 3, 4]))
    if kind == "geometry":
        payload = st.tuples(st.integers(0, 2**32 - 1), st.binary(max_size=40)).map(_geometry)
        return ColumnSpec(T.GEOMETRY, meta), payload.map(lambda b: le(len(b), meta) + b)
    if kind == "vector":
        payload = st.lists(st.floats(width=32), max_size=5).map(
            lambda xs: b"".join(struct.pack("<f", x) for x in xs)
        )
        return ColumnSpec(T.VECTOR, meta), payload.map(lambda b: le(len(b), meta) + b)
    # MySQL binary JSON: a literal (null/true/false), an int16 scalar, documents the compiled
    # envelope prints in C, and ones it leaves to Python (an opaque DECIMAL, a string that
    # is not UTF-8).
    doc = st.one_of(
        st.sampled_from([b"\x04\x00", b"\x04\x01", b"\x04\x02"]),
        st.integers(-(2**15), 2**15 - 1).map(lambda v: b"\x05" + struct.pack("<h", v)),
        plain_documents.map(ev.jsonb),
        st.sampled_from([bytes([0x0F, 0xF6, 4, 5, 2, 0x81, 0x0D, 0xFB]), b"\x0c\x02\xff\xfe"]),
    )
    return ColumnSpec(T.JSON, meta), doc.map(lambda b: le(len(b), meta) + b)


ANY_COLUMN = st.one_of(
    integer_column(),
    float_column(),
    decimal_column(),
    text_column(),
    enum_set_column(),
    temporal_column(),
    bit_column(),
    fallback_column(),
)
NAMES = st.sampled_from(["id", "a", "b", "ключ", "名前", "x y", ""])


@st.composite
def row_images(draw, max_columns: int = 24):
    """(columns, body, pos, images, mariadb): a random layout and one or two row images after
    a random prefix."""
    columns = draw(st.lists(ANY_COLUMN, min_size=0, max_size=max_columns))
    names = draw(st.lists(NAMES, min_size=len(columns), max_size=len(columns)))
    compiled = [CompiledColumn(n, spec) for n, (spec, _) in zip(names, columns, strict=True)]
    prefix = draw(st.binary(max_size=5))
    body = bytearray(prefix)
    images = draw(st.integers(1, 2))
    for _ in range(images):
        nulls = draw(st.lists(st.booleans(), min_size=len(columns), max_size=len(columns)))
        bitmap = sum(1 << i for i, null in enumerate(nulls) if null)
        body += le(bitmap, (len(columns) + 7) // 8)
        for null, (_, values) in zip(nulls, columns, strict=True):
            if not null:
                body += draw(values)
    body += draw(st.binary(max_size=4))  # e.g. the next event's bytes
    return compiled, bytes(body), len(prefix), images, draw(st.booleans())


# --------------------------------------------------------------------------- tests


def _decoders(columns, mariadb):
    pure = compile_python_decoder(columns, mariadb=mariadb)
    fast = decoder_choice.build_compiled_decoder(columns, mariadb=mariadb)
    assert fast is not None
    return pure, fast


def _assert_same_images(columns, body: bytes, pos: int, images: int, mariadb: bool) -> None:
    pure, fast = _decoders(columns, mariadb)
    for _ in range(images):
        expected, got = outcome(pure, body, pos), outcome(fast, body, pos)
        if expected[0] == "error":
            assert got[0] == "error", f"pure raised {expected[1]!r}, accelerated returned {got}"
            assert isinstance(got[1], ROW_ERRORS), repr(got[1])
            return
        _, end = expected[1]
        if end > len(body):  # overran: the accelerated decoder may refuse it earlier
            assert got[0] == "error" or got[1][1] > len(body), got
            if got[0] == "error":
                assert isinstance(got[1], ROW_ERRORS), repr(got[1])
            return
        assert got[0] == "ok", f"accelerated raised {got[1]!r}, pure returned {expected[1]}"
        assert same(got[1], expected[1]), f"\n  pure: {expected[1]}\n  fast: {got[1]}"
        pos = end


@needs_extension
@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(row_images())
def test_random_layouts_decode_identically(image) -> None:
    _assert_same_images(*image)


@needs_extension
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(row_images(max_columns=80))
def test_wide_layouts_decode_identically(image) -> None:
    _assert_same_images(*image)


@needs_extension
@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    layout=st.lists(ANY_COLUMN, max_size=16),
    body=st.binary(max_size=200),
    pos=st.integers(0, 20),
    mariadb=st.booleans(),
)
def test_random_bytes_never_crash(layout, body, pos, mariadb) -> None:
    columns = [CompiledColumn(f"c{i}", spec) for i, (spec, _) in enumerate(layout)]
    pure, fast = _decoders(columns, mariadb)
    expected, got = outcome(pure, body, pos), outcome(fast, body, pos)
    if got[0] == "error":
        assert isinstance(got[1], ROW_ERRORS), repr(got[1])
        # refusing is fine only where the pure decoder refuses or overruns too
        assert expected[0] == "error" or expected[1][1] > len(body), (expected, got)
    else:
        _, end = got[1]
        if end <= len(body):
            assert expected[0] == "ok" and same(got[1], expected[1]), (expected, got)


# --------------------------------------------------------------------------- edge cases


def _one(spec: ColumnSpec, value_bytes: bytes, *, mariadb: bool = True) -> Any:
    columns = [CompiledColumn("v", spec)]
    body = b"\x00" + value_bytes
    pure, fast = _decoders(columns, mariadb)
    expected = pure(body, 0)
    got = fast(body, 0)
    assert same(got, expected), (got, expected)
    assert got[1] == len(body)
    return got[0]["v"]


@needs_extension
@pytest.mark.parametrize(
    ("precision", "scale", "unscaled", "text"),
    [
        (12, 2, 1250, "12.50"),
        (12, 2, -1250, "-12.50"),
        (12, 2, 0, "0.00"),
        (10, 0, -9999999999, "-9999999999"),
        (9, 9, -999999999, "-0.999999999"),
        (18, 4, 10**18 - 1, "99999999999999.9999"),
        (19, 4, -(10**19 - 1), "-999999999999999.9999"),
        (37, 10, 10**37 - 1, "9" * 27 + "." + "9" * 10),
        (38, 10, -(10**38 - 1), "-" + "9" * 28 + "." + "9" * 10),
        (65, 30, 10**65 - 1, "9" * 35 + "." + "9" * 30),
        (65, 30, 1, "0." + "0" * 29 + "1"),
        (1, 0, 0, "0"),
    ],
)
def test_decimal_keeps_its_exponent(precision, scale, unscaled, text) -> None:
    value = _one(
        ColumnSpec(T.NEWDECIMAL, scale << 8 | precision), encode_decimal(unscaled, precision, scale)
    )
    assert value == Decimal(text)
    assert value.as_tuple().exponent == -scale


@needs_extension
@pytest.mark.parametrize(
    ("precision", "scale"), [(17, 1), (18, 0), (19, 0), (38, 0), (39, 1), (65, 30)]
)
@pytest.mark.parametrize("fill", [0x00, 0xFF, 0x7F, 0x80])
def test_decimal_with_corrupt_groups(precision, scale, fill) -> None:
    """Groups larger than their digit count (9-digit groups up to 2^32-1, the leading
    partial group up to its byte maximum) overflow 64 bits well before 19 digits."""
    spec = ColumnSpec(T.NEWDECIMAL, scale << 8 | precision)
    value = _one(spec, bytes([fill]) * decimal_size(precision, scale))
    assert isinstance(value, Decimal)


@needs_extension
@pytest.mark.parametrize(
    ("t", "unsigned", "raw", "expected"),
    [
        (T.TINY, False, b"\x80", -128),
        (T.TINY, True, b"\x80", 128),
        (T.SHORT, False, b"\x00\x80", -32768),
        (T.INT24, False, b"\x00\x00\x80", -(2**23)),
        (T.INT24, True, b"\xff\xff\xff", 2**24 - 1),
        (T.LONG, False, b"\x00\x00\x00\x80", -(2**31)),
        (T.LONG, True, b"\xff\xff\xff\xff", 2**32 - 1),
        (T.LONGLONG, False, b"\x00" * 7 + b"\x80", -(2**63)),
        (T.LONGLONG, True, b"\xff" * 8, 2**64 - 1),
    ],
)
def test_integer_signs(t, unsigned, raw, expected) -> None:
    assert _one(ColumnSpec(t, 0, unsigned=unsigned), raw) == expected


@needs_extension
@pytest.mark.parametrize("fsp", range(7))
@pytest.mark.parametrize(
    ("negative", "h", "m", "s", "us"),
    [
        (True, 0, 0, 0, 1),
        (True, 0, 0, 0, 10000),
        (True, 0, 0, 0, 500000),
        (True, 12, 34, 56, 500000),
        (True, 838, 59, 59, 999999),
        (False, 838, 59, 59, 999999),
        (True, 0, 0, 1, 0),
        (False, 0, 0, 0, 0),
    ],
)
def test_time2_negative_fractions(fsp, negative, h, m, s, us) -> None:
    keep = 10 ** (6 - fsp)
    us = us // keep * keep
    value = _one(ColumnSpec(T.TIME2, fsp), encode_time2(fsp, negative, h, m, s, us))
    expected = dt.timedelta(hours=h, minutes=m, seconds=s, microseconds=us)
    assert value == (-expected if negative else expected)


@needs_extension
@pytest.mark.parametrize("fsp", [0, 3, 6])
def test_zero_and_invalid_temporals(fsp) -> None:
    zero = "0000-00-00 00:00:00" + ("." + "0" * fsp if fsp else "")
    assert _one(ColumnSpec(T.TIMESTAMP2, fsp), encode_timestamp2(fsp, 0, 0)) == zero
    assert _one(ColumnSpec(T.DATETIME2, fsp), encode_datetime2(fsp, 0, 0, 0, 0, 0, 0, 0)) == zero
    assert _one(ColumnSpec(T.DATE, 0), encode_date(2020, 2, 0)) == "2020-02-00"
    assert _one(ColumnSpec(T.DATE, 0), encode_date(2021, 2, 29)) == "2021-02-29"
    assert _one(ColumnSpec(T.DATE, 0), encode_date(2024, 2, 29)) == dt.date(2024, 2, 29)
    ts = _one(ColumnSpec(T.TIMESTAMP2, fsp), encode_timestamp2(fsp, 2**32 - 1, 999999))
    assert ts.tzinfo is dt.UTC and ts.year == 2106


@needs_extension
def test_timestamp_fraction_overflow_raises_like_python() -> None:
    columns = [CompiledColumn("v", ColumnSpec(T.TIMESTAMP2, 2))]
    body = b"\x00" + encode_timestamp2(0, 5, 0) + b"\xff"  # 255 * 10000 us
    pure, fast = _decoders(columns, True)
    with pytest.raises(ValueError):
        pure(body, 0)
    with pytest.raises(ValueError):
        fast(body, 0)


@needs_extension
def test_floats_shortest_repr() -> None:
    spec = ColumnSpec(T.FLOAT, 4)
    for value in (0.1, -0.0, 3.4028234663852886e38, 1.401298464324817e-45, 16777217.0, 1e-10):
        got = _one(spec, struct.pack("<f", value))
        assert isinstance(got, float)
    assert _one(spec, struct.pack("<f", 0.1)) == 0.1
    assert repr(_one(spec, struct.pack("<f", 3.4028234663852886e38))) == "3.4028235e+38"
    nan = _one(spec, b"\x01\x00\xc0\x7f")
    assert nan != nan


@needs_extension
def test_text_binary_enum_set_bit() -> None:
    assert (
        _one(ColumnSpec(T.VARCHAR, 40, codec="utf-8", charset_known=True), b"\x03\xe6\x97\xa5")
        == "日"
    )
    assert (
        _one(ColumnSpec(T.VARCHAR, 40, codec="utf-8", charset_known=True), b"\x02\xc0\x80")
        == b"\xc0\x80"
    )
    binary = ColumnSpec(T.STRING, string_meta(T.STRING, 8), charset_known=True)
    assert _one(binary, b"\x02ab") == b"ab\x00\x00\x00\x00\x00\x00"
    latin1 = ColumnSpec(T.VARCHAR, 30, codec="mysql_latin1", charset_known=True)
    assert _one(latin1, b"\x02\x80\x81") == "€\x81"
    utf16 = ColumnSpec(T.VARCHAR, 30, codec="utf_16_be", charset_known=True)
    assert _one(utf16, b"\x03\x00a\x00") == b"\x00a\x00"  # odd length: undecodable, bytes
    enum = ColumnSpec(T.STRING, T.ENUM << 8 | 1, enum_values=["a", "b"])
    assert [_one(enum, bytes([i])) for i in range(4)] == ["", "a", "b", 3]
    set_ = ColumnSpec(T.STRING, T.SET << 8 | 1, set_values=["a", "b", "c"])
    assert _one(set_, b"\x05") == "a,c"
    assert _one(ColumnSpec(T.STRING, T.SET << 8 | 1), b"\x05") == 5
    assert _one(ColumnSpec(T.BIT, 1 << 8 | 2), b"\x02\x01") == 0x201
    assert (
        _one(ColumnSpec(T.BLOB, 4, charset_known=True), le(3, 4) + b"\xff\x00\x01")
        == b"\xff\x00\x01"
    )
    assert _one(ColumnSpec(T.GEOMETRY, 4), le(6, 4) + b"\xe6\x10\x00\x00\x01\x02") == Geometry(
        4326, b"\x01\x02"
    )


@needs_extension
def test_overrun_raises_index_error() -> None:
    columns = [CompiledColumn("v", ColumnSpec(T.BLOB, 4))]
    pure, fast = _decoders(columns, True)
    body = b"\x00" + le(1000, 4) + b"abc"
    assert pure(body, 0)[1] > len(body)  # pure: a short slice, then a position past the end
    with pytest.raises(IndexError):
        fast(body, 0)
    with pytest.raises(IndexError):
        fast(b"", 0)


@needs_extension
def test_non_bytes_bodies_use_the_python_decoder() -> None:
    columns = [
        CompiledColumn("a", ColumnSpec(T.VARCHAR, 10, charset_known=True)),
        CompiledColumn("b", ColumnSpec(T.LONG, 0)),
    ]
    body = b"\x00\x02hi\x01\x00\x00\x00"
    pure, fast = _decoders(columns, True)
    for wrapped in (bytearray(body),):
        assert same(fast(wrapped, 0), pure(wrapped, 0))
        assert type(fast(wrapped, 0)[0]["a"]) is bytearray
    assert same(fast(body, 0), pure(body, 0))


# --------------------------------------------------------------------------- switching


def test_disabled_or_missing_extension_uses_python(monkeypatch) -> None:
    columns = [CompiledColumn("v", ColumnSpec(T.LONG, 0))]
    monkeypatch.setattr(decoder_choice, "_enabled", False)
    decode = decoder_choice.build_image_decoder(columns, mariadb=True)
    assert decode.__name__ == "decode" and decode.__code__.co_filename == "<replicad row decoder>"
    monkeypatch.setattr(decoder_choice, "_enabled", True)
    monkeypatch.setattr(decoder_choice, "_speedups", None)
    assert not decoder_choice.active()
    assert decoder_choice.build_compiled_decoder(columns, mariadb=True) is None
    decode = decoder_choice.build_image_decoder(columns, mariadb=True)
    assert decode.__code__.co_filename == "<replicad row decoder>"
    assert decode(b"\x00\x01\x00\x00\x00", 0) == ({"v": 1}, 5)


@needs_extension
def test_set_enabled_switches_and_caches_apart(monkeypatch) -> None:
    from replicad.binlog import rows

    monkeypatch.setattr(decoder_choice, "_enabled", decoder_choice.enabled())
    table = rows.TableMapEvent(
        None,
        column_types=bytes([T.LONG]),
        column_metas=(0,),
        columns=[rows.Column(0, "v", T.LONG, 0, True)],
        layout_key=b"test_accel layout",
    )
    decoder_choice.set_enabled(True)
    fast = table.image_decoder(1)
    decoder_choice.set_enabled(False)
    pure = table.image_decoder(1)
    assert fast is not pure
    assert decoder_choice.is_compiled(fast.decode) and not decoder_choice.is_compiled(pure.decode)
    assert pure.decode.__code__.co_filename == "<replicad row decoder>"
    other = rows.TableMapEvent(
        None,
        column_types=bytes([T.LONG]),
        column_metas=(0,),
        columns=[rows.Column(0, "v", T.LONG, 0, True)],
        layout_key=b"test_accel layout",
    )
    assert other.image_decoder(1) is pure  # shared between maps of one layout, per mode
    decoder_choice.set_enabled(True)
    assert other.image_decoder(1) is fast
    assert fast.decode(b"\x00\x07\x00\x00\x00", 0) == pure.decode(b"\x00\x07\x00\x00\x00", 0)


def test_environment_variable_forces_python() -> None:
    code = "from replicad.binlog import decoder_choice as c; print(c.enabled(), c.active())"
    env = {**os.environ, "REPLICAD_PURE_PYTHON": "1"}
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == ["False", "False"]
    env["REPLICAD_PURE_PYTHON"] = "0"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == ["True", str(decoder_choice.available())]


@pytest.mark.parametrize(
    "spec",
    [
        ColumnSpec(T.DECIMAL, 0),  # old DECIMAL: unsupported in both
        ColumnSpec(99, 0),
    ],
)
def test_unsupported_types_fail_at_build_time(spec) -> None:
    columns = [CompiledColumn("v", spec)]
    with pytest.raises(BinlogError):
        compile_python_decoder(columns, mariadb=True)
    if decoder_choice.available():
        with pytest.raises(BinlogError):
            decoder_choice.build_compiled_decoder(columns, mariadb=True)


@needs_extension
@settings(max_examples=200, deadline=None)
@given(st.data())
def test_plan_covers_the_common_types(data) -> None:
    """Everything but the documented fallbacks gets a native opcode."""
    spec, _ = data.draw(st.one_of(integer_column(), float_column(), temporal_column()))
    assert accel.plan_entry(spec, mariadb=True)[0] != "call"
