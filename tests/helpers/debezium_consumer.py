"""A consumer written for Debezium, as its documentation tells one to read a table topic
with Kafka Connect's JSON converter (`schemas.enable=true`): every value typed from the
Connect schema that travels with it (type, logical `name`, `parameters`), nothing else
(no knowledge of the producer or of MySQL), and the change events folded by key: `c`, `r`,
`u` upsert `after`, `d` deletes, a tombstone (null value) is ignored, `t` clears the table.
Used on replicad's `debezium` topics (and on Debezium's own, to check the consumer)."""

from __future__ import annotations

import base64
import datetime as dt
import json
from decimal import Decimal
from typing import Any

import orjson

from tests.helpers.kafka_helpers import Record

_EPOCH = dt.datetime(1970, 1, 1)


def _bytes(value: str) -> bytes:
    return base64.b64decode(value)  # Connect's JSON form of BYTES


def _decimal(value: str, parameters: dict[str, str]) -> Decimal:
    unscaled = int.from_bytes(_bytes(value), "big", signed=True)
    return Decimal(unscaled).scaleb(-int(parameters["scale"]))


# Logical types (schema `name`) as Debezium's "Data type mappings" define them.
_LOGICAL: dict[str, Any] = {
    "org.apache.kafka.connect.data.Decimal": _decimal,
    "io.debezium.time.Date": lambda v, p: dt.date(1970, 1, 1) + dt.timedelta(days=v),
    "org.apache.kafka.connect.data.Date": lambda v, p: dt.date(1970, 1, 1) + dt.timedelta(days=v),
    "io.debezium.time.Timestamp": lambda v, p: _EPOCH + dt.timedelta(milliseconds=v),
    "org.apache.kafka.connect.data.Timestamp": lambda v, p: _EPOCH + dt.timedelta(milliseconds=v),
    "io.debezium.time.MicroTimestamp": lambda v, p: _EPOCH + dt.timedelta(microseconds=v),
    "io.debezium.time.ZonedTimestamp": lambda v, p: dt.datetime.fromisoformat(v),
    "io.debezium.time.MicroTime": lambda v, p: dt.timedelta(microseconds=v),
    "org.apache.kafka.connect.data.Time": lambda v, p: dt.timedelta(milliseconds=v),
    "io.debezium.time.Year": lambda v, p: v,
    "io.debezium.data.Bits": lambda v, p: int.from_bytes(_bytes(v), "little"),
    "io.debezium.data.Json": lambda v, p: json.loads(v),
    "io.debezium.data.Enum": lambda v, p: v,
    "io.debezium.data.EnumSet": lambda v, p: v,
}


def typed(field: dict[str, Any], value: Any) -> Any:
    """One row field's value from its Connect schema entry."""
    if value is None:
        return None
    name = field.get("name")
    if name is not None:
        return _LOGICAL[name](value, field.get("parameters") or {})
    kind = field["type"]
    if kind == "bytes":
        return _bytes(value)
    if kind == "boolean":
        return int(value)
    return value


def typed_row(row_schema: dict[str, Any], row: dict[str, Any]) -> dict[str, Any]:
    fields = {f["field"]: f for f in row_schema["fields"]}
    return {name: typed(fields[name], value) for name, value in row.items()}


def fold(records: list[Record]) -> dict[Any, dict[str, Any]]:
    """The table the change events describe: key (the key payload as JSON text) -> typed row."""
    table: dict[Any, dict[str, Any]] = {}
    columns: list[str] = []  # of the newest row schema seen
    for record in records:
        if record.value is None:
            continue  # a tombstone: log compaction's, the delete came before it
        message = orjson.loads(record.value)
        schema, payload = message["schema"], message["payload"]
        op = payload["op"]
        if op == "t":
            table.clear()
            continue
        key = orjson.loads(record.key)["payload"] if record.key is not None else None
        key_text = json.dumps(key, sort_keys=True)
        if op == "d":
            table.pop(key_text, None)
            continue
        after_schema = next(f for f in schema["fields"] if f["field"] == "after")
        columns = [f["field"] for f in after_schema["fields"]]
        table[key_text] = typed_row(after_schema, payload["after"])
    # A row last written before a column was added holds that column's default, as a sink
    # that evolves its table with the schema gives it (an added optional column: null).
    return {k: {c: row.get(c) for c in columns} for k, row in table.items()}
