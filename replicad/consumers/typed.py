"""Typing change messages from the schema topic alone: a consumer reads `{prefix}.schema`
into a `SchemaCatalog` and turns each message's row images into Python values with the types
MySQL has (what PyMySQL returns for a `SELECT`), by the version the message names
(`source.schema_version`). For the `exact` value mode (docs/consumers.md has the mapping).

Nothing here talks to Kafka: feed `add()` the schema topic's values however they are read.
"""

from __future__ import annotations

import base64
import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import orjson

from replicad.errors import ReplicadError


class SchemaUnknownError(ReplicadError):
    """A message names a schema version the catalog has not read (the schema topic was not
    read far enough, or was written by another pipeline)."""


Convert = Callable[[Any], Any]


def time_value(text: str) -> dt.timedelta:
    """A TIME as the exact mode writes it (`[-]HH:MM:SS[.ffffff]`, beyond 24 h too)."""
    negative = text.startswith("-")
    hours, minutes, seconds = text.lstrip("-").split(":")
    whole, _, fraction = seconds.partition(".")
    value = dt.timedelta(
        hours=int(hours),
        minutes=int(minutes),
        seconds=int(whole),
        microseconds=int(fraction.ljust(6, "0")) if fraction else 0,
    )
    return -value if negative else value


def _date(text: str) -> dt.date | str:
    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        return text  # a zero or invalid date stays the text MySQL prints


def _datetime(text: str) -> dt.datetime | str:
    try:
        return dt.datetime.fromisoformat(text)
    except ValueError:
        return text


def _timestamp(text: str) -> dt.datetime | str:
    """TIMESTAMP is written in UTC with a 'Z': an aware datetime."""
    try:
        return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return text


def _bytes(text: str) -> bytes:
    return base64.b64decode(text)


def _geometry(value: dict[str, Any]) -> tuple[int, bytes]:
    return value["srid"], base64.b64decode(value["wkb"])


def _same(value: Any) -> Any:
    return value


_BY_TYPE: dict[str, Convert] = {
    "decimal": lambda v: Decimal(v),
    "float": float,
    "double": float,
    "date": _date,
    "datetime": _datetime,
    "timestamp": _timestamp,
    "time": time_value,
    "binary": _bytes,
    "varbinary": _bytes,
    "tinyblob": _bytes,
    "blob": _bytes,
    "mediumblob": _bytes,
    "longblob": _bytes,
    "geometry": _geometry,
}


@dataclass(frozen=True, slots=True)
class TypedSchema:
    """One version of a table's row image: its columns (as the schema topic describes them)
    and a converter per column."""

    db: str
    table: str
    version: str
    columns: tuple[dict[str, Any], ...]
    primary_key: tuple[str, ...]
    _converters: dict[str, Convert]

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> TypedSchema:
        columns = tuple(record["columns"])
        converters = {c["name"]: _BY_TYPE.get(c["type"], _same) for c in columns}
        return cls(
            record["db"],
            record["table"],
            record["version"],
            columns,
            tuple(record["primary_key"]),
            converters,
        )

    @property
    def column_names(self) -> list[str]:
        return [c["name"] for c in self.columns]

    def decode(self, row: dict[str, Any] | None) -> dict[str, Any] | None:
        """A row image with each value in its column's Python type (NULL stays None)."""
        if row is None:
            return None
        converters = self._converters
        return {
            name: None if value is None else converters.get(name, _same)(value)
            for name, value in row.items()
        }


class SchemaCatalog:
    """Every table schema version read from a schema topic, and its schema-change events in
    the order read."""

    def __init__(self) -> None:
        self._schemas: dict[tuple[str, str, str], TypedSchema] = {}
        self.ddl: list[dict[str, Any]] = []

    def add(self, value: bytes | dict[str, Any] | None) -> None:
        """One value of the schema topic (a null value, a compaction tombstone, is ignored)."""
        if value is None:
            return
        record = orjson.loads(value) if isinstance(value, (bytes, bytearray)) else value
        if record.get("type") == "table":
            schema = TypedSchema.from_record(record)
            self._schemas[(schema.db, schema.table, schema.version)] = schema
        elif record.get("type") == "ddl":
            self.ddl.append(record)

    def schema(self, db: str, table: str, version: str) -> TypedSchema:
        found = self._schemas.get((db, table, version))
        if found is None:
            raise SchemaUnknownError(
                "no such table schema version in the schema topic",
                table=f"{db}.{table}",
                version=version,
            )
        return found

    def for_message(self, envelope: dict[str, Any]) -> TypedSchema:
        """The schema a change message names (its `source.schema_version`)."""
        source = envelope["source"]
        return self.schema(source["db"], source["table"], source["schema_version"])

    def decode(self, envelope: dict[str, Any]) -> tuple[dict[str, Any] | None, ...]:
        """A change message's (before, after), typed."""
        schema = self.for_message(envelope)
        return schema.decode(envelope.get("before")), schema.decode(envelope.get("after"))
