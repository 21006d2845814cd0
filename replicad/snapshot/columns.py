"""A snapshot's columns: information_schema's description of a column turned into what the
binlog path gives for the same column, so that a row read with SELECT and the same row decoded
from a ROWS event become the same message.

- `SnapshotColumn.parse(raw)` turns the text-protocol bytes of a value (the session's
  `character_set_results` is binary, so text columns arrive in their own character set,
  undecoded) into the value the binlog decoders in `replicad.binlog.values` produce: ints,
  `Decimal`, float32-shortest floats, dates/datetimes (a zero or invalid date as the string the
  server prints), aware UTC datetimes for TIMESTAMP (the session time zone is UTC), `timedelta`
  for TIME, text decoded with the column's character set (bytes where it does not decode),
  bytes for binary types, BIT as an int, ENUM/SET as member names, `Geometry` for spatial
  columns.
- `SnapshotColumn.select` is the expression that reads it (FLOAT through a DOUBLE, so that
  no digit is lost to the server's six-digit FLOAT printing).
- `SnapshotColumn.literal(raw)` writes a read value back as an SQL literal that compares the
  way the column's index orders (its collation), for key ranges.
- `description_of(...)` is the table's `TableDescription` built the way `describe()` builds
  it from a TABLE_MAP with FULL metadata, so both give the same schema version.

Sans-IO: values in, values out.
"""

from __future__ import annotations

import datetime as dt
import functools
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import orjson

from replicad.binlog.charsets import CODEC_BY_CHARSET, decode_text, encode_text
from replicad.binlog.column_types import (
    ColumnDescription,
    SqlType,
    TableDescription,
    table_description,
)
from replicad.binlog.values import (
    Geometry,
    decimal_text,
    float32_shortest,
    format_time,
    make_date,
    make_datetime,
    make_time,
)
from replicad.errors import ReplicadError
from replicad.exit_codes import EXIT_CONFIG
from replicad.source.ddl import enum_set_members

_INTEGERS = frozenset({"tinyint", "smallint", "mediumint", "int", "bigint"})
_TEXTS = frozenset({"char", "varchar", "tinytext", "text", "mediumtext", "longtext"})
_BINARIES = frozenset({"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"})
_SPATIAL = frozenset(
    {
        "geometry",
        "point",
        "linestring",
        "polygon",
        "multipoint",
        "multilinestring",
        "multipolygon",
        "geometrycollection",
    }
)
_FRACTIONAL = frozenset({"time", "datetime", "timestamp"})
_f32 = struct.Struct("<f")


class SnapshotError(ReplicadError):
    """A snapshot cannot read a table (unknown table, a column type it cannot read exactly, a
    broken condition): nothing of it is emitted and the position does not move."""

    exit_code = EXIT_CONFIG


@dataclass(frozen=True, slots=True)
class SnapshotColumn:
    name: str
    data_type: str  # information_schema DATA_TYPE, lower case
    column_type: str  # information_schema COLUMN_TYPE, lower case
    nullable: bool
    precision: int | None = None  # DECIMAL digits, BIT bits
    scale: int | None = None
    fsp: int = 0
    octet_length: int | None = None  # CHAR/VARCHAR/BINARY/VARBINARY: bytes
    charset: str | None = None
    collation: str | None = None
    members: tuple[str, ...] | None = None  # ENUM/SET
    mysql_json: bool = False  # MySQL's JSON type (MariaDB's JSON is LONGTEXT)

    @property
    def unsigned(self) -> bool:
        return " unsigned" in self.column_type

    @property
    def quoted(self) -> str:
        return quote_name(self.name)

    @property
    def select(self) -> str:
        """The expression that reads the column (aliased to its name)."""
        if self.data_type == "float":  # the exact float32 as a double: no digit is lost
            return f"({self.quoted} + 0e0) AS {self.quoted}"
        return self.quoted

    def sql_type(self) -> SqlType:
        """The type as `column_types.sql_type_of` names it from a FULL-metadata TABLE_MAP."""
        data_type = self.data_type
        if data_type in _INTEGERS or data_type in ("float", "double"):
            return SqlType(data_type, unsigned=self.unsigned)
        if data_type == "decimal":
            return SqlType("decimal", self.unsigned, precision=self.precision, scale=self.scale)
        if data_type == "bit":
            return SqlType("bit", precision=self.precision)
        if data_type in ("date", "year", "time", "datetime", "timestamp"):
            return SqlType(data_type, fsp=self.fsp if data_type in _FRACTIONAL else 0)
        if data_type in ("enum", "set"):
            return SqlType(data_type, charset=self.charset, members=self.members)
        if data_type in ("char", "varchar", "binary", "varbinary"):
            return SqlType(data_type, length=self.octet_length, charset=self.charset)
        if data_type in _TEXTS or data_type in _BINARIES:
            return SqlType(data_type, charset=self.charset)
        if data_type in _SPATIAL:
            return SqlType("geometry")
        return SqlType(data_type)

    def parser(self) -> Callable[[bytes], Any]:
        """bytes of a non-NULL value -> the value as the binlog decoders give it."""
        data_type = self.data_type
        if data_type in _INTEGERS or data_type == "year":
            return int
        if data_type == "decimal":
            return _decimal
        if data_type == "float":
            return _float32
        if data_type == "double":
            return float
        if data_type == "bit":
            return _bit
        if data_type == "date":
            return _date
        if data_type == "datetime":
            return _datetime_parser(self.fsp)
        if data_type == "timestamp":
            return _timestamp_parser(self.fsp)
        if data_type == "time":
            return _time
        if data_type == "binary":
            width = self.octet_length or 0
            return lambda raw: bytes(raw).ljust(width, b"\0")
        if data_type in _BINARIES:
            return bytes
        if data_type in _SPATIAL:
            return _geometry
        if self.mysql_json:
            return _json_text
        if data_type in _TEXTS or data_type in ("enum", "set") or data_type == "json":
            codec = CODEC_BY_CHARSET.get(self.charset or "")
            if self.charset is not None and codec is None:
                raise SnapshotError(
                    "a snapshot cannot decode this character set",
                    column=self.name,
                    charset=self.charset,
                )
            return functools.partial(decode_text, codec=codec) if codec else bytes
        raise SnapshotError(
            f"a snapshot cannot read columns of type {self.column_type} exactly",
            column=self.name,
        )

    def literal(self, value: Any) -> str:
        """A value read by this snapshot (as `parser()` gave it) as an SQL literal that compares
        in the order of the column's index: numbers as numbers, temporal values quoted, text
        in its character set and collation, ENUM/SET by their index (the order they sort in),
        binary strings as hex."""
        data_type = self.data_type
        if value is None:
            return "NULL"
        if data_type in _INTEGERS or data_type in ("year", "bit"):
            return str(int(value))
        if data_type == "decimal":
            return decimal_text(value)  # str() may write 0E-8: a DOUBLE to the server
        if data_type in ("double", "float"):
            return repr(float(value)) if isinstance(value, float) else str(value)
        if data_type == "enum":
            assert self.members is not None
            return str(self.members.index(value) + 1) if value else "0"
        if data_type == "set":
            assert self.members is not None
            names = value.split(",") if value else []
            return str(sum(1 << self.members.index(n) for n in names))
        if data_type in ("date", "datetime", "timestamp", "time"):
            return "'" + _temporal_text(value) + "'"
        codec = CODEC_BY_CHARSET.get(self.charset or "", "utf-8")
        raw = value if isinstance(value, bytes) else encode_text(value, codec)
        if data_type in _BINARIES or self.charset is None:
            return f"X'{raw.hex()}'"
        collate = f" COLLATE {self.collation}" if self.collation else ""
        return f"_{self.charset} X'{raw.hex()}'{collate}"


def quote_name(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def description_of(
    db: str, table: str, columns: Sequence[SnapshotColumn], primary_key: Sequence[str]
) -> TableDescription:
    described = tuple(ColumnDescription(c.name, c.sql_type(), c.nullable) for c in columns)
    return table_description(db, table, described, tuple(primary_key))


def _decimal(raw: bytes) -> Decimal:
    return Decimal(raw.decode("ascii"))


def _float32(raw: bytes) -> float:
    # The float32 the column holds, read exactly through a DOUBLE (see `select`).
    return float32_shortest(_f32.unpack(_f32.pack(float(raw)))[0])


def _bit(raw: bytes) -> int:
    return int.from_bytes(raw, "big")


def _json_text(raw: bytes) -> Any:
    # MySQL prints a JSON value as the binlog path prints a decoded one; kept as written.
    return orjson.Fragment(bytes(raw))


def _geometry(raw: bytes) -> Geometry:
    # SELECT gives the stored form, as the binlog: a 4-byte little-endian SRID, then WKB.
    data = bytes(raw)
    if len(data) < 4:
        return Geometry(0, data)
    return Geometry(int.from_bytes(data[:4], "little"), data[4:])


def _ymd(text: str) -> tuple[int, int, int]:
    year, month, day = text.split("-")
    return int(year), int(month), int(day)


def _hms(text: str) -> tuple[int, int, int, int]:
    whole, _, fraction = text.partition(".")
    hours, minutes, seconds = whole.split(":")
    micros = int(fraction.ljust(6, "0")) if fraction else 0
    return int(hours), int(minutes), int(seconds), micros


# The temporal parsers try Python's C parser first (fromisoformat reads what MySQL prints:
# `YYYY-MM-DD[ HH:MM:SS[.f...]]`); what it refuses (zero or invalid dates, which stay
# text) takes the field-by-field path.


def _date(raw: bytes) -> dt.date | str:
    text = raw.decode("ascii")
    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        return make_date(*_ymd(text))


def _datetime_parser(fsp: int) -> Callable[[bytes], dt.datetime | str]:
    def parse(raw: bytes) -> dt.datetime | str:
        text = raw.decode("ascii")
        try:
            return dt.datetime.fromisoformat(text)
        except ValueError:
            day, _, clock = text.partition(" ")
            return make_datetime(*_ymd(day), *_hms(clock), fsp)

    return parse


def _timestamp_parser(fsp: int) -> Callable[[bytes], dt.datetime | str]:
    zero = "0000-00-00 00:00:00" + ("." + "0" * fsp if fsp else "")

    def parse(raw: bytes) -> dt.datetime | str:
        text = raw.decode("ascii")
        if text == zero or text.startswith("0000-00-00"):
            return zero
        try:
            return dt.datetime.fromisoformat(text).replace(tzinfo=dt.UTC)
        except ValueError:
            pass
        day, _, clock = text.partition(" ")
        hh, mm, ss, us = _hms(clock)
        return dt.datetime(*_ymd(day), hh, mm, ss, us, tzinfo=dt.UTC)

    return parse


def _time(raw: bytes) -> dt.timedelta:
    text = raw.decode("ascii")
    negative = text.startswith("-")
    return make_time(negative, *_hms(text.lstrip("-")))


def _temporal_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, dt.timedelta):
        return format_time(value)
    if isinstance(value, dt.datetime):
        return (
            value.astimezone(dt.UTC).replace(tzinfo=None).isoformat(" ")
            if value.tzinfo
            else value.isoformat(" ")
        )
    return value.isoformat()


def column_of(row: dict[str, Any], mariadb: bool) -> SnapshotColumn:
    """One row of information_schema.COLUMNS (by column name) as a SnapshotColumn."""
    data_type = str(row["DATA_TYPE"]).lower()
    column_type = str(row["COLUMN_TYPE"]).lower()
    members = enum_set_members(str(row["COLUMN_TYPE"])) if data_type in ("enum", "set") else None
    precision = row["NUMERIC_PRECISION"]
    return SnapshotColumn(
        name=str(row["COLUMN_NAME"]),
        data_type=data_type,
        column_type=column_type,
        nullable=str(row["IS_NULLABLE"]).upper() == "YES",
        precision=None if precision is None else int(precision),
        scale=None if row["NUMERIC_SCALE"] is None else int(row["NUMERIC_SCALE"]),
        fsp=int(row["DATETIME_PRECISION"] or 0),
        octet_length=(
            None if row["CHARACTER_OCTET_LENGTH"] is None else int(row["CHARACTER_OCTET_LENGTH"])
        ),
        charset=None if row["CHARACTER_SET_NAME"] is None else str(row["CHARACTER_SET_NAME"]),
        collation=None if row["COLLATION_NAME"] is None else str(row["COLLATION_NAME"]),
        members=members,
        mysql_json=data_type == "json" and not mariadb,
    )
