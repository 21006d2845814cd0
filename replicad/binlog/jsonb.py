"""MySQL binary JSON ("JSONB") values and JSON diffs, decoded to Python values.

A JSON column in a row event carries MySQL's binary JSON format; a column in a
PARTIAL_UPDATE_ROWS_EVENT may instead carry a vector of JSON diffs (MySQL 8.0,
``binlog_row_value_options=PARTIAL_JSON``). Everything here is sans-IO: pure
functions over ``bytes``/``memoryview`` that raise
:class:`~replicad.errors.JsonDecodeError` for any malformed input.

Layout knowledge comes from mysql-server: ``sql-common/json_binary.{h,cc}``
(value format, offsets, inlining), ``sql/json_diff.cc`` (diff vector format and
``apply_json_diffs``), ``sql/json_path.cc`` (path syntax),
``sql-common/json_dom.cc`` (how values print, decimal/temporal opaque payloads),
``strings/dtoa.cc`` (``my_gcvt``, double printing), ``strings/decimal.cc``
(binary DECIMAL) and ``mysys/my_time.cc`` (packed temporal integers).

Decoded values:

* object -> ``dict`` in stored key order (MySQL sorts keys by byte length, then
  bytes), array -> ``list``, null/true/false -> ``None``/``True``/``False``,
  integers -> ``int``, double -> ``float``, string -> ``str``;
* opaque DECIMAL -> :class:`decimal.Decimal`; opaque DATE/TIME/DATETIME/TIMESTAMP
  -> :class:`JsonTemporal` (a ``str`` in MySQL's print form); opaque VAR_STRING
  -> ``str`` (MySQL prints it as a plain string); any other opaque ->
  :class:`JsonOpaque`.

Decoded documents may share subtrees (see :func:`apply_json_diffs`); treat them
as immutable values.
"""

from __future__ import annotations

import base64
import enum
import functools
import json
import json.encoder
import math
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Self

from replicad.errors import JsonDecodeError

__all__ = [
    "JSON_NULL",
    "MAX_JSON_DEPTH",
    "JsonDiff",
    "JsonDiffOp",
    "JsonOpaque",
    "JsonTemporal",
    "apply_json_diffs",
    "decimal_bin_size",
    "decode_decimal_bin",
    "decode_json",
    "decode_json_diffs",
    "to_mysql_json_text",
]

# MySQL refuses to build documents nested deeper than this (JSON_DOCUMENT_MAX_DEPTH
# in json_syntax_check.cc); anything deeper in a binlog is corrupt, and the bound
# keeps the recursive decoder far from Python's recursion limit.
MAX_JSON_DEPTH = 100

# Binary JSON type bytes (json_binary.cc).
_SMALL_OBJECT = 0x0
_LARGE_OBJECT = 0x1
_SMALL_ARRAY = 0x2
_LARGE_ARRAY = 0x3
_LITERAL = 0x4
_INT16 = 0x5
_UINT16 = 0x6
_INT32 = 0x7
_UINT32 = 0x8
_INT64 = 0x9
_UINT64 = 0xA
_DOUBLE = 0xB
_STRING = 0xC
_OPAQUE = 0xF

# enum_field_types values that appear as opaque payload types.
_MYSQL_TYPE_TIMESTAMP = 7
_MYSQL_TYPE_DATE = 10
_MYSQL_TYPE_TIME = 11
_MYSQL_TYPE_DATETIME = 12
_MYSQL_TYPE_NEWDECIMAL = 246
_MYSQL_TYPE_VAR_STRING = 253

_LITERALS: dict[int, object] = {0: None, 1: True, 2: False}

_FIXED_SCALARS: dict[int, struct.Struct] = {
    _INT16: struct.Struct("<h"),
    _UINT16: struct.Struct("<H"),
    _INT32: struct.Struct("<i"),
    _UINT32: struct.Struct("<I"),
    _INT64: struct.Struct("<q"),
    _UINT64: struct.Struct("<Q"),
    _DOUBLE: struct.Struct("<d"),
}

_SMALL_HEADER = struct.Struct("<HH")
_LARGE_HEADER = struct.Struct("<II")
# Key entries are (offset, length) and value entries (type, offset-or-inlined value);
# iter_unpack over the entry table keeps the per-entry unpacking in C.
_SMALL_KEY_ENTRY = struct.Struct("<HH")
_LARGE_KEY_ENTRY = struct.Struct("<IH")
_SMALL_VALUE_ENTRY = struct.Struct("<BH")
_LARGE_VALUE_ENTRY = struct.Struct("<BI")
_I64 = struct.Struct("<q")
_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")


def _view(buf: bytes | bytearray | memoryview) -> memoryview:
    view = buf if isinstance(buf, memoryview) else memoryview(buf)
    # Indexing must yield ints 0..255 whatever the caller's buffer format was.
    if view.ndim != 1 or view.format != "B":
        view = view.cast("B")
    return view


# ---------------------------------------------------------------------------
# Value types that have no native Python JSON equivalent.


class JsonTemporal(str):
    """A DATE/TIME/DATETIME/TIMESTAMP stored in a JSON document, as MySQL prints it.

    It is a ``str`` (``"2015-01-15"``, ``"2015-01-15 23:24:25.000000"``,
    ``"-01:02:03.500000"``) so it serialises like the string MySQL shows;
    ``mysql_type`` (an ``enum_field_types`` value: 7, 10, 11 or 12) tells it apart
    from a plain JSON string.
    """

    mysql_type: int

    def __new__(cls, text: str, mysql_type: int) -> Self:
        self = super().__new__(cls, text)
        self.mysql_type = mysql_type
        return self

    # str's own __getnewargs__ would drop mysql_type on copy/pickle.
    def __getnewargs__(self) -> tuple[str, int]:  # type: ignore[override]
        return (str(self), self.mysql_type)

    def __repr__(self) -> str:
        return f"JsonTemporal({str.__repr__(self)}, mysql_type={self.mysql_type})"


class JsonNull:
    """The type of `JSON_NULL`: a JSON column whose whole document is the literal `null`.
    It is kept apart from Python's None, which is SQL NULL, so that the outputs can tell a
    consumer which one the row held (docs/consumers.md, "JSON null"). Nested nulls stay
    None: inside a document nothing else can be meant."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "JSON_NULL"

    def __reduce__(self) -> str:
        return "JSON_NULL"  # the one instance, also after pickling (compared by `is`)


JSON_NULL = JsonNull()


@dataclass(frozen=True, slots=True)
class JsonOpaque:
    """An opaque JSON scalar of a MySQL type that has no JSON form (BLOB, BIT, ...)."""

    mysql_type: int
    data: bytes

    def __str__(self) -> str:
        # MySQL's base64_encode breaks its output with a newline every 76 characters
        # (and none at the end); JSON printing keeps that, escaped as \n.
        encoded = base64.b64encode(self.data).decode("ascii")
        if len(encoded) > 76:
            encoded = "\n".join(encoded[i : i + 76] for i in range(0, len(encoded), 76))
        return f"base64:type{self.mysql_type}:{encoded}"


# ---------------------------------------------------------------------------
# Binary DECIMAL (strings/decimal.cc: decimal2bin / bin2decimal).

_DIG_PER_DEC1 = 9
# Bytes needed for 0..8 leftover decimal digits.
_DIG2BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)
# decimal_t holds at most 9 words of 9 digits.
_MAX_DECIMAL_PRECISION = 81


@dataclass(frozen=True, slots=True)
class _DecimalLayout:
    size: int
    lead_bytes: int
    lead_limit: int
    groups: struct.Struct
    trail_bytes: int
    trail_limit: int
    template: str


@functools.lru_cache(maxsize=512)
def _decimal_layout(precision: int, scale: int) -> _DecimalLayout:
    intg = precision - scale
    intg0, intg0x = divmod(intg, _DIG_PER_DEC1)
    frac0, frac0x = divmod(scale, _DIG_PER_DEC1)
    lead = _DIG2BYTES[intg0x]
    trail = _DIG2BYTES[frac0x]
    # One str.format call renders every digit group zero-padded to its width,
    # which is both exact and much cheaper than arithmetic on a Decimal.
    int_part = (f"{{:0{intg0x}d}}" if intg0x else "") + "{:09d}" * intg0
    frac_part = "{:09d}" * frac0 + (f"{{:0{frac0x}d}}" if frac0x else "")
    template = int_part + ("." + frac_part if scale else "")
    return _DecimalLayout(
        size=intg0 * 4 + lead + frac0 * 4 + trail,
        lead_bytes=lead,
        lead_limit=10**intg0x,
        groups=struct.Struct(f">{intg0 + frac0}I"),
        trail_bytes=trail,
        trail_limit=10**frac0x,
        template=template,
    )


def decimal_bin_size(precision: int, scale: int) -> int:
    """Bytes used by MySQL's binary DECIMAL(precision, scale)."""
    _check_decimal_shape(precision, scale, None)
    return _decimal_layout(precision, scale).size


def _check_decimal_shape(precision: int, scale: int, offset: int | None) -> None:
    if not (0 <= scale <= precision <= _MAX_DECIMAL_PRECISION):
        raise JsonDecodeError(
            "invalid DECIMAL precision/scale",
            precision=precision,
            scale=scale,
            offset=offset,
        )


def decode_decimal_bin(
    buf: bytes | bytearray | memoryview, offset: int, precision: int, scale: int
) -> tuple[Decimal, int]:
    """Decode MySQL's binary DECIMAL(precision, scale) at ``offset``.

    Returns the exact value (its exponent is ``-scale``, so ``DECIMAL(5,2)`` zero is
    ``Decimal('0.00')``) and the offset after it. Negative zero is returned as
    positive zero, which is how MySQL prints it.
    """
    _check_decimal_shape(precision, scale, offset)
    layout = _decimal_layout(precision, scale)
    size = layout.size
    end = offset + size
    if offset < 0 or end > len(buf):
        raise JsonDecodeError(
            "DECIMAL value is truncated",
            offset=offset,
            needed=size,
            available=max(0, len(buf) - offset),
        )
    if size == 0:
        return Decimal(0), end
    raw = int.from_bytes(buf[offset:end], "big")
    bits = size * 8
    negative = not (raw >> (bits - 1)) & 1
    # The stored sign bit is inverted so that encodings sort bytewise; negative
    # values additionally have every byte inverted.
    raw ^= 1 << (bits - 1)
    if negative:
        raw ^= (1 << bits) - 1
    data = raw.to_bytes(size, "big")
    lead = layout.lead_bytes
    values: list[int] = []
    if lead:
        head = int.from_bytes(data[:lead], "big")
        if head >= layout.lead_limit:
            raise JsonDecodeError("DECIMAL digit group out of range", offset=offset)
        values.append(head)
    groups = layout.groups.unpack_from(data, lead)
    for group in groups:
        if group > 999_999_999:
            raise JsonDecodeError("DECIMAL digit group out of range", offset=offset)
    values.extend(groups)
    if layout.trail_bytes:
        tail = int.from_bytes(data[size - layout.trail_bytes :], "big")
        if tail >= layout.trail_limit:
            raise JsonDecodeError("DECIMAL digit group out of range", offset=offset)
        values.append(tail)
    text = layout.template.format(*values)
    value = Decimal("-" + text if negative else text)
    if negative and not value:
        value = value.copy_abs()
    return value, end


# ---------------------------------------------------------------------------
# Binary JSON decoding (json_binary.cc: parse_binary, parse_value, Value::element).


def decode_json(buf: bytes | bytearray | memoryview) -> object:
    """Decode one binary JSON value (the whole value of a JSON column).

    A document that is JSON ``null`` is `JSON_NULL`, not None (SQL NULL). An empty
    value is JSON ``null`` too: MySQL stores an empty string when NULL is
    forced into a NOT NULL JSON column (non-strict mode / INSERT IGNORE), and
    ``json_binary::parse_binary`` reads length 0 as the null literal. Bytes after
    the top-level value are ignored, as MySQL does.
    """
    # Slicing and decoding ``bytes`` is about twice as fast as going through a
    # memoryview for the short strings and keys that dominate documents, so other
    # buffers are copied once up front (a single memcpy) instead.
    data = buf if type(buf) is bytes else bytes(buf)
    n = len(data)
    if n == 0:
        return JSON_NULL
    try:
        type_byte = data[0]
        if type_byte <= _LARGE_ARRAY:
            return _decode_container(data, 1, n, type_byte & 1 == 1, type_byte <= _LARGE_OBJECT, 1)
        value = _decode_scalar(data, type_byte, 1, n)
        return JSON_NULL if value is None else value
    except (IndexError, struct.error, ValueError, OverflowError, RecursionError) as exc:
        # Every read is bounds-checked; this only keeps the module's contract (typed
        # errors only) should a check ever be missing.
        raise JsonDecodeError(f"malformed binary JSON ({type(exc).__name__})") from exc


def _decode_string(data: bytes, pos: int, end: int) -> str:
    length = data[pos] if pos < end else 0x80
    if length < 0x80:
        start = pos + 1
    else:
        length, width = _read_varlen(data, pos, end)
        start = pos + width
    stop = start + length
    if stop > end:
        raise JsonDecodeError(
            "JSON string runs past the end of its container", offset=pos, length=length
        )
    try:
        return data[start:stop].decode()
    except UnicodeDecodeError as exc:
        raise JsonDecodeError("JSON string is not valid UTF-8", offset=start) from exc


def _decode_scalar(data: bytes, type_byte: int, pos: int, end: int) -> object:
    if type_byte == _STRING:
        return _decode_string(data, pos, end)
    fixed = _FIXED_SCALARS.get(type_byte)
    if fixed is not None:
        if pos + fixed.size > end:
            raise JsonDecodeError("JSON number is truncated", offset=pos, type=type_byte)
        return fixed.unpack_from(data, pos)[0]
    if type_byte == _LITERAL:
        if pos >= end:
            raise JsonDecodeError("JSON literal is truncated", offset=pos)
        literal = data[pos]
        if literal not in _LITERALS:
            raise JsonDecodeError("unknown JSON literal", offset=pos, literal=literal)
        return _LITERALS[literal]
    if type_byte == _OPAQUE:
        return _decode_opaque(data, pos, end)
    raise JsonDecodeError("unknown binary JSON type", offset=pos - 1, type=type_byte)


def _read_varlen(data: bytes, pos: int, end: int) -> tuple[int, int]:
    """Read the 7-bits-per-byte length used by strings and opaque values."""
    if pos >= end:
        raise JsonDecodeError("JSON length field is truncated", offset=pos)
    first = data[pos]
    if first < 0x80:
        return first, 1
    length = first & 0x7F
    # UINT32_MAX needs five groups of 7 bits, so MySQL never looks further.
    for i in range(1, 5):
        if pos + i >= end:
            raise JsonDecodeError("JSON length field is truncated", offset=pos)
        byte = data[pos + i]
        length |= (byte & 0x7F) << (7 * i)
        if not byte & 0x80:
            if length > 0xFFFFFFFF:
                raise JsonDecodeError("JSON length exceeds 32 bits", offset=pos)
            return length, i + 1
    raise JsonDecodeError("JSON length field is longer than 5 bytes", offset=pos)


def _decode_container(
    data: bytes, pos: int, end: int, large: bool, is_object: bool, depth: int
) -> object:
    if depth > MAX_JSON_DEPTH:
        raise JsonDecodeError(
            f"JSON document is nested deeper than {MAX_JSON_DEPTH} levels", offset=pos
        )
    if large:
        header, key_entry, value_entry, offset_size = (
            _LARGE_HEADER,
            _LARGE_KEY_ENTRY,
            _LARGE_VALUE_ENTRY,
            4,
        )
    else:
        header, key_entry, value_entry, offset_size = (
            _SMALL_HEADER,
            _SMALL_KEY_ENTRY,
            _SMALL_VALUE_ENTRY,
            2,
        )
    if end - pos < 2 * offset_size:
        raise JsonDecodeError("JSON container header is truncated", offset=pos)
    count, size = header.unpack_from(data, pos)
    if size > end - pos:
        raise JsonDecodeError(
            "JSON container is larger than the space it is stored in",
            offset=pos,
            size=size,
            available=end - pos,
        )
    entries_at = pos + 2 * offset_size
    values_at = entries_at + count * key_entry.size if is_object else entries_at
    header_end = values_at + count * value_entry.size
    if header_end - pos > size:
        raise JsonDecodeError(
            "JSON container entries do not fit in its size",
            offset=pos,
            count=count,
            size=size,
        )
    container_end = pos + size
    # Offsets are relative to the container start. Every key and non-inlined value
    # must live after the entry table and inside the container; partial updates
    # may leave unused gaps, so nothing is assumed about contiguity.
    first_data = header_end - pos

    values: list[object] = []
    append = values.append
    for type_byte, raw in value_entry.iter_unpack(data[values_at:header_end]):
        if type_byte == _LITERAL:
            literal = raw & 0xFF
            if literal not in _LITERALS:
                raise JsonDecodeError("unknown JSON literal", offset=pos, literal=literal)
            append(_LITERALS[literal])
        elif type_byte == _INT16:
            raw &= 0xFFFF
            append(raw - 0x10000 if raw & 0x8000 else raw)
        elif type_byte == _UINT16:
            append(raw & 0xFFFF)
        elif large and type_byte == _INT32:
            append(raw - 0x100000000 if raw & 0x80000000 else raw)
        elif large and type_byte == _UINT32:
            append(raw)
        else:
            if raw < first_data or raw >= size:
                raise JsonDecodeError(
                    "JSON value offset points outside its container",
                    offset=pos,
                    value_offset=raw,
                    size=size,
                )
            # The common value types are dispatched here rather than through
            # _decode_scalar: one Python call per value less.
            at = pos + raw
            if type_byte == _STRING:
                append(_decode_string(data, at, container_end))
            elif type_byte <= _LARGE_ARRAY:
                append(
                    _decode_container(
                        data,
                        at,
                        container_end,
                        type_byte & 1 == 1,
                        type_byte <= _LARGE_OBJECT,
                        depth + 1,
                    )
                )
            else:
                append(_decode_scalar(data, type_byte, at, container_end))

    if not is_object:
        return values

    keys: list[str] = []
    for key_offset, key_length in key_entry.iter_unpack(data[entries_at:values_at]):
        if key_offset < first_data or key_offset + key_length > size:
            raise JsonDecodeError(
                "JSON key offset points outside its container",
                offset=pos,
                key_offset=key_offset,
                size=size,
            )
        start = pos + key_offset
        try:
            keys.append(data[start : start + key_length].decode())
        except UnicodeDecodeError as exc:
            raise JsonDecodeError("JSON object key is not valid UTF-8", offset=start) from exc
    result = dict(zip(keys, values, strict=True))
    if len(result) != count:
        raise JsonDecodeError("JSON object has duplicate keys", offset=pos)
    return result


def _decode_opaque(data: bytes, pos: int, end: int) -> object:
    if pos >= end:
        raise JsonDecodeError("JSON opaque value is truncated", offset=pos)
    field_type = data[pos]
    length, width = _read_varlen(data, pos + 1, end)
    start = pos + 1 + width
    stop = start + length
    if stop > end:
        raise JsonDecodeError(
            "JSON opaque value runs past the end of its container",
            offset=pos,
            length=length,
        )
    if field_type == _MYSQL_TYPE_NEWDECIMAL:
        # Json_decimal::convert_from_binary: precision byte, scale byte, then exactly
        # decimal_bin_size(precision, scale) bytes.
        if length < 2:
            raise JsonDecodeError("JSON DECIMAL lacks precision and scale", offset=start)
        precision = data[start]
        scale = data[start + 1]
        try:
            if 2 + decimal_bin_size(precision, scale) != length:
                raise JsonDecodeError(
                    "JSON DECIMAL length does not match its precision and scale",
                    precision=precision,
                    scale=scale,
                    length=length,
                )
            return decode_decimal_bin(data, start + 2, precision, scale)[0]
        except JsonDecodeError as exc:
            raise exc.with_context(offset=start) from None
    if field_type in _TEMPORAL_TYPES:
        if length != 8:
            raise JsonDecodeError(
                "JSON temporal value must be 8 bytes", offset=start, length=length
            )
        return _decode_temporal(field_type, _I64.unpack_from(data, start)[0], start)
    if field_type == _MYSQL_TYPE_VAR_STRING:
        # Subquery results are stored this way and MySQL prints them as strings.
        try:
            return data[start:stop].decode()
        except UnicodeDecodeError:
            pass
    return JsonOpaque(field_type, data[start:stop])


_TEMPORAL_TYPES = frozenset(
    (_MYSQL_TYPE_TIMESTAMP, _MYSQL_TYPE_DATE, _MYSQL_TYPE_TIME, _MYSQL_TYPE_DATETIME)
)


def _decode_temporal(field_type: int, packed: int, offset: int) -> JsonTemporal:
    """Render a packed temporal integer the way Json_wrapper::to_string does.

    The packing is my_time.cc's TIME_to_longlong_{datetime,date,time}_packed;
    printing is my_TIME_to_str(..., 6): dates without a time, times and datetimes
    always with six fractional digits.
    """
    if field_type == _MYSQL_TYPE_TIME:
        negative = packed < 0
        magnitude = -packed if negative else packed
        fraction = magnitude & 0xFFFFFF
        hms = magnitude >> 24
        # TIME_from_longlong_time_packed keeps 10 bits of hours.
        hour = (hms >> 12) & 0x3FF
        minute = (hms >> 6) & 0x3F
        second = hms & 0x3F
        if minute > 59 or second > 59 or fraction > 999_999:
            raise JsonDecodeError("JSON TIME value out of range", offset=offset, packed=packed)
        sign = "-" if negative else ""
        text = f"{sign}{hour:02d}:{minute:02d}:{second:02d}.{fraction:06d}"
        return JsonTemporal(text, field_type)

    if packed < 0:
        raise JsonDecodeError("JSON date/datetime value is negative", offset=offset, packed=packed)
    fraction = packed & 0xFFFFFF
    ymdhms = packed >> 24
    ymd = ymdhms >> 17
    hms = ymdhms & 0x1FFFF
    day = ymd & 0x1F
    year, month = divmod(ymd >> 5, 13)
    if year > 9999:
        raise JsonDecodeError("JSON date value out of range", offset=offset, packed=packed)
    if field_type == _MYSQL_TYPE_DATE:
        return JsonTemporal(f"{year:04d}-{month:02d}-{day:02d}", field_type)
    hour = hms >> 12
    minute = (hms >> 6) & 0x3F
    second = hms & 0x3F
    if hour > 23 or minute > 59 or second > 59 or fraction > 999_999:
        raise JsonDecodeError("JSON datetime value out of range", offset=offset, packed=packed)
    text = f"{year:04d}-{month:02d}-{day:02d} {hour:02d}:{minute:02d}:{second:02d}.{fraction:06d}"
    return JsonTemporal(text, field_type)


# ---------------------------------------------------------------------------
# JSON text as MySQL prints it (json_dom.cc: wrapper_to_string, double_quote).

# MySQL's double_quote escapes '"', '\\', \b \t \n \f \r by name and the other C0
# controls as \u00xx (lower-case hex), and writes everything else (DEL, U+2028,
# non-ASCII) as is. The json module's C string encoder applies exactly these rules,
# several times faster than anything written here; the unit tests pin the output.
_quote: Callable[[str], str] = json.encoder.encode_basestring


def _format_double(value: float) -> str:
    """Print a double like my_gcvt(MY_GCVT_ARG_DOUBLE, MY_GCVT_MAX_FIELD_WIDTH).

    With the 34-character field width MySQL's JSON printer uses, my_gcvt always
    keeps the shortest round-trip digits (what ``repr`` finds) and only chooses
    the notation: fixed when the decimal exponent is within [-14, 15] or the
    digits extend past the decimal point, otherwise ``d.ddde[-]x`` with no '+'
    and no exponent padding. JSON output then appends ".0" when the text has
    neither '.' nor 'e', so doubles stay distinguishable from integers.
    """
    if not math.isfinite(value):
        # dtoa reports overflow for non-finite values and my_gcvt prints "0".
        return "0.0"
    text = repr(value)
    negative = text[0] == "-"
    if negative:
        text = text[1:]
    mantissa, _, exponent = text.partition("e")
    whole, _, fraction = mantissa.partition(".")
    digits = whole + fraction
    # decpt follows dtoa: value = 0.<digits> * 10**decpt.
    decpt = len(whole) + (int(exponent) if exponent else 0)
    stripped = digits.lstrip("0")
    decpt -= len(digits) - len(stripped)
    digits = stripped.rstrip("0")
    if not digits:
        digits, decpt = "0", 1
    ndigits = len(digits)
    if -14 <= decpt <= 15 or ndigits > decpt > 15:
        if decpt <= 0:
            out = "0." + "0" * -decpt + digits
        elif decpt < ndigits:
            out = digits[:decpt] + "." + digits[decpt:]
        else:
            out = digits + "0" * (decpt - ndigits) + ".0"
    else:
        out = digits[0] + ("." + digits[1:] if ndigits > 1 else "") + "e" + str(decpt - 1)
    return "-" + out if negative else out


def to_mysql_json_text(value: object) -> str:
    """Serialise a decoded JSON value exactly as MySQL prints a JSON column.

    Separators are ``", "`` and ``": "``; strings are escaped like MySQL's
    ``double_quote``; DECIMAL is printed in plain notation without quotes;
    doubles follow ``my_gcvt``; temporals and opaque values are quoted strings.
    """
    v: Any = value
    kind = type(v)
    # Exact-type checks first: they are the fast path, and they keep bool from
    # being taken for int.
    if kind is str or kind is JsonTemporal:
        return _quote(v)
    if kind is dict:
        members = [_quote(k) + ": " + to_mysql_json_text(item) for k, item in v.items()]
        return "{" + ", ".join(members) + "}"
    if kind is list or kind is tuple:
        return "[" + ", ".join([to_mysql_json_text(item) for item in v]) + "]"
    if kind is int:
        return str(v)
    if v is None or v is JSON_NULL:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if kind is float:
        return _format_double(v)
    if kind is Decimal:
        return format(v, "f")
    if kind is JsonOpaque:
        return _quote(str(v))
    # Subclasses of the native types.
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(int(v))
    if isinstance(v, float):
        return _format_double(float(v))
    if isinstance(v, Decimal):
        return format(v, "f")
    if isinstance(v, str):
        return _quote(str(v))
    if isinstance(v, dict):
        return to_mysql_json_text(dict(v))
    if isinstance(v, (list, tuple)):
        return to_mysql_json_text(list(v))
    raise TypeError(f"not a decoded JSON value: {kind.__name__}")


# ---------------------------------------------------------------------------
# JSON paths (json_path.cc), restricted to what a JSON diff can carry.

_MEMBER = 0
_CELL = 1
# A leg is (_MEMBER, name) or (_CELL, index, from_end).
_Leg = tuple[Any, ...]

_WHITESPACE = " \t\n\v\f\r"
_DIGITS = "0123456789"
_UINT32_MAX = 0xFFFFFFFF


def _skip_ws(text: str, i: int) -> int:
    n = len(text)
    while i < n and text[i] in _WHITESPACE:
        i += 1
    return i


@functools.lru_cache(maxsize=4096)
def _parse_path(text: str) -> tuple[_Leg, ...]:
    """Parse a JSON path as Json_path::parse_path does.

    Only member names, array cells and ``last``/``last-N`` cells are accepted:
    wildcards, ``**`` and ranges can never appear in a diff (JSON_SET, JSON_REPLACE
    and JSON_REMOVE refuse paths that may match several values).
    """
    n = len(text)
    i = _skip_ws(text, 0)
    if i >= n or text[i] != "$":
        raise JsonDecodeError("JSON path must start with '$'", path=text)
    i += 1
    legs: list[_Leg] = []
    while True:
        i = _skip_ws(text, i)
        if i >= n:
            break
        ch = text[i]
        if ch == "[":
            leg, i = _parse_array_leg(text, i + 1)
        elif ch == ".":
            leg, i = _parse_member_leg(text, i + 1)
        elif ch == "*":
            raise JsonDecodeError("'**' is not allowed in a JSON diff path", path=text)
        else:
            raise JsonDecodeError("unexpected character in JSON path", path=text, position=i)
        legs.append(leg)
    return tuple(legs)


def _parse_array_index(text: str, i: int) -> tuple[int, bool, int]:
    n = len(text)
    from_end = False
    if text.startswith("last", i):
        from_end = True
        i += 4
        after = _skip_ws(text, i)
        if after < n and text[after] == "-":
            i = _skip_ws(text, after + 1)
        else:
            return 0, True, i
    start = i
    while i < n and text[i] in _DIGITS:
        i += 1
    if i == start:
        raise JsonDecodeError("JSON path array index is not a number", path=text, position=start)
    index = int(text[start:i])
    if index > _UINT32_MAX:
        raise JsonDecodeError("JSON path array index is too large", path=text, position=start)
    return index, from_end, i


def _parse_array_leg(text: str, i: int) -> tuple[_Leg, int]:
    n = len(text)
    i = _skip_ws(text, i)
    if i >= n:
        raise JsonDecodeError("JSON path ends inside '[...]'", path=text)
    if text[i] == "*":
        raise JsonDecodeError("'[*]' is not allowed in a JSON diff path", path=text)
    index, from_end, i = _parse_array_index(text, i)
    number_end = i
    i = _skip_ws(text, i)
    if i >= n:
        raise JsonDecodeError("JSON path ends inside '[...]'", path=text)
    if i > number_end and n - i > 3 and text[i : i + 2] == "to" and text[i + 2] in _WHITESPACE:
        raise JsonDecodeError("array ranges are not allowed in a JSON diff path", path=text)
    if text[i] != "]":
        raise JsonDecodeError("expected ']' in JSON path", path=text, position=i)
    return (_CELL, index, from_end), i + 1


def _parse_member_leg(text: str, i: int) -> tuple[_Leg, int]:
    n = len(text)
    i = _skip_ws(text, i)
    if i >= n:
        raise JsonDecodeError("JSON path ends after '.'", path=text)
    if text[i] == "*":
        raise JsonDecodeError("'.*' is not allowed in a JSON diff path", path=text)
    start = i
    if text[i] == '"':
        # The name ends at the next unescaped quote; a backslash always protects
        # the character after it.
        i += 1
        while i < n:
            ch = text[i]
            i += 1
            if ch == "\\":
                i += 1
            elif ch == '"':
                break
        else:
            i = n
        quoted = text[start:i]
    else:
        while i < n and text[i] not in _WHITESPACE and text[i] not in "[.*":
            i += 1
        if i == start:
            raise JsonDecodeError("empty member name in JSON path", path=text, position=start)
        # MySQL unescapes unquoted names too, by parsing them as a JSON string.
        quoted = '"' + text[start:i] + '"'
    if "\\" not in quoted and len(quoted) >= 2 and quoted[-1] == '"':
        name = quoted[1:-1]
        bad = any(ch < " " for ch in name) or '"' in name
    else:
        try:
            name = json.loads(quoted)
            bad = not isinstance(name, str)
            if not bad:
                name.encode("utf-8")  # lone surrogates from \uD800 escapes
        except (ValueError, UnicodeEncodeError):
            bad = True
    if bad:
        raise JsonDecodeError("invalid member name in JSON path", path=text, position=start)
    return (_MEMBER, name), i


def _array_position(leg: _Leg, length: int) -> tuple[int, bool]:
    """Json_array_index: the clamped position and whether it is inside the array."""
    index = leg[1]
    if leg[2]:
        return (length - index - 1 if index < length else 0), index < length
    return min(index, length), index < length


# ---------------------------------------------------------------------------
# JSON diffs (json_diff.cc: Json_diff_vector::write_binary / read_binary).


class JsonDiffOp(enum.IntEnum):
    """enum_json_diff_operation."""

    REPLACE = 0
    INSERT = 1
    REMOVE = 2


@dataclass(frozen=True, slots=True)
class JsonDiff:
    """One logical change to a JSON column: the operation, the path it applies to,
    and the new value (``None`` both for JSON null and for REMOVE, which has no
    value; use :attr:`has_value` to tell them apart)."""

    operation: JsonDiffOp
    path: str
    value: object = None

    @property
    def has_value(self) -> bool:
        return self.operation != JsonDiffOp.REMOVE


def _read_lenenc(view: bytes | memoryview, pos: int, end: int) -> tuple[int, int]:
    """net_field_length_checked: returns (value, new position)."""
    if pos >= end:
        raise JsonDecodeError("JSON diff length field is truncated", offset=pos)
    first = view[pos]
    if first < 251:
        return first, pos + 1
    if first == 251:
        # NULL_LENGTH: never a valid length for a path or a value.
        raise JsonDecodeError("JSON diff length field is NULL", offset=pos)
    if first == 252:
        if pos + 3 > end:
            raise JsonDecodeError("JSON diff length field is truncated", offset=pos)
        return _U16.unpack_from(view, pos + 1)[0], pos + 3
    if first == 253:
        if pos + 4 > end:
            raise JsonDecodeError("JSON diff length field is truncated", offset=pos)
        return _U16.unpack_from(view, pos + 1)[0] | view[pos + 3] << 16, pos + 4
    if pos + 9 > end:
        raise JsonDecodeError("JSON diff length field is truncated", offset=pos)
    return _U64.unpack_from(view, pos + 1)[0], pos + 9


def decode_json_diffs(
    buf: bytes | bytearray | memoryview, offset: int = 0
) -> tuple[list[JsonDiff], int]:
    """Decode a JSON diff vector starting at ``offset``.

    Layout: u32 little-endian byte length of what follows, then diffs until that
    length is consumed exactly; each diff is an operation byte, a length-encoded
    path, and (except for REMOVE) a length-encoded binary JSON value. Returns all
    the diffs and the offset just after the vector.
    """
    # bytes are read in place; anything else through a memoryview, so that a large
    # event body is never copied for the sake of one column.
    view = buf if type(buf) is bytes else _view(buf)
    n = len(view)
    if offset < 0 or offset + 4 > n:
        raise JsonDecodeError("JSON diff vector length is truncated", offset=offset)
    length = _U32.unpack_from(view, offset)[0]
    pos = offset + 4
    end = pos + length
    if end > n:
        raise JsonDecodeError(
            "JSON diff vector is truncated",
            offset=offset,
            length=length,
            available=n - pos,
        )
    diffs: list[JsonDiff] = []
    while pos < end:
        diff_at = pos
        op_byte = view[pos]
        if op_byte > JsonDiffOp.REMOVE:
            raise JsonDecodeError("unknown JSON diff operation", offset=pos, operation=op_byte)
        operation = JsonDiffOp(op_byte)
        path_length, pos = _read_lenenc(view, pos + 1, end)
        if path_length > end - pos:
            raise JsonDecodeError("JSON diff path is truncated", offset=pos, length=path_length)
        try:
            path = str(view[pos : pos + path_length], "utf-8")
        except UnicodeDecodeError as exc:
            raise JsonDecodeError("JSON diff path is not valid UTF-8", offset=pos) from exc
        pos += path_length
        try:
            _parse_path(path)
        except JsonDecodeError as exc:
            raise exc.with_context(offset=diff_at) from None
        value: object = None
        if operation != JsonDiffOp.REMOVE:
            value_length, pos = _read_lenenc(view, pos, end)
            if value_length > end - pos:
                raise JsonDecodeError(
                    "JSON diff value is truncated",
                    offset=pos,
                    length=value_length,
                    path=path,
                )
            try:
                value = decode_json(view[pos : pos + value_length])
                if value is JSON_NULL:  # a value inside the document, not a document
                    value = None
            except JsonDecodeError as exc:
                raise exc.with_context(path=path, diff_offset=diff_at, value_offset=pos) from None
            pos += value_length
        diffs.append(JsonDiff(operation, path, value))
    return diffs, end


def apply_json_diffs(document: object, diffs: Sequence[JsonDiff]) -> object:
    """Apply diffs in order with the semantics of json_diff.cc ``apply_json_diffs``.

    * REPLACE: the path must exist; its value is replaced.
    * INSERT: the parent must exist. In an object the member must not exist yet
      (it is added, keeping MySQL's key order); in an array the value is inserted
      at the cell's position, clamped to the end (an index past the end appends).
    * REMOVE: the member, or the array cell, must exist.

    Paths never auto-wrap scalars and never address the root. The input is not
    mutated: containers on each changed path are copied, untouched subtrees (and
    the diffs' values) are shared with the result.
    """
    # Containers this call created, kept alive so their ids stay unique.
    owned: dict[int, object] = {}
    for diff in diffs:
        try:
            legs = _parse_path(diff.path)
        except JsonDecodeError as exc:
            raise exc.with_context(operation=diff.operation.name) from None
        if not legs:
            raise JsonDecodeError(
                "a JSON diff cannot address the document root",
                path=diff.path,
                operation=diff.operation.name,
            )
        document = _apply_one(document, diff, legs, owned)
    return document


def _own(container: Any, owned: dict[int, object]) -> Any:
    if id(container) in owned:
        return container
    copy = container.copy()
    owned[id(copy)] = copy
    return copy


def _slot(container: object, leg: _Leg) -> Any:
    """Where ``leg`` points inside ``container`` if that element exists, else None
    (Json_dom seek without auto-wrapping)."""
    if isinstance(container, dict):
        if leg[0] == _MEMBER and leg[1] in container:
            return leg[1]
        return None
    if isinstance(container, list):
        if leg[0] != _CELL:
            return None
        position, inside = _array_position(leg, len(container))
        return position if inside else None
    return None


def _mysql_key_order(item: tuple[str, object]) -> tuple[int, str]:
    # Json_key_comparator: shorter UTF-8 first, then bytewise, which for str is
    # code point order.
    key = item[0]
    return (len(key.encode("utf-8")), key)


def _apply_one(
    document: object, diff: JsonDiff, legs: tuple[_Leg, ...], owned: dict[int, object]
) -> object:
    def missing() -> JsonDecodeError:
        return JsonDecodeError(
            "JSON diff path does not match the document",
            path=diff.path,
            operation=diff.operation.name,
        )

    if not isinstance(document, (dict, list)):
        raise missing()
    root = parent = _own(document, owned)
    for leg in legs[:-1]:
        slot = _slot(parent, leg)
        if slot is None:
            raise missing()
        child = parent[slot]
        if not isinstance(child, (dict, list)):
            raise missing()
        child = _own(child, owned)
        parent[slot] = child
        parent = child

    last = legs[-1]
    operation = diff.operation
    if operation == JsonDiffOp.REPLACE:
        slot = _slot(parent, last)
        if slot is None:
            raise missing()
        parent[slot] = diff.value
    elif operation == JsonDiffOp.INSERT:
        if isinstance(parent, dict) and last[0] == _MEMBER:
            if last[1] in parent:
                raise JsonDecodeError(
                    "JSON diff inserts a member that already exists",
                    path=diff.path,
                    operation=operation.name,
                )
            parent[last[1]] = diff.value
            items = sorted(parent.items(), key=_mysql_key_order)
            parent.clear()
            parent.update(items)
        elif isinstance(parent, list) and last[0] == _CELL:
            position, _ = _array_position(last, len(parent))
            parent.insert(position, diff.value)
        else:
            raise missing()
    else:
        slot = _slot(parent, last)
        if slot is None:
            raise missing()
        del parent[slot]
    return root
