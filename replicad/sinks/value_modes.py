"""The value mode of every output (`envelope` config section): `exact` leaves decoded values
to the envelope's JSON mapping; `debezium` converts each row image column by column with
Debezium's encodings (`debezium_values.py`) before anything else sees it, so keys, filters and
masks work on the converted values as Debezium's do. With `schemas_enable`, keys and values
are wrapped in Kafka Connect JSON's {"schema", "payload"}; the schemas (`ConnectSchemas`) are
rendered once per table version.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import orjson

from replicad.binlog.changes import RowChange
from replicad.binlog.column_types import TableDescription
from replicad.config import EnvelopeConfig
from replicad.sinks.debezium_values import (
    DebeziumOptions,
    connect_field,
    snapshot_encoder,
    value_encoder,
)

Encoders = dict[str, Callable[[Any], Any]]


class ValueMode:
    def __init__(self, config: EnvelopeConfig | None = None) -> None:
        config = config or EnvelopeConfig()
        self.debezium = config.values == "debezium"
        self.options = (
            DebeziumOptions(
                config.decimal_handling_mode,
                config.time_precision_mode,
                config.binary_handling_mode,
                config.bigint_unsigned_handling_mode,
                config.enable_time_adjuster,
            )
            if self.debezium
            else None
        )
        self.connect = (
            ConnectSchemas(self.options) if config.schemas_enable and self.options else None
        )
        # envelope.format: avro (the Kafka sink's keys and values; the config requires
        # `debezium` values for it): the registry, else None for JSON.
        self.registry = config.schema_registry if config.format == "avro" else None
        self._encoders: dict[tuple[str, str, str, bool], Encoders] = {}
        self._last: tuple[TableDescription | None, bool, Encoders] = (None, False, {})

    def convert(self, change: RowChange) -> RowChange:
        """The change with its images in this mode's values (the change itself in `exact`).
        `debezium` also takes Debezium's source.ts_ms and ts_us from the transaction's commit
        time in microseconds where the binlog has it (MySQL 8.0.1+), not the event header's
        seconds."""
        schema = change.schema
        if self.options is None or schema is None:
            return change
        read = change.op == "r"
        last = self._last
        encoders = (
            last[2] if schema is last[0] and read is last[1] else self._encoders_of(schema, read)
        )
        commit_us = change.commit_us
        return dataclasses.replace(
            change,
            before=_encode(change.before, encoders),
            after=_encode(change.after, encoders),
            json_columns=frozenset(),  # JSON documents are text now
            ts_ms=change.ts_ms if commit_us is None else commit_us // 1000,
            ts_us=commit_us,
            # Debezium's initial snapshot reads have server_id 0 (no binlog event names a
            # server); its incremental ones, the stream's (they go out at a binlog position).
            server_id=0 if read and change.snapshot != "incremental" else change.server_id,
        )

    def _encoders_of(self, schema: TableDescription, read: bool) -> Encoders:
        """The column encoders of a table version; `read`: a snapshot read's (Debezium's
        snapshot reads MySQL JSON as MySQL prints it, its binlog reader compact)."""
        key = (schema.db, schema.table, schema.version, read)
        encoders = self._encoders.get(key)
        if encoders is None:
            assert self.options is not None
            encoder = snapshot_encoder if read else value_encoder
            encoders = self._encoders[key] = {
                c.name: encoder(c.type, self.options, nullable=c.nullable) for c in schema.columns
            }
        self._last = (schema, read, encoders)
        return encoders


def _encode(row: dict[str, Any] | None, encoders: Encoders) -> dict[str, Any] | None:
    if row is None:
        return None
    return {
        name: encoders[name](value) if name in encoders else value for name, value in row.items()
    }


# Debezium 3's MySQL `source` block schema, with replicad's fields after its own.
_SOURCE_FIELDS = [
    ("version", "string", False),
    ("connector", "string", False),
    ("name", "string", False),
    ("ts_ms", "int64", False),
    ("ts_us", "int64", True),
    ("ts_ns", "int64", True),
    ("snapshot", "string", True),
    ("db", "string", False),
    ("sequence", "string", True),
    ("table", "string", True),
    ("server_id", "int64", False),
    ("gtid", "string", True),
    ("file", "string", True),
    ("pos", "int64", True),
    ("row", "int32", False),
    ("thread", "int64", True),
    ("query", "string", True),
    ("schema_version", "string", True),
]
_TRANSACTION = {
    "type": "struct",
    "fields": [
        {"type": "string", "optional": False, "field": "id"},
        {"type": "int64", "optional": False, "field": "total_order"},
        {"type": "int64", "optional": False, "field": "data_collection_order"},
    ],
    "optional": True,
    "name": "event.block",
    "version": 1,
    "field": "transaction",
}


class ConnectSchemas:
    """Kafka Connect JSON schemas of the envelope and the key, per table version."""

    def __init__(self, options: DebeziumOptions) -> None:
        self.options = options
        self._values: dict[tuple[str, str, str | None], bytes] = {}
        self._keys: dict[tuple[str, str, str | None, tuple[str, ...]], bytes] = {}
        # The last row schema of each table: a TRUNCATE (which names none) gets its row
        # fields, as Debezium's op "t" message has its table's envelope schema.
        self._latest: dict[tuple[str, str], TableDescription] = {}

    def wrap_value(
        self, body: bytes, db: str, table: str, name: str, schema: TableDescription | None
    ) -> bytes:
        if schema is None:
            schema = self._latest.get((db, table))
        else:
            self._latest[db, table] = schema
        key = (db, table, None if schema is None else schema.version)
        rendered = self._values.get(key)
        if rendered is None:
            rendered = self._values[key] = orjson.dumps(self._envelope(db, table, name, schema))
        return b'{"schema":%b,"payload":%b}' % (rendered, body)

    def wrap_key(
        self,
        body: bytes,
        key: dict[str, Any],
        db: str,
        table: str,
        name: str,
        schema: TableDescription | None,
    ) -> bytes:
        names = tuple(key)
        cache = (db, table, None if schema is None else schema.version, names)
        rendered = self._keys.get(cache)
        if rendered is None:
            columns = {c.name: c for c in schema.columns} if schema is not None else {}
            fields = [
                connect_field(n, columns[n].type, False, self.options)
                if n in columns
                else {"type": "string", "optional": False, "field": n}
                for n in names
            ]
            struct = {
                "type": "struct",
                "fields": fields,
                "optional": False,
                "name": f"{name}.{db}.{table}.Key",
            }
            rendered = self._keys[cache] = orjson.dumps(struct)
        return b'{"schema":%b,"payload":%b}' % (rendered, body)

    def _envelope(
        self, db: str, table: str, name: str, schema: TableDescription | None
    ) -> dict[str, Any]:
        row_fields = (
            []
            if schema is None
            else [connect_field(c.name, c.type, c.nullable, self.options) for c in schema.columns]
        )

        def row(field: str) -> dict[str, Any]:
            return {
                "type": "struct",
                "fields": row_fields,
                "optional": True,
                "name": f"{name}.{db}.{table}.Value",
                "field": field,
            }

        source = {
            "type": "struct",
            "fields": [{"type": t, "optional": o, "field": f} for f, t, o in _SOURCE_FIELDS],
            "optional": False,
            "name": "replicad.Source",
            "field": "source",
        }
        return {
            "type": "struct",
            "fields": [
                row("before"),
                row("after"),
                source,
                {"type": "string", "optional": False, "field": "op"},
                {"type": "int64", "optional": True, "field": "ts_ms"},
                {"type": "int64", "optional": True, "field": "ts_us"},
                {"type": "int64", "optional": True, "field": "ts_ns"},
                _TRANSACTION,
            ],
            "optional": False,
            "name": f"{name}.{db}.{table}.Envelope",
            "version": 1,
        }
