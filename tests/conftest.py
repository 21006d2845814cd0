"""Shared fixtures: the MariaDB started by scripts/services.sh and per-test databases."""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pymysql
import pytest

from replicad.config import SparkConfig
from tests.helpers.daemon_process import kill_leftovers
from tests.helpers.databases import fresh_database
from tests.helpers.kafka_helpers import PrivateKafka
from tests.helpers.kafka_run import TABLES_SQL
from tests.helpers.mariadb import MARIADB_PORT, connect_root

ROOT = Path(__file__).resolve().parent.parent
KAFKA_PORT = int(os.environ.get("REPLICAD_KAFKA_PORT", "9092"))
ZK_PORT = int(os.environ.get("REPLICAD_ZK_PORT", "2181"))
REGISTRY_PORT = int(os.environ.get("REPLICAD_REGISTRY_PORT", "8091"))
S3_PORT = int(os.environ.get("REPLICAD_S3_PORT", "9010"))


@pytest.fixture(scope="session")
def mariadb() -> dict[str, object]:
    """Make sure the private MariaDB is up (idempotent) and describe it."""
    subprocess.run(["bash", str(ROOT / "scripts/services.sh"), "up", "mariadb"], check=True)
    conn = connect_root()
    with conn.cursor() as cur:
        cur.execute("SELECT @@log_bin_basename, @@binlog_format, @@binlog_row_metadata")
        basename, fmt, metadata = cur.fetchone()
    conn.close()
    assert fmt == "ROW" and metadata == "FULL", (fmt, metadata)
    return {"port": MARIADB_PORT, "binlog_dir": Path(basename).parent}


@pytest.fixture(scope="session")
def kafka() -> str:
    """Make sure the shared Apache Kafka broker is up; its bootstrap string."""
    subprocess.run(["bash", str(ROOT / "scripts/services.sh"), "up", "kafka"], check=True)
    return f"127.0.0.1:{KAFKA_PORT}"


@pytest.fixture(scope="session")
def registry() -> str:
    """Make sure the schema registry (Apicurio, in memory) is up; the base URL of its
    Confluent-compatible API, for confluent-kafka's SchemaRegistryClient."""
    subprocess.run(["bash", str(ROOT / "scripts/services.sh"), "up", "registry"], check=True)
    return f"http://127.0.0.1:{REGISTRY_PORT}/apis/ccompat/v7"


@pytest.fixture(scope="session")
def s3() -> str:
    """Make sure the S3 server (moto, in memory) is up; its endpoint URL. Any access key is
    accepted; every bucket must be created first (PUT /<bucket>)."""
    subprocess.run(["bash", str(ROOT / "scripts/services.sh"), "up", "s3"], check=True)
    return f"http://127.0.0.1:{S3_PORT}"


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One SparkSession (local[2]) for the whole test session: starting one costs ~10 s. It
    loads what the jobs load: Delta Lake, Spark's Kafka source, and MariaDB Connector/J
    (scripts/services.sh installs it) for verify's JDBC reads."""
    from replicad.spark.session import build_session, lake_conf
    from tests.helpers.spark_jars import spark_jars_dir

    conf = lake_conf(SparkConfig(lake_jars=spark_jars_dir()))
    jar = SparkConfig().jdbc_driver_jar
    if Path(jar).is_file():
        conf["spark.jars"] += f",{jar}"
    session = build_session(
        "local[2]",
        "replicad-tests",
        local_dir=str(tmp_path_factory.mktemp("spark-local")),
        conf=conf,
    )
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture
def private_kafka(kafka: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateKafka]:
    """A single-node Apache Kafka of the test's own, started, for tests that stop, kill or
    restart the broker; stopped after the test."""
    broker = PrivateKafka(tmp_path_factory.mktemp("private-kafka"))
    broker.start()
    try:
        yield broker
    finally:
        broker.kill()


@pytest.fixture(scope="session")
def zookeeper() -> str:
    """Make sure the standalone ZooKeeper is up; its connect string."""
    subprocess.run(["bash", str(ROOT / "scripts/services.sh"), "up", "zookeeper"], check=True)
    return f"127.0.0.1:{ZK_PORT}"


@pytest.fixture
def zk_root(zookeeper: str) -> Iterator[str]:
    """A ZooKeeper root of the test's own (its pipelines' nodes), deleted afterwards."""
    from kazoo.client import KazooClient

    root = f"/replicad-test-{uuid.uuid4().hex[:10]}"
    yield root
    from kazoo.exceptions import NotEmptyError

    client = KazooClient(hosts=zookeeper)
    client.start(10)
    try:
        for _ in range(20):  # a daemon's ephemeral node may appear while the tree goes
            try:
                client.delete(root, recursive=True)
                break
            except NotEmptyError:
                time.sleep(0.25)
    finally:
        client.stop()


@pytest.fixture
def db(mariadb: dict[str, object]) -> Iterator[tuple[pymysql.connections.Connection, str]]:
    """A connection to a fresh, uniquely named database, dropped afterwards."""
    with fresh_database(connect_root) as database:
        yield database


@pytest.fixture(autouse=True)
def no_leftover_daemons() -> Iterator[None]:
    """Whatever a test asserted, none of its `replicad run` processes outlives it."""
    yield
    kill_leftovers()


def pytest_configure(config: pytest.Config) -> None:
    """CI builds the Cython accelerator; tests that need it skip only where no compiler was
    available. REPLICAD_REQUIRE_SPEEDUPS=1 (set by .ci/run) turns a missing build into an
    error instead of silent skips."""
    from replicad.binlog import decoder_choice
    from replicad.errors import CompiledDecoderMissingError
    from replicad.sinks import writer_choice

    try:
        decoder_choice.check_required()
        writer_choice.check_required()
    except CompiledDecoderMissingError as exc:
        raise pytest.UsageError(str(exc)) from exc


@pytest.fixture
def clients() -> Iterator[Callable[[Any], Any]]:
    """Make replicad ZkClients from ZookeeperConfigs (one session each); all are stopped
    after the test."""
    from replicad.coordination.zk import ZkClient

    made: list[ZkClient] = []

    def make(config: Any) -> ZkClient:
        client = ZkClient(config)
        made.append(client)
        return client

    yield make
    for client in made:
        with contextlib.suppress(Exception):
            client.stop()


@pytest.fixture
def shop(db) -> Iterator[tuple[pymysql.connections.Connection, str]]:
    conn, name = db
    with conn.cursor() as cur:
        for sql in TABLES_SQL:
            cur.execute(sql)
    yield conn, name
