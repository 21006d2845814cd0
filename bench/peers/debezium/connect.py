"""Debezium in Kafka Connect standalone, beside replicad: the same primary, the same broker.

`DebeziumConnect(options, workdir)` writes a worker and a connector config into `workdir`,
starts `org.apache.kafka.connect.cli.ConnectStandalone` (Kafka Connect 4.3 with Debezium's
MariaDB or MySQL connector on its plugin.path, both fetched from Maven Central by
`fetch.sh`), waits until the connector's task is RUNNING (Connect's REST API) and its initial
snapshot is done and streaming has begun (Debezium's log), and stops the JVM it started (its
own pid only). Offsets go to a file in `workdir` (FileOffsetBackingStore) and the schema
history to another (`io.debezium.storage.file.history.FileSchemaHistory`): nothing of the
peer's state lives in the broker but its data topics and its schema-change topic.

Used as a context manager by the contract tests and the benchmarks, and by
`python -m bench.peers.debezium up|down` (see __main__.py) from a shell.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

from tests.helpers.ports import free_port_block

ROOT = Path(__file__).resolve().parents[3]
FETCH_SCRIPT = Path(__file__).resolve().parent / "fetch.sh"
MAIN_CLASS = "org.apache.kafka.connect.cli.ConnectStandalone"

Server = Literal["mariadb", "mysql"]
CONNECTOR_CLASS: dict[Server, str] = {
    "mariadb": "io.debezium.connector.mariadb.MariaDbConnector",
    "mysql": "io.debezium.connector.mysql.MySqlConnector",
}
DEFAULT_PORT: dict[Server, int] = {
    "mariadb": int(os.environ.get("REPLICAD_MARIADB_PORT", "3306")),
    "mysql": int(os.environ.get("REPLICAD_MYSQL_PORT", "3307")),
}

# Debezium's INFO lines that mark the end of the initial snapshot and the start of the binlog
# stream (io.debezium.pipeline.ChangeEventSourceCoordinator and
# io.debezium.connector.binlog.BinlogStreamingChangeEventSource).
SNAPSHOT_DONE = "Snapshot completed"
STREAMING_STARTED = "Starting streaming"
BINLOG_CONNECTED = "Connected to binlog at"

LOG4J2 = """\
# Connect and Kafka's clients: warnings. Debezium: INFO (snapshot and streaming milestones,
# which DebeziumConnect.wait_ready reads).
rootLogger.level = WARN
rootLogger.appenderRef.out.ref = OUT
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c{1})%n
logger.debezium.name = io.debezium
logger.debezium.level = INFO
"""


class DebeziumError(RuntimeError):
    """The peer could not be fetched, started, or did not become ready; says why."""


@dataclass(frozen=True)
class DebeziumOptions:
    """What to capture and how. `extra` holds further connector properties (e.g.
    `decimal.handling.mode`, `include.query`), which override the defaults below."""

    server: Server
    database: str
    topic_prefix: str
    server_id: int
    tables: tuple[str, ...] = ()  # table names in `database`; empty: all of them
    kafka: str = "127.0.0.1:9092"
    port: int | None = None  # default: the shared server of that kind
    user: str = "root"  # root has every privilege Debezium needs (see README.md)
    password: str = "root"
    schemas_enable: bool = False
    snapshot_mode: str = "initial"
    heap: str = "512m"
    extra: dict[str, str] = field(default_factory=dict)
    # Further worker properties, over the defaults below: e.g. the producer Connect gives the
    # connector (`producer.linger.ms`, `producer.compression.type`), as a tuned deployment
    # sets them. Empty: the worker as before.
    worker_extra: dict[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"dbz-{self.topic_prefix}"

    def connector_properties(self, workdir: Path) -> dict[str, str]:
        props = {
            "name": self.name,
            "connector.class": CONNECTOR_CLASS[self.server],
            "tasks.max": "1",
            "database.hostname": "127.0.0.1",
            "database.port": str(self.port or DEFAULT_PORT[self.server]),
            "database.user": self.user,
            "database.password": self.password,
            "database.server.id": str(self.server_id),
            "topic.prefix": self.topic_prefix,
            "database.include.list": self.database,
            "snapshot.mode": self.snapshot_mode,
            "schema.history.internal": "io.debezium.storage.file.history.FileSchemaHistory",
            "schema.history.internal.file.filename": str(workdir / "schema-history.dat"),
            # The shared server holds other runs' databases: read and keep only ours.
            "schema.history.internal.store.only.captured.tables.ddl": "true",
            "schema.history.internal.store.only.captured.databases.ddl": "true",
            # The broker does not auto-create topics: Connect creates them (one partition).
            "topic.creation.default.replication.factor": "1",
            "topic.creation.default.partitions": "1",
        }
        if self.tables:
            props["table.include.list"] = ",".join(f"{self.database}.{t}" for t in self.tables)
        props.update(self.extra)
        return props

    def worker_properties(self, workdir: Path, rest_port: int, dist: Path) -> dict[str, str]:
        schemas = "true" if self.schemas_enable else "false"
        converter = "org.apache.kafka.connect.json.JsonConverter"
        return {
            "bootstrap.servers": self.kafka,
            "key.converter": converter,
            "value.converter": converter,
            "key.converter.schemas.enable": schemas,
            "value.converter.schemas.enable": schemas,
            "offset.storage.file.filename": str(workdir / "offsets.dat"),
            "offset.flush.interval.ms": "1000",
            "listeners": f"http://127.0.0.1:{rest_port}",
            "rest.advertised.host.name": "127.0.0.1",
            "rest.advertised.port": str(rest_port),
            # Only this server's connector: scanning a plugin costs ~1-2 s of start-up.
            "plugin.path": str(dist / "plugins" / self.server),
            "plugin.discovery": "only_scan",
        } | self.worker_extra


def fetch(env: dict[str, str] | None = None) -> Path:
    """Run fetch.sh (a no-op once the jars match the poms); the distribution directory.
    Honours REPLICAD_MAVEN_ARGS and REPLICAD_DEBEZIUM_DIST."""
    proc = subprocess.run(
        ["bash", str(FETCH_SCRIPT)],
        capture_output=True,
        text=True,
        env=env if env is not None else dict(os.environ),
        check=False,
    )
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise DebeziumError(f"fetching Debezium failed (exit {proc.returncode}): {last}")
    return Path(proc.stdout.strip().splitlines()[-1])


def _write_properties(path: Path, props: dict[str, str]) -> None:
    # java.util.Properties: backslashes escape, so paths are written with forward slashes only.
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))


class DebeziumConnect:
    """One Connect standalone JVM running one Debezium connector."""

    def __init__(self, options: DebeziumOptions, workdir: Path, rest_port: int | None = None):
        self.options = options
        self.workdir = workdir
        self.rest_port = rest_port
        self.log = workdir / "connect.log"
        self.pid_file = workdir / "connect.pid"
        self.proc: subprocess.Popen[bytes] | None = None
        self.timings: dict[str, float] = {}

    # ------------------------------------------------------------------ start and stop

    def command(self, dist: Path) -> list[str]:
        return [
            "java",
            "-Xms64m",
            f"-Xmx{self.options.heap}",
            "-XX:+UseSerialGC",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={self.workdir / 'log4j2.properties'}",
            "-cp",
            f"{dist / 'lib'}/*",
            MAIN_CLASS,
            str(self.workdir / "worker.properties"),
            str(self.workdir / "connector.properties"),
        ]

    def spawn(self) -> subprocess.Popen[bytes]:
        """Fetch if needed, write the configs, start the JVM (its own session, so that a
        terminal's signals do not reach it); returns without waiting."""
        dist = fetch()
        self.workdir.mkdir(parents=True, exist_ok=True)
        if self.rest_port is None:
            self.rest_port = free_port_block(1)
        opts = self.options
        _write_properties(
            self.workdir / "worker.properties",
            opts.worker_properties(self.workdir, self.rest_port, dist),
        )
        _write_properties(
            self.workdir / "connector.properties", opts.connector_properties(self.workdir)
        )
        (self.workdir / "log4j2.properties").write_text(LOG4J2)
        self.timings["spawn"] = time.monotonic()
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                self.command(dist),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self.pid_file.write_text(f"{self.proc.pid}\n")
        (self.workdir / "rest.port").write_text(f"{self.rest_port}\n")
        return self.proc

    def start(self, timeout: float = 120) -> None:
        self.spawn()
        try:
            self.wait_ready(timeout)
        except BaseException:
            self.stop()
            raise

    def stop(self, timeout: float = 30) -> int | None:
        """SIGTERM to the JVM this object started (Connect stops the task and flushes its
        offsets), SIGKILL after `timeout`; its exit code."""
        proc = self.proc
        if proc is None:
            return None
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        self.pid_file.unlink(missing_ok=True)
        return proc.returncode

    def __enter__(self) -> DebeziumConnect:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # ------------------------------------------------------------------ readiness

    def status(self) -> dict[str, Any] | None:
        """Connect's /connectors/<name>/status, or None while the REST server is not up or
        the connector not yet registered."""
        url = f"http://127.0.0.1:{self.rest_port}/connectors/{self.options.name}/status"
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                return dict(json.load(resp))
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return None

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def _check_alive(self, status: dict[str, Any] | None) -> None:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise DebeziumError(
                f"Kafka Connect exited {self.proc.returncode}; log {self.log}:\n"
                + self.log_text()[-3000:]
            )
        tasks = (status or {}).get("tasks", [])
        failed = [t for t in tasks if t.get("state") == "FAILED"]
        if failed or (status or {}).get("connector", {}).get("state") == "FAILED":
            trace = (failed[0] if failed else status["connector"]).get("trace", "")  # type: ignore[index]
            raise DebeziumError(f"connector {self.options.name} FAILED:\n{trace[:3000]}")

    def running(self, status: dict[str, Any] | None) -> bool:
        if not status or status.get("connector", {}).get("state") != "RUNNING":
            return False
        tasks = status.get("tasks", [])
        return bool(tasks) and all(t.get("state") == "RUNNING" for t in tasks)

    def streaming(self) -> bool:
        """Debezium has finished its snapshot (if it takes one) and is connected to the
        binlog: changes committed from now on reach its topics."""
        text = self.log_text()
        snapshot_done = SNAPSHOT_DONE in text or self.options.snapshot_mode == "never"
        return snapshot_done and BINLOG_CONNECTED in text

    def wait_ready(self, timeout: float = 120) -> None:
        """Until the task is RUNNING and streaming has begun; records the times since spawn
        in `timings` (`running_s`, `streaming_s`)."""
        deadline = time.monotonic() + timeout
        while True:
            status = self.status()
            self._check_alive(status)
            now = time.monotonic()
            if "running_s" not in self.timings and self.running(status):
                self.timings["running_s"] = now - self.timings["spawn"]
            if "running_s" in self.timings and self.streaming():
                self.timings["streaming_s"] = now - self.timings["spawn"]
                return
            if now > deadline:
                raise DebeziumError(
                    f"connector {self.options.name} not streaming after {timeout} s "
                    f"(status {status}); log {self.log}:\n" + self.log_text()[-3000:]
                )
            time.sleep(0.1)
