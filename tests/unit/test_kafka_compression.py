"""`sinks.kafka.compression` reaches librdkafka as compression.type; `producer:` still wins."""

from __future__ import annotations

import pytest

from replicad.config import KafkaSinkConfig
from replicad.sinks.kafka import producer_settings


def test_the_default_compression_is_lz4() -> None:
    settings = producer_settings(KafkaSinkConfig(bootstrap_servers="x"), "p")
    assert settings["compression.type"] == "lz4"


@pytest.mark.parametrize("codec", ["none", "zstd", "gzip", "snappy"])
def test_the_configured_compression_reaches_the_producer(codec: str) -> None:
    config = KafkaSinkConfig(bootstrap_servers="x", compression=codec)
    assert producer_settings(config, "p")["compression.type"] == codec


def test_producer_settings_override_the_compression() -> None:
    config = KafkaSinkConfig(bootstrap_servers="x", producer={"compression.type": "zstd"})
    assert producer_settings(config, "p")["compression.type"] == "zstd"


def test_an_unknown_codec_is_a_config_error() -> None:
    with pytest.raises(ValueError, match="compression"):
        KafkaSinkConfig(bootstrap_servers="x", compression="brotli")
