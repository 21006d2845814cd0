"""`replicad spark <job>` refuses a configuration it cannot use before Spark starts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("sinks", "named"),
    [
        ("sinks: {stdout: {path: /dev/null}}\n", "sinks.kafka"),
        (
            "sinks: {kafka: {bootstrap_servers: '127.0.0.1:1', schema_topic: ''}}\n",
            "sinks.kafka.schema_topic",
        ),
    ],
)
def test_a_job_without_what_it_reads_exits_78_naming_the_key(tmp_path, sinks, named) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("pipeline: p\n" + sinks)
    # A process of its own: the command configures logging for the whole interpreter.
    result = subprocess.run(
        [sys.executable, "-m", "replicad.cli", "spark", "changes", "-c", str(config)],
        cwd=ROOT,
        capture_output=True,
        timeout=60,
    )
    assert result.returncode == 78, result.stderr
    assert named.encode() in result.stderr


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (
            "spark: {jdbc_driver_jar: /nonexistent/mariadb-java-client.jar}\n",
            "spark.jdbc_driver_jar",
        ),
        ("source: {password_env: REPLICAD_TEST_UNSET_PASSWORD}\n", "source.password_env"),
    ],
)
def test_verify_without_its_driver_or_password_exits_78_naming_the_key(
    tmp_path, extra, named
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("pipeline: p\nsinks: {kafka: {bootstrap_servers: '127.0.0.1:1'}}\n" + extra)
    result = subprocess.run(
        [sys.executable, "-m", "replicad.cli", "spark", "verify", "-c", str(config)],
        cwd=ROOT,
        capture_output=True,
        timeout=60,
    )
    assert result.returncode == 78, result.stderr
    assert named.encode() in result.stderr
