"""envelope.format (docs/consumers.md, "Avro"): `json` by default; `avro` needs Debezium
values and a schema registry, and refuses Connect JSON schemas beside it, when the
configuration is read (exit 78)."""

from __future__ import annotations

from pathlib import Path

import pytest

from replicad.config import load_config
from replicad.errors import ConfigError
from replicad.exit_codes import EXIT_CONFIG

pytestmark = pytest.mark.unit

REGISTRY = "schema_registry: {url: 'http://127.0.0.1:8081'}"


def _load(tmp_path: Path, envelope: str, environ: dict[str, str] | None = None):
    path = tmp_path / "c.yaml"
    path.write_text(f"envelope: {{{envelope}}}\n")
    return load_config(path, environ or {})


def test_json_is_the_default(tmp_path: Path) -> None:
    config = _load(tmp_path, "values: debezium")
    assert (config.envelope.format, config.envelope.schema_registry) == ("json", None)


def test_avro_with_debezium_values_and_a_registry(tmp_path: Path) -> None:
    config = _load(tmp_path, f"values: debezium, format: avro, {REGISTRY}")
    registry = config.envelope.schema_registry
    assert registry is not None
    assert registry.client_settings() == {"url": "http://127.0.0.1:8081", "timeout": 10.0}


@pytest.mark.parametrize(
    ("envelope", "says"),
    [
        (f"format: avro, {REGISTRY}", "needs envelope.values: debezium"),
        ("values: debezium, format: avro", "needs envelope.schema_registry.url"),
        (f"values: debezium, schemas_enable: true, format: avro, {REGISTRY}", "schemas_enable"),
        ("values: debezium, format: protobuf", "format"),
    ],
)
def test_avro_without_what_it_needs_is_refused(tmp_path: Path, envelope: str, says: str) -> None:
    with pytest.raises(ConfigError) as err:
        _load(tmp_path, envelope)
    assert says in str(err.value)
    assert err.value.exit_code == EXIT_CONFIG


def test_basic_auth_from_a_variable(tmp_path: Path) -> None:
    registry = "schema_registry: {url: 'https://r', username: u, password_env: REG_PASS}"
    config = _load(tmp_path, f"values: debezium, format: avro, {registry}", {"REG_PASS": "p:w"})
    assert config.envelope.schema_registry is not None
    settings = config.envelope.schema_registry.client_settings({"REG_PASS": "p:w"})
    assert settings["basic.auth.user.info"] == "u:p:w"
    with pytest.raises(ConfigError, match="username and a password"):
        _load(tmp_path, "values: debezium, format: avro, schema_registry: {url: r, username: u}")
