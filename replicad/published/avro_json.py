"""Avro change messages back in the form their JSON twins have: a converter, built once per
writer schema, that turns what fastavro decoded into what `orjson.loads` gives for the same
change written as JSON (docs/architecture.md, "Message format"), so that every reader of the
published stream handles one form. Sans-IO: a parsed Avro schema in, a function out.

What fastavro gives and what the JSON payload holds instead (Kafka Connect's JsonConverter,
replicad/sinks/debezium_values.py):
- `bytes` with logical type `decimal` (Connect's Decimal, DECIMAL under decimal.handling.mode
  precise, BIGINT UNSIGNED under precise): a `Decimal` -> the base64 of the unscaled value's
  big-endian two's complement in the fewest bytes that keep the sign (Java's
  BigInteger.toByteArray);
- plain `bytes` (binary columns under binary.handling.mode bytes, BIT(n>1), a geometry's wkb):
  `bytes` -> base64;
- `int` with logical type `date` (Connect's Date): a `date` -> days since 1970-01-01;
- `int` with logical type `time-millis` (Connect's Time): a `time` -> milliseconds of the day;
- `long` with logical type `timestamp-millis` (Connect's Timestamp): a `datetime` in UTC ->
  milliseconds since the epoch;
- `float` (FLOAT, VECTOR's elements): the float32 read back as a double -> the shortest decimal
  that reads back as the same float32, which is how the binlog decoder gives a FLOAT;
- records, arrays, maps and the ["null", T] unions of optional fields: converted inside.
Everything else is the same in both forms.

Field names are the Avro ones: a column name Avro refuses was adjusted by the writer
(replicad/sinks/avro_schema.py, `avro_name`) and cannot be told back from the schema.
"""

from __future__ import annotations

import binascii
import datetime as dt
import struct
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from replicad.errors import ReplicadError
from replicad.exit_codes import EXIT_DATA_ERROR

Convert = Callable[[Any], Any]
AvroSchema = dict[str, Any] | list[Any] | str

_EPOCH_DATE = dt.date(1970, 1, 1)
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_FLOAT32 = struct.Struct("<f")
_NAMED = ("record", "enum", "fixed")


class AvroFormError(ReplicadError):
    """A writer schema this reader cannot turn into the JSON form (a union of two non-null
    types, which no replicad schema has) or a value that does not fit its schema."""

    exit_code = EXIT_DATA_ERROR


def json_form(schema: AvroSchema) -> Convert | None:
    """The converter of values of `schema` to their JSON form; None when they already are."""
    return _Compiler().build(schema, None)


# ---------------------------------------------------------------------- one value


def decimal_text(value: Decimal, scale: int) -> str:
    """A Connect Decimal as JsonConverter writes it: base64 of the unscaled two's complement."""
    sign, digits, exponent = value.as_tuple()
    shift = exponent + scale if isinstance(exponent, int) else -1
    if shift < 0:
        raise AvroFormError(f"a decimal of scale {scale} cannot hold {value}")
    unscaled = int("".join(map(str, digits)) or "0") * 10**shift
    if sign:
        unscaled = -unscaled
    length = (unscaled if unscaled >= 0 else ~unscaled).bit_length() // 8 + 1
    return bytes_text(unscaled.to_bytes(length, "big", signed=True))


def bytes_text(value: bytes) -> str:
    return binascii.b2a_base64(value, newline=False).decode("ascii")


def date_days(value: dt.date) -> int:
    return (value - _EPOCH_DATE).days


def time_millis(value: dt.time) -> int:
    seconds = (value.hour * 60 + value.minute) * 60 + value.second
    return seconds * 1000 + value.microsecond // 1000


def timestamp_millis(value: dt.datetime) -> int:
    delta = value - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


def float32_text(value: float) -> float:
    """The shortest decimal (6 to 9 significant digits) that reads back as the same float32."""
    packed = _FLOAT32.pack(value)
    for digits in range(6, 10):
        shorter = float(f"{value:.{digits}g}")
        if _FLOAT32.pack(shorter) == packed:
            return shorter
    return value


_LOGICAL: dict[tuple[str, str], Convert] = {
    ("int", "date"): date_days,
    ("int", "time-millis"): time_millis,
    ("long", "timestamp-millis"): timestamp_millis,
}


# ---------------------------------------------------------------------- a schema


class _Compiler:
    """One schema: named types are defined once and referred to by their full name later."""

    def __init__(self) -> None:
        self._named: dict[str, Convert | None] = {}

    def build(self, schema: AvroSchema, namespace: str | None) -> Convert | None:
        if isinstance(schema, list):
            return self._union(schema, namespace)
        if isinstance(schema, str):
            return self._by_name(schema, namespace)
        kind = schema["type"]
        if kind == "record":
            return self._record(schema, namespace)
        if kind == "array":
            return _each(self.build(schema["items"], namespace))
        if kind == "map":
            return _each_value(self.build(schema["values"], namespace))
        if kind in _NAMED:  # enum and fixed: no replicad schema has them; kept as read
            self._named[_full_name(schema, namespace)] = None
            return None
        logical = schema.get("logicalType")
        if kind == "bytes" and logical == "decimal":
            scale = int(schema.get("scale", 0))
            return lambda value: decimal_text(value, scale)
        if isinstance(kind, str) and isinstance(logical, str) and (kind, logical) in _LOGICAL:
            return _LOGICAL[kind, logical]
        return self._by_name(kind, namespace)

    def _by_name(self, name: str, namespace: str | None) -> Convert | None:
        if name == "bytes":
            return bytes_text
        if name == "float":
            return float32_text
        if name in self._named:
            return self._named[name]
        qualified = f"{namespace}.{name}" if namespace and "." not in name else name
        return self._named.get(qualified)  # a primitive, or a type defined as plain

    def _union(self, branches: list[Any], namespace: str | None) -> Convert | None:
        converts = [self.build(b, namespace) for b in branches if b != "null"]
        if len(converts) > 1:
            raise AvroFormError("a union of several non-null types", union=str(branches))
        return converts[0] if converts else None  # None stays None: converters skip it

    def _record(self, schema: dict[str, Any], namespace: str | None) -> Convert | None:
        full = _full_name(schema, namespace)
        inner = full.rpartition(".")[0] or None
        fields = {f["name"]: self.build(f["type"], inner) for f in schema["fields"]}
        converts = {name: c for name, c in fields.items() if c is not None}
        convert = _fields(converts) if converts else None
        self._named[full] = convert
        return convert


def _full_name(schema: dict[str, Any], namespace: str | None) -> str:
    name = str(schema["name"])
    if "." in name:
        return name
    space = schema.get("namespace", namespace)
    return f"{space}.{name}" if space else name


def _fields(converts: dict[str, Convert]) -> Convert:
    items = tuple(converts.items())

    def record(value: dict[str, Any]) -> dict[str, Any]:
        for name, convert in items:  # in place: the dict is fastavro's, made for this read
            field = value.get(name)
            if field is not None:
                value[name] = convert(field)
        return value

    return record


def _each(convert: Convert | None) -> Convert | None:
    if convert is None:
        return None
    return lambda values: [None if v is None else convert(v) for v in values]


def _each_value(convert: Convert | None) -> Convert | None:
    if convert is None:
        return None
    return lambda values: {k: None if v is None else convert(v) for k, v in values.items()}
