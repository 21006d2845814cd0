"""The schema registry scripts/services.sh starts (Apicurio Registry with its
Confluent-compatible API, in memory), driven by confluent-kafka's own schema-registry client
and Avro serdes, the way the Avro envelope (issue 35, item 1) will use them.

Oracles, from Avro's schema-resolution rules and the Confluent wire format, not from the
registry: a field added with a default is a backward-compatible second version; a field whose
type changes from int to string cannot be read by the new schema, so a subject set to BACKWARD
refuses it with HTTP 409 and keeps its two versions; a serialized value starts with magic byte
0 and the 4-byte big-endian id the registry gave the schema, and the record read back through
Kafka equals the one written.
"""

from __future__ import annotations

import json
import struct
import uuid
from typing import Any

import pytest
from confluent_kafka import Producer

from tests.helpers.kafka_helpers import consume_all, create_topics, delete_topics

pytestmark = pytest.mark.integration

# confluent-kafka's schema-registry extras (fastavro, httpx2, attrs, cachetools, certifi,
# authlib): the `test` extra of pyproject.toml installs them.
schema_registry = pytest.importorskip(
    "confluent_kafka.schema_registry", reason="the test extra (confluent-kafka[avro]) is missing"
)
avro = pytest.importorskip("confluent_kafka.schema_registry.avro")
serialization = pytest.importorskip("confluent_kafka.serialization")
registry_error = pytest.importorskip("confluent_kafka.schema_registry.error")

ROW_V1: dict[str, Any] = {
    "type": "record",
    "name": "Value",
    "namespace": "replicad.test",
    "fields": [{"name": "id", "type": "int"}, {"name": "qty", "type": "int"}],
}
ROW_V2 = {
    **ROW_V1,
    "fields": [*ROW_V1["fields"], {"name": "note", "type": "string", "default": ""}],
}
ROW_QTY_AS_STRING = {
    **ROW_V2,
    "fields": [
        {"name": "id", "type": "int"},
        {"name": "qty", "type": "string"},
        {"name": "note", "type": "string", "default": ""},
    ],
}


def _avro(schema: dict[str, Any]) -> Any:
    return schema_registry.Schema(json.dumps(schema), "AVRO")


@pytest.fixture
def client(registry: str) -> Any:
    return schema_registry.SchemaRegistryClient({"url": registry})


@pytest.fixture
def topic(kafka: str) -> Any:
    name = f"registry-test-{uuid.uuid4().hex[:10]}"
    create_topics(kafka, [name])
    yield name
    delete_topics(kafka, [name])


def test_backward_compatible_version_registered_incompatible_refused(
    client: Any, topic: str
) -> None:
    subject = f"{topic}-value"
    client.set_compatibility(subject, "BACKWARD")
    first = client.register_schema(subject, _avro(ROW_V1))
    second = client.register_schema(subject, _avro(ROW_V2))
    assert first != second
    assert client.get_latest_version(subject).version == 2

    with pytest.raises(registry_error.SchemaRegistryError) as refused:
        client.register_schema(subject, _avro(ROW_QTY_AS_STRING))
    assert refused.value.http_status_code == 409, refused.value
    assert "qty" in str(refused.value) or "/fields/1" in str(refused.value), refused.value
    assert client.get_versions(subject) == [1, 2]
    # Registering an existing schema again returns its id, no new version.
    assert client.register_schema(subject, _avro(ROW_V2)) == second


def test_avro_round_trip_through_kafka(client: Any, kafka: str, topic: str) -> None:
    subject = f"{topic}-value"
    serializer = avro.AvroSerializer(client, json.dumps(ROW_V2))
    context = serialization.SerializationContext(topic, serialization.MessageField.VALUE)
    row = {"id": 7, "qty": -3, "note": "héllo"}
    payload = serializer(row, context)
    assert payload is not None

    schema_id = client.get_latest_version(subject).schema_id  # topic-name strategy
    magic, wire_id = struct.unpack(">bI", payload[:5])
    assert (magic, wire_id) == (0, schema_id)

    producer = Producer({"bootstrap.servers": kafka})
    producer.produce(topic, value=payload)
    assert producer.flush(30) == 0

    records = consume_all(kafka, [topic])
    assert len(records) == 1
    deserializer = avro.AvroDeserializer(client)
    assert deserializer(records[0].value, context) == row
