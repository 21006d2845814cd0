"""Debezium MySQL value encodings and Connect schema fields (replicad/sinks/debezium_values.py).

Every expected value is worked out by hand from Debezium's MySQL connector documentation
(shared-mariadb-mysql.adoc, "Data type mappings" and "Connector properties") and Kafka
Connect's JSON forms, with the arithmetic in a comment; none is produced by the module under
test. Base64 is RFC 4648 (what the JsonConverter writes for bytes).
"""

from __future__ import annotations

import base64
import datetime as dt
from decimal import Decimal, localcontext
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from replicad.binlog.column_types import SqlType
from replicad.binlog.jsonb import JSON_NULL
from replicad.binlog.values import Geometry
from replicad.errors import ConfigError
from replicad.exit_codes import EXIT_CONFIG
from replicad.sinks.debezium_values import (
    DebeziumEncodingError,
    DebeziumOptions,
    connect_field,
    value_encoder,
)

pytestmark = pytest.mark.unit

DEFAULTS = DebeziumOptions()
CONNECT = DebeziumOptions(time_precision_mode="connect")


def enc(sql: SqlType, value: Any, options: DebeziumOptions = DEFAULTS, nullable: bool = True):
    out = value_encoder(sql, options, nullable=nullable)(value)
    orjson.dumps(out)  # whatever comes out must be writable as JSON
    return out


def dec(precision: int, scale: int) -> SqlType:
    return SqlType("decimal", precision=precision, scale=scale)


# ----------------------------------------------------------------------------- options


def test_options_defaults_are_debeziums() -> None:
    # Connector properties: decimal.handling.mode precise, time.precision.mode
    # adaptive_time_microseconds, binary.handling.mode bytes, bigint.unsigned.handling.mode
    # long, enable.time.adjuster true.
    assert DEFAULTS.decimal_handling_mode == "precise"
    assert DEFAULTS.time_precision_mode == "adaptive_time_microseconds"
    assert DEFAULTS.binary_handling_mode == "bytes"
    assert DEFAULTS.bigint_unsigned_handling_mode == "long"
    assert DEFAULTS.enable_time_adjuster is True


def test_options_are_read_as_debezium_parses_them() -> None:
    options = DebeziumOptions(decimal_handling_mode=" String ", binary_handling_mode="HEX")
    assert options.decimal_handling_mode == "string"
    assert options.binary_handling_mode == "hex"


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("decimal_handling_mode", "exact"),
        ("time_precision_mode", "adaptive_time"),
        ("binary_handling_mode", "base32"),
        ("bigint_unsigned_handling_mode", "string"),
        ("decimal_handling_mode", 1),
    ],
)
def test_a_bad_option_names_its_key(key: str, value: Any) -> None:
    with pytest.raises(ConfigError) as info:
        DebeziumOptions(**{key: value})
    assert info.value.context["key"] == key
    assert key.replace("_", ".") in str(info.value)  # and Debezium's name for it
    assert info.value.exit_code == EXIT_CONFIG


@pytest.mark.parametrize("mode", ["isostring", "structured", "microseconds", "nanoseconds"])
def test_debezium_time_modes_not_implemented_are_refused_by_name(mode: str) -> None:
    with pytest.raises(ConfigError, match="does not implement") as info:
        DebeziumOptions(time_precision_mode=mode)
    assert info.value.context["key"] == "time_precision_mode"


def test_time_adjuster_must_be_a_boolean() -> None:
    with pytest.raises(ConfigError) as info:
        DebeziumOptions(enable_time_adjuster="yes")  # type: ignore[arg-type]
    assert info.value.context["key"] == "enable_time_adjuster"


# ----------------------------------------------------------------------------- null


@pytest.mark.parametrize(
    "sql",
    [
        SqlType("int"),
        dec(10, 2),
        SqlType("date"),
        SqlType("varchar"),
        SqlType("blob"),
        SqlType("geometry"),
        SqlType("json"),
        SqlType("bit", precision=3),
    ],
)
def test_null_is_null(sql: SqlType) -> None:
    assert enc(sql, None) is None


def test_null_in_a_not_null_json_column_is_the_json_literal() -> None:
    # A NOT NULL JSON column cannot hold SQL NULL: None is the document `null`, whose string
    # representation ("Basic types", JSON) is "null".
    assert enc(SqlType("json"), None, nullable=False) == "null"
    assert enc(SqlType("int"), None, nullable=False) is None


# ----------------------------------------------------------------------------- integers


def test_integers_are_numbers() -> None:
    assert enc(SqlType("tinyint"), -128) == -128
    assert enc(SqlType("tinyint", unsigned=True), 255) == 255
    assert enc(SqlType("int", unsigned=True), 4294967295) == 4294967295
    assert enc(SqlType("bigint"), -(2**63)) == -(2**63)


def test_bigint_unsigned_long_wraps_above_2_63() -> None:
    # Connector properties, bigint.unsigned.handling.mode=long: values above 2^63-1 "are
    # emitted as a negative number": the 64 bits read as a signed long.
    sql = SqlType("bigint", unsigned=True)
    assert enc(sql, 2**63 - 1) == 9223372036854775807
    assert enc(sql, 2**64 - 1) == -1  # 0xffffffffffffffff
    assert enc(sql, 2**63) == -9223372036854775808  # 0x8000000000000000


def test_bigint_unsigned_precise_is_a_decimal() -> None:
    # bigint.unsigned.handling.mode=precise: Connect Decimal, scale 0. 2^64-1 needs a 0x00
    # sign byte: 00 ff ff ff ff ff ff ff ff -> "AP//" "////" "////".
    options = DebeziumOptions(bigint_unsigned_handling_mode="precise")
    sql = SqlType("bigint", unsigned=True)
    assert enc(sql, 2**64 - 1, options) == "AP//////////"
    # 2^63: 00 80 00 00 00 00 00 00 00 -> "AIAA" "AAAA" "AAAA"
    assert enc(sql, 2**63, options) == "AIAAAAAAAAAA"
    assert enc(sql, 1, options) == "AQ=="  # 01


# ----------------------------------------------------------------------------- decimals


@pytest.mark.parametrize(
    ("sql", "value", "expected"),
    [
        # "Decimal types", precise: Connect Decimal, the unscaled value's two's-complement
        # bytes, big-endian, as few as keep the sign; base64 in JSON.
        (dec(10, 2), Decimal("1.50"), "AJY="),  # 150 = 00 96 (0x96 alone would be negative)
        (dec(10, 2), Decimal("-1.50"), "/2o="),  # -150 = 0xff6a
        (dec(10, 2), Decimal("0.00"), "AA=="),  # 0 = 00
        (dec(10, 2), Decimal("-0.01"), "/w=="),  # -1 = ff
        (dec(5, 0), Decimal("12345"), "MDk="),  # 0x3039
        (dec(3, 0), Decimal("127"), "fw=="),  # 7f
        (dec(3, 0), Decimal("128"), "AIA="),  # 00 80
        (dec(3, 0), Decimal("-128"), "gA=="),  # 80
        (dec(3, 0), Decimal("-129"), "/38="),  # ff 7f
        (dec(10, 2), Decimal("1.5"), "AJY="),  # given at scale 1: still unscaled 150
    ],
)
def test_decimal_precise(sql: SqlType, value: Decimal, expected: str) -> None:
    assert enc(sql, value) == expected


def test_decimal_65_30_limits() -> None:
    # DECIMAL(65,30) extremes: unscaled +-(10^65-1), 216 bits (65 * log2(10) = 215.9), so 27
    # magnitude bytes with the top bit set plus a sign byte: 28 bytes, 00 first for the
    # maximum, ff first for the minimum.
    sql = dec(65, 30)
    top = Decimal("9" * 35 + "." + "9" * 30)
    bottom = Decimal("-" + str(top))  # not -top: unary minus rounds to 28 digits
    for value, sign, sign_byte in ((top, 1, 0x00), (bottom, -1, 0xFF)):
        raw = base64.b64decode(enc(sql, value))
        assert len(raw) == 28
        assert raw[0] == sign_byte
        assert (raw[1] >= 0x80) == (sign == 1)
        assert int.from_bytes(raw, "big", signed=True) == sign * (10**65 - 1)
    strings = DebeziumOptions(decimal_handling_mode="string")
    assert enc(sql, top, strings) == "9" * 35 + "." + "9" * 30
    assert enc(sql, bottom, strings) == "-" + "9" * 35 + "." + "9" * 30


def test_decimal_string_is_plain_with_the_column_scale() -> None:
    # decimal.handling.mode=string: BigDecimal.toPlainString of the value at the column scale.
    options = DebeziumOptions(decimal_handling_mode="string")
    assert enc(dec(10, 2), Decimal("-0.05"), options) == "-0.05"
    assert enc(dec(10, 2), Decimal("1.5"), options) == "1.50"
    assert enc(dec(10, 2), Decimal("-0.00"), options) == "0.00"  # BigDecimal has no -0
    assert enc(dec(10, 0), Decimal("-42"), options) == "-42"
    assert enc(dec(20, 4), Decimal("1E+10"), options) == "10000000000.0000"  # never 1E+10


def test_decimal_double() -> None:
    options = DebeziumOptions(decimal_handling_mode="double")
    assert enc(dec(10, 2), Decimal("-1.50"), options) == -1.5
    assert enc(dec(10, 0), Decimal("0"), options) == 0.0
    assert isinstance(enc(dec(10, 0), Decimal("3"), options), float)


def test_decimal_with_more_digits_than_the_scale_is_refused() -> None:
    with pytest.raises(DebeziumEncodingError):
        enc(dec(10, 2), Decimal("1.005"))


@given(
    st.integers(min_value=1, max_value=65).flatmap(
        lambda p: st.tuples(
            st.just(p),
            st.integers(min_value=0, max_value=min(p, 30)),
            st.integers(min_value=-(10**p) + 1, max_value=10**p - 1),
        )
    )
)
def test_precise_decimal_decodes_back(case: tuple[int, int, int]) -> None:
    precision, scale, unscaled = case
    value = Decimal(f"{unscaled}E-{scale}")  # from text: exact at any precision
    raw = base64.b64decode(enc(dec(precision, scale), value))
    back = int.from_bytes(raw, "big", signed=True)
    with localcontext() as ctx:
        ctx.prec = 100
        assert Decimal(back).scaleb(-scale) == value
    assert back == unscaled
    # Minimal: no leading byte that only repeats the sign of the next one.
    if len(raw) > 1:
        assert not (raw[0] == 0x00 and raw[1] < 0x80)
        assert not (raw[0] == 0xFF and raw[1] >= 0x80)


# ----------------------------------------------------------------------------- float, bit, year


def test_float_and_double_are_numbers() -> None:
    assert enc(SqlType("float"), 1.1) == 1.1
    assert enc(SqlType("double"), -2.5e-300) == -2.5e-300


@pytest.mark.parametrize(
    ("bits", "value", "expected"),
    [
        (1, 1, True),  # "Basic types": BIT(1) is BOOLEAN
        (1, 0, False),
        # BIT(>1): io.debezium.data.Bits, little-endian, n/8 rounded up bytes.
        (17, 0x010203, "AwIB"),  # 03 02 01
        (17, 1, "AQAA"),  # 01 00 00
        (8, 64, "QA=="),  # 40
        (2, 2, "Ag=="),  # 02
        (64, 2**64 - 1, "//////////8="),  # eight ff
    ],
)
def test_bit(bits: int, value: int, expected: object) -> None:
    assert enc(SqlType("bit", precision=bits), value) == expected


def test_bits_ignore_binary_handling_mode() -> None:
    # Bits is a BYTES schema of its own; binary.handling.mode names binary columns only.
    assert (
        enc(SqlType("bit", precision=17), 1, DebeziumOptions(binary_handling_mode="hex")) == "AQAA"
    )


def test_year() -> None:
    assert enc(SqlType("year"), 2024) == 2024
    assert enc(SqlType("year"), 1901) == 1901
    assert enc(SqlType("year"), 0) == 0


# ----------------------------------------------------------------------------- temporal


def test_date_is_days_since_the_epoch() -> None:
    # "Temporal types": io.debezium.time.Date, days since the epoch. 2018-06-20: 48 years of
    # 365 days and 12 leap days (1972..2016) = 17532, then 151 days to June 1, +19 = 17702.
    assert enc(SqlType("date"), dt.date(2018, 6, 20)) == 17702
    assert enc(SqlType("date"), dt.date(1970, 1, 1)) == 0
    assert enc(SqlType("date"), dt.date(1969, 12, 31)) == -1
    # 1900-01-01: 70 years of 365 days and 17 leap days (1904..1968) before the epoch.
    assert enc(SqlType("date"), dt.date(1900, 1, 1)) == -25567
    assert enc(SqlType("date"), dt.date(2018, 6, 20), CONNECT) == 17702  # Connect Date: days


def test_datetime_adaptive() -> None:
    # "Temporal values without time zones": DATETIME 2018-06-20 06:37:03 becomes 1529476623000
    # (read as UTC). fsp 0-3: Timestamp (ms); fsp 4-6: MicroTimestamp (us).
    value = dt.datetime(2018, 6, 20, 6, 37, 3)
    assert enc(SqlType("datetime", fsp=0), value) == 1529476623000
    assert enc(SqlType("datetime", fsp=3), value.replace(microsecond=123000)) == 1529476623123
    assert enc(SqlType("datetime", fsp=6), value.replace(microsecond=123456)) == 1529476623123456
    assert enc(SqlType("datetime", fsp=4), value) == 1529476623000000


def test_datetime_before_1970() -> None:
    assert enc(SqlType("datetime", fsp=0), dt.datetime(1969, 12, 31, 23, 59, 59)) == -1000
    assert enc(SqlType("datetime", fsp=3), dt.datetime(1969, 12, 31, 23, 59, 59, 999000)) == -1
    assert enc(SqlType("datetime", fsp=6), dt.datetime(1969, 12, 31, 23, 59, 59, 999999)) == -1
    # 1900-01-01 00:00:00 is -25567 days: -25567 * 86400 * 1000 ms.
    assert enc(SqlType("datetime"), dt.datetime(1900, 1, 1)) == -2208988800000


def test_datetime_connect_is_milliseconds() -> None:
    # time.precision.mode=connect: Connect Timestamp, epoch milliseconds whatever the fsp
    # (sub-millisecond digits are lost, rounding down as Instant.toEpochMilli).
    sql = SqlType("datetime", fsp=6)
    assert enc(sql, dt.datetime(2018, 6, 20, 6, 37, 3, 123456), CONNECT) == 1529476623123
    assert enc(sql, dt.datetime(1969, 12, 31, 23, 59, 59, 999999), CONNECT) == -1


def test_timestamp_is_a_zoned_timestamp_in_utc() -> None:
    # "Basic types"/"Temporal types": TIMESTAMP 2018-06-20 06:37:03 in America/Los_Angeles
    # becomes "2018-06-20T13:37:03Z"; the decoder has the UTC instant already.
    value = dt.datetime(2018, 6, 20, 13, 37, 3, tzinfo=dt.UTC)
    assert enc(SqlType("timestamp", fsp=0), value) == "2018-06-20T13:37:03Z"
    assert enc(SqlType("timestamp", fsp=0), value, CONNECT) == "2018-06-20T13:37:03Z"
    pacific = dt.timezone(dt.timedelta(hours=-7))
    local = dt.datetime(2018, 6, 20, 6, 37, 3, tzinfo=pacific)
    assert enc(SqlType("timestamp", fsp=0), local) == "2018-06-20T13:37:03Z"


def test_timestamp_fraction_has_fsp_digits() -> None:
    # The connector writes exactly fsp fractional digits for TIMESTAMP(1-6) (DBZ-5996).
    value = dt.datetime(2023, 1, 11, 0, 34, 10, 123000, tzinfo=dt.UTC)
    assert enc(SqlType("timestamp", fsp=3), value) == "2023-01-11T00:34:10.123Z"
    assert enc(SqlType("timestamp", fsp=6), value) == "2023-01-11T00:34:10.123000Z"
    assert enc(SqlType("timestamp", fsp=5), value) == "2023-01-11T00:34:10.12300Z"
    whole = value.replace(microsecond=0)
    assert enc(SqlType("timestamp", fsp=6), whole) == "2023-01-11T00:34:10.000000Z"
    assert enc(SqlType("timestamp", fsp=2), value.replace(microsecond=10000)) == (
        "2023-01-11T00:34:10.01Z"
    )


def test_time_adaptive_is_signed_microseconds() -> None:
    # MicroTime: microseconds. 13:37:03.5 = (13*3600 + 37*60 + 3) s = 49023 s + 0.5 s.
    sql = SqlType("time", fsp=1)
    assert enc(sql, dt.timedelta(hours=13, minutes=37, seconds=3, milliseconds=500)) == 49023500000
    # Beyond a day and negative: 838:59:59 = 838*3600 + 59*60 + 59 = 3020399 s.
    assert enc(sql, dt.timedelta(hours=838, minutes=59, seconds=59)) == 3020399000000
    assert enc(sql, -dt.timedelta(hours=838, minutes=59, seconds=59)) == -3020399000000
    assert enc(sql, -dt.timedelta(hours=1)) == -3600000000
    assert enc(sql, -dt.timedelta(seconds=1, microseconds=500000)) == -1500000
    assert enc(sql, dt.timedelta(hours=25)) == 90000000000


def test_time_connect_is_milliseconds_of_the_day() -> None:
    sql = SqlType("time", fsp=6)
    assert enc(sql, dt.timedelta(hours=13, minutes=37, seconds=3, milliseconds=500), CONNECT) == (
        49023500
    )
    assert enc(sql, dt.timedelta(microseconds=999), CONNECT) == 0
    assert enc(sql, dt.timedelta(hours=24), CONNECT) == 86400000  # 24:00:00 is accepted


@pytest.mark.parametrize("value", [-dt.timedelta(seconds=1), dt.timedelta(hours=24, seconds=1)])
def test_time_connect_refuses_what_it_cannot_hold(value: dt.timedelta) -> None:
    # "Values in only the range of 00:00:00.000 to 23:59:59.999 can be handled."
    with pytest.raises(DebeziumEncodingError) as info:
        enc(SqlType("time"), value, CONNECT)
    assert info.value.exit_code == EXIT_CONFIG


@pytest.mark.parametrize(
    ("sql", "zero", "epoch"),
    [
        (SqlType("date"), "0000-00-00", 0),
        (SqlType("date"), "2020-00-15", 0),
        (SqlType("datetime", fsp=0), "0000-00-00 00:00:00", 0),
        (SqlType("datetime", fsp=6), "0000-00-00 00:00:00.000000", 0),
        (SqlType("timestamp", fsp=2), "0000-00-00 00:00:00.00", "1970-01-01T00:00:00Z"),
    ],
)
def test_zero_dates(sql: SqlType, zero: str, epoch: object) -> None:
    # "Temporal types": zero values are null when the column allows null, else the epoch
    # ("Zero-date fallback": 1970-01-01[T00:00:00Z]).
    assert enc(sql, zero, nullable=True) is None
    assert enc(sql, zero, nullable=False) == epoch
    assert enc(sql, zero, CONNECT, nullable=False) == epoch


def test_time_adjuster_expands_two_digit_years() -> None:
    # enable.time.adjuster (default true): years 0-69 -> 2000-2069, 70-99 -> 1970-1999.
    # 2050-06-01: 80 years and 20 leap days (1972..2048) = 29220, + 151 days to June 1.
    assert enc(SqlType("date"), dt.date(50, 6, 1)) == 29371
    # 1999-01-01: 29 years and 7 leap days (1972..1996).
    assert enc(SqlType("date"), dt.date(99, 1, 1)) == 10592
    assert enc(SqlType("datetime"), dt.datetime(99, 1, 1)) == 10592 * 86400000
    # Year 100 and later are left alone, and the adjuster can be switched off.
    assert (
        enc(SqlType("date"), dt.date(100, 1, 1)) == (dt.date(100, 1, 1) - dt.date(1970, 1, 1)).days
    )
    off = DebeziumOptions(enable_time_adjuster=False)
    assert (
        enc(SqlType("date"), dt.date(50, 6, 1), off)
        == (dt.date(50, 6, 1) - dt.date(1970, 1, 1)).days
    )


# ----------------------------------------------------------------------------- strings


def test_strings() -> None:
    assert enc(SqlType("varchar", charset="utf8mb4"), "héllo") == "héllo"
    assert enc(SqlType("longtext"), "") == ""
    # Bytes the character set rejects become U+FFFD, as Java's String(bytes, charset).
    assert enc(SqlType("varchar", charset="utf8mb4"), b"h\xffi") == "h\ufffdi"
    assert enc(SqlType("text"), b"\xc3\xa9") == "é"  # no charset named: UTF-8


def test_enum_and_set() -> None:
    # "Basic types": ENUM and SET are strings (Enum / EnumSet).
    members = ("a", "b", "c")
    assert enc(SqlType("enum", members=members), "b") == "b"
    assert enc(SqlType("enum", members=members), 2) == "b"  # a 1-based index
    assert enc(SqlType("enum", members=members), 0) == ""  # the invalid value's ''
    assert enc(SqlType("enum"), 2) == "2"  # no names: the index kept as text
    assert enc(SqlType("set", members=members), "a,c") == "a,c"
    assert enc(SqlType("set", members=members), 0b101) == "a,c"
    assert enc(SqlType("set", members=members), 0) == ""
    assert enc(SqlType("set"), 5) == "5"


# ----------------------------------------------------------------------------- binary


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        # fb ff = 111110 111111 1111(00): standard "+/8=", URL-safe "-_8=".
        ("bytes", "+/8="),  # BYTES, which the JsonConverter writes as base64
        ("base64", "+/8="),
        ("base64-url-safe", "-_8="),  # padded, as Java's URL encoder
        ("hex", "fbff"),  # lower case
    ],
)
def test_binary_handling_modes(mode: str, expected: str) -> None:
    options = DebeziumOptions(binary_handling_mode=mode)
    for kind in ("varbinary", "blob", "longblob"):
        assert enc(SqlType(kind), b"\xfb\xff", options) == expected


def test_binary_is_padded_to_its_length() -> None:
    # BINARY(4) holding 01: the connector pads fixed-length binary with 00 to 01 00 00 00.
    sql = SqlType("binary", length=4)
    assert enc(sql, b"\x01", DebeziumOptions(binary_handling_mode="hex")) == "01000000"
    assert enc(sql, b"\x01") == "AQAAAA=="
    assert enc(SqlType("varbinary", length=4), b"\x01") == "AQ=="  # VARBINARY is not padded


# ----------------------------------------------------------------------------- JSON, GIS, vector


def test_json_is_its_text() -> None:
    # "Basic types": io.debezium.data.Json, the string representation of the document. The
    # binlog reader's text is compact: Debezium 3.6.1 wrote '{"a":[1,2.5,null],"b":"ü"}' for
    # MySQL's '{"a": [1, 2.5, null], "b": "ü"}' (test_debezium_contract).
    assert enc(SqlType("json"), {"a": 1, "b": [True, None]}) == '{"a":1,"b":[true,null]}'
    assert enc(SqlType("json"), "x") == '"x"'  # a JSON string scalar keeps its quotes
    assert enc(SqlType("json"), [Decimal("1.10")]) == "[1.10]"


def test_json_text_follows_the_binlog_clients_formatter() -> None:
    # mysql-binlog-connector's JsonStringFormatter: Double.toString inside 1e-3..1e7 (always
    # a digit after the point), else new BigDecimal(d).toPlainString(): 1e7 is exactly
    # 10000000; 0.0001 is the double 0.000100000000000000004792...; strings escape controls
    # as upper-case \u00XX and leave non-ASCII alone; a DATETIME in a document drops the
    # fraction's trailing zeros (MySQL prints six digits).
    from replicad.binlog.jsonb import JsonTemporal

    assert enc(SqlType("json"), [2.5, 1.0, -0.0, 1e7]) == "[2.5,1.0,-0.0,10000000]"
    assert enc(SqlType("json"), [0.0001]) == (
        "[0.000100000000000000004792173602385929598312941379845142364501953125]"
    )
    assert enc(SqlType("json"), ['\x01\t"\\ü\u2028']) == '["\\u0001\\t\\"\\\\ü\u2028"]'
    dt6 = JsonTemporal("2020-01-02 03:04:05.500000", 12)
    assert enc(SqlType("json"), {"t": dt6, "z": JsonTemporal("01:02:03.000000", 11)}) == (
        '{"t":"2020-01-02 03:04:05.5","z":"01:02:03"}'
    )


def test_json_snapshot_read_is_mysqls_text() -> None:
    # Debezium's snapshot reads the column over JDBC: the text MySQL prints.
    from replicad.sinks.debezium_values import snapshot_encoder

    encode = snapshot_encoder(SqlType("json"), DEFAULTS, nullable=True)
    assert encode({"a": [1, 2.5]}) == '{"a": [1, 2.5]}'
    assert encode(None) is None


def test_json_null_document_is_the_text_null() -> None:
    # io.debezium.data.Json is the document's text: a JSON null document is "null", which
    # SQL NULL (None, below the encoder) is not.
    assert enc(SqlType("json"), JSON_NULL) == "null"


def test_geometry() -> None:
    # "Spatial types": a struct of wkb (bytes, base64 in JSON) and srid. POINT(1 1) as WKB:
    # 01 01000000 000000000000f03f 000000000000f03f.
    wkb = bytes.fromhex("0101000000000000000000f03f000000000000f03f")
    expected = {"wkb": "AQEAAAAAAAAAAADwPwAAAAAAAPA/", "srid": 4326}
    assert enc(SqlType("geometry"), Geometry(4326, wkb)) == expected
    # The connector writes an unset SRID (0) as null, and ignores binary.handling.mode.
    hex_mode = DebeziumOptions(binary_handling_mode="hex")
    assert enc(SqlType("geometry"), Geometry(0, wkb), hex_mode) == {**expected, "srid": None}


def test_vector() -> None:
    # "Vector types": an array of FLOAT32.
    assert enc(SqlType("vector", dimensions=2), [1.5, -0.25]) == [1.5, -0.25]
    with pytest.raises(DebeziumEncodingError):
        enc(SqlType("vector", dimensions=2), b"\x00\x00\x80")


def test_an_unknown_type_is_refused_when_the_encoder_is_built() -> None:
    with pytest.raises(DebeziumEncodingError):
        value_encoder(SqlType("typed_array"), DEFAULTS, nullable=True)
    with pytest.raises(DebeziumEncodingError):
        connect_field("x", SqlType("typed_array"), True, DEFAULTS)


# ----------------------------------------------------------------------------- Connect schema


def field(sql: SqlType, options: DebeziumOptions = DEFAULTS, nullable: bool = True) -> list:
    # As (key, value) pairs: the JsonConverter's key order is part of what is compared.
    return list(connect_field("c", sql, nullable, options).items())


def test_decimal_field() -> None:
    assert field(dec(10, 2)) == [
        ("type", "bytes"),
        ("optional", True),
        ("name", "org.apache.kafka.connect.data.Decimal"),
        ("version", 1),
        ("parameters", {"scale": "2", "connect.decimal.precision": "10"}),
        ("field", "c"),
    ]
    assert field(dec(65, 30), nullable=False)[4] == (
        "parameters",
        {"scale": "30", "connect.decimal.precision": "65"},
    )
    strings = DebeziumOptions(decimal_handling_mode="string")
    assert field(dec(10, 2), strings, False) == [
        ("type", "string"),
        ("optional", False),
        ("field", "c"),
    ]
    assert field(dec(10, 2), DebeziumOptions(decimal_handling_mode="double"))[0] == (
        "type",
        "double",
    )


def test_bigint_unsigned_fields() -> None:
    assert field(SqlType("bigint", unsigned=True))[0] == ("type", "int64")
    precise = DebeziumOptions(bigint_unsigned_handling_mode="precise")
    assert dict(field(SqlType("bigint", unsigned=True), precise))["parameters"] == {
        "scale": "0",
        "connect.decimal.precision": "20",
    }


@pytest.mark.parametrize(
    ("sql", "connect_type"),
    [
        (SqlType("tinyint"), "int16"),  # as Debezium 3.5/3.6 wrote it (not int8)
        (SqlType("tinyint", unsigned=True), "int16"),  # "Basic types": TINYINT UNSIGNED
        (SqlType("smallint"), "int16"),
        (SqlType("smallint", unsigned=True), "int32"),
        (SqlType("mediumint"), "int32"),
        (SqlType("mediumint", unsigned=True), "int32"),
        (SqlType("int"), "int32"),
        (SqlType("int", unsigned=True), "int64"),
        (SqlType("bigint"), "int64"),
        (SqlType("float"), "float"),
        (SqlType("double"), "double"),
        (SqlType("bit", precision=1), "boolean"),
        (SqlType("varchar"), "string"),
        (SqlType("mediumtext"), "string"),
        (SqlType("blob"), "bytes"),
    ],
)
def test_plain_fields(sql: SqlType, connect_type: str) -> None:
    assert field(sql, nullable=False) == [
        ("type", connect_type),
        ("optional", False),
        ("field", "c"),
    ]


def test_binary_field_is_a_string_when_encoded_as_text() -> None:
    for mode in ("base64", "base64-url-safe", "hex"):
        assert field(SqlType("varbinary"), DebeziumOptions(binary_handling_mode=mode))[0] == (
            "type",
            "string",
        )


@pytest.mark.parametrize(
    ("sql", "options", "connect_type", "name"),
    [
        (SqlType("date"), DEFAULTS, "int32", "io.debezium.time.Date"),
        (SqlType("date"), CONNECT, "int32", "org.apache.kafka.connect.data.Date"),
        (SqlType("time", fsp=0), DEFAULTS, "int64", "io.debezium.time.MicroTime"),
        (SqlType("time", fsp=6), CONNECT, "int32", "org.apache.kafka.connect.data.Time"),
        (SqlType("datetime", fsp=0), DEFAULTS, "int64", "io.debezium.time.Timestamp"),
        (SqlType("datetime", fsp=3), DEFAULTS, "int64", "io.debezium.time.Timestamp"),
        (SqlType("datetime", fsp=4), DEFAULTS, "int64", "io.debezium.time.MicroTimestamp"),
        (SqlType("datetime", fsp=6), DEFAULTS, "int64", "io.debezium.time.MicroTimestamp"),
        (SqlType("datetime", fsp=6), CONNECT, "int64", "org.apache.kafka.connect.data.Timestamp"),
        (SqlType("timestamp", fsp=6), DEFAULTS, "string", "io.debezium.time.ZonedTimestamp"),
        (SqlType("timestamp", fsp=0), CONNECT, "string", "io.debezium.time.ZonedTimestamp"),
        (SqlType("year"), DEFAULTS, "int32", "io.debezium.time.Year"),
        (SqlType("json"), DEFAULTS, "string", "io.debezium.data.Json"),
    ],
)
def test_named_fields(sql: SqlType, options: DebeziumOptions, connect_type: str, name: str) -> None:
    assert field(sql, options) == [
        ("type", connect_type),
        ("optional", True),
        ("name", name),
        ("version", 1),
        ("field", "c"),
    ]


def test_bits_field() -> None:
    assert field(SqlType("bit", precision=17)) == [
        ("type", "bytes"),
        ("optional", True),
        ("name", "io.debezium.data.Bits"),
        ("version", 1),
        ("parameters", {"length": "17"}),
        ("field", "c"),
    ]


def test_enum_and_set_fields_list_the_allowed_values() -> None:
    assert field(SqlType("enum", members=("a", "b"))) == [
        ("type", "string"),
        ("optional", True),
        ("name", "io.debezium.data.Enum"),
        ("version", 1),
        ("parameters", {"allowed": "a,b"}),
        ("field", "c"),
    ]
    fields = dict(field(SqlType("set", members=("x,y", "z\\"))))
    assert fields["name"] == "io.debezium.data.EnumSet"
    assert fields["parameters"] == {"allowed": "x\\,y,z\\\\"}  # ',' and '\' escaped
    assert "parameters" not in dict(field(SqlType("enum")))  # names unknown


def test_geometry_field_is_always_optional() -> None:
    expected = [
        ("type", "struct"),
        (
            "fields",
            [
                {"type": "bytes", "optional": False, "field": "wkb"},
                {"type": "int32", "optional": True, "field": "srid"},
            ],
        ),
        ("optional", True),
        ("name", "io.debezium.data.geometry.Geometry"),
        ("version", 1),
        ("doc", "Geometry"),
        ("field", "c"),
    ]
    assert field(SqlType("geometry"), nullable=False) == expected


def test_vector_field() -> None:
    assert field(SqlType("vector", dimensions=3), nullable=False) == [
        ("type", "array"),
        ("items", {"type": "float", "optional": False}),
        ("optional", False),
        ("name", "io.debezium.data.FloatVector"),
        ("version", 1),
        ("field", "c"),
    ]


def test_json_snapshot_read_keeps_the_servers_text() -> None:
    # The snapshot reader holds MySQL's printed text as an orjson.Fragment (it failed with
    # TypeError before: "not a decoded JSON value: Fragment").
    from replicad.sinks.debezium_values import snapshot_encoder

    text = b'{"a": [1, 2.5, null], "b": "\xc3\xbc"}'
    for nullable in (True, False):
        encode = snapshot_encoder(SqlType("json"), DEFAULTS, nullable=nullable)
        assert encode(orjson.Fragment(text)) == text.decode()
