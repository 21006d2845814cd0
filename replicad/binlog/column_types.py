"""The SQL type of a TABLE_MAP column, as consumers are told it (the schema topic, Debezium's
value encodings): data type, precision and scale, fractional seconds, length, signedness,
character set, ENUM/SET members. Sans-IO: derived from the map's type codes and metadata only.

What the binlog cannot say is left out rather than guessed: a TEXT column's character count
(only its byte length is known), DEFAULT values, and whether a MariaDB LONGTEXT holds JSON
(MariaDB's JSON type is LONGTEXT with a check constraint; the binlog does not mark it).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import orjson

from replicad.binlog.charsets import BINARY_COLLATION, charset_of
from replicad.binlog.rows import Column, TableMapEvent
from replicad.binlog.values import ColumnType as T

_INTEGERS = {
    T.TINY: "tinyint",
    T.SHORT: "smallint",
    T.INT24: "mediumint",
    T.LONG: "int",
    T.LONGLONG: "bigint",
}
_BLOB_SIZES = {1: "tiny", 2: "", 3: "medium", 4: "long"}  # length bytes -> TINY/-/MEDIUM/LONG
_TEMPORAL = {
    T.DATE: "date",
    T.NEWDATE: "date",
    T.TIME: "time",
    T.TIME2: "time",
    T.DATETIME: "datetime",
    T.DATETIME2: "datetime",
    T.TIMESTAMP: "timestamp",
    T.TIMESTAMP2: "timestamp",
    T.YEAR: "year",
}
_FRACTIONAL = frozenset({T.TIME2, T.DATETIME2, T.TIMESTAMP2})


@dataclass(frozen=True, slots=True)
class SqlType:
    data_type: str  # lower case, as information_schema.COLUMNS.DATA_TYPE spells it
    unsigned: bool = False
    precision: int | None = None  # DECIMAL digits; BIT bits
    scale: int | None = None  # DECIMAL digits after the point
    fsp: int | None = None  # TIME/DATETIME/TIMESTAMP fractional digits
    length: int | None = None  # CHAR/VARCHAR/BINARY/VARBINARY: maximum length in bytes
    charset: str | None = None  # character columns (None: binary, or not known)
    members: tuple[str, ...] | None = None  # ENUM/SET members in definition order
    dimensions: int | None = None  # VECTOR

    @property
    def binary(self) -> bool:
        """Values are bytes: BINARY/VARBINARY/BLOB types (and GEOMETRY's WKB)."""
        return self.data_type in (
            "binary",
            "varbinary",
            "tinyblob",
            "blob",
            "mediumblob",
            "longblob",
        )

    def sql(self) -> str:
        """The type as DDL would write it: `decimal(10,2) unsigned`, `datetime(6)`,
        `varbinary(16)`, `enum('a','b')`."""
        text = self.data_type
        if self.members is not None:
            text += "(" + ",".join("'" + m.replace("'", "''") + "'" for m in self.members) + ")"
        elif self.data_type == "decimal":
            text += f"({self.precision},{self.scale})"
        elif self.data_type == "bit":
            text += f"({self.precision})"
        elif self.fsp:
            text += f"({self.fsp})"
        elif self.length is not None:
            text += f"({self.length})"
        elif self.dimensions is not None:
            text += f"({self.dimensions})"
        return text + (" unsigned" if self.unsigned else "")

    def to_json(self) -> dict[str, Any]:
        """Only the fields that apply, so that equal types have equal JSON."""
        out: dict[str, Any] = {"type": self.data_type, "sql": self.sql()}
        for name in ("unsigned", "precision", "scale", "fsp", "length", "charset", "dimensions"):
            value = getattr(self, name)
            if value:
                out[name] = value
        if self.data_type == "decimal":
            out["scale"] = self.scale  # 0 is meaningful
        if self.members is not None:
            out["enum" if self.data_type == "enum" else "set"] = list(self.members)
        return out


def sql_type_of(column: Column, *, mariadb: bool) -> SqlType:
    """The SQL type of one TABLE_MAP column (with names and members as the map has them,
    FULL metadata or named from the schema history)."""
    code, meta = column.type_code, column.meta
    charset = _charset(column, mariadb)
    if code in _INTEGERS:
        return SqlType(_INTEGERS[code], unsigned=column.unsigned)
    if code in (T.NEWDECIMAL, T.DECIMAL):
        return SqlType("decimal", column.unsigned, precision=meta & 0xFF, scale=meta >> 8)
    if code == T.FLOAT:
        return SqlType("float", column.unsigned)
    if code == T.DOUBLE:
        return SqlType("double", column.unsigned)
    if code == T.BIT:
        return SqlType("bit", precision=(meta >> 8) * 8 + (meta & 0xFF))
    if code in _TEMPORAL:
        return SqlType(_TEMPORAL[code], fsp=meta if code in _FRACTIONAL else 0)
    if code == T.ENUM:
        return SqlType("enum", charset=charset, members=_members(column.enum_values))
    if code == T.SET:
        return SqlType("set", charset=charset, members=_members(column.set_values))
    if code in (T.VARCHAR, T.VAR_STRING):
        return SqlType("varbinary" if _binary(column) else "varchar", length=meta, charset=charset)
    if code == T.STRING:
        length = column.max_length if column.max_length is not None else meta
        return SqlType("binary" if _binary(column) else "char", length=length, charset=charset)
    if code in (T.BLOB, T.TINY_BLOB, T.MEDIUM_BLOB, T.LONG_BLOB):
        size = _BLOB_SIZES.get(meta, "")
        return SqlType(f"{size}blob" if _binary(column) else f"{size}text", charset=charset)
    if code == T.JSON:
        return SqlType("json")
    if code == T.GEOMETRY:
        return SqlType("geometry")
    if code == T.VECTOR:
        return SqlType("vector", dimensions=column.vector_dimensions)
    return SqlType(column.type_name.lower())


def _charset(column: Column, mariadb: bool) -> str | None:
    if column.collation is None or column.collation == BINARY_COLLATION:
        return None
    return charset_of(column.collation, mariadb=mariadb)


def _binary(column: Column) -> bool:
    """A column with the binary collation. Without charset metadata (MINIMAL row metadata)
    the binlog cannot tell TEXT from BLOB or CHAR from BINARY: such a column is named as the
    character type, and its values are text where they decode as UTF-8, else bytes."""
    return column.collation == BINARY_COLLATION


def _members(values: list[str] | None) -> tuple[str, ...] | None:
    return None if values is None else tuple(values)


@dataclass(frozen=True, slots=True)
class ColumnDescription:
    name: str
    type: SqlType
    nullable: bool

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, **self.type.to_json(), "nullable": self.nullable}


@dataclass(frozen=True, slots=True)
class TableDescription:
    """A table's row image as one TABLE_MAP describes it: what the schema topic publishes.
    `version` is a digest of everything else, so every replicad instance (and every restart)
    gives the same shape the same version without keeping a counter anywhere."""

    db: str
    table: str
    columns: tuple[ColumnDescription, ...]
    primary_key: tuple[str, ...]
    version: str

    def to_json(self) -> dict[str, Any]:
        return {
            "db": self.db,
            "table": self.table,
            "version": self.version,
            "columns": [c.to_json() for c in self.columns],
            "primary_key": list(self.primary_key),
        }


def table_description(
    db: str, table: str, columns: tuple[ColumnDescription, ...], primary_key: tuple[str, ...]
) -> TableDescription:
    """A description with its version: the digest of the columns and the key, so that the
    same shape read from a TABLE_MAP or from information_schema (a snapshot) gets the same
    version wherever the two agree."""
    shape = {"columns": [c.to_json() for c in columns], "primary_key": list(primary_key)}
    digest = hashlib.sha256(orjson.dumps(shape, option=orjson.OPT_SORT_KEYS)).hexdigest()
    return TableDescription(db, table, columns, primary_key, digest[:16])


_DESCRIPTIONS: dict[tuple[Any, ...], TableDescription] = {}
_DESCRIPTIONS_MAX = 4096


def describe(table_map: TableMapEvent) -> TableDescription:
    """The description of a (resolved) TABLE_MAP. Every transaction repeats its maps, so
    descriptions are shared between maps of equal layout, names and keys."""
    columns = table_map.columns
    key = (
        table_map.schema,
        table_map.table,
        table_map.mariadb,
        table_map.primary_key,
        tuple(
            (
                c.name,
                c.type_code,
                c.meta,
                c.collation,
                c.unsigned,
                c.nullable,
                c.max_length,
                _members(c.enum_values),
                _members(c.set_values),
                c.vector_dimensions,
            )
            for c in columns
        ),
    )
    found = _DESCRIPTIONS.get(key)
    if found is not None:
        return found
    described = tuple(
        ColumnDescription(c.name, sql_type_of(c, mariadb=table_map.mariadb), c.nullable)
        for c in columns
    )
    description = table_description(
        table_map.schema, table_map.table, described, tuple(table_map.primary_key_names)
    )
    if len(_DESCRIPTIONS) >= _DESCRIPTIONS_MAX:
        del _DESCRIPTIONS[next(iter(_DESCRIPTIONS))]
    _DESCRIPTIONS[key] = description
    return description
