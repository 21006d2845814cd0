"""Tests for replicad.binlog.jsonb: MySQL binary JSON, binary DECIMAL and JSON diffs.

No MySQL 8 server is available, so every input is built from the documented layout
(mysql-server sql-common/json_binary.cc, sql/json_diff.cc, strings/decimal.cc,
mysys/my_time.cc): literal fixtures written out byte by byte, plus an encoder
written here, independently of the decoder, for the property tests.
"""

from __future__ import annotations

import copy
import json
import pickle
import random
import re
import struct
from collections.abc import Callable
from datetime import timedelta
from decimal import Decimal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replicad.binlog.jsonb import (
    JSON_NULL,
    MAX_JSON_DEPTH,
    JsonDiff,
    JsonDiffOp,
    JsonOpaque,
    JsonTemporal,
    apply_json_diffs,
    decimal_bin_size,
    decode_decimal_bin,
    decode_json,
    decode_json_diffs,
    to_mysql_json_text,
)
from replicad.errors import BinlogError, JsonDecodeError

pytestmark = pytest.mark.unit

FAST = settings(deadline=timedelta(seconds=2), max_examples=150, database=None)
SLOW = settings(
    database=None,
    deadline=timedelta(seconds=5),
    max_examples=25,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def h(text: str) -> bytes:
    """Hex with spaces and '|' separators allowed, so fixtures can show structure."""
    return bytes.fromhex(text.replace("|", " "))


# ---------------------------------------------------------------------------
# Hand-written binary JSON fixtures.


def test_small_object():
    # {"a": 1}: type 00 (small object); count=1, size=12 (u16 each);
    # key entry (offset 11, length 1); value entry int16 (05) inlined as 1;
    # header = 4 + 4 + 3 = 11, so key "a" sits at offset 11 and the object is 12 bytes.
    buf = h("00 | 0100 0c00 | 0b00 0100 | 05 0100 | 61")
    assert decode_json(buf) == {"a": 1}
    assert to_mysql_json_text(decode_json(buf)) == '{"a": 1}'


def test_nested_small_array_and_object():
    # {"a": [1, "x"], "b": {"c": null}}
    # outer header = 4 + 2*4 + 2*3 = 18 (0x12): keys "a" at 0x12, "b" at 0x13;
    # "a" -> small array (02) at 0x14, "b" -> small object (00) at 0x20; size 0x2c.
    # array: count 2, size 12; int16 1 inlined; string (0c) at offset 10: len 1 "x".
    # inner object: count 1, size 12; key "c" at 11; literal null (04 00) inlined.
    array = "0200 0c00 | 05 0100 | 0c 0a00 | 01 78"
    inner = "0100 0c00 | 0b00 0100 | 04 0000 | 63"
    buf = h(
        "00 | 0200 2c00 | 1200 0100 | 1300 0100 | 02 1400 | 00 2000 | 61 62 | "
        + array
        + " | "
        + inner
    )
    doc = decode_json(buf)
    assert doc == {"a": [1, "x"], "b": {"c": None}}
    assert to_mysql_json_text(doc) == '{"a": [1, "x"], "b": {"c": null}}'


def test_large_object_with_u32_offsets_and_inlined_int32():
    # {"a": 100000, "bc": 3000000000, "def": "hi"} in the large format (01):
    # count and size are u32, key entries are (u32 offset, u16 length), value
    # entries are (type, u32). header = 8 + 3*6 + 3*5 = 41 (0x29); keys at 0x29,
    # 0x2a, 0x2c; int32 (07) and uint32 (08) are inlined in large containers
    # (100000 = 0x000186a0, 3000000000 = 0xb2d05e00); the string is at 0x2f; size 50.
    buf = h(
        "01 | 03000000 32000000 | 29000000 0100 | 2a000000 0200 | 2c000000 0300 | "
        "07 a0860100 | 08 005ed0b2 | 0c 2f000000 | 61 | 6263 | 646566 | 02 6869"
    )
    doc = decode_json(buf)
    assert doc == {"a": 100000, "bc": 3000000000, "def": "hi"}
    assert list(doc) == ["a", "bc", "def"]


def test_int32_referenced_by_offset_in_small_array():
    # [100000, 3000000000, -100000] small: int32/uint32 are NOT inlined with 16-bit
    # offsets, so the entries point at offsets 13, 17 and 21 (header 4 + 3*3 = 13);
    # -100000 = 0xfffe7960.
    buf = h("02 | 0300 1900 | 07 0d00 | 08 1100 | 07 1500 | a0860100 005ed0b2 6079feff")
    assert decode_json(buf) == [100000, 3000000000, -100000]


def test_int_values_inlined_in_large_array():
    # The same values inlined in a large array (03), plus int16 -2 whose 4-byte slot
    # is fe ff 00 00 (only the first two bytes count) and uint16 65535.
    # size = 8 + 5*5 = 33 (0x21).
    buf = h(
        "03 | 05000000 21000000 | 07 a0860100 | 08 005ed0b2 | 07 6079feff | "
        "05 feff0000 | 06 ffff0000"
    )
    assert decode_json(buf) == [100000, 3000000000, -100000, -2, 65535]


def test_small_array_int32_offset_must_not_be_read_as_inlined():
    # A small array entry of type int32 holds an offset; reading it as a value
    # would give 7 instead of the 0x7fffffff stored at offset 7.
    buf = h("02 | 0100 0b00 | 07 0700 | ffffff7f")
    assert decode_json(buf) == [2147483647]


def test_object_with_holes_between_values():
    # {"a": "x", "b": 7} as a MySQL 8.0.16+ partial update can leave it: junk bytes
    # (de ad be ef, ff ff) between the keys and the values, which are only
    # reachable through their offsets (0x18 and 0x1c). header 18, size 32.
    buf = h(
        "00 | 0200 2000 | 1200 0100 | 1300 0100 | 0c 1800 | 07 1c00 | 61 62 | "
        "deadbeef | 01 78 | ffff | 07000000"
    )
    assert decode_json(buf) == {"a": "x", "b": 7}


def test_values_stored_in_reverse_order():
    # Offsets need not increase with the entry index: ["x", "yz"] with "yz" stored
    # first (offset 10) and "x" after it (offset 13).
    buf = h("02 | 0200 0f00 | 0c 0d00 | 0c 0a00 | 02 797a | 01 78")
    assert decode_json(buf) == ["x", "yz"]


def test_string_with_two_byte_length():
    # 300 = 0b10_0101100: low 7 bits 0x2c with the continuation bit -> 0xac, then 0x02.
    buf = h("0c ac02") + b"a" * 300
    assert decode_json(buf) == "a" * 300


def test_string_with_three_byte_length_and_unicode():
    text = "\u00e9\U0001f600" * 5000  # 6 UTF-8 bytes each -> 30000 bytes
    # 30000 = 0x7530: groups of 7 bits (low first) 0x30, 0x6a, 0x01.
    buf = h("0c b0ea01") + text.encode()
    assert decode_json(buf) == text


@pytest.mark.parametrize(
    ("hexbuf", "expected"),
    [
        # uint64 (0a) max
        ("0a ffffffffffffffff", 18446744073709551615),
        # int64 (09) min: 0x8000000000000000 little-endian
        ("09 0000000000000080", -9223372036854775808),
        # int16 (05) -1, uint16 (06) 65535, int32 (07) min, uint32 (08) max
        ("05 ffff", -1),
        ("06 ffff", 65535),
        ("07 00000080", -2147483648),
        ("08 ffffffff", 4294967295),
        # double (0b) 1.5 = 0x3ff8000000000000, -0.1 = 0xbfb999999999999a
        ("0b 000000000000f83f", 1.5),
        ("0b 9a9999999999b9bf", -0.1),
        # literals (04): 00 null, 01 true, 02 false
        ("04 00", JSON_NULL),  # a whole document that is null: not SQL NULL (None)
        ("04 01", True),
        ("04 02", False),
    ],
)
def test_top_level_scalars(hexbuf, expected):
    value = decode_json(h(hexbuf))
    assert value == expected
    assert type(value) is type(expected)


def test_literals_inlined_in_small_array():
    # [true, false, null]: three inlined literal entries, size 4 + 9 = 13.
    buf = h("02 | 0300 0d00 | 04 0100 | 04 0200 | 04 0000")
    doc = decode_json(buf)
    assert doc == [True, False, None]
    assert to_mysql_json_text(doc) == "[true, false, null]"


def test_inlined_literal_reads_only_its_first_byte():
    # Value::element parses an inlined literal from the first byte of the slot, so
    # whatever follows in the slot does not matter.
    assert decode_json(h("02 | 0100 0700 | 04 01ff")) == [True]
    assert decode_json(h("03 | 01000000 0d000000 | 04 02abcdef")) == [False]


def test_empty_value_is_json_null():
    # json_binary::parse_binary reads a zero-length value as the null literal.
    assert decode_json(b"") is JSON_NULL
    assert decode_json(memoryview(b"")) is JSON_NULL


def test_empty_containers():
    assert decode_json(h("00 0000 0400")) == {}
    assert decode_json(h("02 0000 0400")) == []
    assert decode_json(h("03 00000000 08000000")) == []
    assert to_mysql_json_text({"a": {}, "b": []}) == '{"a": {}, "b": []}'


def test_memoryview_input_at_an_offset():
    data = b"\xff\xff" + h("00 | 0100 0c00 | 0b00 0100 | 05 0100 | 61") + b"\xee"
    assert decode_json(memoryview(data)[2:-1]) == {"a": 1}


def test_opaque_decimal():
    # CAST(1234567890.1234 AS JSON): opaque (0f), field type NEWDECIMAL (f6),
    # length 9 = precision 14 (0e) + scale 4 + the 7-byte DECIMAL(14,4) encoding.
    buf = h("0f f6 09 0e 04 810dfb38d204d2")
    value = decode_json(buf)
    assert isinstance(value, Decimal)
    assert str(value) == "1234567890.1234"
    assert to_mysql_json_text([value]) == "[1234567890.1234]"


def test_opaque_decimal_size_must_match_precision():
    # One byte too many for DECIMAL(14,4).
    with pytest.raises(JsonDecodeError):
        decode_json(h("0f f6 0a 0e 04 810dfb38d204d2 00"))


def test_opaque_date():
    # DATE 2015-01-15: ymd = ((2015*13 + 1) << 5) | 15 = 838287; packed (my_time.cc
    # TIME_to_longlong_date_packed) = (ymd << 17) << 24 -> 8 bytes little-endian.
    buf = h("0f 0a 08 00000000001e9519")
    value = decode_json(buf)
    assert isinstance(value, JsonTemporal)
    assert value == "2015-01-15"
    assert value.mysql_type == 10
    assert to_mysql_json_text(value) == '"2015-01-15"'


def test_opaque_datetime_with_fraction():
    # DATETIME 2015-01-15 23:24:25.123456: hms = 23<<12 | 24<<6 | 25;
    # packed = ((ymd << 17 | hms) << 24) + 123456.
    buf = h("0f 0c 08 40e20119761f9519")
    value = decode_json(buf)
    assert value == "2015-01-15 23:24:25.123456"
    assert value.mysql_type == 12


def test_opaque_timestamp_prints_like_datetime():
    # TIMESTAMP (07) uses the datetime packing; no fraction -> ".000000".
    value = decode_json(h("0f 07 08 00000019761f9519"))
    assert value == "2015-01-15 23:24:25.000000"
    assert value.mysql_type == 7


def test_opaque_negative_time():
    # TIME -01:02:03.5: hms = 1<<12 | 2<<6 | 3; packed = -((hms << 24) + 500000).
    value = decode_json(h("0f 0b 08 e05ef87cefffffff"))
    assert value == "-01:02:03.500000"
    assert value.mysql_type == 11


def test_opaque_time_with_three_digit_hours():
    # 838:59:59, the TIME maximum; hours are printed with as many digits as needed.
    assert decode_json(h("0f 0b 08 000000fb6e340000")) == "838:59:59.000000"


def test_temporal_inside_container_and_as_text():
    # ["2015-01-15" as DATE]: the opaque value sits at offset 7 of a small array;
    # size = 7 + 1 (field type) + 1 (length) + 8 = 17.
    buf = h("02 | 0100 1100 | 0f 0700 | 0a 08 00000000001e9519")
    doc = decode_json(buf)
    assert doc == ["2015-01-15"]
    assert to_mysql_json_text(doc) == '["2015-01-15"]'


def test_temporal_survives_copy_and_pickle():
    value = JsonTemporal("23:24:25.000000", 11)
    for clone in (copy.deepcopy(value), pickle.loads(pickle.dumps(value))):
        assert clone == value
        assert clone.mysql_type == 11
        assert isinstance(clone, JsonTemporal)


def test_unknown_opaque():
    # An opaque BLOB (field type 0xfc) with data 00 ff 61 62.
    value = decode_json(h("0f fc 04 00ff6162"))
    assert value == JsonOpaque(252, b"\x00\xffab")
    assert str(value) == "base64:type252:AP9hYg=="
    assert to_mysql_json_text(value) == '"base64:type252:AP9hYg=="'


def test_opaque_base64_wraps_every_76_characters():
    # MySQL's base64_encode inserts a newline every 76 output characters, which
    # JSON printing escapes as \n.
    value = JsonOpaque(252, b"x" * 60)  # 80 base64 characters
    text = str(value)
    body = text.removeprefix("base64:type252:")
    assert body.split("\n") == [body[:76], body[77:]]
    assert len(body) == 81
    assert to_mysql_json_text(value).count("\\n") == 1


def test_opaque_var_string_is_a_plain_string():
    # Json_wrapper prints opaque MYSQL_TYPE_VAR_STRING (0xfd) as a JSON string.
    assert decode_json(h("0f fd 02 6869")) == "hi"


# ---------------------------------------------------------------------------
# Malformed binary JSON.


@pytest.mark.parametrize(
    "hexbuf",
    [
        "0d 00",  # unknown type 0x0d
        "04 03",  # unknown literal
        "04",  # truncated literal
        "05 01",  # truncated int16
        "0b 000000",  # truncated double
        "0c 05 6162",  # string longer than the buffer
        "0c 8080808080 01",  # varlen longer than 5 bytes
        "0c ffffffff7f",  # varlen above 32 bits
        "0c 80",  # varlen cut short
        "0c 02 c328",  # invalid UTF-8
        "00 0100",  # truncated header
        "00 0100 ff00",  # size larger than the buffer
        "00 0500 0800 00000000",  # entries do not fit in the size
        "02 0100 0700 0c 0200",  # value offset inside the header
        "02 0100 0700 0c 0700",  # value offset at the container end
        "00 0100 0b00 0200 0100 04 0000",  # key offset inside the header
        "00 0100 0c00 0b00 0200 05 0100 61",  # key runs past the container
        "00 0100 0c00 0b00 0100 05 0100 ff",  # key is not UTF-8
        # two identical keys "a"
        "00 0200 1400 1200 0100 1300 0100 05 0100 05 0200 61 61",
        "0f f6 01 0e",  # decimal without scale
        "0f f6 04 0e 04 81 0d",  # decimal truncated
        "0f f6 09 52 04 810dfb38d204d2",  # precision 82, above decimal_t's 81
        "0f f6 09 04 0e 810dfb38d204d2",  # scale above precision
        "0f 0a 07 00000000001e95",  # temporal of 7 bytes
        "0f 0c 08 000000d97f1f9519",  # datetime with minute 63
        "0f 0c 08 0000000000000080",  # negative datetime
        "0f 0b 08 000000ff0f000000",  # time with seconds 63
        "0f fc 05 00ff",  # opaque data longer than the buffer
        "0f",  # opaque without field type
    ],
)
def test_malformed_json_raises_json_decode_error(hexbuf):
    with pytest.raises(JsonDecodeError) as info:
        decode_json(h(hexbuf))
    assert isinstance(info.value, BinlogError)
    assert "malformed binary JSON (" not in str(info.value)


def test_decimal_digit_group_out_of_range_is_rejected():
    # DECIMAL(9,0): one full group; 0x3b9aca00 = 1000000000 does not fit 9 digits.
    with pytest.raises(JsonDecodeError):
        decode_decimal_bin(h("bb9aca00"), 0, 9, 0)


def test_nesting_limit():
    doc: object = []
    for _ in range(MAX_JSON_DEPTH - 1):
        doc = [doc]
    ok = Encoder(random.Random(1)).document(doc)
    assert decode_json(ok) == doc
    too_deep = Encoder(random.Random(1)).document([doc])
    with pytest.raises(JsonDecodeError, match="nested deeper"):
        decode_json(too_deep)


def test_nesting_far_beyond_recursion_limit_is_a_typed_error():
    # 5000 nested single-element small arrays, each entry pointing at offset 7.
    levels = 5000
    buf = bytearray(b"\x02")
    for level in range(levels):
        size = 7 * (levels - level) + 4
        buf += struct.pack("<HHBH", 1, size, 0x02, 7)
    buf += struct.pack("<HH", 0, 4)
    with pytest.raises(JsonDecodeError):
        decode_json(bytes(buf))


# ---------------------------------------------------------------------------
# MySQL's JSON text.


def test_text_separators_and_nesting():
    doc = {"a": [1, 2.5, None, True, False], "bb": {"c": "d"}, "ccc": []}
    assert to_mysql_json_text(doc) == (
        '{"a": [1, 2.5, null, true, false], "bb": {"c": "d"}, "ccc": []}'
    )


def test_text_string_escapes():
    # double_quote escapes '"', '\\', \b \t \n \f \r by name and other C0 controls
    # as \u00xx (lower-case hex); DEL, '/' and non-ASCII stay as they are.
    value = 'q"b\\s\b\t\n\f\r\x01\x1f\x7f/\u00e9\U0001f600'
    assert to_mysql_json_text(value) == (
        '"q\\"b\\\\s\\b\\t\\n\\f\\r\\u0001\\u001f\x7f/\u00e9\U0001f600"'
    )
    assert to_mysql_json_text({"k\n": 1}) == '{"k\\n": 1}'


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (1.5, "1.5"),
        (0.1, "0.1"),
        (100.0, "100.0"),
        (0.0, "0.0"),
        (-0.0, "-0.0"),
        (-2.25, "-2.25"),
        (1e14, "100000000000000.0"),  # decimal exponent 15: still fixed
        (1e15, "1e15"),  # exponent 16 with one digit: scientific, no '+'
        (1e20, "1e20"),
        (1.5e300, "1.5e300"),
        (1234567890123456.8, "1234567890123456.8"),  # digits pass the point
        (1.2345678901234567e16, "1.2345678901234568e16"),  # as many digits as decpt
        (1e-7, "0.0000001"),  # fixed down to 1e-15
        (1e-15, "0.000000000000001"),
        (1e-16, "1e-16"),
        (-2.5e-300, "-2.5e-300"),
        (5e-324, "5e-324"),
        (1.7976931348623157e308, "1.7976931348623157e308"),
    ],
)
def test_text_doubles(value, text):
    assert to_mysql_json_text(value) == text
    assert float(text) == value


def test_text_decimal_is_plain_and_unquoted():
    assert to_mysql_json_text([Decimal("0.0000001")]) == "[0.0000001]"
    assert to_mysql_json_text(Decimal("-12.50")) == "-12.50"
    assert to_mysql_json_text(Decimal("1E+3")) == "1000"


def test_text_scalars_and_rejects_unknown_types():
    assert to_mysql_json_text(None) == "null"
    assert to_mysql_json_text(True) == "true"
    assert to_mysql_json_text(18446744073709551615) == "18446744073709551615"
    assert to_mysql_json_text("x") == '"x"'
    assert to_mysql_json_text((1, "a")) == '[1, "a"]'
    with pytest.raises(TypeError):
        to_mysql_json_text({1, 2})


# ---------------------------------------------------------------------------
# Binary DECIMAL.


def test_decimal_14_4_positive_and_negative():
    # DECIMAL(14,4): 10 integer digits = 1 leftover digit (1 byte) + one 9-digit
    # group (4 bytes); 4 fraction digits (2 bytes). 1 | 234567890 = 0x0dfb38d2 |
    # 1234 = 0x04d2, with the sign bit (0x80) set on the first byte.
    buf = h("810dfb38d204d2")
    assert decode_decimal_bin(buf, 0, 14, 4) == (Decimal("1234567890.1234"), 7)
    # The negative value inverts every byte of the positive encoding before the sign
    # bit is flipped: 01 0d fb .. -> fe f2 04 .. -> 7e f2 04 ..
    neg = h("7ef204c72dfb2d")
    value, end = decode_decimal_bin(neg, 0, 14, 4)
    assert str(value) == "-1234567890.1234"
    assert end == 7


def test_decimal_65_30_max():
    # 35 integer digits: 8 leftover digits (4 bytes, 99999999 = 0x05f5e0ff) + three
    # groups of 999999999 (0x3b9ac9ff); 30 fraction digits: three groups + 3
    # leftover digits (2 bytes, 999 = 0x03e7). First byte gets the sign bit.
    buf = h("85f5e0ff" + "3b9ac9ff" * 6 + "03e7")
    value, end = decode_decimal_bin(buf, 0, 65, 30)
    assert str(value) == "9" * 35 + "." + "9" * 30
    assert end == 30 == decimal_bin_size(65, 30)


def test_decimal_negative_zero_is_printed_as_zero():
    # DECIMAL(3,2) zero is 80 00; the all-inverted form 7f ff is a "negative zero".
    # MySQL prints it as 0.00.
    value, _ = decode_decimal_bin(h("7fff"), 0, 3, 2)
    assert str(value) == "0.00"
    assert value.as_tuple().sign == 0
    assert str(decode_decimal_bin(h("8000"), 0, 3, 2)[0]) == "0.00"


def test_decimal_at_offset_and_fraction_only():
    # DECIMAL(4,4) .5 -> fraction 5000 in 2 bytes: 0x1388 | 0x8000.
    buf = b"junk" + h("9388") + b"tail"
    assert decode_decimal_bin(buf, 4, 4, 4) == (Decimal("0.5000"), 6)


def test_decimal_truncated():
    with pytest.raises(JsonDecodeError):
        decode_decimal_bin(h("810dfb38d204"), 0, 14, 4)
    with pytest.raises(JsonDecodeError):
        decode_decimal_bin(h("810dfb38d204d2"), -1, 14, 4)


_DIG2BYTES = [0, 1, 1, 2, 2, 3, 3, 4, 4, 4]


def encode_decimal(text: str, precision: int, scale: int) -> bytes:
    """Write a decimal string in MySQL's binary DECIMAL(precision, scale) form."""
    negative = text.startswith("-")
    whole, _, fraction = text.lstrip("-").partition(".")
    intg = precision - scale
    whole = whole.lstrip("0").rjust(intg, "0")
    fraction = fraction.ljust(scale, "0")
    assert len(whole) == intg and len(fraction) == scale
    out = bytearray()
    lead = intg % 9
    if lead:
        out += int(whole[:lead]).to_bytes(_DIG2BYTES[lead], "big")
    for i in range(lead, intg, 9):
        out += int(whole[i : i + 9]).to_bytes(4, "big")
    full = scale - scale % 9
    for i in range(0, full, 9):
        out += int(fraction[i : i + 9]).to_bytes(4, "big")
    if scale % 9:
        out += int(fraction[full:]).to_bytes(_DIG2BYTES[scale % 9], "big")
    if negative:
        out = bytearray(b ^ 0xFF for b in out)
    if out:
        out[0] ^= 0x80
    return bytes(out)


@st.composite
def decimals(draw: st.DrawFn) -> tuple[Decimal, int, int]:
    precision = draw(st.integers(1, 65))
    scale = draw(st.integers(0, min(30, precision)))
    magnitude = draw(
        st.one_of(
            st.integers(0, 10**precision - 1),
            st.just(10**precision - 1),
            st.integers(0, min(10**scale, 10**precision - 1)),
        )
    )
    digits = str(magnitude).rjust(scale + 1, "0")
    whole, fraction = digits[: len(digits) - scale], digits[len(digits) - scale :]
    sign = "-" if magnitude and draw(st.booleans()) else ""
    text = f"{sign}{whole}.{fraction}" if scale else f"{sign}{whole}"
    return Decimal(text), precision, scale


@FAST
@given(decimals(), st.binary(max_size=3), st.binary(max_size=3))
def test_decimal_round_trip(case, prefix, suffix):
    value, precision, scale = case
    encoded = encode_decimal(format(value, "f"), precision, scale)
    assert len(encoded) == decimal_bin_size(precision, scale)
    decoded, end = decode_decimal_bin(prefix + encoded + suffix, len(prefix), precision, scale)
    assert end == len(prefix) + len(encoded)
    assert decoded == value
    assert decoded.as_tuple() == value.as_tuple()  # same digits and exponent (-scale)


@FAST
@given(decimals())
def test_decimal_in_json_round_trip_and_text(case):
    value, precision, scale = case
    payload = bytes([precision, scale]) + encode_decimal(format(value, "f"), precision, scale)
    buf = bytes([0x0F, 0xF6]) + varlen(len(payload)) + payload
    decoded = decode_json(buf)
    assert decoded.as_tuple() == value.as_tuple()
    assert to_mysql_json_text(decoded) == format(value, "f")


# ---------------------------------------------------------------------------
# An independent encoder for the property tests.


def varlen(n: int) -> bytes:
    """7 bits per byte, least significant group first, high bit = more follows."""
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


def mysql_key_order(key: str) -> tuple[int, bytes]:
    raw = key.encode()
    return (len(raw), raw)


class Encoder:
    """Builds binary JSON with random (valid) choices: small or large containers,
    signed or unsigned integer types, junk gaps before values and the order in which
    values are stored."""

    def __init__(self, rnd: random.Random, junk: bool = False) -> None:
        self.rnd = rnd
        self.junk = junk

    def document(self, value: object) -> bytes:
        type_byte, payload = self.value(value)
        return bytes([type_byte]) + payload

    def value(self, value: object) -> tuple[int, bytes]:
        if value is None:
            return 0x04, b"\x00"
        if value is True:
            return 0x04, b"\x01"
        if value is False:
            return 0x04, b"\x02"
        if isinstance(value, int):
            return self.integer(value)
        if isinstance(value, float):
            return 0x0B, struct.pack("<d", value)
        if isinstance(value, str):
            raw = value.encode()
            return 0x0C, varlen(len(raw)) + raw
        if isinstance(value, JsonOpaque):
            return 0x0F, bytes([value.mysql_type]) + varlen(len(value.data)) + value.data
        if isinstance(value, list):
            return self.container([(None, v) for v in value], is_object=False)
        if isinstance(value, dict):
            items = sorted(value.items(), key=lambda kv: mysql_key_order(kv[0]))
            return self.container([(k.encode(), v) for k, v in items], is_object=True)
        raise TypeError(type(value))

    def integer(self, n: int) -> tuple[int, bytes]:
        choices = []
        if -(2**15) <= n < 2**15:
            choices.append((0x05, "<h"))
        if 0 <= n < 2**16:
            choices.append((0x06, "<H"))
        if -(2**31) <= n < 2**31:
            choices.append((0x07, "<i"))
        if 0 <= n < 2**32:
            choices.append((0x08, "<I"))
        if -(2**63) <= n < 2**63:
            choices.append((0x09, "<q"))
        if 0 <= n < 2**64:
            choices.append((0x0A, "<Q"))
        type_byte, fmt = self.rnd.choice(choices)
        return type_byte, struct.pack(fmt, n)

    def container(
        self, items: list[tuple[bytes | None, object]], is_object: bool
    ) -> tuple[int, bytes]:
        encoded = [self.value(v) for _, v in items]
        attempts = [True] if self.rnd.random() < 0.3 else [False, True]
        for large in attempts:
            body = self.layout(items, encoded, large, is_object)
            if body is not None:
                return (0 if is_object else 2) + (1 if large else 0), body
        raise AssertionError("document too big for the large format")

    def layout(self, items, encoded, large: bool, is_object: bool) -> bytes | None:
        width = 4 if large else 2
        limit = 2 ** (8 * width) - 1
        count = len(items)
        key_entry = width + 2
        header = 2 * width + count * (key_entry if is_object else 0) + count * (1 + width)
        data = bytearray()
        key_entries = bytearray()
        if is_object:
            for key, _ in items:
                offset = header + len(data)
                key_entries += offset.to_bytes(width, "little") + len(key).to_bytes(2, "little")
                data += key
        slots: list[bytes] = [b""] * count
        order = list(range(count))
        if self.junk:
            self.rnd.shuffle(order)
        for index in order:
            type_byte, payload = encoded[index]
            inlined = type_byte in (0x04, 0x05, 0x06) or (large and type_byte in (0x07, 0x08))
            if inlined:
                slots[index] = bytes([type_byte]) + payload.ljust(width, b"\x00")
                continue
            if self.junk and self.rnd.random() < 0.5:
                data += self.rnd.randbytes(self.rnd.randint(1, 5))
            offset = header + len(data)
            if offset > limit:
                return None
            slots[index] = bytes([type_byte]) + offset.to_bytes(width, "little")
            data += payload
        size = header + len(data)
        if size > limit or count > limit:
            return None
        return (
            count.to_bytes(width, "little")
            + size.to_bytes(width, "little")
            + bytes(key_entries)
            + b"".join(slots)
            + bytes(data)
        )


def test_encoder_matches_hand_written_fixture():
    # Guards the encoder itself against drifting from the documented layout.
    rnd = random.Random(0)
    rnd.random = lambda: 0.9  # type: ignore[method-assign]  # always try small first
    rnd.choice = lambda seq: seq[0]  # type: ignore[method-assign]  # int16 first
    assert Encoder(rnd).document({"a": 1}) == h("00 0100 0c00 0b00 0100 05 0100 61")


# ---------------------------------------------------------------------------
# Property tests on the encoder/decoder pair.

keys = st.text(max_size=6)
strings = st.one_of(st.text(max_size=10), st.text(min_size=120, max_size=300))
opaques = st.builds(
    JsonOpaque,
    st.sampled_from([15, 16, 249, 250, 251, 252, 254, 255]),
    st.binary(max_size=20),
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**64 - 1),
    st.sampled_from([-(2**63), 2**63 - 1, 2**64 - 1, -(2**31), 2**32 - 1, -(2**15), 65535]),
    st.floats(allow_nan=False),
    strings,
    opaques,
)
documents = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=6), st.dictionaries(keys, children, max_size=6)
    ),
    max_leaves=40,
)
plain_documents = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**63), 2**64 - 1),
        st.floats(allow_nan=False, allow_infinity=False),
        strings,
    ),
    lambda children: st.one_of(
        st.lists(children, max_size=5), st.dictionaries(keys, children, max_size=5)
    ),
    max_leaves=30,
)


def assert_key_order(doc: object) -> None:
    if isinstance(doc, dict):
        assert list(doc) == sorted(doc, key=mysql_key_order)
        for v in doc.values():
            assert_key_order(v)
    elif isinstance(doc, list):
        for v in doc:
            assert_key_order(v)


@FAST
@given(documents, st.randoms(use_true_random=False), st.booleans())
def test_round_trip(doc, rnd, junk):
    buf = Encoder(rnd, junk=junk).document(doc)
    decoded = decode_json(buf)
    assert decoded == (JSON_NULL if doc is None else doc)  # a null document is not None
    assert_key_order(decoded)


@SLOW
@given(
    st.lists(
        st.tuples(st.characters(codec="utf-8"), st.integers(12_000, 25_000)),
        min_size=3,
        max_size=4,
    ),
    st.randoms(use_true_random=False),
)
def test_round_trip_documents_too_big_for_the_small_format(parts, rnd):
    # More than 64 KiB of strings forces the large format (u32 offsets) at the top.
    doc = {f"k{i}": ch * n for i, (ch, n) in enumerate(parts)}
    doc["nested"] = [1, {"x": 2.5}, list(doc.values())]
    buf = Encoder(rnd, junk=True).document(doc)
    assert len(buf) > 65535
    assert buf[0] == 0x01  # large object: u16 offsets cannot reach the values
    assert decode_json(buf) == doc


@FAST
@given(plain_documents)
def test_text_is_json_with_the_same_values(doc):
    # Every double is printed with enough digits to read back exactly.
    text = to_mysql_json_text(doc)
    assert json.loads(text) == doc


# ---------------------------------------------------------------------------
# Fuzzing: malformed input must only ever raise JsonDecodeError.


def decode_or_typed_error(fn: Callable[[], object]) -> None:
    try:
        fn()
    except JsonDecodeError as exc:
        # The catch-all in decode_json means a bounds check is missing.
        assert "malformed binary JSON (" not in str(exc)


@settings(deadline=timedelta(seconds=2), max_examples=400, database=None)
@given(st.binary(max_size=300))
def test_fuzz_random_bytes(data):
    decode_or_typed_error(lambda: decode_json(data))
    decode_or_typed_error(lambda: decode_json_diffs(data))
    decode_or_typed_error(lambda: decode_json_diffs(len(data).to_bytes(4, "little") + data))


@settings(deadline=timedelta(seconds=2), max_examples=300, database=None)
@given(
    documents,
    st.randoms(use_true_random=False),
    st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), min_size=1, max_size=4),
    st.integers(0, 10**6),
)
def test_fuzz_mutated_encodings(doc, rnd, edits, cut):
    buf = bytearray(Encoder(rnd, junk=True).document(doc))
    for position, byte in edits:
        buf[position % len(buf)] = byte
    decode_or_typed_error(lambda: decode_json(bytes(buf)))
    decode_or_typed_error(lambda: decode_json(bytes(buf[: cut % (len(buf) + 1)])))
    diffs = encode_diffs([(JsonDiffOp.REPLACE, "$.a", bytes(buf))])
    decode_or_typed_error(lambda: decode_json_diffs(diffs))


@settings(deadline=timedelta(seconds=2), max_examples=300, database=None)
@given(st.text(max_size=20), st.binary(max_size=20), st.integers(0, 2))
def test_fuzz_diff_paths(path, value, op):
    buf = encode_diffs([(JsonDiffOp(op), path, value)])
    decode_or_typed_error(lambda: decode_json_diffs(buf))


# ---------------------------------------------------------------------------
# JSON diffs.


def lenenc(n: int) -> bytes:
    if n < 251:
        return bytes([n])
    if n < 2**16:
        return b"\xfc" + n.to_bytes(2, "little")
    if n < 2**24:
        return b"\xfd" + n.to_bytes(3, "little")
    return b"\xfe" + n.to_bytes(8, "little")


def encode_diffs(diffs: list[tuple[JsonDiffOp, str, bytes | None]]) -> bytes:
    body = bytearray()
    for op, path, value in diffs:
        raw = path.encode()
        body += bytes([op]) + lenenc(len(raw)) + raw
        if op != JsonDiffOp.REMOVE:
            assert value is not None
            body += lenenc(len(value)) + value
    return len(body).to_bytes(4, "little") + bytes(body)


def test_three_diffs_are_all_decoded_and_applied():
    # u32 length 29, then:
    #   00 | 03 "$.b"    | 03 (0c 01 79)  REPLACE $.b with "y"
    #   01 | 06 "$.a[1]" | 03 (05 0500)   INSERT $.a[1] the int16 5
    #   02 | 06 "$.a[0]"                  REMOVE $.a[0]
    # followed by two bytes that belong to the next column.
    buf = (
        h("1d000000")
        + h("00 03")
        + b"$.b"
        + h("03 0c0179")
        + h("01 06")
        + b"$.a[1]"
        + h("03 050500")
        + h("02 06")
        + b"$.a[0]"
        + h("abcd")
    )
    diffs, end = decode_json_diffs(buf)
    assert end == len(buf) - 2
    assert diffs == [
        JsonDiff(JsonDiffOp.REPLACE, "$.b", "y"),
        JsonDiff(JsonDiffOp.INSERT, "$.a[1]", 5),
        JsonDiff(JsonDiffOp.REMOVE, "$.a[0]", None),
    ]
    assert [d.has_value for d in diffs] == [True, True, False]
    before = {"a": [1, 2], "b": "x"}
    after = apply_json_diffs(before, diffs)
    assert after == {"a": [5, 2], "b": "y"}
    assert before == {"a": [1, 2], "b": "x"}


def test_diffs_at_an_offset_with_long_path_and_null_value():
    # A 302-byte path needs the fc + u16 length; an empty value is JSON null.
    path = "$." + "k" * 300
    vector = encode_diffs([(JsonDiffOp.REPLACE, path, b""), (JsonDiffOp.INSERT, "$.z", h("0401"))])
    assert b"\xfc\x2e\x01" in vector
    buf = b"prefix" + vector
    diffs, end = decode_json_diffs(memoryview(buf), 6)
    assert end == len(buf)
    assert diffs[0] == JsonDiff(JsonDiffOp.REPLACE, path, None)
    assert diffs[0].has_value
    assert diffs[1].value is True


def test_empty_diff_vector():
    assert decode_json_diffs(h("00000000ff")) == ([], 4)


@pytest.mark.parametrize(
    "buf",
    [
        h("0500"),  # length truncated
        h("05000000 00 03"),  # vector shorter than its length
        h("02000000 03 00"),  # unknown operation 3
        h("03000000 02 05 24"),  # path longer than the vector
        h("02000000 02 fb"),  # NULL length
        h("03000000 02 fc 01"),  # 2-byte length cut short
        h("04000000 00 01 24 05"),  # value longer than the vector
        h("05000000 00 01 24 01 0d"),  # value of unknown type
        h("03000000 02 01 78"),  # path not starting with '$'
        h("04000000 02 02 24 ff"),  # path not UTF-8
        h("05000000 02 03 24 5b 2a"),  # '$[*' wildcard
    ],
)
def test_malformed_diffs(buf):
    with pytest.raises(JsonDecodeError):
        decode_json_diffs(buf)


@pytest.mark.parametrize(
    ("doc", "diffs", "expected"),
    [
        # INSERT of a member keeps MySQL's key order (by length, then bytes).
        ({"bb": 1, "ccc": 2}, [(1, "$.a", 0)], {"a": 0, "bb": 1, "ccc": 2}),
        ({"a": 1, "ccc": 2}, [(1, "$.bb", 0)], {"a": 1, "bb": 0, "ccc": 2}),
        # Array INSERT past the end appends (Json_array::insert_alias clamps).
        ([1], [(1, "$[5]", 9)], [1, 9]),
        # [last] is the last element's position, so INSERT lands before it.
        ([1, 2, 3], [(1, "$[last]", 9)], [1, 2, 9, 3]),
        ([1, 2, 3], [(0, "$[last-2]", 9)], [9, 2, 3]),
        ([1, 2, 3], [(2, "$[last - 1]", None)], [1, 3]),
        # Quoted member names, escapes and whitespace between legs.
        ({"b c": {'q"x': 1}}, [(0, '$."b c"."q\\"x"', 2)], {"b c": {'q"x': 2}}),
        ({"é": [0]}, [(0, '$ ."\\u00e9" [ 0 ]', 1)], {"é": [1]}),
        # A replaced subtree can be edited by a later diff.
        ({"a": 1}, [(0, "$.a", {"x": []}), (1, "$.a.x[0]", 5)], {"a": {"x": [5]}}),
        ({"a": [1, 2]}, [(2, "$.a[0]", None), (2, "$.a[0]", None)], {"a": []}),
    ],
)
def test_apply_semantics(doc, diffs, expected):
    before = copy.deepcopy(doc)
    ops = [JsonDiff(JsonDiffOp(op), path, value) for op, path, value in diffs]
    values_before = copy.deepcopy([d.value for d in ops])
    result = apply_json_diffs(doc, ops)
    assert result == expected
    assert_key_order(result)
    if isinstance(result, dict):
        assert list(result) == list(expected)
    assert doc == before
    assert [d.value for d in ops] == values_before


@pytest.mark.parametrize(
    ("doc", "op", "path"),
    [
        ({"a": 1}, 0, "$.b"),  # REPLACE of a missing member
        ([1], 0, "$[1]"),  # REPLACE past the end
        ([1], 0, "$[last-1]"),
        ({"a": 1}, 0, "$[0]"),  # no auto-wrapping
        ({"a": 1}, 0, "$.a.b"),  # scalar on the way
        ({"a": 1}, 1, "$.a"),  # INSERT of an existing member
        ({"a": []}, 1, "$.a.b"),  # member leg into an array
        ({"a": {}}, 1, "$.a[0]"),  # cell leg into an object
        ({"a": 1}, 1, "$.x.y"),  # missing parent
        ({"a": 1}, 2, "$.b"),  # REMOVE of a missing member
        ([], 2, "$[0]"),
        ({"a": 1}, 0, "$"),  # the root cannot be addressed
        (5, 0, "$[0]"),
        ({"a": 1}, 0, "$.*"),
        ({"a": 1}, 0, "$[1 to 2]"),
        ({"a": 1}, 0, "$**.a"),
        ({"a": 1}, 0, '$."a'),
    ],
)
def test_apply_failures_name_the_path(doc, op, path):
    before = copy.deepcopy(doc)
    with pytest.raises(JsonDecodeError) as info:
        apply_json_diffs(doc, [JsonDiff(JsonDiffOp(op), path, 0)])
    assert info.value.context["path"] == path
    assert doc == before


def format_path(steps: list[object], rnd: random.Random, container_sizes: list[int]) -> str:
    """MySQL path text for keys/indexes, using each allowed spelling at random."""
    out = ["$"]
    for step, size in zip(steps, container_sizes, strict=True):
        if isinstance(step, int):
            back = size - 1 - step
            spelling = rnd.randrange(3) if back >= 0 else 0
            if spelling == 0:
                out.append(f"[{step}]")
            elif spelling == 1:
                out.append("[last]" if back == 0 else f"[last-{back}]")
            else:
                out.append(f"[ last - {back} ]")
        elif re.fullmatch(r"[A-Za-z_$][A-Za-z0-9_$]*", step) and rnd.random() < 0.5:
            out.append("." + step)
        else:
            out.append("." + json.dumps(step, ensure_ascii=rnd.random() < 0.5))
    return "".join(out)


def all_paths(doc: object, prefix: tuple = ()) -> list[tuple]:
    found = []
    if isinstance(doc, dict):
        for k, v in doc.items():
            found.append((*prefix, k))
            found += all_paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            found.append((*prefix, i))
            found += all_paths(v, (*prefix, i))
    return found


@FAST
@given(
    st.one_of(
        st.lists(documents, min_size=1, max_size=5),
        st.dictionaries(keys, documents, min_size=1, max_size=5),
    ),
    st.data(),
)
def test_random_replace_diffs_match_python(doc, data):
    rnd = data.draw(st.randoms(use_true_random=False))
    expected = copy.deepcopy(doc)
    wire = []
    for _ in range(data.draw(st.integers(1, 4))):
        steps = data.draw(st.sampled_from(all_paths(expected)))
        value = data.draw(documents)
        sizes = []
        parent = expected
        for step in steps[:-1]:
            sizes.append(len(parent))
            parent = parent[step]
        sizes.append(len(parent))
        parent[steps[-1]] = copy.deepcopy(value)
        path = format_path(list(steps), rnd, sizes)
        wire.append((JsonDiffOp.REPLACE, path, Encoder(rnd, junk=True).document(value)))
    before = copy.deepcopy(doc)
    diffs, end = decode_json_diffs(encode_diffs(wire))
    assert len(diffs) == len(wire)
    assert end == len(encode_diffs(wire))
    assert apply_json_diffs(doc, diffs) == expected
    assert doc == before


@FAST
@given(st.lists(st.integers(), max_size=6), st.integers(0, 8), st.booleans(), st.integers())
def test_random_array_insert_matches_python(items, index, from_end, value):
    path = f"$[last-{index}]" if from_end else f"$[{index}]"
    if from_end:
        position = len(items) - index - 1 if index < len(items) else 0
    else:
        position = min(index, len(items))
    expected = [*items[:position], value, *items[position:]]
    assert apply_json_diffs(items, [JsonDiff(JsonDiffOp.INSERT, path, value)]) == expected
