"""Configuration: defaults, YAML, environment overrides, errors that name key and value,
secrets that never leak."""

from __future__ import annotations

from pathlib import Path

import pytest

from replicad.config import load_config
from replicad.errors import ConfigError

pytestmark = pytest.mark.unit
EXAMPLE = Path(__file__).resolve().parents[2] / "config.example.yaml"


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return path


def test_defaults_without_a_file() -> None:
    config = load_config(None, {})
    assert (config.source.host, config.source.port, config.source.start) == (
        "127.0.0.1",
        3306,
        "latest",
    )
    assert config.sinks.stdout is None and config.log.format == "console"


def test_example_file_is_valid_and_documents_every_section() -> None:
    config = load_config(EXAMPLE, {"REPLICAD_SOURCE_PASSWORD": "x"})
    text = EXAMPLE.read_text()
    for key in (
        "pipeline",
        "source",
        "tls",
        "start",
        "heartbeat_s",
        "reconnect",
        "sinks",
        "coordination",
        "schema",
        "log",
    ):
        assert f"{key}:" in text
    assert config.source.resolve_password({"REPLICAD_SOURCE_PASSWORD": "x"}) == "x"


def test_environment_overrides_nested_keys_with_yaml_scalars(tmp_path: Path) -> None:
    path = _write(tmp_path, "source:\n  host: db1\n  port: 3306\n")
    env = {
        "REPLICAD_SOURCE__PORT": "3307",
        "REPLICAD_SOURCE__START__GTID": "0-1-5",
        "REPLICAD_PURE_PYTHON": "1",
        "REPLICAD_LOG__FORMAT": "json",
    }
    config = load_config(path, env)
    assert config.source.host == "db1" and config.source.port == 3307
    assert config.source.start.gtid == "0-1-5"
    assert config.log.format == "json"


@pytest.mark.parametrize(
    ("text", "key", "fragment"),
    [
        ("source:\n  prot: 1\n", "source.prot", "unknown key `prot` (did you mean `port`?)"),
        ("source:\n  port: 99999\n", "source.port", "less than or equal"),
        ("source:\n  tls: {mode: verify-ca}\n", "source.tls", "needs tls.ca"),
        ("log: {level: loud}\n", "log.level", "'debug'"),
        ("pipeline: 'has space'\n", "pipeline", "pattern"),
        (
            "sinks: {kafka: {bootstrap_servers: k, exactly_once: true, producer_processes: 2}}\n",
            "sinks.kafka",
            "needs at-least-once",
        ),
        (
            "sinks: {kafka: {bootstrap_servers: k, producer: "
            "{delivery.report.only.error: 'true'}}}\n",
            "sinks.kafka",
            "delivery.report.only.error needs exactly_once",
        ),
        (
            "sinks: {kafka: {bootstrap_servers: k, producer_processes: 0}}\n",
            "sinks.kafka.producer_processes",
            "greater than or equal",
        ),
    ],
)
def test_errors_name_key_and_value(tmp_path: Path, text: str, key: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(_write(tmp_path, text), {})
    assert info.value.context["key"] == key
    assert fragment in str(info.value)


def test_secrets_never_appear_in_errors_or_reprs(tmp_path: Path) -> None:
    path = _write(tmp_path, "source: {password: hunter2, password_env: X}\n")
    with pytest.raises(ConfigError) as info:
        load_config(path, {})
    assert "hunter2" not in str(info.value)
    config = load_config(_write(tmp_path, "source: {password: hunter2}\n"), {})
    assert "hunter2" not in repr(config) and "hunter2" not in str(config)
    assert config.source.resolve_password() == "hunter2"


def test_password_sources(tmp_path: Path) -> None:
    secret = tmp_path / "pw"
    secret.write_text("from-file\n")
    config = load_config(_write(tmp_path, f"source: {{password_file: {secret}}}\n"), {})
    assert config.source.resolve_password() == "from-file"
    config = load_config(_write(tmp_path, "source: {password_env: PW}\n"), {})
    with pytest.raises(ConfigError) as info:
        config.source.resolve_password({})
    assert info.value.context["key"] == "source.password_env"


def test_unreadable_and_malformed_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.yaml", {})
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(_write(tmp_path, "source: [\n"), {})
    with pytest.raises(ConfigError, match="mapping"):
        load_config(_write(tmp_path, "- 1\n"), {})


def test_example_kafka_block_parses_and_names_every_option(tmp_path: Path) -> None:
    """The commented-out Kafka block of the example, uncommented, is a valid config whose
    values are the defaults, and it mentions every Kafka option."""
    from replicad.config import KafkaSinkConfig

    lines = EXAMPLE.read_text().splitlines()
    start = lines.index(
        "  # kafka:                              # example: publish to Kafka "
        "(then stdout is off unless set)"
    )
    block = ["sinks:"]
    for line in lines[start:]:
        if not line.startswith("  #"):
            break
        block.append("  " + line[len("  # ") :])
    config = load_config(_write(tmp_path, "\n".join(block) + "\n"), {})
    kafka = config.sinks.kafka
    assert kafka is not None and kafka.bootstrap_servers == "127.0.0.1:9092"
    assert kafka == KafkaSinkConfig(bootstrap_servers="127.0.0.1:9092")
    text = "\n".join(block)
    for option in KafkaSinkConfig.model_fields:
        assert f"{option}:" in text, option


def test_example_zookeeper_block_parses_and_names_every_option(tmp_path: Path) -> None:
    """The commented-out ZooKeeper block, uncommented, is a valid config whose values are the
    defaults, and it mentions every option."""
    from replicad.config import ZookeeperConfig

    lines = EXAMPLE.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("  # zookeeper:"))
    block = ["coordination:"]
    for line in lines[start:]:
        if not line.startswith("  #"):
            break
        block.append("  " + line[len("  # ") :])
    config = load_config(_write(tmp_path, "\n".join(block) + "\n"), {})
    zookeeper = config.coordination.zookeeper
    assert zookeeper == ZookeeperConfig(hosts="127.0.0.1:2181")
    text = "\n".join(block)
    for option in ZookeeperConfig.model_fields:
        assert f"{option}:" in text, option


def test_example_relay_block_names_every_option() -> None:
    """The relay section of the example is valid as written and names every option."""
    from replicad.config import RelayConfig, RelayRetentionConfig

    config = load_config(EXAMPLE, {"REPLICAD_SOURCE_PASSWORD": "x"})
    assert config.relay == RelayConfig()  # documented defaults are the real defaults
    text = EXAMPLE.read_text()
    block = text[text.index("\nrelay:") : text.index("\nschema:")]
    for name in [*RelayConfig.model_fields, *RelayRetentionConfig.model_fields]:
        assert f" {name}:" in block, name
