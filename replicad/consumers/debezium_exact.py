"""Row images written in Debezium's value encodings (`envelope.values: debezium`, which every
Avro topic uses) turned into the `exact` mode's values (docs/consumers.md), so that a reader
typed for `exact` (spark/types.py) reads both. Per column, from its schema-topic description
and the Debezium options the daemon wrote with (`envelope.*`); sans-IO, no Kafka.

Debezium's forms (sinks/debezium_values.py has the encoders) and their `exact` twins:
- DECIMAL: precise, the base64 of the unscaled two's complement -> the plain decimal text;
  string -> as is; double -> the number (the lake fits it to the column's scale);
- BIGINT UNSIGNED: long, wrapped negative above 2^63-1 -> the unsigned value; precise, a
  Decimal of scale 0 -> its integer;
- BIT(1): a boolean -> 0/1; BIT(n>1): the bits as little-endian bytes, base64 -> the integer;
- DATE: days since the epoch -> YYYY-MM-DD;
- DATETIME: epoch milliseconds (connect, or fsp 0-3) or microseconds -> ISO-8601 without zone;
- TIME: milliseconds of the day (connect) or microseconds -> [-]HH:MM:SS.ffffff;
- binary types: base64 (bytes, base64), url-safe base64 or hex -> base64;
- MySQL JSON: the document's text -> the document;
- GEOMETRY: {"wkb", "srid" or null} -> {"srid", "wkb"} with 0 for no SRID;
everything else (integers, floats, text, ENUM, SET, YEAR, TIMESTAMP's ISO text) is the same.
"""

from __future__ import annotations

import base64
import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import orjson

Convert = Callable[[Any], Any]
Image = dict[str, Any]

_EPOCH_DATE = dt.date(1970, 1, 1)
_EPOCH = dt.datetime(1970, 1, 1)
_BINARY = frozenset({"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"})


@dataclass(frozen=True)
class DebeziumForm:
    """The Debezium options the values were written under (`envelope.*`, their defaults)."""

    decimal_handling_mode: str = "precise"
    time_precision_mode: str = "adaptive_time_microseconds"
    binary_handling_mode: str = "bytes"
    bigint_unsigned_handling_mode: str = "long"


def _unscaled(text: str) -> int:
    return int.from_bytes(base64.b64decode(text), "big", signed=True)


def _decimal_text(scale: int) -> Convert:
    def convert(text: str) -> str:
        unscaled = _unscaled(text)
        digits = tuple(int(d) for d in str(abs(unscaled)))
        return format(Decimal((int(unscaled < 0), digits, -scale)), "f")

    return convert


def _unsigned_long(value: int) -> int:
    return value + 2**64 if value < 0 else value


def _bits(text: str) -> int:
    return int.from_bytes(base64.b64decode(text), "little")


def _date(days: int) -> str:
    return (_EPOCH_DATE + dt.timedelta(days=days)).isoformat()


def _datetime(per_second: int) -> Convert:
    def convert(ticks: int) -> str:
        micros = ticks * (1_000_000 // per_second)
        return (_EPOCH + dt.timedelta(microseconds=micros)).isoformat()

    return convert


def _time(per_second: int) -> Convert:
    def convert(ticks: int) -> str:
        micros = abs(ticks) * (1_000_000 // per_second)
        seconds, fraction = divmod(micros, 1_000_000)
        minutes, second = divmod(seconds, 60)
        hours, minute = divmod(minutes, 60)
        sign = "-" if ticks < 0 else ""
        return f"{sign}{hours:02d}:{minute:02d}:{second:02d}.{fraction:06d}"

    return convert


def _binary(mode: str) -> Convert | None:
    if mode == "hex":
        return lambda text: base64.b64encode(bytes.fromhex(text)).decode("ascii")
    if mode == "base64-url-safe":
        return lambda text: base64.b64encode(base64.urlsafe_b64decode(text)).decode("ascii")
    return None  # bytes (Connect's base64) and base64: the exact mode's base64 already


def _geometry(value: Mapping[str, Any]) -> dict[str, Any]:
    return {"srid": value.get("srid") or 0, "wkb": value["wkb"]}


def column_converter(column: Mapping[str, Any], form: DebeziumForm) -> Convert | None:
    """From the Debezium value of a schema-topic column to its exact value; None: the same."""
    kind = column["type"]
    connect = form.time_precision_mode == "connect"
    fsp = int(column.get("fsp") or 0)
    if kind == "decimal" and form.decimal_handling_mode == "precise":
        return _decimal_text(int(column.get("scale") or 0))
    if kind == "bigint" and column.get("unsigned"):
        if form.bigint_unsigned_handling_mode == "precise":
            return _unscaled
        return _unsigned_long
    if kind == "bit":
        return int if int(column.get("precision") or 1) == 1 else _bits
    if kind == "date":
        return _date
    if kind == "datetime":
        return _datetime(1000 if connect or fsp <= 3 else 1_000_000)
    if kind == "time":
        return _time(1000 if connect else 1_000_000)
    if kind in _BINARY:
        return _binary(form.binary_handling_mode)
    if kind == "json":
        return orjson.loads
    if kind == "geometry":
        return _geometry
    return None


def image_converter(
    columns: Sequence[Mapping[str, Any]], form: DebeziumForm
) -> Callable[[Image | None], Image | None]:
    """A row image of these columns in Debezium's form -> the same image in the exact form
    (a new dict; NULL stays None)."""
    converts = {
        c["name"]: convert for c in columns if (convert := column_converter(c, form)) is not None
    }

    def convert_image(image: Image | None) -> Image | None:
        if image is None:
            return None
        out = dict(image)
        for name, convert in converts.items():
            value = out.get(name)
            if value is not None:
                out[name] = convert(value)
        return out

    return convert_image


class EnvelopeToExact:
    """Change envelopes of a table in Debezium's value form -> the exact form, by the schema
    version each names (one not among `versions` is left as it is: the reader refuses it)."""

    def __init__(self, versions: Sequence[Any], form: DebeziumForm) -> None:
        self._by_version = {v.version: image_converter(v.columns, form) for v in versions}

    def __call__(self, envelope: dict[str, Any]) -> dict[str, Any]:
        convert = self._by_version.get(envelope["source"].get("schema_version"))
        if convert is None:
            return envelope
        return {
            **envelope,
            "before": convert(envelope.get("before")),
            "after": convert(envelope.get("after")),
        }
