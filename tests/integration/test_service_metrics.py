"""`replicad run` as a service: a real Prometheus scrapes its /metrics under load and through
a Kafka outage; /readyz flips on a sink outage and on a lost ZooKeeper session; sd_notify
datagrams reach a socket standing in for systemd's; heartbeat writes move the position of a
source whose tables are all filtered out; the binlog retention warning."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import threading
import time
import urllib.parse
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.daemon_process import ROOT, wait_for
from tests.helpers.http import http_json, sample
from tests.helpers.kafka_helpers import PrivateKafka
from tests.helpers.kafka_run import (
    BackgroundWriter,
    KafkaReplicad,
    read_topics,
    wait_caught_up,
)
from tests.helpers.mariadb import MARIADB_PORT
from tests.helpers.tcp_proxy import FaultProxy

pytestmark = pytest.mark.integration


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_value(read: Any, accept: Any, timeout: float, what: str) -> Any:
    """Poll `read()` until `accept(value)`; a timeout names the last values read."""
    values: list[Any] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        values.append(read())
        if accept(values[-1]):
            return values[-1]
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}: last {values[-5:]}")


class Prometheus:
    """A private Prometheus (scripts/services.sh prometheus-instance) scraping one target."""

    def __init__(self, tmp: Path, target: str) -> None:
        self.dir = tmp / "prometheus"
        self.dir.mkdir(parents=True)
        self.port = _free_port()
        self.config = self.dir / "prometheus.yml"
        self.config.write_text(
            "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
            "scrape_configs:\n"
            f"  - job_name: replicad\n    static_configs: [{{targets: ['{target}']}}]\n"
        )

    def _services(self, action: str) -> None:
        subprocess.run(
            [
                "bash",
                str(ROOT / "scripts/services.sh"),
                "prometheus-instance",
                action,
                str(self.dir),
                str(self.port),
                str(self.config),
            ],
            check=True,
        )

    def __enter__(self) -> Prometheus:
        self._services("up")
        return self

    def __exit__(self, *exc: object) -> None:
        self._services("down")

    def query(self, expr: str) -> float | None:
        url = f"http://127.0.0.1:{self.port}/api/v1/query?" + urllib.parse.urlencode(
            {"query": expr}
        )
        status, body = http_json(url)
        assert status == 200, (status, body)
        result = body["data"]["result"]
        return float(result[0]["value"][1]) if result else None


def _row_changes(records: list[Any]) -> int:
    """Row changes published: distinct binlog coordinates of the row messages (an update
    that changes the primary key goes out as a delete and a create from one change)."""
    seen = set()
    for record in records:
        if record.value is None:
            continue  # a tombstone
        if json.loads(record.value).get("op") in ("c", "u", "d"):
            headers = record.headers
            seen.add((headers["replicad.file"], headers["replicad.pos"], headers["replicad.row"]))
    return len(seen)


def test_prometheus_scrapes_rows_and_lag_through_a_kafka_outage(
    shop, private_kafka: PrivateKafka, tmp_path
) -> None:
    kafka = private_kafka.bootstrap
    _conn, db = shop
    prefix = f"m{uuid.uuid4().hex[:8]}"
    port = _free_port()
    replicad = KafkaReplicad(
        tmp_path / "replicad",
        server_id=7311,
        prefix=prefix,
        kafka=kafka,
        pipeline="metrics",
        extra_yaml=f"metrics: {{listen: '127.0.0.1:{port}', ready_ack_stall_s: 3}}\n",
        db=db,
    )
    base = f"http://127.0.0.1:{port}"
    with Prometheus(tmp_path, f"127.0.0.1:{port}") as prometheus:
        replicad.start()
        wait_for(lambda: http_json(base + "/readyz")[0] == 200, 20, "/readyz 200")
        writer = BackgroundWriter(db, seed=11, pause_s=0.005)
        writer.start()
        time.sleep(4.0)
        assert writer.stop() > 0
        wait_caught_up(replicad)
        published = _row_changes(read_topics(kafka, prefix, db))
        assert published > 50
        selector = 'pipeline="metrics"'
        rows = f'replicad_rows_total{{{selector},db="{db}"}}'  # other tests write other dbs
        _wait_value(
            lambda: prometheus.query(f"sum({rows})"),
            lambda v: v == published,
            20,
            f"Prometheus to see the {published} rows published",
        )
        for op in ("c", "u", "d"):
            assert prometheus.query(f'sum({rows[:-1]},op="{op}"}})') > 0
        assert prometheus.query(f"replicad_commit_to_ack_seconds_count{{{selector}}}") > 0
        lag = f"replicad_lag_seconds{{{selector}}}"
        _wait_value(
            lambda: prometheus.query(lag),
            lambda v: v is not None and v < 3,
            20,
            "the lag to settle while caught up",
        )
        assert prometheus.query(f"replicad_source_connected{{{selector}}}") == 1
        # The standard process and Python series, which a custom registry would otherwise lack
        scraped = http_json(base + "/metrics")[1]
        assert sample(scraped, "process_cpu_seconds_total") is not None
        assert sample(scraped, "process_resident_memory_bytes") is not None
        assert "python_info{" in scraped

        # Kafka away while the primary keeps committing: no acknowledgement, the lag grows,
        # /readyz says why; back: the lag falls and /readyz is 200 again.
        writer = BackgroundWriter(db, seed=12, pause_s=0.05)
        writer.start()
        private_kafka.stop()
        try:
            wait_for(lambda: http_json(base + "/readyz")[0] == 503, 20, "/readyz 503 without Kafka")
            body = http_json(base + "/readyz")[1]
            assert "no acknowledgement" in body["pipelines"]["metrics"]["problem"], body
            assert http_json(base + "/healthz")[0] == 200  # alive, only not ready
            queued = sample(http_json(base + "/metrics")[1], "replicad_sink_queued_messages")
            assert queued is not None and queued > 0
            time.sleep(2.0)
            first = prometheus.query(lag)
            time.sleep(4.0)
            second = prometheus.query(lag)
            direct = sample(http_json(base + "/metrics")[1], "replicad_lag_seconds")
            assert first is not None and second is not None
            assert second >= first + 2.0, (first, second, direct, http_json(base + "/readyz"))
            assert second >= 5.0
        finally:
            private_kafka.start()
            writer.stop()
        wait_caught_up(replicad, timeout=120)
        _wait_value(
            lambda: (prometheus.query(lag), http_json(base + "/readyz")[1]),
            lambda v: v[0] is not None and v[0] < 3,
            30,
            "the lag to fall once Kafka is back",
        )
        wait_for(lambda: http_json(base + "/readyz")[0] == 200, 30, "/readyz 200 again")
        assert prometheus.query(f"max_over_time({lag}[2m])") >= 5.0
        assert replicad.stop() == 0


def test_readyz_flips_when_the_zookeeper_session_is_lost(zookeeper, zk_root, tmp_path) -> None:
    port = _free_port()
    zk_host, zk_port = zookeeper.split(":")
    with FaultProxy(zk_host, int(zk_port)) as proxy:
        daemon = _stdout_daemon(
            tmp_path,
            "readyz",
            f"metrics: {{listen: '127.0.0.1:{port}'}}\n"
            f"coordination:\n  zookeeper: {{hosts: '127.0.0.1:{proxy.port}', root: '{zk_root}',"
            " session_timeout_s: 4}\n",
        )
        daemon.spawn()
        base = f"http://127.0.0.1:{port}"
        try:

            def leading_and_ready() -> bool:
                status, body = http_json(base + "/readyz")
                return status == 200 and body["pipelines"]["readyz"]["role"] == "leading"

            wait_for(leading_and_ready, 30, "/readyz 200 as leader")
            metrics = http_json(base + "/metrics")[1]
            assert sample(metrics, "replicad_role", pipeline="readyz", role="leading") == 1
            assert sample(metrics, "replicad_leader_epoch", pipeline="readyz") >= 1
            epoch = sample(metrics, "replicad_leader_epoch", pipeline="readyz")
            proxy.partition()
            wait_for(lambda: http_json(base + "/readyz")[0] == 503, 15, "/readyz 503 (ZooKeeper)")
            problem = http_json(base + "/readyz")[1]["pipelines"]["readyz"]["problem"]
            assert "ZooKeeper session" in problem, problem
            assert http_json(base + "/healthz")[0] == 200
            # Past the session timeout: leadership is lost, not only in doubt.
            wait_for(lambda: daemon.count("leadership_lost") >= 1, 20, "leadership to be lost")
            assert http_json(base + "/readyz")[0] == 503
            proxy.heal()
            wait_for(leading_and_ready, 40, "/readyz 200 as leader again")
            metrics = http_json(base + "/metrics")[1]
            assert sample(metrics, "replicad_leader_epoch", pipeline="readyz") > epoch
            assert sample(metrics, "replicad_errors_total", kind="leadership_lost") >= 1
        finally:
            assert daemon.stop() == 0


def _stdout_daemon(
    tmp: Path, pipeline: str, extra_yaml: str, port: int = MARIADB_PORT, start: str = "latest"
) -> Any:
    from tests.helpers.daemon_process import DaemonProcess

    tmp.mkdir(parents=True, exist_ok=True)
    return DaemonProcess(
        tmp,
        pipeline=pipeline,
        source_yaml=f"  host: 127.0.0.1\n  port: {port}\n  user: repl\n  server_id: 7312\n"
        f"  start: {start}\n  heartbeat_s: 1\n  reconnect: {{initial_s: 0.05, max_s: 0.5}}\n",
        password="repl",
        extra_yaml=extra_yaml,
    )


class _NotifySocket:
    """An AF_UNIX datagram socket read by a thread, as systemd reads $NOTIFY_SOCKET."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.sock.settimeout(0.2)
        self.lines: list[tuple[float, str]] = []
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while not self._halt.is_set():
            try:
                data = self.sock.recv(4096)
            except TimeoutError:
                continue
            now = time.monotonic()
            self.lines.extend((now, line) for line in data.decode().split("\n"))

    def seen(self, line: str) -> list[float]:
        return [at for at, text in list(self.lines) if text == line]

    def close(self) -> None:
        self._halt.set()
        self._thread.join()
        self.sock.close()


def test_sd_notify_ready_watchdog_and_stopping(shop, tmp_path, monkeypatch) -> None:
    notify = _NotifySocket(tmp_path / "notify")
    monkeypatch.setenv("NOTIFY_SOCKET", str(notify.path))
    monkeypatch.setenv("WATCHDOG_USEC", "1000000")  # WatchdogSec=1: a ping every 0.5 s
    try:
        # The primary unreachable: connecting is not ready (systemd keeps waiting).
        dead = _stdout_daemon(tmp_path / "dead", "notify-dead", "", port=_free_port())
        dead.spawn()
        time.sleep(3.0)
        assert notify.seen("READY=1") == []
        assert len(notify.seen("WATCHDOG=1")) >= 4  # the loop runs meanwhile
        assert dead.stop() == 0
        assert notify.seen("STOPPING=1")

        notify.lines.clear()
        daemon = _stdout_daemon(tmp_path / "live", "notify", "")
        daemon.spawn()
        wait_for(lambda: notify.seen("READY=1"), 20, "READY=1")
        assert daemon.count("source_connected") >= 1  # READY only once connected
        ready_at = notify.seen("READY=1")[0]
        statuses = [text for _, text in notify.lines if text.startswith("STATUS=")]
        assert "STATUS=1 leading" in statuses, statuses
        with shop[0].cursor() as cur:  # a transaction: a position to store
            cur.execute("CREATE TABLE notified (id INT PRIMARY KEY)")
        time.sleep(2.0)
        pings = [at for at in notify.seen("WATCHDOG=1") if at > ready_at]
        assert 3 <= len(pings) <= 6, pings  # every 0.5 s
        daemon.proc.send_signal(signal.SIGTERM)
        assert daemon.proc.wait(30) == 0
        assert len(notify.seen("STOPPING=1")) == 1
        assert notify.seen("READY=1") == [ready_at]  # once

        # Again from the stored position (no query to the primary before streaming), with
        # the primary unreachable: still not ready.
        assert daemon.position() is not None
        notify.lines.clear()
        again = _stdout_daemon(tmp_path / "live", "notify", "", port=_free_port())
        again.spawn()
        time.sleep(3.0)
        assert notify.seen("READY=1") == []
        assert again.stop() == 0
    finally:
        notify.close()


def test_heartbeat_writes_move_a_filtered_pipeline_and_retention_warns(shop, tmp_path) -> None:
    conn, db = shop
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE hb (id INT PRIMARY KEY, at DATETIME(6))")
        # The replication account needs to write the heartbeat table, nothing more.
        cur.execute(f"GRANT INSERT, DELETE ON {db}.hb TO 'repl'@'127.0.0.1'")
    port = _free_port()
    common = (
        "checkpoint: {interval_s: 0.2}\n"
        f"filters: {{include: ['{db}\\.nothing']}}\n"  # every table filtered out
        f"metrics: {{listen: '127.0.0.1:{port}'}}\n"
    )
    daemon = _stdout_daemon(
        tmp_path,
        "heartbeat",
        common + f"heartbeat: {{query: 'REPLACE INTO {db}.hb VALUES (1, NOW(6))', "
        f"interval_s: 0.3}}\nrelay: {{enabled: true, directory: '{tmp_path / 'relay'}'}}\n",
    )
    daemon.start()
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: daemon.position() is not None, 20, "a stored position")
        seen = {daemon.position()["mariadb_gtid"]}
        deadline = time.monotonic() + 10
        while len(seen) < 4 and time.monotonic() < deadline:
            seen.add(daemon.position()["mariadb_gtid"])
            time.sleep(0.1)
        assert len(seen) >= 4, f"the position did not move with the heartbeats: {seen}"
        assert daemon.changes() == []  # nothing published: all filtered
        metrics = http_json(base + "/metrics")[1]
        assert sample(metrics, "replicad_heartbeat_writes_total", outcome="ok") >= 3
        assert sample(metrics, "replicad_relay_bytes") > 0
        assert sample(metrics, "replicad_relay_segments") >= 1
        assert sample(metrics, "replicad_transactions_total") >= 3
    finally:
        assert daemon.stop() == 0

    # Retention: without heartbeats, a rotation leaves the stored position in a file that is
    # no longer the newest; with a threshold larger than any file count, that warns.
    daemon = _stdout_daemon(  # the same directory: the same position file
        tmp_path,
        "heartbeat",
        common + "heartbeat: {retention_warn_files: 1000000, retention_check_s: 0.3}\n",
    )
    daemon.start()
    try:

        def rotated_and_warned() -> bool:
            if daemon.count("binlog_retention_near") >= 1:
                return True
            # Other suites' writes on the shared primary may carry the position into the new
            # file before a check looks: rotate again until one sees it behind.
            with conn.cursor() as cur:
                cur.execute("FLUSH BINARY LOGS")
            time.sleep(0.5)
            return False

        wait_for(rotated_and_warned, 15, "the retention warning")

        def files_before_purge() -> float | None:
            text = http_json(base + "/metrics")[1]
            return sample(text, "replicad_binlog_files_before_purge", pipeline="heartbeat")

        def metric_counts_files_before_stored() -> bool:  # against the lists as they are now
            stored = daemon.position()["file"]
            return files_before_purge() == _binary_logs(conn).index(stored)

        wait_for(
            metric_counts_files_before_stored,
            10,
            "the metric to count the files before the stored one",
        )
        warnings = daemon.count("binlog_retention_near")
        # A transaction in the newest file moves the position there: no further warning.
        with conn.cursor() as cur:
            cur.execute("INSERT INTO hb VALUES (2, NOW(6))")
        wait_for(lambda: daemon.position()["file"] == _binary_logs(conn)[-1], 10, "a move")
        wait_for(lambda: files_before_purge() == len(_binary_logs(conn)) - 1, 10, "the metric")
        assert daemon.count("binlog_retention_near") == warnings
    finally:
        assert daemon.stop() == 0


def _binary_logs(conn: Any) -> list[str]:
    with conn.cursor() as cur:
        cur.execute("SHOW BINARY LOGS")
        return [row[0] for row in cur.fetchall()]


def test_an_idle_primary_behind_the_relay_log_is_no_lag(shop, tmp_path) -> None:
    """With the relay log the primary's heartbeats reach the pipeline once it has served
    everything relayed: a transaction read late (here: committed 6 s before replicad starts
    from a position before it) stops counting as lag once the primary is seen idle, and
    /readyz stays 200. (The relay used to drop the heartbeats: the lag stayed at 6 s.)"""
    conn, db = shop
    with conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        file, pos = cur.fetchone()[:2]
        cur.execute("CREATE TABLE quiet (id INT PRIMARY KEY)")
        cur.execute("INSERT INTO quiet VALUES (1)")
    time.sleep(6.0)
    port = _free_port()
    daemon = _stdout_daemon(
        tmp_path,
        "relay-idle",
        f"filters: {{include: ['{db}\\..*']}}\n"
        f"metrics: {{listen: '127.0.0.1:{port}'}}\n"
        f"relay: {{enabled: true, directory: '{tmp_path / 'relay'}'}}\n",
        start=f"{{file: {file}, pos: {pos}}}",
    )
    daemon.start()
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: len(daemon.changes()) == 1, 20, "the row")

        def lag() -> float:
            text = http_json(base + "/metrics")[1]
            value = sample(text, "replicad_lag_seconds", pipeline="relay-idle")
            return 99.0 if value is None else value

        # Read about 6 s late; heartbeats come every second once the primary is idle. The
        # bound is 3 s, not 0: tests beside this one keep the shared primary busy, and a
        # loaded machine delays the heartbeats (the defect this guards against left 6 s).
        _wait_value(lag, lambda v: v < 3.0, 10, "the lag to drop")
        time.sleep(3.0)  # and it stays there while the primary stays idle
        assert lag() < 3.0
        assert http_json(base + "/readyz")[0] == 200
    finally:
        assert daemon.stop() == 0
