"""The pure-Python value decoders: ``decoder(buf, pos) -> (value, next_pos)``.

Each ``<kind>_decoder(spec, mariadb)`` builds the decoder of one column once per TABLE_MAP
column, so that the per-row work is a single call with everything else (sizes, signedness,
codecs, enum names) already bound. Which factory serves which column type is decided by the
table in `column_decoders.py` (its `make_decoder`), not here.

Python values returned:
- integer types, YEAR, BIT: ``int`` (YEAR 0 stays 0);
- FLOAT: the shortest ``float`` that round-trips through float32 (what MySQL prints);
- DOUBLE: ``float``; DECIMAL: ``decimal.Decimal``;
- DATE: ``datetime.date``; DATETIME: naive ``datetime.datetime``; TIMESTAMP: ``datetime`` in UTC;
  TIME: ``datetime.timedelta`` (may be negative or exceed a day);
  a date Python cannot hold (zero date, zero month/day, year 0) is the ``str`` MySQL prints;
- character columns: ``str`` decoded with the column's character set, ``bytes`` for binary
  collations (and for bytes the character set rejects);
- ENUM: the member name (``int`` index when names are not in the metadata; '' for index 0);
  SET: the member names joined by ',' in definition order, as MySQL prints them (``int`` mask
  when names are unknown);
- BLOB: ``bytes``; GEOMETRY: ``Geometry``; MySQL JSON: the decoded document; VECTOR: list of float.
"""

from __future__ import annotations

import datetime as dt
import functools
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal

from replicad.binlog import jsonb
from replicad.binlog.charsets import decode_text

Decoder = Callable[[bytes, int], tuple[object, int]]


class ColumnType:
    """MySQL field type codes as they appear in TABLE_MAP."""

    DECIMAL = 0
    TINY = 1
    SHORT = 2
    LONG = 3
    FLOAT = 4
    DOUBLE = 5
    NULL = 6
    TIMESTAMP = 7
    LONGLONG = 8
    INT24 = 9
    DATE = 10
    TIME = 11
    DATETIME = 12
    YEAR = 13
    NEWDATE = 14
    VARCHAR = 15
    BIT = 16
    TIMESTAMP2 = 17
    DATETIME2 = 18
    TIME2 = 19
    TYPED_ARRAY = 20
    VECTOR = 242
    JSON = 245
    NEWDECIMAL = 246
    ENUM = 247
    SET = 248
    TINY_BLOB = 249
    MEDIUM_BLOB = 250
    LONG_BLOB = 251
    BLOB = 252
    VAR_STRING = 253
    STRING = 254
    GEOMETRY = 255


TYPE_NAMES = {v: k for k, v in vars(ColumnType).items() if not k.startswith("_")}

NUMERIC_TYPES = frozenset(
    {
        ColumnType.TINY,
        ColumnType.SHORT,
        ColumnType.INT24,
        ColumnType.LONG,
        ColumnType.LONGLONG,
        ColumnType.NEWDECIMAL,
        ColumnType.FLOAT,
        ColumnType.DOUBLE,
    }
)
CHARACTER_TYPES = frozenset(
    {ColumnType.STRING, ColumnType.VAR_STRING, ColumnType.VARCHAR, ColumnType.BLOB}
)


@dataclass(frozen=True, slots=True)
class Geometry:
    """A spatial value as stored: SRID and the OGC well-known binary."""

    srid: int
    wkb: bytes


_u16 = struct.Struct("<H").unpack_from
_u32 = struct.Struct("<I").unpack_from
_f32 = struct.Struct("<f")
_f64 = struct.Struct("<d").unpack_from
_INT_STRUCTS = {
    (ColumnType.TINY, False): (struct.Struct("<b").unpack_from, 1),
    (ColumnType.TINY, True): (struct.Struct("<B").unpack_from, 1),
    (ColumnType.SHORT, False): (struct.Struct("<h").unpack_from, 2),
    (ColumnType.SHORT, True): (struct.Struct("<H").unpack_from, 2),
    (ColumnType.LONG, False): (struct.Struct("<i").unpack_from, 4),
    (ColumnType.LONG, True): (struct.Struct("<I").unpack_from, 4),
    (ColumnType.LONGLONG, False): (struct.Struct("<q").unpack_from, 8),
    (ColumnType.LONGLONG, True): (struct.Struct("<Q").unpack_from, 8),
}
_UTC = dt.UTC
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=_UTC)


def float32_shortest(value: float) -> float:
    """The shortest decimal that reads back as the same float32, as a Python float."""
    packed = _f32.pack(value)
    for digits in range(6, 10):
        candidate = float(f"{value:.{digits}g}")
        if _f32.pack(candidate) == packed:
            return candidate
    return value


def fraction_reader(fsp: int) -> tuple[int, int]:
    """(bytes, multiplier to microseconds) of a fractional-seconds part of precision fsp."""
    if fsp <= 0:
        return 0, 0
    if fsp <= 2:
        return 1, 10000
    if fsp <= 4:
        return 2, 100
    return 3, 1


def _be(buf: bytes, pos: int, n: int) -> int:
    return int.from_bytes(buf[pos : pos + n], "big")


def format_date(year: int, month: int, day: int) -> str:
    return f"{year:04d}-{month:02d}-{day:02d}"


def format_datetime(year: int, month: int, day: int, hh: int, mm: int, ss: int, us: int, fsp: int):
    text = f"{year:04d}-{month:02d}-{day:02d} {hh:02d}:{mm:02d}:{ss:02d}"
    if fsp > 0:
        text += "." + f"{us:06d}"[:fsp]
    return text


def make_date(year: int, month: int, day: int) -> dt.date | str:
    try:
        return dt.date(year, month, day)
    except ValueError:
        return format_date(year, month, day)


def make_datetime(
    year: int, month: int, day: int, hh: int, mm: int, ss: int, us: int, fsp: int
) -> dt.datetime | str:
    try:
        return dt.datetime(year, month, day, hh, mm, ss, us)
    except ValueError:
        return format_datetime(year, month, day, hh, mm, ss, us, fsp)


def make_time(negative: bool, hours: int, minutes: int, seconds: int, micros: int) -> dt.timedelta:
    delta = dt.timedelta(hours=hours, minutes=minutes, seconds=seconds, microseconds=micros)
    return -delta if negative else delta


def format_time(value: dt.timedelta) -> str:
    """A TIME value as MySQL prints it: `[-]HH:MM:SS[.ffffff]` (hours may exceed 24)."""
    negative = value < dt.timedelta(0)
    total = -value if negative else value
    micros = total.days * 86_400_000_000 + total.seconds * 1_000_000 + total.microseconds
    seconds, us = divmod(micros, 1_000_000)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    text = f"{'-' if negative else ''}{hours:02d}:{minutes:02d}:{secs:02d}"
    return text + (f".{us:06d}" if us else "")


def decimal_text(value: Decimal) -> str:
    """A DECIMAL as MySQL and MariaDB print it (SELECT CAST(d AS CHAR)): plain digits with the
    column's scale, which the decoders keep as the Decimal's exponent. str() would switch to
    exponent notation below 1e-6 (0E-8, 1.23E-7), and a SQL literal `0E-8` is a DOUBLE."""
    return format(value, "f")


# --------------------------------------------------------------------------- decoders by type


def integer_decoder(spec: ColumnSpec, mariadb: bool) -> Decoder:
    type_code, unsigned = spec.type_code, bool(spec.unsigned)
    if type_code == ColumnType.INT24:

        def int24(buf: bytes, pos: int) -> tuple[object, int]:
            return int.from_bytes(buf[pos : pos + 3], "little", signed=not unsigned), pos + 3

        return int24
    unpack, size = _INT_STRUCTS[(type_code, unsigned)]

    def integer(buf: bytes, pos: int) -> tuple[object, int]:
        return unpack(buf, pos)[0], pos + size

    return integer


def _float(buf: bytes, pos: int) -> tuple[object, int]:
    return float32_shortest(_f32.unpack_from(buf, pos)[0]), pos + 4


def float_decoder(spec: ColumnSpec, mariadb: bool) -> Decoder:
    return _float


def _double(buf: bytes, pos: int) -> tuple[object, int]:
    return _f64(buf, pos)[0], pos + 8


def double_decoder(spec: ColumnSpec, mariadb: bool) -> Decoder:
    return _double


def decimal_decoder(spec: ColumnSpec, mariadb: bool) -> Decoder:
    precision, scale = spec.meta & 0xFF, spec.meta >> 8
    size = decimal_size(precision, scale)
    decode = jsonb.decode_decimal_bin

    def decimal(buf: bytes, pos: int) -> tuple[object, int]:
        return decode(buf, pos, precision, scale)[0], pos + size

    return decimal


_DIG2BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)


def decimal_groups(precision: int, scale: int) -> tuple[tuple[int, int], ...]:
    """(bytes, digits) of each stored digit group of DECIMAL(p,s), most significant first:
    9 digits per 4 bytes, leftover integer digits in front, leftover fraction digits last."""
    intg, frac = precision - scale, scale
    groups: list[tuple[int, int]] = []
    if intg % 9:
        groups.append((_DIG2BYTES[intg % 9], intg % 9))
    groups += [(4, 9)] * (intg // 9)
    groups += [(4, 9)] * (frac // 9)
    if frac % 9:
        groups.append((_DIG2BYTES[frac % 9], frac % 9))
    return tuple(groups)


def decimal_size(precision: int, scale: int) -> int:
    return sum(nbytes for nbytes, _ in decimal_groups(precision, scale))


def _year(buf: bytes, pos: int) -> tuple[object, int]:
    raw = buf[pos]
    return (raw + 1900 if raw else 0), pos + 1


def year_decoder(spec: ColumnSpec, mariadb: bool) -> Decoder:
    return _year


def _date(buf: bytes, pos: int) -> tuple[object, int]:
    v = buf[pos] | buf[pos + 1] << 8 | buf[pos + 2] << 16
    return make_date(v >> 9, (v >> 5) & 15, v & 31), pos + 3


def date_decoder(spec: ColumnSpec, mariadb: bool) -> Decoder:
    return _date


def _datetime_v1(buf: bytes, pos: int) -> tuple[object, int]:
    v = struct.unpack_from("<Q", buf, pos)[0]
    date, time = divmod(v, 1000000)
    year, md = divmod(date, 10000)
    month, day = divmod(md, 100)
    hh, ms = divmod(time, 10000)
    mm, ss = divmod(ms, 100)
    return make_datetime(year, month, day, hh, mm, ss, 0, 0), pos + 8


def datetime_v1_decoder(spec: ColumnSpec, mariadb: bool) -> Decoder:
    return _datetime_v1


def _timestamp_v1(buf: bytes, pos: int) -> tuple[object, int]:
    seconds = _u32(buf, pos)[0]
    if seconds == 0:
        return "0000-00-00 00:00:00", pos + 4
    return _EPOCH + dt.timedelta(seconds=seconds), pos + 4


def timestamp_v1_decoder(spec: ColumnSpec, mariadb: bool) -> Decoder:
    return _timestamp_v1


def _time_v1(buf: bytes, pos: int) -> tuple[object, int]:
    v = int.from_bytes(buf[pos : pos + 3], "little", signed=True)
    negative = v < 0
    hh, ms = divmod(abs(v), 10000)
    mm, ss = divmod(ms, 100)
    return make_time(negative, hh, mm, ss, 0), pos + 3


def time_v1_decoder(spec: ColumnSpec, mariadb: bool) -> Decoder:
    return _time_v1


def timestamp2_decoder(spec: ColumnSpec, mariadb: bool) -> Decoder:
    fsp = spec.meta
    frac_len, scale = fraction_reader(fsp)
    zero = "0000-00-00 00:00:00" + ("." + "0" * fsp if fsp else "")

    def timestamp2(buf: bytes, pos: int) -> tuple[object, int]:
        seconds = _be(buf, pos, 4)
        micros = _be(buf, pos + 4, frac_len) * scale if frac_len else 0
        if seconds == 0 and micros == 0:
            return zero, pos + 4 + frac_len
        return _EPOCH + dt.timedelta(seconds=seconds, microseconds=micros), pos + 4 + frac_len

    return timestamp2


def datetime2_decoder(spec: ColumnSpec, mariadb: bool) -> Decoder:
    fsp = spec.meta
    frac_len, scale = fraction_reader(fsp)

    def datetime2(buf: bytes, pos: int) -> tuple[object, int]:
        v = _be(buf, pos, 5) - 0x8000000000
        micros = _be(buf, pos + 5, frac_len) * scale if frac_len else 0
        ymd = v >> 17
        ym = ymd >> 5
        hms = v & 0x1FFFF
        value = make_datetime(
            ym // 13, ym % 13, ymd & 31, hms >> 12, (hms >> 6) & 63, hms & 63, micros, fsp
        )
        return value, pos + 5 + frac_len

    return datetime2


def time2_decoder(spec: ColumnSpec, mariadb: bool) -> Decoder:
    fsp = spec.meta
    frac_len, scale = fraction_reader(fsp)

    def time2(buf: bytes, pos: int) -> tuple[object, int]:
        # MySQL's packed TIME: (integer part << 24) + microseconds, as one signed number.
        # With 1-4 fractional digits a negative value's fraction is stored as a borrow from
        # the integer part, which has to be undone before combining them.
        if frac_len == 3:
            packed = _be(buf, pos, 6) - 0x800000000000
        else:
            intpart = _be(buf, pos, 3) - 0x800000
            frac = _be(buf, pos + 3, frac_len) if frac_len else 0
            if intpart < 0 and frac:
                intpart += 1
                frac -= 1 << (8 * frac_len)
            packed = (intpart << 24) + frac * scale
        negative = packed < 0
        packed = -packed if negative else packed
        hms = packed >> 24
        value = make_time(
            negative, (hms >> 12) % 1024, (hms >> 6) % 64, hms % 64, packed % (1 << 24)
        )
        return value, pos + 3 + frac_len

    return time2


def bit_decoder(spec: ColumnSpec, mariadb: bool) -> Decoder:
    meta = spec.meta
    nbytes = (meta >> 8) + (1 if meta & 0xFF else 0)

    def bit(buf: bytes, pos: int) -> tuple[object, int]:
        return int.from_bytes(buf[pos : pos + nbytes], "big"), pos + nbytes

    return bit


def _text_transform(codec: str | None) -> Callable[[bytes], object] | None:
    return None if codec is None else functools.partial(decode_text, codec=codec)


# Character set unknown (no optional metadata): UTF-8 when it is valid, else bytes.
_guess_text = functools.partial(decode_text, codec="utf-8")


def _length_prefixed(length_bytes: int, transform: Callable[[bytes], object] | None) -> Decoder:
    if length_bytes == 1:

        def short(buf: bytes, pos: int) -> tuple[object, int]:
            end = pos + 1 + buf[pos]
            data = buf[pos + 1 : end]
            return (transform(data) if transform else data), end

        return short
    if length_bytes == 2:

        def medium(buf: bytes, pos: int) -> tuple[object, int]:
            end = pos + 2 + (buf[pos] | buf[pos + 1] << 8)
            data = buf[pos + 2 : end]
            return (transform(data) if transform else data), end

        return medium

    def long(buf: bytes, pos: int) -> tuple[object, int]:
        start = pos + length_bytes
        end = start + int.from_bytes(buf[pos:start], "little")
        data = buf[start:end]
        return (transform(data) if transform else data), end

    return long


def _padded(transform: Callable[[bytes], object] | None, width: int) -> Callable[[bytes], object]:
    """BINARY(n) is stored without its trailing zero bytes; SELECT shows them."""

    def pad(data: bytes) -> object:
        data = data.ljust(width, b"\0")
        return transform(data) if transform else data

    return pad


def _enum_decoder(size: int, names: Sequence[str] | None) -> Decoder:
    def enum(buf: bytes, pos: int) -> tuple[object, int]:
        index = buf[pos] if size == 1 else _u16(buf, pos)[0]
        if names is None:
            return index, pos + size
        if index == 0:
            return "", pos + size  # the "error value" MySQL stores for an invalid member
        return (names[index - 1] if index <= len(names) else index), pos + size

    return enum


def _set_decoder(size: int, names: Sequence[str] | None) -> Decoder:
    def set_(buf: bytes, pos: int) -> tuple[object, int]:
        mask = int.from_bytes(buf[pos : pos + size], "little")
        if names is None:
            return mask, pos + size
        members = [name for i, name in enumerate(names) if mask >> i & 1]
        return ",".join(members), pos + size

    return set_


def _geometry(length_bytes: int) -> Decoder:
    def transform(data: bytes) -> object:
        if len(data) < 4:
            return Geometry(0, bytes(data))
        return Geometry(_u32(data, 0)[0], bytes(data[4:]))

    return _length_prefixed(length_bytes, transform)


def _vector(length_bytes: int) -> Decoder:
    def transform(data: bytes) -> object:
        if len(data) % 4:
            return bytes(data)
        return [float32_shortest(x) for (x,) in _f32.iter_unpack(data)]

    return _length_prefixed(length_bytes, transform)


def _null(buf: bytes, pos: int) -> tuple[object, int]:
    return None, pos


def null_decoder(spec: ColumnSpec, mariadb: bool) -> Decoder:
    return _null


@dataclass(slots=True)
class ColumnSpec:
    """What a value decoder needs to know about one column."""

    type_code: int
    meta: int
    unsigned: bool = False
    codec: str | None = None  # Python codec; None = binary or unknown (see charset_known)
    charset_known: bool = False
    enum_values: Sequence[str] | None = None
    set_values: Sequence[str] | None = None


def real_type_and_length(type_code: int, meta: int) -> tuple[int, int]:
    """Undo the STRING metadata packing: (real type, max length in bytes)."""
    if type_code != ColumnType.STRING:
        return type_code, meta
    byte0, byte1 = meta >> 8, meta & 0xFF
    if byte0 and (byte0 & 0x30) != 0x30:
        return byte0 | 0x30, byte1 | (((byte0 & 0x30) ^ 0x30) << 4)
    return (byte0 or ColumnType.STRING), byte1


def _text_of(spec: ColumnSpec) -> Callable[[bytes], object] | None:
    """How a character column's bytes become its value: its character set when TABLE_MAP
    named one (None: a binary collation, bytes as stored), else a guess (UTF-8 or bytes)."""
    return _text_transform(spec.codec) if spec.charset_known else _guess_text


def varchar_decoder(spec: ColumnSpec, mariadb: bool) -> Decoder:
    return _length_prefixed(1 if spec.meta < 256 else 2, _text_of(spec))


def string_decoder(spec: ColumnSpec, mariadb: bool) -> Decoder:
    """CHAR/BINARY, and ENUM and SET, which MySQL logs as STRING with the real type in the
    metadata (MariaDB may log their own type codes)."""
    real, length = real_type_and_length(spec.type_code, spec.meta)
    if real == ColumnType.ENUM:
        return _enum_decoder(length, spec.enum_values)
    if real == ColumnType.SET:
        return _set_decoder(length, spec.set_values)
    text = _text_of(spec)
    if spec.charset_known and spec.codec is None:
        text = _padded(None, length)
    return _length_prefixed(1 if length < 256 else 2, text)


def blob_decoder(spec: ColumnSpec, mariadb: bool) -> Decoder:
    return _length_prefixed(spec.meta, _text_of(spec))


def geometry_decoder(spec: ColumnSpec, mariadb: bool) -> Decoder:
    return _geometry(spec.meta)


def json_decoder(spec: ColumnSpec, mariadb: bool) -> Decoder:
    if mariadb:  # MariaDB's JSON is text; it never writes type 245, but be safe
        return _length_prefixed(spec.meta, _guess_text)
    return _length_prefixed(spec.meta, _json_transform)


def vector_decoder(spec: ColumnSpec, mariadb: bool) -> Decoder:
    return _vector(spec.meta)


def _json_transform(data: bytes) -> object:
    return jsonb.decode_json(data)
