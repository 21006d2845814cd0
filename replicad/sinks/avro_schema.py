"""Avro schemas of the change events, as a Debezium MySQL connector behind Confluent's
AvroConverter registers them: the Kafka Connect schemas replicad already builds for the
JSON envelope (`value_modes.ConnectSchemas`, each column by `debezium_values.connect_field`
with the configured Debezium options) converted the way the converter's AvroData does with
its defaults (`connect.meta.data=true`). Sans-IO: dicts in, dicts out; the registry and the
serializer are the caller's (`avro_registry`).

The conversion, per Connect schema:
- int8/int16 -> "int" with "connect.type" saying which; int32 -> "int", int64 -> "long",
  float -> "float", double -> "double", boolean, string and bytes as themselves; array ->
  Avro array; struct -> record named by the schema's name (namespace = all before the last
  dot), its fields in order;
- Kafka Connect's logical types keep their Avro logical type: Decimal -> bytes "decimal" with
  precision (`connect.decimal.precision`, 64 when absent, as AvroData) and scale; Date ->
  "date", Time -> "time-millis", Timestamp -> "timestamp-millis"; Debezium's semantic types
  (io.debezium.time.*, io.debezium.data.*) are plain types carrying their name;
- metadata as properties: "connect.name", "connect.version", "connect.doc",
  "connect.parameters" (strings);
- an optional schema is the union ["null", type] and its field defaults to null;
- a named record met again (before/after share the row record, two GEOMETRY columns share
  Geometry) is referred to by its full name, as Avro requires.

Names: a Connect name or column name that is no valid Avro name has every other character
replaced by "_" and a leading digit prefixed with "_", as Debezium's `avro` name adjustment
mode does (its default, `none`, would make the converter fail on such a name).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from replicad.binlog.column_types import TableDescription
from replicad.errors import ReplicadError
from replicad.exit_codes import EXIT_CONFIG
from replicad.sinks.debezium_values import DECIMAL, DECIMAL_PRECISION, DebeziumOptions
from replicad.sinks.value_modes import ConnectSchemas

AvroSchema = dict[str, Any] | list[Any] | str

_PRIMITIVES = {
    "int8": "int",
    "int16": "int",
    "int32": "int",
    "int64": "long",
    "float": "float",
    "double": "double",
    "boolean": "boolean",
    "string": "string",
    "bytes": "bytes",
}
_LOGICAL = {  # Kafka Connect logical type -> Avro logicalType
    "org.apache.kafka.connect.data.Date": "date",
    "org.apache.kafka.connect.data.Time": "time-millis",
    "org.apache.kafka.connect.data.Timestamp": "timestamp-millis",
}
_DEFAULT_DECIMAL_PRECISION = 64  # AvroData's when the schema carries none
_INVALID = re.compile(r"[^A-Za-z0-9_]")


class AvroSchemaError(ReplicadError, ValueError):
    """A Connect schema with no Avro form here (a map, an unknown type). The same table
    gives the same error after a restart, so it ends the run for an operator to act on."""

    exit_code = EXIT_CONFIG


def avro_name(name: str) -> str:
    """`name` as a valid Avro name (one component: no dots)."""
    adjusted = _INVALID.sub("_", name)
    return "_" + adjusted if not adjusted or adjusted[0].isdigit() else adjusted


def _full_name(connect_name: str) -> tuple[str, str | None]:
    """(name, namespace) of a dotted Connect name, each component adjusted."""
    *space, last = connect_name.split(".")
    namespace = ".".join(avro_name(part) for part in space) if space else None
    return avro_name(last), namespace


class _Converter:
    """One conversion: remembers the records it has defined, so that later uses name them."""

    def __init__(self) -> None:
        self._defined: set[str] = set()

    def schema(self, connect: Mapping[str, Any]) -> AvroSchema:
        base = self._required(connect)
        return ["null", base] if connect.get("optional") else base

    def _required(self, connect: Mapping[str, Any]) -> AvroSchema:
        kind = connect.get("type")
        if kind == "struct":
            return self._record(connect)
        if kind == "array":
            out: dict[str, Any] = {"type": "array", "items": self.schema(connect["items"])}
        elif kind in _PRIMITIVES:
            out = {"type": _PRIMITIVES[kind]}
            if kind in ("int8", "int16"):
                out["connect.type"] = kind
            out.update(_logical(connect))
        else:
            raise AvroSchemaError(f"no Avro form for the Connect type {kind!r}", type=str(kind))
        out.update(_metadata(connect))
        return out["type"] if len(out) == 1 else out

    def _record(self, connect: Mapping[str, Any]) -> AvroSchema:
        connect_name = connect.get("name")
        if not connect_name:
            raise AvroSchemaError("a Connect struct needs a name to become an Avro record")
        name, namespace = _full_name(connect_name)
        full = f"{namespace}.{name}" if namespace else name
        if full in self._defined:
            return full
        self._defined.add(full)
        record: dict[str, Any] = {"type": "record", "name": name}
        if namespace:
            record["namespace"] = namespace
        record["fields"] = [self._field(f) for f in connect.get("fields", [])]
        record.update(_metadata(connect))
        return record

    def _field(self, connect: Mapping[str, Any]) -> dict[str, Any]:
        field: dict[str, Any] = {"name": avro_name(connect["field"]), "type": self.schema(connect)}
        if connect.get("optional"):
            field["default"] = None
        return field


def _logical(connect: Mapping[str, Any]) -> dict[str, Any]:
    name = connect.get("name")
    if name == DECIMAL:
        parameters = connect.get("parameters") or {}
        precision = int(parameters.get(DECIMAL_PRECISION, _DEFAULT_DECIMAL_PRECISION))
        return {"logicalType": "decimal", "precision": precision, "scale": int(parameters["scale"])}
    if name in _LOGICAL:
        return {"logicalType": _LOGICAL[name]}
    return {}


def _metadata(connect: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if connect.get("doc") is not None:
        out["connect.doc"] = connect["doc"]
    if connect.get("version") is not None:
        out["connect.version"] = connect["version"]
    if connect.get("parameters"):
        out["connect.parameters"] = {k: str(v) for k, v in connect["parameters"].items()}
    if connect.get("name"):
        out["connect.name"] = connect["name"]
    return out


def avro_from_connect(connect: Mapping[str, Any]) -> AvroSchema:
    """The Avro schema AvroData makes of a Kafka Connect schema (in JsonConverter's JSON)."""
    return _Converter().schema(connect)


def value_schema(
    description: TableDescription, server_name: str, options: DebeziumOptions
) -> AvroSchema:
    """The Avro schema of the table's change events (the Envelope record), registered under
    `<topic>-value`."""
    db, table = description.db, description.table
    wrapped = ConnectSchemas(options).wrap_value(b"null", db, table, server_name, description)
    return avro_from_connect(_connect_schema(wrapped))


def key_schema(
    description: TableDescription,
    server_name: str,
    options: DebeziumOptions,
    names: Sequence[str] | None = None,
) -> AvroSchema | None:
    """The Avro schema of the table's message keys (the Key record of its primary key
    columns, or of `names`: the key the routing gives, e.g. `key_columns`), registered under
    `<topic>-key`; None for a key without columns (a table without a primary key, whose
    messages have no key)."""
    names = description.primary_key if names is None else tuple(names)
    if not names:
        return None
    db, table = description.db, description.table
    wrapped = ConnectSchemas(options).wrap_key(
        b"null", dict.fromkeys(names), db, table, server_name, description
    )
    return avro_from_connect(_connect_schema(wrapped))


def _connect_schema(wrapped: bytes) -> dict[str, Any]:
    """The schema half of a rendered {"schema", "payload"} (the form ConnectSchemas gives
    its schemas in; the payload here is a placeholder)."""
    schema: dict[str, Any] = orjson.loads(wrapped)["schema"]
    return schema
