"""`replicad check` against the running services (issue 36): every dependency the config
names is checked in one run, a dependency down is a FAIL with a remedy that does not stop
the others' checks, `--json` is one document, and the exit status is 1 exactly when
something FAILs.

The command runs as a child process. "Down" is a port nothing listens on (bound to port 0,
then closed). The primary is the shared MariaDB, through a database and a user of the
test's own (dropped after), so that the signal table's grants can be chosen."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pymysql
import pytest

from replicad.config import SnapshotSignalConfig
from replicad.snapshot.watermarks import signal_ddl
from tests.helpers.databases import fresh_database
from tests.helpers.mariadb import MARIADB_PORT, connect_root

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
KAFKA = f"127.0.0.1:{os.environ.get('REPLICAD_KAFKA_PORT', '9092')}"
ZOOKEEPER = f"127.0.0.1:{os.environ.get('REPLICAD_ZK_PORT', '2181')}"
REDIS_PORT = int(os.environ.get("REPLICAD_REDIS_PORT", "6390"))
MQTT_PORT = int(os.environ.get("REPLICAD_MQTT_PORT", "1890"))
PASSWORD = "check-pw"
EVERY_TOPIC = {
    "connection",
    "server",
    "binlog_format",
    "binlog_row_image",
    "binlog_row_metadata",
    "gtid",
    "binlog_checksum",
    "privileges",
    "oldest_position",
    "retention",
    "signal_table",
    "server_id",
    "kafka",
    "zookeeper",
    "position",
    "mqtt",
    "redis",
    "metrics",
}


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def check(tmp_path: Path, config: str, *extra: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "check.yaml"
    path.write_text(config)
    clean = {k: v for k, v in os.environ.items() if not k.startswith("REPLICAD_")}
    return subprocess.run(
        [sys.executable, "-m", "replicad.cli", "check", "-c", str(path), *extra],
        cwd=tmp_path,
        env={**clean, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )


def levels(stdout: str) -> dict[str, str]:
    """topic -> level of each finding line of the text report."""
    found = {}
    for line in stdout.splitlines():
        level, _, rest = line.partition("  ")
        if level in ("PASS", "WARN", "FAIL"):
            found[rest.split()[0]] = level
    return found


@contextmanager
def source_user(conn: pymysql.connections.Connection, signal_grants: str) -> Iterator[str]:
    """A replication user of the test's own, with `signal_grants` on the signal table of the
    connection's database (which the caller created)."""
    user = f"chk_{uuid.uuid4().hex[:10]}"
    with conn.cursor() as cur:
        cur.execute("SELECT DATABASE()")
        (database,) = cur.fetchone()
        cur.execute(f"CREATE USER '{user}'@'127.0.0.1' IDENTIFIED BY '{PASSWORD}'")
        cur.execute(
            f"GRANT SELECT, REPLICATION SLAVE, BINLOG MONITOR ON *.* TO '{user}'@'127.0.0.1'"
        )
        cur.execute(
            f"GRANT {signal_grants} ON `{database}`.`replicad_signal` TO '{user}'@'127.0.0.1'"
        )
    try:
        yield user
    finally:
        with conn.cursor() as cur:
            cur.execute(f"DROP USER IF EXISTS '{user}'@'127.0.0.1'")


@pytest.fixture
def signal_db(mariadb: dict[str, object]) -> Iterator[tuple[pymysql.connections.Connection, str]]:
    """A fresh database holding the signal table (docs/snapshots.md's DDL)."""
    with fresh_database(connect_root) as (conn, database):
        with conn.cursor() as cur:
            cur.execute(signal_ddl(SnapshotSignalConfig(database=database)))
        yield conn, database


def source_yaml(user: str, database: str, port: int = MARIADB_PORT) -> str:
    return (
        f"source: {{port: {port}, user: {user}, password: {PASSWORD}, server_id: 7171, "
        "connect_timeout_s: 3}\n"
        f"snapshot: {{signal: {{database: {database}}}}}\n"
    )


def test_every_dependency_up_passes_and_exits_0(tmp_path: Path, signal_db) -> None:
    conn, database = signal_db
    with source_user(conn, "INSERT, UPDATE, DELETE") as user:
        config = source_yaml(user, database) + (
            f"sinks:\n  kafka: {{bootstrap_servers: '{KAFKA}'}}\n"
            f"  mqtt: {{port: {MQTT_PORT}}}\n"
            f"coordination: {{zookeeper: {{hosts: '{ZOOKEEPER}', "
            f"root: /replicad-check-{uuid.uuid4().hex[:8]}, connect_timeout_s: 5}}}}\n"
            f"invalidate: {{redis: {{url: 'redis://127.0.0.1:{REDIS_PORT}/0'}}, "
            "rules: [{table: '.*', keys: ['k:{id}']}]}\n"
            f"metrics: {{listen: '127.0.0.1:{closed_port()}'}}\n"
        )
        text = check(tmp_path, config)
        as_json = check(tmp_path, config, "--json")
    assert text.returncode == 0, text.stdout + text.stderr
    found = levels(text.stdout)
    assert set(found) == EVERY_TOPIC, text.stdout
    assert set(found.values()) == {"PASS"}, text.stdout
    assert "fix:" not in text.stdout
    assert text.stdout.splitlines()[-1] == "ready to replicate"

    assert as_json.returncode == 0, as_json.stdout + as_json.stderr
    document = json.loads(as_json.stdout)  # the whole of standard output: one document
    assert document["ok"] is True
    assert {f["topic"] for f in document["findings"]} == EVERY_TOPIC
    assert {(f["level"], f["remedy"]) for f in document["findings"]} == {("PASS", None)}


def test_the_primary_kafka_and_zookeeper_down_all_fail_in_one_run(tmp_path: Path) -> None:
    primary, kafka, zookeeper = closed_port(), closed_port(), closed_port()
    config = (
        f"source: {{port: {primary}, password: repl, connect_timeout_s: 3}}\n"
        f"sinks: {{kafka: {{bootstrap_servers: '127.0.0.1:{kafka}'}}}}\n"
        f"coordination: {{zookeeper: {{hosts: '127.0.0.1:{zookeeper}', connect_timeout_s: 2}}}}\n"
    )
    started = time.monotonic()
    text = check(tmp_path, config)
    elapsed = time.monotonic() - started
    assert text.returncode == 1, text.stdout + text.stderr
    assert levels(text.stdout) == {"connection": "FAIL", "kafka": "FAIL", "zookeeper": "FAIL"}
    lines = text.stdout.splitlines()
    for topic, port, remedy in [
        ("connection", primary, "fix: start the primary or fix source.host and source.port"),
        ("kafka", kafka, "fix: start Kafka or fix sinks.kafka.bootstrap_servers"),
        ("zookeeper", zookeeper, "fix: start ZooKeeper or fix coordination.zookeeper.hosts"),
    ]:
        (at,) = [i for i, line in enumerate(lines) if line.startswith(f"FAIL  {topic} ")]
        assert f"127.0.0.1:{port}" in lines[at], lines[at]
        assert lines[at + 1].strip().startswith(remedy), lines[at + 1]
    assert lines[-1] == "replication would stop: fix the FAIL lines above"
    assert "Traceback" not in text.stderr
    assert elapsed < 60  # the checks run side by side, each within its own timeout

    as_json = check(tmp_path, config, "--json")
    assert as_json.returncode == 1, as_json.stderr
    document = json.loads(as_json.stdout)
    assert document["ok"] is False
    assert [(f["level"], f["topic"]) for f in document["findings"]] == [
        ("FAIL", "connection"),
        ("FAIL", "kafka"),
        ("FAIL", "zookeeper"),
    ]
    assert all(f["remedy"] for f in document["findings"])


def test_a_signal_table_without_insert_fails_naming_the_grant(tmp_path: Path, signal_db) -> None:
    conn, database = signal_db
    with source_user(conn, "UPDATE, DELETE") as user:
        text = check(tmp_path, source_yaml(user, database))
        as_json = check(tmp_path, source_yaml(user, database), "--json")
    assert text.returncode == 1, text.stdout + text.stderr
    found = levels(text.stdout)
    assert found.pop("signal_table") == "FAIL", text.stdout
    assert set(found.values()) == {"PASS"}, text.stdout  # only the signal table is wrong
    grant = (
        f"GRANT INSERT, UPDATE, DELETE ON `{database}`.`replicad_signal` TO '{user}'@'127.0.0.1'"
    )
    lines = text.stdout.splitlines()
    (at,) = [i for i, line in enumerate(lines) if line.startswith("FAIL  signal_table ")]
    assert "INSERT" in lines[at] and "denied" in lines[at], lines[at]
    assert lines[at + 1].strip() == f"fix: {grant}"
    (finding,) = [f for f in json.loads(as_json.stdout)["findings"] if f["level"] == "FAIL"]
    assert finding["topic"] == "signal_table" and finding["remedy"] == grant


def test_a_metrics_port_in_use_warns_and_exits_0(tmp_path: Path, signal_db) -> None:
    conn, database = signal_db
    with socket.socket() as taken, source_user(conn, "INSERT, UPDATE, DELETE") as user:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        listen = f"127.0.0.1:{taken.getsockname()[1]}"
        text = check(tmp_path, source_yaml(user, database) + f"metrics: {{listen: '{listen}'}}\n")
    assert text.returncode == 0, text.stdout + text.stderr
    assert levels(text.stdout)["metrics"] == "WARN"
    assert f"cannot listen on {listen}" in text.stdout
    assert "fix: stop what listens there or change metrics.listen" in text.stdout
    assert text.stdout.splitlines()[-1] == "ready to replicate (see WARN lines)"
