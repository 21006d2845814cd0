"""`replicad run` does not import confluent-kafka's schema-registry client unless the
envelope is Avro: with its HTTP and JOSE libraries it was about 0.2 s of CPU and 16 MB of every
start (docs/performance.md), for a feature most pipelines do not use."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
REGISTRY = "confluent_kafka.schema_registry"
# The daemon's modules, then a Kafka sink built as `run` builds it (no broker is contacted).
SCRIPT = f"""
import sys
import replicad.cli, replicad.service.worker
from replicad.config import EnvelopeConfig, FiltersConfig, KafkaSinkConfig
from replicad.sinks.kafka import KafkaSink
from replicad.sinks.routing import ChangeFilter
from replicad.sinks.value_modes import ValueMode
avro = sys.argv[1] == "avro"
registry = {{"url": "http://127.0.0.1:1"}}
envelope = {{"format": "avro", "values": "debezium", "schema_registry": registry}}
values = ValueMode(EnvelopeConfig(**envelope) if avro else None)
print({REGISTRY!r} in sys.modules, end=" ")
config = KafkaSinkConfig(bootstrap_servers="127.0.0.1:1")
KafkaSink(config, "p", ChangeFilter(FiltersConfig()), values)
print({REGISTRY!r} in sys.modules)
"""


@pytest.mark.parametrize(
    ("envelope", "imported"), [("json", "False False"), ("avro", "False True")]
)
def test_the_registry_client_is_imported_only_for_avro(envelope: str, imported: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, envelope],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == imported
