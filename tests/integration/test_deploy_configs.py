"""The configs docker-compose.yml mounts, started as they are against the local services (no
container engine runs here, so the compose stack itself never starts in these tests).

Each process gets the environment compose gives its service (env_files and `environment`,
read from docker-compose.yml) plus these overrides, through replicad's documented
`REPLICAD_SECTION__KEY` variables, and nothing else:
- hosts and ports of the local services instead of compose's service names: source host/port,
  Kafka bootstrap, ZooKeeper hosts, MQTT host/port, the Redis URL, metrics.listen (a free
  port: two workers share this host);
- the shared MariaDB's replication account (user `repl`, REPLICATION_PASSWORD=repl) instead of
  the `replicad` user compose's init script creates;
- isolation on shared servers: a pipeline name of the test's own (its topics, ZooKeeper nodes
  and MQTT client id), a ZooKeeper root of its own, and the container's /var/lib/replicad
  paths (position file, Spark lake) moved into the test's directory.

The demo schema (deploy/compose/mysql/01-schema.sql) lives in a database `shop`, as in compose;
deploy/compose/loadgen.py writes to it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pymysql
import pytest
import redis

from tests.conftest import ZK_PORT
from tests.helpers.daemon_process import ROOT, DaemonProcess, wait_for
from tests.helpers.http import http_get
from tests.helpers.invalidate import PrivateRedis, committed, topic_ends
from tests.helpers.kafka_helpers import consume_all
from tests.helpers.mariadb import MARIADB_PORT, connect_root
from tests.helpers.spark_jars import spark_jars_dir
from tests.unit.test_deploy import replicad_services

pytestmark = pytest.mark.integration

MQTT_PORT = int(os.environ.get("REPLICAD_MQTT_PORT", "1890"))
SCHEMA_SQL = ROOT / "deploy/compose/mysql/01-schema.sql"
REDIS_PASSWORD = "deploy-test-redis"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def statements(path: Path) -> list[str]:
    text = "\n".join(
        line for line in path.read_text().splitlines() if not line.lstrip().startswith("--")
    )
    return [s.strip() for s in text.split(";") if s.strip()]


class Service:
    """One compose service's replicad command, run here as a subprocess."""

    def __init__(self, name: str, tmp: Path, overrides: dict[str, str]) -> None:
        args, config, compose_env = replicad_services()[name]
        self.name = name
        self.args = list(args)
        self.args[self.args.index("-c") + 1] = str(config)  # the repository file it mounts
        self.dir = tmp / name
        self.dir.mkdir(parents=True, exist_ok=True)
        self.log = self.dir / "replicad.log"
        self.env = {**os.environ, **compose_env, **overrides}
        self.proc: subprocess.Popen[bytes] | None = None
        self.metrics = overrides.get("REPLICAD_METRICS__LISTEN")

    def start(self) -> None:
        with self.log.open("ab") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "replicad.cli", *self.args],
                cwd=self.dir,
                env=self.env,
                stdout=err,
                stderr=err,
            )
        DaemonProcess.started.append(self.proc)  # killed after the test whatever happens

    def run(self, timeout: float) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "replicad.cli", *self.args],
            cwd=self.dir,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def events(self) -> list[dict[str, Any]]:
        lines = self.log.read_text().split("\n")[:-1] if self.log.exists() else []
        out = []
        for line in lines:
            with contextlib.suppress(ValueError):
                out.append(json.loads(line))
        return out

    def logged(self, event: str) -> bool:
        return any(e.get("event") == event for e in self.events())

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=120)

    def url(self, path: str) -> str:
        assert self.metrics is not None
        return f"http://{self.metrics}{path}"

    def tail(self) -> str:
        return self.log.read_text()[-4000:] if self.log.exists() else "(no log)"


@pytest.fixture
def shop(mariadb: dict[str, object]) -> pymysql.connections.Connection:
    """The demo database `shop` with the seeded tables (created once on the shared server)."""
    conn = connect_root()
    with conn.cursor() as cur:
        cur.execute("CREATE DATABASE IF NOT EXISTS shop DEFAULT CHARACTER SET utf8mb4")
        cur.execute("USE shop")
        cur.execute("SHOW TABLES")
        if {row[0] for row in cur.fetchall()} < {"customers", "orders"}:
            for sql in statements(SCHEMA_SQL):
                cur.execute(sql)
    return conn


def test_seed_schema_and_load_generator_run_on_a_fresh_database(db: Any) -> None:
    conn, name = db
    with conn.cursor() as cur:
        for sql in statements(SCHEMA_SQL):
            cur.execute(sql)
        cur.execute("SELECT COUNT(*) FROM customers")
        assert cur.fetchone()[0] == 4
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "deploy/compose/loadgen.py"),
            "--host",
            "127.0.0.1",
            "--port",
            str(MARIADB_PORT),
            "--database",
            name,
            "--rate",
            "0",
            "--count",
            "60",
            "--seed",
            "7",
            "--alive-file",
            os.devnull,
        ],
        env={**os.environ, "MYSQL_USER": "root", "MYSQL_PASSWORD": "root"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "stopped after 60 transactions" in result.stderr
    with conn.cursor() as cur:
        cur.execute("SELECT (SELECT COUNT(*) FROM customers), (SELECT COUNT(*) FROM orders)")
        customers, orders = cur.fetchone()
    assert customers > 4 and orders > 3


def test_compose_configs_run_the_pipeline_fail_over_and_stop(
    tmp_path: Path, shop: pymysql.connections.Connection, kafka: str, zk_root: str
) -> None:
    pipeline = f"deploy-{uuid.uuid4().hex[:8]}"
    redis_port = free_port()
    cache = PrivateRedis(tmp_path / "redis", "--requirepass", REDIS_PASSWORD, port=redis_port)
    cache.up()
    base = {
        "REPLICAD_PIPELINE": pipeline,
        "REPLICAD_SOURCE__HOST": "127.0.0.1",
        "REPLICAD_SOURCE__PORT": str(MARIADB_PORT),
        "REPLICAD_SOURCE__USER": "repl",
        "REPLICATION_PASSWORD": "repl",
        "REPLICAD_SINKS__KAFKA__BOOTSTRAP_SERVERS": kafka,
        "REPLICAD_SINKS__MQTT__HOST": "127.0.0.1",
        "REPLICAD_SINKS__MQTT__PORT": str(MQTT_PORT),
        "REPLICAD_COORDINATION__ZOOKEEPER__HOSTS": f"127.0.0.1:{ZK_PORT}",
        "REPLICAD_COORDINATION__ZOOKEEPER__ROOT": zk_root,
        "REPLICAD_INVALIDATE__REDIS__URL": f"redis://127.0.0.1:{redis_port}/0",
        "REDIS_PASSWORD": REDIS_PASSWORD,
        "REPLICAD_SPARK__LAKE_PATH": str(tmp_path / "lake"),
        "REPLICAD_SPARK__CHANGES_PATH": str(tmp_path / "changes"),
        "REPLICAD_SPARK__CHECKPOINT_PATH": str(tmp_path / "spark-checkpoints"),
        "REPLICAD_SPARK__LAKE_JARS": spark_jars_dir(),  # the image's /opt/replicad/spark-jars
        "PYSPARK_PYTHON": sys.executable,
    }
    workers = {
        name: Service(
            name,
            tmp_path,
            {
                **base,
                "REPLICAD_METRICS__LISTEN": f"127.0.0.1:{free_port()}",
                "REPLICAD_COORDINATION__LOCAL__PATH": str(tmp_path / name / "position.json"),
            },
        )
        for name in ("replicad-a", "replicad-b")
    }
    a, b = workers.values()
    try:
        # `replicad check` with the config as it is: the primary suits replicad
        check = Service("replicad-a", tmp_path / "check", base)
        check.args[0] = "check"
        result = check.run(timeout=60)
        assert result.returncode == 0, result.stdout + result.stderr
        assert "ready to replicate" in result.stdout

        a.start()
        wait_for(lambda: a.logged("leading") or not a.alive(), 60, "replicad-a to lead")
        assert a.alive(), a.tail()
        b.start()
        wait_for(
            lambda: b.logged("zk_candidate_created") or not b.alive(), 60, "replicad-b to stand by"
        )
        assert b.alive() and not b.logged("leading"), b.tail()
        # health and readiness of both: the leader publishing, the standby ready
        for worker in (a, b):
            wait_for(
                lambda w=worker: http_get(w.url("/readyz"))[0] == 200, 60, f"{worker.name} /readyz"
            )
            assert http_get(worker.url("/healthz"))[0] == 200
        status, metrics = http_get(a.url("/metrics"))
        assert status == 200 and "replicad_" in metrics

        # the invalidator of compose, on a Redis with a password (from REDIS_PASSWORD)
        invalidator_listen = f"127.0.0.1:{free_port()}"
        invalidator = Service(
            "invalidate",
            tmp_path,
            {**base, "REPLICAD_INVALIDATE__METRICS_LISTEN": invalidator_listen},
        )
        invalidator.start()
        # what its compose healthcheck asks
        wait_for(
            lambda: http_get(f"http://{invalidator_listen}/readyz")[0] == 200,
            60,
            "the invalidator's /readyz",
        )

        # load from the generator, then a marker row: both reach Kafka from the leader
        load = subprocess.run(
            [
                sys.executable,
                str(ROOT / "deploy/compose/loadgen.py"),
                "--host",
                "127.0.0.1",
                "--port",
                str(MARIADB_PORT),
                "--database",
                "shop",
                "--rate",
                "0",
                "--count",
                "30",
                "--alive-file",
                os.devnull,
            ],
            env={**os.environ, "MYSQL_USER": "root", "MYSQL_PASSWORD": "root"},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert load.returncode == 0, load.stderr
        email = f"{pipeline}@example.com"
        with shop.cursor() as cur:
            cur.execute("INSERT INTO customers (email, name) VALUES (%s, 'Marker')", (email,))
            marker = cur.lastrowid
        topic = f"{pipeline}.shop.customers"

        def published(name: str) -> bool:
            # Any record of this marker: an earlier run's markers may be in the topic too.
            for record in consume_all(kafka, [topic], idle_s=1.0):
                after = (record.json() or {}).get("after") or {}
                if after.get("name") == name and after.get("id") == marker:
                    return True
            return False

        wait_for(lambda: published("Marker"), 60, "the marker row in Kafka")

        # invalidation: once the group has consumed everything so far, cached keys of the
        # marker row go with its next change
        group = f"replicad-invalidate-{pipeline}"
        wait_for(
            lambda: committed(kafka, group, topic, [0]) == topic_ends(kafka, topic),
            60,
            "the invalidator to commit the customers topic",
        )
        client = redis.Redis(port=redis_port, password=REDIS_PASSWORD)
        client.set(f"customer:{marker}", "cached")
        client.set(f"customer:email:{email}", "cached")
        with shop.cursor() as cur:
            cur.execute("UPDATE customers SET name = 'Marker 2' WHERE id = %s", (marker,))
        wait_for(
            lambda: client.exists(f"customer:{marker}", f"customer:email:{email}") == 0,
            60,
            "the invalidator to delete the marker's keys",
        )
        assert invalidator.alive(), invalidator.tail()

        # failover: the leader stops (exit 0), the standby leads and publishes
        assert a.stop() == 0, a.tail()
        wait_for(lambda: b.logged("leading") or not b.alive(), 60, "replicad-b to take over")
        assert b.alive(), b.tail()
        with shop.cursor() as cur:
            cur.execute("UPDATE customers SET name = 'Marker 3' WHERE id = %s", (marker,))
        wait_for(lambda: published("Marker 3"), 60, "the new leader to publish")
        wait_for(lambda: http_get(b.url("/readyz"))[0] == 200, 60, "replicad-b /readyz")

        assert invalidator.stop() == 0, invalidator.tail()
        assert b.stop() == 0, b.tail()

        # the Spark job of compose over the same topics, once
        materialize = Service("materialize", tmp_path, base)
        materialize.args.append("--once")
        result = materialize.run(timeout=600)
        assert result.returncode == 0, result.stderr[-4000:]
        for table in ("customers", "orders"):
            lake = tmp_path / "lake" / "shop" / table
            assert (lake / "_delta_log").is_dir() and list(lake.glob("*.parquet")), table
    finally:
        cache.down()
