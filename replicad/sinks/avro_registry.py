"""Keys and values of the Kafka sink in Avro (`envelope.format: avro`): Confluent's wire
format (magic byte 0, the 4-byte schema id, Avro binary) written by confluent-kafka's
`AvroSerializer`, the schemas (`avro_schema`) registered with `SchemaRegistryClient` under
the topic-name strategy (`<topic>-key`, `<topic>-value`).

The registry is asked once per table version (and key columns): the serializers are kept
per (topic, schema version), so a message costs the conversion and fastavro's write only.
A table version the registry refuses as incompatible (HTTP 409; Apicurio answers it with
error_code 0, so the status decides) stops the run with exit 78, naming the table, the
subject and the columns whose fields changed; the message is not produced, so the position
stays before it. A registry that cannot be reached or fails otherwise is a transient error
(exit 75: a restart resumes from the stored position and registers again).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import structlog
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer

# The HTTP library the registry client uses (httpx2, else httpx), for its transport errors.
from confluent_kafka.schema_registry.common._httpx_compat import httpx
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.serialization import MessageField, SerializationContext

from replicad.binlog.changes import RowChange, TableChange
from replicad.binlog.column_types import TableDescription
from replicad.config import SchemaRegistryConfig
from replicad.sinks.avro_schema import AvroSchema, key_schema, value_schema
from replicad.sinks.avro_values import Row, StructConverter, avro_envelope, row_converter
from replicad.sinks.base import SinkError, SinkUnavailableError
from replicad.sinks.debezium_values import DebeziumOptions
from replicad.sinks.envelope import change_envelope, truncate_envelope

log = structlog.get_logger("replicad.sinks.avro")

_CONFLICT = 409  # the registry's answer to an incompatible schema
_NO_ROW = StructConverter([])


class AvroSchemaRefusedError(SinkError):
    """The registry refused a table's new schema as incompatible with the subject's earlier
    versions (exit 78: the same change is refused again after a restart; an operator changes
    the subject's compatibility or the table)."""


class SchemaRegistryUnavailableError(SinkUnavailableError):
    """The registry did not answer, or failed (exit 75: a restart tries again)."""


class _Serializer:
    """One registered schema of one subject, and how to write messages with it."""

    __slots__ = ("context", "row", "write")

    def __init__(
        self,
        client: SchemaRegistryClient,
        schema: AvroSchema,
        topic: str,
        field: MessageField,
        row: StructConverter,
    ) -> None:
        self.context = SerializationContext(topic, field)
        self.write = AvroSerializer(client, json.dumps(schema))
        self.row = row


class AvroEncoder:
    """The Avro keys and values of one Kafka sink."""

    def __init__(
        self, config: SchemaRegistryConfig, server_name: str, options: DebeziumOptions
    ) -> None:
        self._client = SchemaRegistryClient(config.client_settings())
        self._name = server_name
        self._options = options
        self._values: dict[tuple[str, str | None], _Serializer] = {}
        self._keys: dict[tuple[str, str | None, tuple[str, ...]], _Serializer] = {}
        self._latest: dict[str, _Serializer] = {}  # per topic: for a TRUNCATE, which has no row

    def value(
        self,
        topic: str,
        change: RowChange,
        op: str,
        before: Row,
        after: Row,
        ts_ms: int,
        transaction: dict[str, Any] | None = None,
    ) -> bytes:
        """The Avro value of one row message (the arguments of `EnvelopeWriter.value`)."""
        schema = change.schema
        if schema is None:
            raise SinkError(
                "envelope.format: avro needs the table's columns (schema history)",
                table=f"{change.db}.{change.table}",
            )
        serializer = self._values.get((topic, schema.version))
        if serializer is None:
            serializer = self._value_serializer(topic, schema)
        self._latest[topic] = serializer
        payload = change_envelope(change, op, before, after, self._name, ts_ms, transaction)
        return self._write(serializer, avro_envelope(payload, serializer.row))

    def key(self, topic: str, change: RowChange, key: Mapping[str, Any] | None) -> bytes | None:
        """The Avro key of a row message (None: no key)."""
        if key is None:
            return None
        schema = change.schema
        if schema is None:
            raise SinkError("envelope.format: avro needs the table's columns (schema history)")
        names = tuple(key)
        serializer = self._keys.get((topic, schema.version, names))
        if serializer is None:
            serializer = self._key_serializer(topic, schema, names)
        return self._write(serializer, serializer.row(key))

    def truncate(self, topic: str, change: TableChange, ts_ms: int) -> bytes | None:
        """The op "t" message of a TRUNCATE, in the envelope schema of the table's last row
        message in this process, else the subject's latest version; None when the topic has
        no Avro schema yet (no row of the table was ever published: nothing to clear)."""
        serializer = self._latest.get(topic) or self._registered_value(topic)
        if serializer is None:
            log.warning("avro_truncate_without_schema", topic=topic, table=change.table)
            return None
        payload = truncate_envelope(change, self._name, ts_ms)
        return self._write(serializer, avro_envelope(payload, serializer.row))

    def _write(self, serializer: _Serializer, record: Mapping[str, Any]) -> bytes:
        try:
            data = serializer.write(record, serializer.context)
        except (TypeError, ValueError) as exc:
            # A value the schema cannot hold: e.g. a NOT NULL column missing from a partial
            # row image (binlog_row_image MINIMAL). The same row fails again after a restart.
            raise SinkError(
                f"a message does not fit its Avro schema: {exc}",
                topic=serializer.context.topic,
            ) from None
        except SchemaRegistryError as exc:
            raise _unavailable(exc, serializer.context.topic) from None
        assert data is not None  # None only for a None record
        return data

    # ------------------------------------------------------------------ registration

    def _value_serializer(self, topic: str, description: TableDescription) -> _Serializer:
        schema = value_schema(description, self._name, self._options)
        self._register(f"{topic}-value", schema, description)
        row = row_converter(description, self._options)
        serializer = _Serializer(self._client, schema, topic, MessageField.VALUE, row)
        self._values[topic, description.version] = serializer
        return serializer

    def _key_serializer(
        self, topic: str, description: TableDescription, names: tuple[str, ...]
    ) -> _Serializer:
        schema = key_schema(description, self._name, self._options, names)
        assert schema is not None  # names is not empty
        self._register(f"{topic}-key", schema, description)
        row = row_converter(description, self._options)
        serializer = _Serializer(self._client, schema, topic, MessageField.KEY, row)
        self._keys[topic, description.version, names] = serializer
        return serializer

    def _register(self, subject: str, schema: AvroSchema, description: TableDescription) -> None:
        table = f"{description.db}.{description.table}"
        try:
            schema_id = self._client.register_schema(subject, Schema(json.dumps(schema), "AVRO"))
        except SchemaRegistryError as exc:
            if exc.http_status_code != _CONFLICT:
                raise _unavailable(exc, subject) from None
            changed = self._changed_columns(subject, schema)
            raise AvroSchemaRefusedError(
                f"the schema registry refused the new Avro schema of {table} as incompatible "
                f"with the subject's earlier versions; changed column(s): {changed}; the "
                "position stays before the change (relax the subject's compatibility, or "
                "start a new topic)",
                table=table,
                subject=subject,
                columns=changed,
                registry=exc.error_message,
            ) from None
        except (httpx.HTTPError, OSError) as exc:
            raise _unavailable(exc, subject) from None
        log.info("avro_schema_registered", subject=subject, id=schema_id, table=table)

    def _registered_value(self, topic: str) -> _Serializer | None:
        """A serializer for the latest version of `<topic>-value`, if there is one."""
        subject = f"{topic}-value"
        try:
            latest = self._client.get_latest_version(subject)
        except SchemaRegistryError as exc:
            if exc.http_status_code == 404:
                return None
            raise _unavailable(exc, subject) from None
        except (httpx.HTTPError, OSError) as exc:
            raise _unavailable(exc, subject) from None
        schema = json.loads(latest.schema.schema_str or "null")
        # A TRUNCATE's envelope has no row images: the row converter is never used.
        serializer = _Serializer(self._client, schema, topic, MessageField.VALUE, _NO_ROW)
        self._latest[topic] = serializer
        return serializer

    def _changed_columns(self, subject: str, schema: AvroSchema) -> str:
        """The columns whose fields differ between the subject's latest version and
        `schema`, e.g. "qty (int -> string)"; "unknown" if the registry cannot say."""
        try:
            latest = self._client.get_latest_version(subject)
            old = json.loads(latest.schema.schema_str or "null")
        except (SchemaRegistryError, httpx.HTTPError, OSError, ValueError):
            return "unknown"
        return changed_fields(old, schema) or "none (the registry named no field)"


def changed_fields(old: Any, new: Any) -> str:
    """The row fields added, dropped or retyped from `old` to `new` (envelope or key
    schemas), as text."""
    before, after = _row_fields(old), _row_fields(new)
    parts = []
    for name in [*before, *(n for n in after if n not in before)]:
        if name not in after:
            parts.append(f"{name} (dropped)")
        elif name not in before:
            parts.append(f"{name} (added)")
        elif before[name] != after[name]:
            parts.append(f"{name} ({_type_text(before[name])} -> {_type_text(after[name])})")
    return ", ".join(parts)


def _row_fields(schema: Any) -> dict[str, Any]:
    """name -> Avro type of the row record's fields (an envelope's `before` record, or a key
    record's own fields)."""
    if not isinstance(schema, dict):
        return {}
    fields = {f["name"]: f["type"] for f in schema.get("fields", [])}
    before = fields.get("before")
    if isinstance(before, list):
        record = next((t for t in before if isinstance(t, dict)), None)
        return _row_fields(record) if record is not None else {}
    return fields


def _type_text(avro_type: Any) -> str:
    """A short name of an Avro type: "string", "long", "int?" (optional)."""
    if isinstance(avro_type, list):
        inner = [t for t in avro_type if t != "null"]
        return (_type_text(inner[0]) if inner else "null") + "?"
    if isinstance(avro_type, dict):
        return str(avro_type.get("connect.name") or avro_type.get("type"))
    return str(avro_type)


def _unavailable(exc: Exception, subject: str) -> SchemaRegistryUnavailableError:
    return SchemaRegistryUnavailableError(
        f"the schema registry failed: {exc}; a restart resumes from the stored position",
        subject=subject,
    )
