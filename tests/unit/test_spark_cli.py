"""`replicad spark <job>` refuses a configuration it cannot use before Spark starts."""

from __future__ import annotations

import pytest

from replicad.cli import main

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
def test_a_job_without_what_it_reads_exits_78_naming_the_key(
    tmp_path, capsys, sinks, named
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("pipeline: p\n" + sinks)
    assert main(["spark", "changes", "-c", str(config)]) == 78
    assert named in capsys.readouterr().err
