"""The schema history's model: a table version's columns (`TableSchema`, `ColumnSchema`) and
the type-family check of a TABLE_MAP against it. Shared by the DDL parser (`replicad.source.ddl`)
and the history (`replicad.source.schema`)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from replicad.binlog.rows import TableMapEvent
from replicad.binlog.values import ColumnType as T

SYSTEM_SCHEMAS = ("mysql", "information_schema", "performance_schema", "sys")
Key = tuple[str, str]


@dataclass(frozen=True, slots=True)
class ColumnSchema:
    name: str
    data_type: str  # lower case, as information_schema.COLUMNS.DATA_TYPE spells it
    unsigned: bool = False
    enum_values: tuple[str, ...] | None = None
    set_values: tuple[str, ...] | None = None


# MariaDB's implicit system-versioning columns, after all others in the row image.
_ROW_START = ColumnSchema("row_start", "timestamp")
_ROW_END = ColumnSchema("row_end", "timestamp")


@dataclass(frozen=True, slots=True)
class TableSchema:
    schema: str
    table: str
    columns: tuple[ColumnSchema, ...]  # in ordinal order, as in the row image
    primary_key: tuple[str, ...] = ()
    implicit_versioning: bool = False  # WITH SYSTEM VERSIONING without period columns

    @classmethod
    def build(
        cls,
        key: Key,
        defined: Iterable[ColumnSchema],
        primary_key: Iterable[str] = (),
        implicit_versioning: bool = False,
    ) -> TableSchema:
        columns = tuple(defined) + ((_ROW_START, _ROW_END) if implicit_versioning else ())
        return cls(key[0], key[1], columns, tuple(primary_key), implicit_versioning)

    @property
    def defined_columns(self) -> tuple[ColumnSchema, ...]:
        return self.columns[:-2] if self.implicit_versioning else self.columns

    @property
    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]

    def to_json(self) -> dict[str, Any]:
        columns = []
        for c in self.defined_columns:
            item: dict[str, Any] = {"name": c.name, "type": c.data_type}
            if c.unsigned:
                item["unsigned"] = True
            if c.enum_values is not None:
                item["enum"] = list(c.enum_values)
            if c.set_values is not None:
                item["set"] = list(c.set_values)
            columns.append(item)
        out: dict[str, Any] = {
            "schema": self.schema,
            "table": self.table,
            "columns": columns,
            "primary_key": list(self.primary_key),
        }
        if self.implicit_versioning:
            out["implicit_versioning"] = True
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TableSchema:
        columns = [
            ColumnSchema(
                c["name"],
                c["type"],
                bool(c.get("unsigned", False)),
                tuple(c["enum"]) if "enum" in c else None,
                tuple(c["set"]) if "set" in c else None,
            )
            for c in data["columns"]
        ]
        key = (data["schema"], data["table"])
        return cls.build(key, columns, data["primary_key"], bool(data.get("implicit_versioning")))


# Type families: a TABLE_MAP column must be of its history column's family, else the history
# is stale for this table (a DDL it could not read) and the map keeps its @N names.
_FAMILIES: dict[str, frozenset[int]] = {
    "int": frozenset({T.TINY, T.SHORT, T.INT24, T.LONG, T.LONGLONG}),
    "decimal": frozenset({T.DECIMAL, T.NEWDECIMAL}),
    "float": frozenset({T.FLOAT, T.DOUBLE}),
    "string": frozenset({T.VARCHAR, T.VAR_STRING, T.STRING}),
    "blob": frozenset({T.TINY_BLOB, T.MEDIUM_BLOB, T.LONG_BLOB, T.BLOB}),
    "enum": frozenset({T.ENUM}),
    "set": frozenset({T.SET}),
    "temporal": frozenset({T.DATE, T.NEWDATE, T.TIME, T.TIME2, T.YEAR}),
    "datetime": frozenset({T.DATETIME, T.DATETIME2, T.TIMESTAMP, T.TIMESTAMP2}),
    "bit": frozenset({T.BIT}),
    "geometry": frozenset({T.GEOMETRY}),
}
FAMILY_OF: dict[str, str] = {
    **dict.fromkeys(("tinyint", "smallint", "mediumint", "int", "bigint"), "int"),
    "decimal": "decimal",
    "float": "float",
    "double": "float",
    **dict.fromkeys(("char", "varchar", "binary", "varbinary", "uuid", "inet4", "inet6"), "string"),
    **dict.fromkeys(
        (
            "tinytext",
            "text",
            "mediumtext",
            "longtext",
            "tinyblob",
            "blob",
            "mediumblob",
            "longblob",
        ),
        "blob",
    ),
    "enum": "enum",
    "set": "set",
    **dict.fromkeys(("date", "time", "year"), "temporal"),
    **dict.fromkeys(("datetime", "timestamp"), "datetime"),
    "bit": "bit",
    **dict.fromkeys(
        (
            "geometry",
            "point",
            "linestring",
            "polygon",
            "multipoint",
            "multilinestring",
            "multipolygon",
            "geometrycollection",
        ),
        "geometry",
    ),
}
NUMERIC_FAMILIES = frozenset({"int", "decimal", "float"})
_MAP_FAMILY = {code: name for name, codes in _FAMILIES.items() for code in codes}


def type_mismatch(table: TableSchema, table_map: TableMapEvent) -> str | None:
    for source, column in zip(table.columns, table_map.columns, strict=True):
        mine = FAMILY_OF.get(source.data_type)
        theirs = _MAP_FAMILY.get(column.type_code)
        if source.data_type == "json":  # MySQL's JSON type; MariaDB's JSON is a LONGTEXT
            mine = None if column.type_code == T.JSON else "blob"
        if mine is not None and theirs is not None and mine != theirs:
            return (
                f"column {column.index + 1} ({source.name}) is {column.type_name} here, "
                f"{source.data_type} in the schema history"
            )
    return None
