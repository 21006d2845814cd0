"""Column values and their Kafka Connect schemas as Debezium's MySQL connector encodes them,
in the form Kafka Connect's JsonConverter writes them (`schemas.enable=true` for the schema).
Sans-IO: built from a column's `SqlType` and the options; no Kafka, no MySQL.

The encodings follow the Debezium MySQL connector documentation (documentation/modules/ROOT/
partials/modules/all-connectors/shared-mariadb-mysql.adoc, included by connectors/mysql.adoc):

- "Basic types": integers, FLOAT/DOUBLE, BIT(1) as boolean and BIT(>1) as `io.debezium.data.Bits`
  (little-endian bytes), strings, binary per `binary.handling.mode`, JSON as
  `io.debezium.data.Json`, ENUM/SET as `io.debezium.data.Enum`/`EnumSet` with `allowed`,
  YEAR as `io.debezium.time.Year`, TIMESTAMP as `io.debezium.time.ZonedTimestamp`;
- "Temporal types": DATE, TIME and DATETIME per `time.precision.mode`, and zero dates as null
  for a nullable column, else the epoch;
- "Decimal types": DECIMAL per `decimal.handling.mode`;
- "Spatial types": `io.debezium.data.geometry.Geometry`, a struct of `wkb` and `srid`;
- "Vector types": VECTOR as `io.debezium.data.FloatVector`;
- "Connector properties": the options' names, values and defaults, `bigint.unsigned.handling.mode`
  (values above 2^63-1 wrap negative in `long` mode) and `enable.time.adjuster`.

How a logical type is written as JSON is Kafka Connect's: bytes, and so `Decimal`'s unscaled
two's-complement bytes, as base64; `Date` as days, `Time` as milliseconds of the day (an int32),
`Timestamp` as epoch milliseconds.

Where the documentation says nothing, the connector's own behaviour is followed and a comment
says so; where that behaviour is a defect or cannot apply to a decoded binlog value, the least
surprising encoding is chosen and the comment says why. Not represented: schema `default`
values (the binlog carries no DEFAULT), BOOLEAN columns (logged as TINYINT(1); the binlog
cannot tell them apart, so they are int8 as in Debezium's snapshot), and POINT's own schema
(the binlog only says GEOMETRY).
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import datetime as dt
import math
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, TypeVar

import orjson

from replicad.binlog import jsonb
from replicad.binlog.charsets import CODEC_BY_CHARSET, decode_mysql_latin1
from replicad.binlog.column_types import SqlType
from replicad.binlog.values import Geometry
from replicad.errors import ConfigError, ReplicadError
from replicad.exit_codes import EXIT_CONFIG

Encoder = Callable[[Any], Any]

DECIMAL_HANDLING_MODES = ("precise", "string", "double")
TIME_PRECISION_MODES = ("adaptive_time_microseconds", "connect")
# Accepted by Debezium (the connector properties list isostring and structured, the temporal
# types section microseconds and nanoseconds; adaptive is deprecated) but not implemented here:
# refused by name rather than taken for a mode they are not.
UNSUPPORTED_TIME_PRECISION_MODES = (
    "adaptive",
    "isostring",
    "microseconds",
    "nanoseconds",
    "structured",
)
BINARY_HANDLING_MODES = ("bytes", "base64", "base64-url-safe", "hex")
BIGINT_UNSIGNED_HANDLING_MODES = ("long", "precise")

DECIMAL = "org.apache.kafka.connect.data.Decimal"
DECIMAL_PRECISION = "connect.decimal.precision"  # the parameter Debezium adds to Decimal

_D = TypeVar("_D", bound=dt.date)  # a date or a datetime

_EPOCH_DATE = dt.date(1970, 1, 1)
_EPOCH_DATETIME = dt.datetime(1970, 1, 1)
_ONE_DAY = dt.timedelta(days=1)
_TWO_64 = 1 << 64
_TWO_63 = 1 << 63


class DebeziumEncodingError(ReplicadError, ValueError):
    """A column type or value the configured Debezium encoding cannot represent (a TIME outside
    0-24 h under time.precision.mode=connect, a column type with no mapping). The same row
    gives the same error after a restart, so it ends the run for an operator to act on."""

    exit_code = EXIT_CONFIG


@dataclass(frozen=True, slots=True)
class DebeziumOptions:
    """Debezium's MySQL connector properties that change how values are encoded, with its
    defaults. Values are matched as Debezium parses them: trimmed, in any case."""

    decimal_handling_mode: str = "precise"  # decimal.handling.mode
    time_precision_mode: str = "adaptive_time_microseconds"  # time.precision.mode
    binary_handling_mode: str = "bytes"  # binary.handling.mode
    bigint_unsigned_handling_mode: str = "long"  # bigint.unsigned.handling.mode
    # enable.time.adjuster: DATE/DATETIME years 0-69 become 2000-2069 and 70-99 become
    # 1970-1999, as Debezium does by default (MySQL already expands 2-digit years on insert,
    # so False keeps a stored year 0050 as 50).
    enable_time_adjuster: bool = True

    def __post_init__(self) -> None:
        for field, allowed in (
            ("decimal_handling_mode", DECIMAL_HANDLING_MODES),
            ("time_precision_mode", TIME_PRECISION_MODES),
            ("binary_handling_mode", BINARY_HANDLING_MODES),
            ("bigint_unsigned_handling_mode", BIGINT_UNSIGNED_HANDLING_MODES),
        ):
            value = getattr(self, field)
            debezium_name = field.replace("_", ".")
            if not isinstance(value, str):
                raise ConfigError(
                    f"{field} ({debezium_name}) must be a string", key=field, value=repr(value)
                )
            normal = value.strip().lower()
            if normal in allowed:
                object.__setattr__(self, field, normal)
                continue
            if field == "time_precision_mode" and normal in UNSUPPORTED_TIME_PRECISION_MODES:
                reason = (
                    f"{field} ({debezium_name}) {normal!r} is a Debezium mode replicad "
                    f"does not implement; use one of {', '.join(allowed)}"
                )
            else:
                reason = f"{field} ({debezium_name}) must be one of {', '.join(allowed)}"
            raise ConfigError(reason, key=field, value=value)
        if not isinstance(self.enable_time_adjuster, bool):
            raise ConfigError(
                "enable_time_adjuster (enable.time.adjuster) must be true or false",
                key="enable_time_adjuster",
                value=repr(self.enable_time_adjuster),
            )


# --------------------------------------------------------------------------- value encoders


def value_encoder(sql: SqlType, options: DebeziumOptions, *, nullable: bool) -> Encoder:
    """The function from one decoded value of a column to the JSON value Debezium's connector
    and the JsonConverter would write for it. Built once per column. `nullable` decides what a
    zero date becomes (null, or the epoch for a NOT NULL column). None is always None, except
    in a NOT NULL JSON column where it can only be the JSON literal null."""
    build = _ENCODERS.get(sql.data_type)
    if build is None:
        raise DebeziumEncodingError(
            f"no Debezium encoding for column type {sql.data_type}", type=sql.sql()
        )
    encode = build(sql, options, nullable)
    if sql.data_type == "json" and not nullable:
        return encode  # None here is the document `null`, whose text is "null"

    def encoder(value: Any) -> Any:
        return None if value is None else encode(value)

    return encoder


def _identity(value: Any) -> Any:
    return value


def _integer(sql: SqlType, options: DebeziumOptions, nullable: bool) -> Encoder:
    if sql.data_type != "bigint" or not sql.unsigned:
        return _identity  # the decoder already gives unsigned columns their unsigned value
    if options.bigint_unsigned_handling_mode == "precise":
        return _bigint_precise
    return _bigint_long


def _bigint_long(value: int) -> int:
    # Connector properties, bigint.unsigned.handling.mode=long: a Java long; values above
    # 2^63-1 "are emitted as a negative number" (the two's-complement reading of the 64 bits).
    return value - _TWO_64 if value >= _TWO_63 else value


def _bigint_precise(value: int) -> str:
    return _base64(_twos_complement(value))  # a Decimal of scale 0


def _decimal(sql: SqlType, options: DebeziumOptions, nullable: bool) -> Encoder:
    scale = sql.scale or 0
    mode = options.decimal_handling_mode
    if mode == "double":
        return float  # BigDecimal.doubleValue and float(Decimal) both round correctly
    if mode == "string":

        def as_string(value: Decimal) -> str:
            return _plain(_unscaled(value, scale), scale)  # BigDecimal.toPlainString

        return as_string

    def precise(value: Decimal) -> str:
        return _base64(_twos_complement(_unscaled(value, scale)))

    return precise


def _unscaled(value: Decimal, scale: int) -> int:
    """The value times 10**scale, exactly (Decimal arithmetic would round past 28 digits)."""
    sign, digits, exponent = value.as_tuple()
    if not isinstance(exponent, int):
        raise DebeziumEncodingError("a DECIMAL value must be finite", value=str(value))
    shift = exponent + scale
    if shift < 0:
        # The binlog gives every value the column's scale; more digits would need rounding.
        raise DebeziumEncodingError(
            f"DECIMAL value has more than {scale} digits after the point", value=str(value)
        )
    unscaled = int("".join(map(str, digits))) * 10**shift
    return -unscaled if sign else unscaled


def _plain(unscaled: int, scale: int) -> str:
    if scale == 0:
        return str(unscaled)
    digits = str(abs(unscaled)).rjust(scale + 1, "0")
    return ("-" if unscaled < 0 else "") + digits[:-scale] + "." + digits[-scale:]


def _twos_complement(value: int) -> bytes:
    """Big-endian two's complement in the fewest bytes that keep the sign, as Java's
    BigInteger.toByteArray (what Connect's Decimal stores): 0 -> 00, 128 -> 00 80, -129 -> ff 7f."""
    length = (value if value >= 0 else ~value).bit_length() // 8 + 1
    return value.to_bytes(length, "big", signed=True)


def _base64(data: bytes) -> str:
    return binascii.b2a_base64(data, newline=False).decode("ascii")


def _bit(sql: SqlType, options: DebeziumOptions, nullable: bool) -> Encoder:
    bits = sql.precision
    if not bits:
        raise DebeziumEncodingError("a BIT column needs its number of bits", type=sql.sql())
    if bits == 1:
        return bool
    nbytes = (bits + 7) // 8

    def as_bits(value: int) -> str:
        # "Basic types", BIT(>1): the bits little-endian in n/8 rounded up bytes. The schema
        # is io.debezium.data.Bits, always bytes: binary.handling.mode does not apply to it.
        return _base64(value.to_bytes(nbytes, "little"))

    return as_bits


# Temporal types. A zero or invalid date reaches here as the str MySQL prints: "Temporal
# types" says such values are null in a nullable column and the epoch otherwise. Debezium's
# binlog reader does the same for any date with a zero year, month or day; a date that is
# invalid otherwise (2021-02-30) fails its reader by default, and is treated as zero here.


def _adjust(value: _D, options: DebeziumOptions) -> _D:
    year = value.year
    if not options.enable_time_adjuster or year >= 100:
        return value
    # Leap years stay leap years under +2000 (years 1-69) and +1900 (70-99): replace is safe.
    return value.replace(year=year + (2000 if year < 70 else 1900))


def _date(sql: SqlType, options: DebeziumOptions, nullable: bool) -> Encoder:
    zero = None if nullable else 0  # io.debezium.time.Date and Connect's Date are both days

    def as_days(value: dt.date | str) -> int | None:
        if isinstance(value, str):
            return zero
        return (_adjust(value, options) - _EPOCH_DATE).days

    return as_days


def _datetime(sql: SqlType, options: DebeziumOptions, nullable: bool) -> Encoder:
    zero = None if nullable else 0
    # adaptive_time_microseconds: Timestamp (ms) for fsp 0-3, MicroTimestamp (us) for 4-6;
    # connect: Connect's Timestamp (ms) whatever the fsp.
    micros = options.time_precision_mode != "connect" and (sql.fsp or 0) > 3

    def as_epoch(value: dt.datetime | str) -> int | None:
        if isinstance(value, str):
            return zero
        delta = _adjust(value, options) - _EPOCH_DATETIME  # DATETIME is read as UTC
        total = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
        return total if micros else total // 1000  # floor, as Instant.toEpochMilli

    return as_epoch


def _timestamp(sql: SqlType, options: DebeziumOptions, nullable: bool) -> Encoder:
    # ZonedTimestamp in both time precision modes ("Excluding the TIMESTAMP data type ...").
    # The documentation says ISO 8601 in UTC, e.g. 2018-06-20T13:37:03Z. The number of
    # fractional digits is the connector's (DBZ-5996): exactly fsp digits for TIMESTAMP(1-6)
    # (truncated, zero-padded), and for TIMESTAMP(0) Java's ISO_OFFSET_DATE_TIME, which writes
    # only the digits needed.
    zero = None if nullable else "1970-01-01T00:00:00Z"
    fsp = sql.fsp or 0

    def as_iso(value: dt.datetime | str) -> str | None:
        if isinstance(value, str):
            return zero
        if value.utcoffset():  # the decoder gives UTC; anything else is converted
            value = value.astimezone(dt.UTC)
        text = (
            f"{value.year:04d}-{value.month:02d}-{value.day:02d}T"
            f"{value.hour:02d}:{value.minute:02d}:{value.second:02d}"
        )
        us = value.microsecond
        if fsp:
            text += "." + f"{us:06d}"[:fsp]
        elif us:
            text += "." + f"{us:06d}".rstrip("0")
        return text + "Z"

    return as_iso


def _time(sql: SqlType, options: DebeziumOptions, nullable: bool) -> Encoder:
    if options.time_precision_mode == "connect":
        return _time_connect
    return _time_micros


def _total_micros(value: dt.timedelta) -> int:
    return (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds


def _time_micros(value: dt.timedelta) -> int:
    # MicroTime. The documentation warns that only 00:00:00-23:59:59.999999 is captured
    # "correctly"; the connector still writes any TIME, -838:59:59 to 838:59:59, as its signed
    # microseconds (a Duration, not a time of day), and so does this.
    return _total_micros(value)


def _time_connect(value: dt.timedelta) -> int:
    # Connect's Time: int32 milliseconds of the day. The documentation's table says INT64 and
    # microseconds, which no org.apache.kafka.connect.data.Time can be; the connector writes
    # int32 milliseconds. Outside 00:00:00-24:00:00 ("Values in only the range ... can be
    # handled") the connector logs a warning and writes null: refused here instead, so that
    # no value is silently lost.
    if value < dt.timedelta(0) or value > _ONE_DAY:
        raise DebeziumEncodingError(
            "time.precision.mode=connect cannot represent a TIME outside 00:00:00-24:00:00;"
            " use adaptive_time_microseconds",
            key="time_precision_mode",
            value=str(value),
        )
    return _total_micros(value) // 1000


def _string(sql: SqlType, options: DebeziumOptions, nullable: bool) -> Encoder:
    codec = CODEC_BY_CHARSET.get(sql.charset or "", "utf-8")

    def as_text(value: str | bytes) -> str:
        if isinstance(value, str):
            return value
        # Bytes the column's character set rejects (or a column whose charset the binlog did
        # not name). The connector decodes them as Java's String(bytes, charset) does, each
        # malformed sequence becoming U+FFFD, with UTF-8 when the charset is unknown.
        if codec == "mysql_latin1":
            return decode_mysql_latin1(value)
        return bytes(value).decode(codec, "replace")

    return as_text


def _enum(sql: SqlType, options: DebeziumOptions, nullable: bool) -> Encoder:
    members = sql.members

    def as_member(value: str | int) -> str:
        if isinstance(value, str):
            return value
        # An index: the decoder did not have the names. With names, as the connector maps a
        # binlog index (1-based; 0 is the '' of an invalid value).
        if value == 0:
            return ""
        if members is not None and 0 < value <= len(members):
            return members[value - 1]
        # Without names the connector writes null; the index, as text, keeps the value.
        return str(value)

    return as_member


def _set(sql: SqlType, options: DebeziumOptions, nullable: bool) -> Encoder:
    members = sql.members

    def as_members(value: str | int) -> str:
        if isinstance(value, str):
            return value
        if members is None:
            return str(value)  # the bit mask, as text: see _enum
        # Bit i is member i; the names joined by ',' in definition order, as the connector
        # does (and MySQL prints). Bits past the members are dropped, as the connector does.
        return ",".join(name for i, name in enumerate(members) if value >> i & 1)

    return as_members


def _binary(sql: SqlType, options: DebeziumOptions, nullable: bool) -> Encoder:
    # The connector pads BINARY(n) to n bytes with 0x00 (DBZ-254; the binlog drops trailing
    # zeros). Not documented; harmless when the decoder has padded already.
    pad = sql.length if sql.data_type == "binary" else None
    mode = options.binary_handling_mode
    if mode == "hex":
        text: Callable[[bytes], str] = bytes.hex  # lower case, as Debezium's HexConverter
    elif mode == "base64-url-safe":

        def text(data: bytes) -> str:
            return base64.urlsafe_b64encode(data).decode("ascii")  # padded, as Java's encoder

    else:
        # bytes: a BYTES field, which the JsonConverter writes as base64; base64: a string
        # holding the same text.
        text = _base64

    def as_binary(value: bytes | str) -> str:
        data = value.encode() if isinstance(value, str) else bytes(value)
        if pad is not None and len(data) < pad:
            data = data.ljust(pad, b"\x00")
        return text(data)

    return as_binary


def _json(sql: SqlType, options: DebeziumOptions, nullable: bool) -> Encoder:
    # The documentation says only "the string representation". The connector's binlog
    # reader writes the document compact (its JsonStringFormatter: `debezium_json_text`);
    # its snapshot reads MySQL's own text (", " and ": ") over JDBC: `snapshot_encoder`
    # gives a read that. A JSON null document is the text "null", SQL NULL stays null. (A
    # partial update without its base document never gets here: binlog/changes.py takes it
    # out of the image into `json_diffs`.)
    return debezium_json_text


def snapshot_encoder(sql: SqlType, options: DebeziumOptions, *, nullable: bool) -> Encoder:
    """As `value_encoder`, for a snapshot read (op "r"): the same except a MySQL JSON
    column, which Debezium's snapshot reads as the text MySQL prints, and a TIMESTAMP(1-6),
    whose fraction its snapshot writes as Java's ISO_OFFSET_DATE_TIME does (the digits
    needed: 07.5Z, where its binlog reader writes 07.500000Z). Both measured against
    Debezium 3.5/3.6 (test_debezium_contract)."""
    if sql.data_type == "timestamp":
        return value_encoder(dataclasses.replace(sql, fsp=0), options, nullable=nullable)
    if sql.data_type != "json":
        return value_encoder(sql, options, nullable=nullable)
    if not nullable:
        return _mysql_json_text

    def encoder(value: Any) -> Any:
        return None if value is None else _mysql_json_text(value)

    return encoder


def _mysql_json_text(value: Any) -> str:
    if isinstance(value, orjson.Fragment):
        # The snapshot reader keeps the text the server printed as a Fragment, which gives
        # its bytes back only through orjson.
        return orjson.dumps(value).decode()
    return jsonb.to_mysql_json_text(value)


# JSON string escapes of the binlog client's JsonStringFormatter: '"' and '\\' by a
# backslash, \b \t \n \f \r by name, the other C0 controls as \u00XX (upper-case hex),
# everything from 0x20 up as is (DEL, U+2028 and non-ASCII too).
_JSON_ESCAPES = {i: f"\\u{i:04X}" for i in range(32)} | {
    0x08: "\\b",
    0x09: "\\t",
    0x0A: "\\n",
    0x0C: "\\f",
    0x0D: "\\r",
    ord('"'): '\\"',
    ord("\\"): "\\\\",
}


def _json_string(text: str) -> str:
    return '"' + text.translate(_JSON_ESCAPES) + '"'


def _json_double(value: float) -> str:
    """Java's Double.toString where it has no exponent (1e-3 <= |x| < 1e7: the shortest
    round-trip digits, at least one after the point), else BigDecimal(value).toPlainString:
    the double's exact binary value in plain digits, as JsonStringFormatter writes it."""
    if not math.isfinite(value):
        return "0.0"  # MySQL stores no NaN or infinity in a JSON document
    if value == 0 or 1e-3 <= abs(value) < 1e7:
        return repr(value)
    return format(Decimal(value), "f")


def _json_temporal(value: jsonb.JsonTemporal) -> str:
    """A DATE/TIME/DATETIME inside a document: the formatter's text, the fraction without
    its trailing zeros and left out when zero (MySQL prints six digits)."""
    text = str(value)
    if "." in text:
        whole, fraction = text.split(".")
        fraction = fraction.rstrip("0")
        text = whole + ("." + fraction if fraction else "")
    return '"' + text + '"'


def debezium_json_text(value: Any) -> str:
    """A decoded JSON document as Debezium's binlog reader writes it (mysql-binlog-connector's
    JsonStringFormatter): no spaces after ',' and ':', members in MySQL's stored order,
    strings escaped as `_JSON_ESCAPES`, doubles per `_json_double`, DECIMAL in plain digits,
    temporals per `_json_temporal`, other opaque values as their base64 in quotes."""
    kind = type(value)
    if kind is str:
        return _json_string(value)
    if kind is dict:
        return (
            "{"
            + ",".join(_json_string(k) + ":" + debezium_json_text(v) for k, v in value.items())
            + "}"
        )
    if kind is list or kind is tuple:
        return "[" + ",".join(debezium_json_text(v) for v in value) + "]"
    if value is None or value is jsonb.JSON_NULL:
        return "null"
    if value is True or value is False:
        return "true" if value else "false"
    if kind is int:
        return str(value)
    if kind is float:
        return _json_double(value)
    if kind is Decimal:
        return format(value, "f")
    if kind is jsonb.JsonTemporal:
        return _json_temporal(value)
    if kind is jsonb.JsonOpaque:
        return '"' + _base64(value.data) + '"'
    if kind is orjson.Fragment:  # a snapshot's text (snapshot_encoder is for those)
        return orjson.dumps(value).decode()
    if isinstance(value, str):
        return _json_string(str(value))
    raise DebeziumEncodingError(f"not a decoded JSON value: {kind.__name__}")


def _geometry(sql: SqlType, options: DebeziumOptions, nullable: bool) -> Encoder:
    def as_struct(value: Geometry) -> dict[str, Any]:
        # An SRID of 0 is null, as the connector writes an unset SRID. The WKB is a BYTES
        # field: base64 whatever binary.handling.mode says.
        return {"wkb": _base64(value.wkb), "srid": value.srid or None}

    return as_struct


def _vector(sql: SqlType, options: DebeziumOptions, nullable: bool) -> Encoder:
    def as_floats(value: list[float] | bytes) -> list[float]:
        if isinstance(value, list):
            return value  # already the shortest decimal of each float32
        # The decoder gives bytes when the length is not a multiple of 4; the connector
        # writes null with a warning. Refused instead: an array of floats cannot hold them.
        raise DebeziumEncodingError(
            "a VECTOR value is not a whole number of float32", length=len(value)
        )

    return as_floats


def _float(sql: SqlType, options: DebeziumOptions, nullable: bool) -> Encoder:
    return _identity


def _year(sql: SqlType, options: DebeziumOptions, nullable: bool) -> Encoder:
    # io.debezium.time.Year, the year as an int32. YEAR 0000 is 0 here; undocumented, the
    # connector's binlog reader makes it 1900 (1900 + the stored byte), which no one stored.
    return _identity


_Build = Callable[[SqlType, DebeziumOptions, bool], Encoder]
_TEXT_TYPES = ("char", "varchar", "tinytext", "text", "mediumtext", "longtext")
_BINARY_TYPES = ("binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob")
_ENCODERS: dict[str, _Build] = {
    **dict.fromkeys(("tinyint", "smallint", "mediumint", "int", "bigint"), _integer),
    "decimal": _decimal,
    "float": _float,
    "double": _float,
    "bit": _bit,
    "date": _date,
    "datetime": _datetime,
    "timestamp": _timestamp,
    "time": _time,
    "year": _year,
    **dict.fromkeys(_TEXT_TYPES, _string),
    **dict.fromkeys(_BINARY_TYPES, _binary),
    "enum": _enum,
    "set": _set,
    "json": _json,
    "geometry": _geometry,
    "vector": _vector,
}


# --------------------------------------------------------------------------- Connect schemas


@dataclass(frozen=True, slots=True)
class _Schema:
    type: str
    name: str | None = None
    version: int | None = None
    doc: str | None = None
    parameters: dict[str, str] | None = None
    items: dict[str, Any] | None = None  # array
    fields: list[dict[str, Any]] | None = None  # struct
    always_optional: bool = False


_INT_TYPES = {
    # (data type, unsigned) -> Connect type. The documentation lists TINYINT UNSIGNED as
    # INT16; the others widen the same way in the connector (each unsigned type takes the
    # next wider Connect type; MEDIUMINT UNSIGNED already fits INT32). A signed TINYINT,
    # TINYINT(1) too, is INT16 as well: the connector maps it through JDBC's SMALLINT
    # (measured against Debezium 3.5/3.6, tests/integration/test_debezium_contract.py).
    ("tinyint", False): "int16",
    ("tinyint", True): "int16",
    ("smallint", False): "int16",
    ("smallint", True): "int32",
    ("mediumint", False): "int32",
    ("mediumint", True): "int32",
    ("int", False): "int32",
    ("int", True): "int64",
    ("bigint", False): "int64",
}


def _decimal_schema(precision: int | None, scale: int) -> _Schema:
    parameters = {"scale": str(scale)}
    if precision is not None:
        parameters[DECIMAL_PRECISION] = str(precision)
    return _Schema("bytes", DECIMAL, 1, parameters=parameters)


def _allowed(members: tuple[str, ...] | None) -> dict[str, str] | None:
    if members is None:
        return None  # the names are unknown: no `allowed` rather than a wrong one
    # Comma-separated, with ',' and '\' escaped by '\' as the connector writes them since
    # debezium/dbz#2102 (a member may hold a comma).
    escaped = (m.replace("\\", "\\\\").replace(",", "\\,") for m in members)
    return {"allowed": ",".join(escaped)}


def _schema_of(sql: SqlType, options: DebeziumOptions) -> _Schema:
    kind = sql.data_type
    connect = options.time_precision_mode == "connect"
    if (kind, sql.unsigned) in _INT_TYPES:
        return _Schema(_INT_TYPES[kind, sql.unsigned])
    if kind == "bigint":  # unsigned
        if options.bigint_unsigned_handling_mode == "precise":
            return _decimal_schema(20, 0)
        return _Schema("int64")
    if kind == "decimal":
        mode = options.decimal_handling_mode
        if mode == "double":
            return _Schema("double")
        if mode == "string":
            return _Schema("string")
        return _decimal_schema(sql.precision, sql.scale or 0)
    if kind == "float":
        return _Schema("float")
    if kind == "double":
        return _Schema("double")
    if kind == "bit":
        if sql.precision == 1:
            return _Schema("boolean")
        return _Schema(
            "bytes", "io.debezium.data.Bits", 1, parameters={"length": str(sql.precision)}
        )
    if kind == "date":
        return _Schema(
            "int32", "org.apache.kafka.connect.data.Date" if connect else "io.debezium.time.Date", 1
        )
    if kind == "time":
        if connect:
            return _Schema("int32", "org.apache.kafka.connect.data.Time", 1)
        return _Schema("int64", "io.debezium.time.MicroTime", 1)
    if kind == "datetime":
        if connect:
            return _Schema("int64", "org.apache.kafka.connect.data.Timestamp", 1)
        if (sql.fsp or 0) > 3:
            return _Schema("int64", "io.debezium.time.MicroTimestamp", 1)
        return _Schema("int64", "io.debezium.time.Timestamp", 1)
    if kind == "timestamp":
        return _Schema("string", "io.debezium.time.ZonedTimestamp", 1)
    if kind == "year":
        return _Schema("int32", "io.debezium.time.Year", 1)
    if kind in _TEXT_TYPES:
        return _Schema("string")
    if kind in _BINARY_TYPES:
        return _Schema("bytes" if options.binary_handling_mode == "bytes" else "string")
    if kind == "enum":
        return _Schema("string", "io.debezium.data.Enum", 1, parameters=_allowed(sql.members))
    if kind == "set":
        return _Schema("string", "io.debezium.data.EnumSet", 1, parameters=_allowed(sql.members))
    if kind == "json":
        return _Schema("string", "io.debezium.data.Json", 1)
    if kind == "geometry":
        # The struct's builder marks itself optional, so the field is optional even for a
        # NOT NULL column; it carries a doc. Version 1 with the two documented fields.
        return _Schema(
            "struct",
            "io.debezium.data.geometry.Geometry",
            1,
            doc="Geometry",
            fields=[
                {"type": "bytes", "optional": False, "field": "wkb"},
                {"type": "int32", "optional": True, "field": "srid"},
            ],
            always_optional=True,
        )
    if kind == "vector":
        return _Schema(
            "array", "io.debezium.data.FloatVector", 1, items={"type": "float", "optional": False}
        )
    raise DebeziumEncodingError(f"no Debezium encoding for column type {kind}", type=sql.sql())


def connect_field(name: str, sql: SqlType, nullable: bool, options: DebeziumOptions) -> dict:
    """The column's entry in the `fields` of the row struct's schema, as the JsonConverter
    writes it: type (items or fields), optional, name, version, doc, parameters, then the
    field name. No `default`: the binlog does not carry DEFAULT values."""
    schema = _schema_of(sql, options)
    out: dict[str, Any] = {"type": schema.type}
    if schema.items is not None:
        out["items"] = dict(schema.items)
    if schema.fields is not None:
        out["fields"] = [dict(f) for f in schema.fields]
    out["optional"] = nullable or schema.always_optional
    if schema.name is not None:
        out["name"] = schema.name
    if schema.version is not None:
        out["version"] = schema.version
    if schema.doc is not None:
        out["doc"] = schema.doc
    if schema.parameters is not None:
        out["parameters"] = dict(schema.parameters)
    out["field"] = name
    return out
