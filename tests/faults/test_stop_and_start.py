"""SIGTERM in every state of `replicad run`, and a start with the primary down.

Each case puts a daemon in one state, sends SIGTERM and checks:
- it exits 0 within `shutdown.timeout_s` (+ a margin for the interpreter's start and exit):
  the watchdog's 75 would mean the clean path did not finish in time;
- the stored position never passed anything a sink did not acknowledge: with the JSON-lines
  sink, a restart from it delivers every row of an insert-only workload (a position past an
  undelivered row would skip it for good); with Kafka unreachable, the position did not move
  from where the daemon started.

States: connecting to ZooKeeper that is unreachable (this used to ignore SIGTERM forever),
waiting for the lease as a standby, leading under a write load, reconnecting to a primary that
went away, Kafka unreachable with published changes unacknowledged (the drain), and relay
back-pressure (the relay full while Kafka is away).
"""

from __future__ import annotations

import signal
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pymysql
import pytest

from tests.helpers.daemon_process import DaemonProcess, wait_for
from tests.helpers.kafka_helpers import PrivateKafka, Record, consume_all
from tests.helpers.kafka_run import alive, producer_pids
from tests.helpers.mariadb import MARIADB_PORT, connect_root
from tests.helpers.tcp_proxy import FaultProxy

pytestmark = pytest.mark.faults

STOP_TIMEOUT_S = 10.0
MARGIN_S = 4.0  # interpreter start-up is not in the budget; exit and reaping are
stop_times: dict[str, float] = {}


def closed_port() -> int:
    """A port nothing listens on (bound and closed again)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Daemon(DaemonProcess):
    def __init__(
        self,
        tmp: Path,
        *,
        server_id: int,
        port: int = MARIADB_PORT,
        password: str = "repl",
        sinks_yaml: str | None = None,
        extra_yaml: str = "",
        zookeeper: dict[str, str] | None = None,
    ) -> None:
        """`zookeeper`: coordination.zookeeper options, given as REPLICAD_* variables (the
        base config already has a `coordination` section)."""
        tmp.mkdir(parents=True, exist_ok=True)
        self.zk_env = {
            f"REPLICAD_COORDINATION__ZOOKEEPER__{key.upper()}": value
            for key, value in (zookeeper or {}).items()
        }
        super().__init__(
            tmp,
            pipeline=f"stop{server_id}",
            source_yaml=(
                f"  host: 127.0.0.1\n  port: {port}\n  user: repl\n  server_id: {server_id}\n"
                "  start: latest\n  heartbeat_s: 1\n  connect_timeout_s: 2\n"
                "  reconnect: {initial_s: 0.1, max_s: 0.5}\n"
            ),
            password=password,
            sinks_yaml=sinks_yaml,
            extra_yaml=f"shutdown: {{timeout_s: {STOP_TIMEOUT_S}}}\n" + extra_yaml,
        )

    @property
    def env(self) -> dict[str, str]:
        return {**super().env, **self.zk_env}

    def wait_event(self, event: str, timeout: float = 30, count: int = 1) -> None:
        proc = self.proc
        assert proc is not None
        wait_for(
            lambda: self.count(event) >= count or proc.poll() is not None,
            timeout,
            f"{event} in the log",
        )
        assert proc.poll() is None, f"exited {proc.returncode}:\n{self.err.read_text()[-3000:]}"

    def sigterm(self, state: str) -> int:
        """SIGTERM; the exit status, once it came within the budget (recorded per state)."""
        assert self.proc is not None
        started = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=STOP_TIMEOUT_S + MARGIN_S)
        except Exception:
            self.proc.kill()
            raise AssertionError(
                f"{state}: no exit {STOP_TIMEOUT_S + MARGIN_S} s after SIGTERM:\n"
                + self.err.read_text()[-3000:]
            ) from None
        stop_times[state] = round(time.monotonic() - started, 2)
        print(f"stop in state {state!r}: exit {code} after {stop_times[state]} s")
        return code

    def initial_position(self) -> str | None:
        found = [e for e in self.log_events() if e.get("event") == "position_initial"]
        return found[0]["position"] if found else None


class Inserter:
    """Inserts rows with increasing ids into `db`.t from a thread until stopped."""

    def __init__(self, db: str, width: int = 50) -> None:
        self.db = db
        self.width = width
        self.next_id = 1
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        conn = connect_root()
        with conn.cursor() as cur:
            while not self._stop.is_set():
                row = (self.next_id, "x" * self.width)
                cur.execute(f"INSERT INTO `{self.db}`.t VALUES (%s, %s)", row)
                self.next_id += 1
                time.sleep(0.005)
        conn.close()

    def __enter__(self) -> Inserter:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)


@pytest.fixture
def tdb(db) -> Iterator[tuple[pymysql.connections.Connection, str]]:
    conn, name = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(4000))")
    yield conn, name


def delivered_ids(daemon: DaemonProcess, db: str) -> set[int]:
    return {
        c["after"]["id"]
        for c in daemon.changes()
        if c["source"]["db"] == db and c["source"]["table"] == "t" and c["after"] is not None
    }


def table_ids(conn: pymysql.connections.Connection, db: str) -> set[int]:
    with conn.cursor() as cur:
        cur.execute(f"SELECT id FROM `{db}`.t")
        return {int(r[0]) for r in cur.fetchall()}


def assert_restart_delivers_everything(daemon: Daemon, conn: Any, db: str) -> None:
    """Restart from the stored position: together both runs delivered every row."""
    daemon.start()
    wanted = table_ids(conn, db)
    wait_for(lambda: wanted <= delivered_ids(daemon, db), 30, "the restart to catch up")
    assert daemon.sigterm("leading, idle") == 0


# ---------------------------------------------------------------------------- ZooKeeper


def test_sigterm_while_zookeeper_is_unreachable(tmp_path: Path, zk_root: str) -> None:
    daemon = Daemon(
        tmp_path,
        server_id=7601,
        zookeeper={
            "hosts": f"127.0.0.1:{closed_port()}",
            "root": zk_root,
            "connect_timeout_s": "1",
        },
    )
    daemon.spawn()
    daemon.wait_event("zk_unavailable", count=2)
    assert daemon.sigterm("connecting to ZooKeeper") == 0


def test_sigterm_as_standby_and_as_leader(tmp_path: Path, tdb, zk_root: str, zookeeper: str):
    conn, db = tdb
    zk = {"hosts": zookeeper, "root": zk_root, "session_timeout_s": "3"}
    leader = Daemon(tmp_path / "a", server_id=7602, zookeeper=zk)
    standby = Daemon(tmp_path / "b", server_id=7602, zookeeper=zk)
    leader.start()
    standby.spawn()
    standby.wait_event("zk_candidate_waiting")
    assert standby.sigterm("waiting for the lease") == 0
    with Inserter(db):
        wait_for(lambda: len(delivered_ids(leader, db)) > 50, 30, "rows published")
        assert leader.sigterm("leading (ZooKeeper), writes going on") == 0
    assert_restart_delivers_everything(leader, conn, db)


# ---------------------------------------------------------------------------- primary


def test_sigterm_while_leading_under_load(tmp_path: Path, tdb) -> None:
    conn, db = tdb
    daemon = Daemon(tmp_path, server_id=7603)
    daemon.start()
    with Inserter(db):
        wait_for(lambda: len(delivered_ids(daemon, db)) > 100, 30, "rows published")
        assert daemon.sigterm("leading, writes going on") == 0
    assert_restart_delivers_everything(daemon, conn, db)


def test_sigterm_while_reconnecting_to_the_primary(tmp_path: Path, tdb) -> None:
    conn, db = tdb
    with FaultProxy("127.0.0.1", MARIADB_PORT) as proxy:
        daemon = Daemon(tmp_path, server_id=7604, port=proxy.port)
        daemon.start()
        with Inserter(db):
            wait_for(lambda: len(delivered_ids(daemon, db)) > 50, 30, "rows published")
            proxy.partition()
            daemon.wait_event("source_disconnected", count=2)
            assert daemon.sigterm("reconnecting to the primary") == 0
        proxy.heal()
        assert_restart_delivers_everything(daemon, conn, db)


def test_start_with_the_primary_down_waits_for_it(tmp_path: Path, tdb) -> None:
    """It used to exit 75 at once; now the reconnect policy applies, as to a later outage."""
    conn, db = tdb
    with FaultProxy("127.0.0.1", MARIADB_PORT) as proxy:
        proxy.partition()
        daemon = Daemon(tmp_path, server_id=7605, port=proxy.port)
        daemon.spawn()
        daemon.wait_event("source_unavailable", count=3)
        proxy.heal()
        daemon.wait_event("source_connected")
        with Inserter(db):
            wait_for(lambda: len(delivered_ids(daemon, db)) > 20, 30, "rows published")
        wanted = table_ids(conn, db)
        wait_for(lambda: wanted <= delivered_ids(daemon, db), 30, "every row")
        assert daemon.sigterm("leading, idle") == 0


def test_sigterm_while_the_primary_is_down_at_start(tmp_path: Path) -> None:
    with FaultProxy("127.0.0.1", MARIADB_PORT) as proxy:
        proxy.partition()
        daemon = Daemon(tmp_path, server_id=7606, port=proxy.port)
        daemon.spawn()
        daemon.wait_event("source_unavailable", count=2)
        assert daemon.sigterm("primary down at start") == 0


def test_a_wrong_password_still_stops_at_once(tmp_path: Path) -> None:
    daemon = Daemon(tmp_path, server_id=7607, password="not-the-password")
    started = time.monotonic()
    result = daemon.run_to_exit(timeout=30)
    assert result.returncode == 78, result.stderr[-2000:]
    assert time.monotonic() - started < 10


# ---------------------------------------------------------------------------- Kafka


@pytest.mark.parametrize("relay", [False, True], ids=["waiting_for_kafka", "relay_backpressure"])
def test_sigterm_while_kafka_is_unreachable(tmp_path: Path, tdb, relay: bool) -> None:
    """Kafka away from the start: the sink waits for the topic's metadata (reconnecting to
    Kafka), nothing is acknowledged, and the position stays where the daemon started. With
    the relay, reading went on into the relay until `relay.max_bytes` and then paused
    (back-pressure) before the stop."""
    _conn, db = tdb
    relay_yaml = (
        f"relay:\n  enabled: true\n  directory: {tmp_path / 'relay'}\n"
        "  segment_bytes: 65536\n  max_bytes: 1048576\n  fsync: interval\n"
        if relay
        else ""
    )
    daemon = Daemon(
        tmp_path,
        server_id=7608 + relay,
        sinks_yaml=(
            f"  kafka:\n    bootstrap_servers: '127.0.0.1:{closed_port()}'\n"
            f"    prefix: stop{relay:d}\n"
        ),
        extra_yaml=relay_yaml,
    )
    daemon.start()
    with Inserter(db, width=3000 if relay else 50):
        if relay:
            daemon.wait_event("relay_full", timeout=60)
        else:
            daemon.wait_event("kafka_metadata_retry", count=2)
        state = "relay back-pressure, Kafka away" if relay else "Kafka away, waiting for topics"
        assert daemon.sigterm(state) == 0
    assert_position_not_moved(daemon)


def assert_position_not_moved(daemon: Daemon) -> None:
    stored = daemon.position()
    initial = daemon.initial_position()
    assert initial is not None
    assert stored is None or initial.startswith(f"{stored['file']}:{stored['pos']} "), (
        stored,
        initial,
    )


@pytest.mark.parametrize("processes", [1, 2], ids=["one_producer", "two_producer_processes"])
def test_sigterm_while_draining_to_a_stopped_broker(
    tmp_path: Path, tdb, private_kafka: PrivateKafka, processes: int
) -> None:
    """Kafka went away after delivery began: changes are published and unacknowledged when
    SIGTERM comes. The drain waits for its share of the timeout, then the acknowledged
    position is stored: everything delivered before the broker stopped is in the topics, and
    nothing after the stored position counts as delivered. With two producer processes
    (sinks.kafka.producer_processes) they hold the unacknowledged messages: stopping them
    must fit the same budget, and neither may outlive the daemon."""
    conn, db = tdb
    kafka = private_kafka.bootstrap
    prefix = f"stopd{uuid.uuid4().hex[:6]}"
    daemon = Daemon(
        tmp_path,
        server_id=7610 + 10 * (processes - 1),
        sinks_yaml=(
            f"  kafka:\n    bootstrap_servers: '{kafka}'\n    prefix: {prefix}\n"
            f"    producer_processes: {processes}\n"
        ),
        extra_yaml=f"filters: {{include: ['{db}\\..*']}}\n",
    )
    daemon.start()
    try:
        with Inserter(db):
            daemon.wait_event("first_row_published")
            wait_for(lambda: daemon.position() is not None, 30, "an acknowledged position")
            # The first stored position may be the start, before any row: wait for one past
            # a delivered row (the inserter keeps writing), or the oracle below has nothing.
            first = daemon.position()
            wait_for(lambda: daemon.position() != first, 30, "the position to move")
            private_kafka.stop()
            time.sleep(1.0)  # published, not acknowledged
            children = producer_pids(daemon)
            assert len(children) == (processes if processes > 1 else 0), children
            assert daemon.sigterm(f"draining, Kafka stopped, {processes} producer(s)") == 0
            assert not [pid for pid in children if alive(pid)], "a producer process outlived it"
        stored = daemon.position()
    finally:
        private_kafka.start()
    assert stored is not None
    # Everything before the stored position reached the topic: a restart from it delivers
    # every row of the table (what the topic lacks comes again).
    records = consume_all(kafka, rf"{prefix}\..*", idle_s=3.0)
    daemon.start()
    wanted = table_ids(conn, db)
    wait_for(
        lambda: wanted <= kafka_ids(consume_all(kafka, rf"{prefix}\..*", idle_s=1.0)),
        60,
        "the restart to deliver every row",
    )
    assert daemon.sigterm("leading, idle") == 0
    key = (stored["file"], stored["pos"])
    before = [r for r in records if coordinate(r) < key]
    assert kafka_ids(before), "nothing was delivered before the stop"


def kafka_ids(records: list[Record]) -> set[int]:
    out = set()
    for record in records:
        if record.value is not None and not record.topic.endswith(".schema"):
            after = orjson.loads(record.value)["after"]
            if after is not None:
                out.add(int(after["id"]))
    return out


def coordinate(record: Record) -> tuple[str, int]:
    return record.headers["replicad.file"].decode(), int(record.headers["replicad.pos"])
