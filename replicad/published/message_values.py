"""A published message's key or value as the dict a reader works on, whichever form the daemon
wrote it in: JSON (the default), or Avro in Confluent's wire format (`envelope.format: avro`:
byte 0, the schema's 4-byte big-endian id in the registry, the Avro binary). One byte tells
them apart (a JSON text never starts with byte 0), so the JSON path costs one comparison.

Avro is read with confluent-kafka's `AvroDeserializer` (the writer schema fetched by id,
cached by the registry client) and converted to the JSON form (published/avro_json.py). The
registry is the reader's setting (`invalidate.schema_registry_url`,
`spark.schema_registry_url`), else the daemon's own (`envelope.schema_registry`, in the same
file); without one, an Avro message stops the reader with an error that names it.
Picklable (Spark ships it to its Python workers): the clients are made on first use in each
process.
"""

from __future__ import annotations

from typing import Any

import orjson

from replicad.config import Config
from replicad.errors import ConfigError, ReplicadError
from replicad.exit_codes import EXIT_CONFIG, EXIT_DATA_ERROR
from replicad.published.avro_json import Convert, json_form

MAGIC = 0  # Confluent's wire format: byte 0, then the schema id
_HEADER = 5
_NOT_FOUND = 404


class AvroWithoutRegistryError(ReplicadError):
    """An Avro message, and no registry configured to read it with: an operator sets one."""

    exit_code = EXIT_CONFIG


class AvroMessageError(ReplicadError):
    """An Avro message that cannot be read: its schema id unknown to the registry, its bytes
    not those of its schema. Stops the reader before it (exit 65), as a JSON text that does
    not parse."""

    exit_code = EXIT_DATA_ERROR


class RegistryUnavailableError(ReplicadError):
    """The registry did not answer (refused, timed out, a server error): transient."""


def reader_registry(own_url: str | None, config: Config) -> dict[str, Any] | None:
    """The registry settings of a reader: its own URL, else the daemon's
    `envelope.schema_registry` (with its basic auth), else None."""
    if own_url:
        return {"url": own_url}
    daemon = config.envelope.schema_registry
    return None if daemon is None else daemon.client_settings()


def is_avro(data: bytes | bytearray | memoryview) -> bool:
    return len(data) > 0 and data[0] == MAGIC


class MessageDecoder:
    """Keys and values of published messages, JSON or Avro, as JSON's dicts."""

    def __init__(self, registry: dict[str, Any] | None, setting: str) -> None:
        self.registry = registry  # SchemaRegistryClient's settings: url, basic auth, timeout
        self.registry_url = None if registry is None else registry.get("url")
        self.setting = setting  # the configuration key named by errors
        self._client: Any = None
        self._deserializer: Any = None
        self._converters: dict[int, Convert | None] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {"registry": self.registry, "setting": self.setting}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["registry"], state["setting"])  # type: ignore[misc]

    def value(
        self, data: bytes | bytearray, topic: str, partition: int | None, offset: int | None
    ) -> Any:
        """What `orjson.loads` gives for the JSON form of the message (orjson's own error for
        a JSON text that does not parse)."""
        if not is_avro(data):
            return orjson.loads(data)
        return self._avro(bytes(data), topic, partition, offset, key=False)

    def key_text(
        self, data: bytes | bytearray, topic: str, partition: int | None, offset: int | None
    ) -> str:
        """The key as text: a JSON key as written, an Avro key as compact JSON."""
        if not is_avro(data):
            return bytes(data).decode()
        key = self._avro(bytes(data), topic, partition, offset, key=True)
        return orjson.dumps(key).decode()

    def _avro(
        self, data: bytes, topic: str, partition: int | None, offset: int | None, key: bool
    ) -> Any:
        where = {"topic": topic, "partition": partition, "offset": offset}
        if not self.registry:
            raise AvroWithoutRegistryError(
                "an Avro message (Confluent wire format) and no schema registry to read it "
                "with: set the registry the daemon writes to",
                key=self.setting,
                **where,
            )
        if len(data) <= _HEADER:
            raise AvroMessageError("an Avro message shorter than its header", **where)
        schema_id = int.from_bytes(data[1:_HEADER], "big")
        try:
            decoded = self._deserialize(data, topic, key)
            convert = self._converter(schema_id)
            return decoded if convert is None else convert(decoded)
        except ReplicadError as exc:
            raise exc.with_context(schema_id=schema_id, **where) from None
        except (ValueError, TypeError, EOFError, IndexError, KeyError, AttributeError) as exc:
            raise AvroMessageError(
                f"an Avro message its schema cannot read: {exc}", schema_id=schema_id, **where
            ) from None

    def _deserialize(self, data: bytes, topic: str, key: bool) -> Any:
        from confluent_kafka.serialization import MessageField, SerializationContext

        field = MessageField.KEY if key else MessageField.VALUE
        deserializer = self._clients()[1]
        return self._registry_call(deserializer, data, SerializationContext(topic, field))

    def _converter(self, schema_id: int) -> Convert | None:
        if schema_id not in self._converters:
            schema = self._registry_call(self._clients()[0].get_schema, schema_id)
            try:
                self._converters[schema_id] = json_form(orjson.loads(schema.schema_str))
            except (ValueError, TypeError, KeyError) as exc:
                raise AvroMessageError(f"a writer schema that is not Avro: {exc}") from None
        return self._converters[schema_id]

    def _registry_call(self, call: Any, *args: Any) -> Any:
        from confluent_kafka.schema_registry.error import SchemaRegistryError
        from confluent_kafka.serialization import SerializationError

        try:
            return call(*args)
        except SchemaRegistryError as exc:
            if exc.http_status_code == _NOT_FOUND:
                raise AvroMessageError(f"the registry has no such schema: {exc}") from None
            raise RegistryUnavailableError(
                f"the schema registry failed: {exc}", url=self.registry_url
            ) from None
        except SerializationError as exc:
            raise AvroMessageError(f"an Avro message that does not decode: {exc}") from None
        except OSError as exc:
            raise RegistryUnavailableError(
                f"the schema registry did not answer: {exc}", url=self.registry_url
            ) from None
        except Exception as exc:
            if _is_transport_error(exc):
                raise RegistryUnavailableError(
                    f"the schema registry did not answer: {exc}", url=self.registry_url
                ) from None
            raise

    def _clients(self) -> tuple[Any, Any]:
        if self._client is None:
            try:
                from confluent_kafka.schema_registry import SchemaRegistryClient
                from confluent_kafka.schema_registry.avro import AvroDeserializer
            except ImportError as exc:
                raise ConfigError(
                    "reading Avro messages needs confluent-kafka's schema-registry and Avro "
                    f"support, not installed: pip install 'confluent-kafka[avro,schemaregistry]' "
                    f"({exc})",
                    key=self.setting,
                ) from None
            self._client = SchemaRegistryClient(dict(self.registry or {}))
            self._deserializer = AvroDeserializer(self._client)
        return self._client, self._deserializer


def _is_transport_error(exc: Exception) -> bool:
    """The registry client's HTTP library's connection and timeout errors (httpx, vendored
    under another name by some confluent-kafka versions), without importing it."""
    return any(cls.__name__ in ("TransportError", "TimeoutException") for cls in type(exc).__mro__)
