"""Operator rough edges (issue 19, item 5): librdkafka's lines as JSON events, --version,
misspelt environment overrides, offline position syntax, source.start forms, --timeout,
which store `status` read, and the Kafka SASL password from a variable or a file.

The commands run in child processes: in-process they would leave structlog writing to
pytest's capture stream (tests/unit/test_spark_cli.py says why)."""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from replicad.cli import build_parser, main
from replicad.config import (
    ENV_NOT_OVERRIDES,
    ENV_TEST_PREFIX,
    _env_path,
    load_config,
    unknown_env_names,
)
from replicad.errors import ConfigError

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]
REPLICAD = [sys.executable, "-m", "replicad.cli"]
SECRET = "kafka-sasl-s3cret-91f2"


def closed_port() -> int:
    """A port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def clean_env(**extra: str) -> dict[str, str]:
    """The test process's environment without REPLICAD_ overrides a CI job may export."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("REPLICAD_")}
    return {**env, "PYTHONPATH": str(ROOT), **extra}


def run(
    args: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*REPLICAD, *args],
        cwd=cwd,
        env=env or clean_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def write_config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "replicad.yaml"
    path.write_text(text)
    return path


# ------------------------------------------------------------- 1. librdkafka's lines


CLIENTS = r"""
import sys, time
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient
from replicad.service.logging import configure_logging
from replicad.published.kafka_clients import kafka_client, serve_logs
configure_logging("json", "info")
servers = sys.argv[1]
producer = kafka_client(Producer, {"bootstrap.servers": servers})
admin = kafka_client(AdminClient, {"bootstrap.servers": servers})
consumer = kafka_client(Consumer, {"bootstrap.servers": servers, "group.id": "edges"})
try:
    admin.list_topics(timeout=1)
except Exception:
    pass
time.sleep(0.5)
producer.poll(0.2)
serve_logs(admin)
consumer.poll(0.2)
consumer.close()
"""


def test_librdkafka_lines_of_every_client_kind_are_json_events(tmp_path: Path) -> None:
    port = closed_port()
    out = subprocess.run(
        [sys.executable, "-c", CLIENTS, f"127.0.0.1:{port}"],
        cwd=tmp_path,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    records = [json.loads(line) for line in out.stderr.splitlines()]  # raw %3|... fails here
    fails = [r for r in records if r["event"] == "librdkafka_log" and r["facility"] == "FAIL"]
    kinds = {re.sub(r"-\d+$", "", r["client"]) for r in fails}
    assert kinds == {"rdkafka#producer", "rdkafka#consumer"}, records  # admin is a producer
    assert len({r["client"] for r in fails}) == 3, fails  # all three clients spoke
    assert all(r["level"] == "error" and str(port) in r["message"] for r in fails), fails


def test_run_with_kafka_away_writes_only_json_lines(tmp_path: Path) -> None:
    """`replicad run`, log.format json, Kafka and the primary both away: librdkafka's FAIL
    lines are JSON events among the daemon's own."""
    config = write_config(
        tmp_path,
        f"source: {{port: {closed_port()}, password: x}}\n"
        f"sinks: {{kafka: {{bootstrap_servers: '127.0.0.1:{closed_port()}', "
        "exactly_once: true}}\n"  # the positions topic is looked up before the primary
        f"coordination: {{local: {{path: {tmp_path / 'pos.json'}}}}}\n"
        "log: {format: json}\nshutdown: {timeout_s: 5}\n",
    )
    err = tmp_path / "stderr"
    with err.open("w") as f:
        daemon = subprocess.Popen(
            [*REPLICAD, "run", "-c", str(config)],
            cwd=tmp_path,
            env=clean_env(),
            stderr=f,
            stdout=subprocess.DEVNULL,
        )
    try:
        deadline = time.monotonic() + 30
        while "librdkafka_log" not in err.read_text() and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(30)
    lines = err.read_text().splitlines()
    records = []
    for line in lines:
        try:
            records.append(json.loads(line))
        except ValueError:
            pytest.fail(f"not a JSON line on stderr: {line!r}")
    assert any(r["event"] == "librdkafka_log" and r["facility"] == "FAIL" for r in records), records


# ------------------------------------------------------------- 2. --version


def test_version_is_the_installed_distributions(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"replicad {importlib.metadata.version('replicad')}\n"


# ------------------------------------------------------------- 3. environment overrides


def test_misspelt_section_is_refused_naming_the_variable_and_the_section() -> None:
    with pytest.raises(ConfigError) as refused:
        load_config(None, {"REPLICAD_SOURCES__HOST": "db1"})
    text = str(refused.value)
    assert "REPLICAD_SOURCES__HOST" in text and "REPLICAD_SOURCE__" in text, text


def test_unknown_nested_key_error_names_the_variable() -> None:
    with pytest.raises(ConfigError) as refused:
        load_config(None, {"REPLICAD_SOURCE__HOTS": "db1"})
    text = str(refused.value)
    assert "source.hots" in text and "env=REPLICAD_SOURCE__HOTS" in text, text


def test_non_overrides_are_warned_about_unless_replicad_reads_them() -> None:
    config = load_config(
        None, {"REPLICAD_SOURCE__PASSWORD_ENV": "REPLICAD_DB_SECRET", "REPLICAD_PURE_PYTHON": "1"}
    )
    environ = {
        "REPLICAD_SOURCE_HOST": "db1",  # single underscore: not an override, not read
        "REPLICAD_DB_SECRET": "x",  # named by source.password_env
        "REPLICAD_PURE_PYTHON": "1",
        "REPLICAD_HA_ITERATIONS": "3",
        f"{ENV_TEST_PREFIX}ANYTHING": "1",
        "REPLICAD_SOURCE__PASSWORD_ENV": "REPLICAD_DB_SECRET",
        "OTHER_VARIABLE": "1",
    }
    assert unknown_env_names(config, environ=environ) == ["REPLICAD_SOURCE_HOST"]


def test_every_replicad_variable_the_tests_and_ci_set_is_allowed() -> None:
    """A knob the suite or CI exports reaches the daemons the tests start: it must be an
    override or allow-listed, never refused (nor warned about)."""
    names: set[str] = set()
    for folder in ("tests", "scripts", ".ci", "deploy", "bench"):
        for path in (ROOT / folder).rglob("*"):
            if not path.is_file() or path.name == Path(__file__).name:
                continue
            if path.suffix == ".py":  # quoted: a variable's name, not a Python constant
                pattern = r"[\"']REPLICAD_[A-Z0-9_]*[A-Z0-9][\"']"
            elif path.suffix in ("", ".sh", ".yml", ".yaml", ".service", ".env"):
                pattern = r"\bREPLICAD_[A-Z0-9_]*[A-Z0-9]\b"
            else:
                continue
            names |= {m.strip("\"'") for m in re.findall(pattern, path.read_text())}
    # Passwords a config names (password_env; unknown_env_names reads the config for them);
    # REPLICAD_SECTION__KEY: how comments write the pattern, not a variable.
    names = {n for n in names if not n.endswith("_PASSWORD") and "_SECTION__" not in n}
    assert names, "the scan found nothing"
    for name in sorted(names):
        if _env_path(name) is None:  # raises for a misspelt section
            assert name in ENV_NOT_OVERRIDES or name.startswith(ENV_TEST_PREFIX), name


def test_cli_warns_about_and_refuses_environment_names(tmp_path: Path) -> None:
    warned = run(
        ["status"], tmp_path, clean_env(REPLICAD_LOG__FORMAT="json", REPLICAD_SOURCE_HOST="db1")
    )
    assert warned.returncode == 0, warned.stderr
    events = [json.loads(line) for line in warned.stderr.splitlines()]
    assert [e["variable"] for e in events if e["event"] == "env_variable_ignored"] == [
        "REPLICAD_SOURCE_HOST"
    ], events
    refused = run(["status"], tmp_path, clean_env(REPLICAD_SOURCES__HOST="db1"))
    assert refused.returncode == 78 and "REPLICAD_SOURCES__HOST" in refused.stderr


# ------------------------------------------------------------- 4. position syntax offline


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("garbage", "not earliest, latest, FILE:POS or a GTID"),
        ("mysql-bin.000001:abc", "FILE:POS takes a decimal offset"),
        ("0-1-x", "malformed MariaDB GTID"),
        ("3E11FA47-71CA-11E1-9E33-C80AA9429562:0-x", "GTID"),
    ],
)
def test_position_set_checks_the_syntax_before_connecting(
    tmp_path: Path, value: str, words: str
) -> None:
    position = tmp_path / "pos.json"
    config = write_config(
        tmp_path,
        f"source: {{port: {closed_port()}, password: x, connect_timeout_s: 1}}\n"
        f"coordination: {{local: {{path: {position}}}}}\n",
    )
    out = run(["position", "set", value, "-c", str(config)], tmp_path)
    assert out.returncode == 64, (out.returncode, out.stderr)
    assert words in out.stderr and value in out.stderr, out.stderr
    assert not position.exists()


def test_position_set_checks_the_syntax_before_zookeeper(tmp_path: Path) -> None:
    """With ZooKeeper (away here) and the source's password variable unset, a malformed
    value is still a usage error, not a connection timeout (75) or a config error (78)."""
    config = write_config(
        tmp_path,
        "source: {password_env: REPLICAD_TEST_UNSET_PASSWORD}\n"
        f"coordination: {{zookeeper: {{hosts: '127.0.0.1:{closed_port()}', "
        "connect_timeout_s: 1}}\n",
    )
    out = run(["position", "set", "0-1-x", "-c", str(config)], tmp_path)
    assert out.returncode == 64 and "0-1-x" in out.stderr, (out.returncode, out.stderr)


def test_position_set_with_good_syntax_does_connect(tmp_path: Path) -> None:
    """The other side of the test above: a well-formed value goes to the primary (which is
    away here: 75), so the 64 above came from the offline check."""
    config = write_config(
        tmp_path,
        f"source: {{port: {closed_port()}, password: x, connect_timeout_s: 1}}\n"
        f"coordination: {{local: {{path: {tmp_path / 'pos.json'}}}}}\n",
    )
    out = run(["position", "set", "0-1-5", "-c", str(config)], tmp_path)
    assert out.returncode == 75, (out.returncode, out.stderr)


# ------------------------------------------------------------- 5. source.start forms


@pytest.mark.parametrize(
    ("start", "words"),
    [
        ("{}", "got neither"),
        ("{file: mysql-bin.000001, gtid: '0-1-5'}", "got both"),
        ("{gtid: '0-1-5', pos: 120}", "pos goes with file"),
    ],
)
def test_start_takes_exactly_one_form(tmp_path: Path, start: str, words: str) -> None:
    with pytest.raises(ConfigError) as refused:
        load_config(write_config(tmp_path, f"source: {{start: {start}}}\n"), {})
    text = str(refused.value)
    assert words in text and "key=source.start" in text, text


@pytest.mark.parametrize(
    ("start", "expected"),
    [
        ("latest", "latest"),
        ("earliest", "earliest"),
        ("{gtid: '0-1-5'}", ("0-1-5", None, 4)),
        ("{file: mysql-bin.000001}", (None, "mysql-bin.000001", 4)),
        ("{file: mysql-bin.000001, pos: 120}", (None, "mysql-bin.000001", 120)),
    ],
)
def test_valid_start_forms(tmp_path: Path, start: str, expected: Any) -> None:
    got = load_config(write_config(tmp_path, f"source: {{start: {start}}}\n"), {}).source.start
    assert (got if isinstance(got, str) else (got.gtid, got.file, got.pos)) == expected


# ------------------------------------------------------------- 6. --timeout


@pytest.mark.parametrize("timeout", ["-5", "0", "nan", "soon"])
def test_position_timeout_must_be_positive(
    timeout: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["position", "set", "latest", "--timeout", timeout])
    assert exited.value.code == 64
    assert "--timeout" in capsys.readouterr().err


def test_position_timeout_accepts_seconds() -> None:
    args = build_parser().parse_args(["position", "reset", "--timeout", "2.5"])
    assert args.timeout == 2.5


# ------------------------------------------------------------- 7. which store status read


def test_status_says_which_store_and_config_it_read(tmp_path: Path) -> None:
    here = run(["status"], tmp_path)
    assert here.returncode == 0, here.stderr
    default = tmp_path / "replicad-position.json"
    assert f"file {default}, absent" in here.stdout, here.stdout
    assert "built-in defaults (no -c)" in here.stdout, here.stdout
    (state,) = json.loads(run(["status", "--json"], tmp_path).stdout)["pipelines"]
    assert (state["store_path"], state["store_exists"], state["config"]) == (
        str(default),
        False,
        None,
    )
    position = tmp_path / "elsewhere" / "pos.json"
    config = write_config(tmp_path, f"coordination: {{local: {{path: {position}}}}}\n")
    (state,) = json.loads(run(["status", "--json", "-c", str(config)], tmp_path).stdout)[
        "pipelines"
    ]
    assert (state["store_path"], state["config"]) == (str(position), str(config))


# ------------------------------------------------------------- 8. Kafka SASL password


def kafka_config(tmp_path: Path, sasl: str, producer: str = "{}") -> Path:
    return write_config(
        tmp_path,
        f"source: {{port: {closed_port()}, password: x, connect_timeout_s: 1}}\n"
        f"sinks: {{kafka: {{bootstrap_servers: '127.0.0.1:{closed_port()}', "
        f"producer: {producer}, sasl: {sasl}}}}}\n",
    )


def test_sasl_password_from_a_variable_or_a_file_reaches_every_client(tmp_path: Path) -> None:
    from replicad.published.kafka_clients import shared_settings
    from replicad.sinks.kafka import producer_settings

    env = {"KAFKA_PASSWORD": SECRET}
    config = load_config(
        kafka_config(
            tmp_path,
            "{mechanism: SCRAM-SHA-512, username: rep, password_env: KAFKA_PASSWORD}",
            "{security.protocol: SASL_PLAINTEXT}",
        ),
        env,
    )
    kafka = config.sinks.kafka
    assert kafka is not None
    os.environ.update(env)  # the settings read the process's environment, as the daemon does
    try:
        for settings in (producer_settings(kafka, "p"), shared_settings(kafka)):
            assert settings["sasl.password"] == SECRET
            assert settings["sasl.username"] == "rep"
            assert settings["sasl.mechanism"] == "SCRAM-SHA-512"
            assert settings["security.protocol"] == "SASL_PLAINTEXT"
    finally:
        del os.environ["KAFKA_PASSWORD"]
    secret_file = tmp_path / "kafka.password"
    secret_file.write_text(SECRET + "\n")
    from_file = load_config(kafka_config(tmp_path, f"{{password_file: {secret_file}}}"), {})
    assert from_file.sinks.kafka is not None
    assert shared_settings(from_file.sinks.kafka)["sasl.password"] == SECRET
    assert SECRET not in repr(from_file) and SECRET not in repr(config)


def test_sasl_password_given_twice_is_refused_without_showing_it(tmp_path: Path) -> None:
    path = kafka_config(tmp_path, "{password_env: KAFKA_PASSWORD}", f"{{sasl.password: {SECRET}}}")
    with pytest.raises(ConfigError) as refused:
        load_config(path, {"KAFKA_PASSWORD": SECRET})
    text = str(refused.value)
    assert "both give sasl.password" in text and SECRET not in text, text
    with pytest.raises(ConfigError) as unset:
        load_config(kafka_config(tmp_path, "{username: rep}"), {})
    assert "needs one of password_env" in str(unset.value)


PROBE = r"""
import sys
from replicad.config import load_config
from replicad.errors import ReplicadError
from replicad.service.logging import configure_logging
from replicad.sinks.kafka_admin import probe_kafka
configure_logging("json", "debug")
kafka = load_config(sys.argv[1]).sinks.kafka
try:
    probe_kafka(kafka, timeout_s=2)
except ReplicadError as exc:
    print(f"refused: {exc}")
"""


def test_check_and_errors_never_show_the_sasl_password(tmp_path: Path) -> None:
    config = kafka_config(tmp_path, "{username: rep, password_env: KAFKA_PASSWORD}")
    env = clean_env(KAFKA_PASSWORD=SECRET)
    # `replicad check`'s Kafka probe, its error and every librdkafka line (at debug)
    probe = subprocess.run(
        [sys.executable, "-c", PROBE, str(config)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "refused: cannot reach Kafka" in probe.stdout, (probe.stdout, probe.stderr)
    assert "librdkafka_log" in probe.stderr
    assert SECRET not in probe.stdout + probe.stderr
    checked = run(["check", "-c", str(config)], tmp_path, env)
    assert checked.returncode == 1, (checked.stdout, checked.stderr)  # nothing is reachable
    assert SECRET not in checked.stdout + checked.stderr
    unset = run(["run", "-c", str(config)], tmp_path)  # the variable is not set
    assert unset.returncode == 78, unset.stderr
    assert "sinks.kafka.sasl.password_env" in unset.stderr, unset.stderr
