"""snapshot.mode (docs/snapshots.md, "Snapshot modes") against the shared MariaDB: what each
mode does at a first start and at a restart, and a stored position whose schema history is
gone (only `recovery` resumes; every other mode stops with exit 78 naming the store).

`replicad run` is a subprocess writing JSON lines; the oracle is SELECT (the rows read) and
the stored position file."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.daemon_process import ROOT, DaemonProcess, wait_for
from tests.helpers.kafka_run import wait_caught_up
from tests.helpers.mariadb import MARIADB_PORT

pytestmark = pytest.mark.integration


def _daemon(tmp: Path, server_id: int, mode: str, db: str, signal: str = "") -> DaemonProcess:
    return DaemonProcess(
        tmp,
        pipeline="modes",
        source_yaml=(
            f"  host: 127.0.0.1\n  port: {MARIADB_PORT}\n  user: repl\n"
            f"  server_id: {server_id}\n  heartbeat_s: 1\n"
            "  reconnect: {initial_s: 0.05, max_s: 0.5}\n"
        ),
        password="repl",
        extra_yaml=(
            f"snapshot: {{mode: {mode}{signal}}}\nfilters: {{include: ['{db}\\..*']}}\n"
            "checkpoint: {interval_s: 0.2}\n"
        ),
    )


def _set_mode(daemon: DaemonProcess, old: str, new: str) -> None:
    text = daemon.config.read_text()
    daemon.config.write_text(
        text.replace(f"snapshot: {{mode: {old}}}", f"snapshot: {{mode: {new}}}")
    )


def _events(stderr: bytes) -> list[dict[str, Any]]:
    lines = stderr.decode().splitlines()
    return [json.loads(line) for line in lines if line.startswith("{")]


def _named(events: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [e for e in events if e.get("event") == name]


def _rows(daemon: DaemonProcess, op: str) -> list[dict[str, Any]]:
    return [m["after"] for m in daemon.messages() if m.get("op") == op]


def _table(conn: Any, rows: str) -> None:
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE k (id INT PRIMARY KEY, v VARCHAR(10))")
        cur.execute(f"INSERT INTO k VALUES {rows}")


def _insert(conn: Any, rows: str) -> None:
    with conn.cursor() as cur:
        cur.execute(f"INSERT INTO k VALUES {rows}")


def _streamed_once(daemon: DaemonProcess, conn: Any, rows: str) -> None:
    """Start, write `rows`, wait until they are stored, stop (exit 0)."""
    daemon.start()
    _insert(conn, rows)
    wait_caught_up(daemon)
    assert daemon.stop() == 0, daemon.err.read_text()


def test_initial_only_reads_every_row_stores_its_position_and_exits_0(db, tmp_path) -> None:
    conn, name = db
    _table(conn, "(1, 'a'), (2, 'b'), (3, 'c')")
    daemon = _daemon(tmp_path, 7731, "initial_only", name)
    result = daemon.run_to_exit(timeout=60)
    assert result.returncode == 0, result.stderr.decode()
    events = _events(result.stderr)
    assert _rows(daemon, "r") == [{"id": 1, "v": "a"}, {"id": 2, "v": "b"}, {"id": 3, "v": "c"}]
    assert [m["op"] for m in daemon.messages()] == ["r", "r", "r"]
    # The stored position is the snapshot's: a later `initial`/`never` run streams from there.
    read_at = daemon.messages()[0]["source"]
    stored = daemon.position()
    assert stored is not None
    assert (stored["file"], stored["pos"]) == (read_at["file"], read_at["pos"])
    assert [e["position"] for e in _named(events, "snapshot_started")] == [
        e["position"] for e in _named(events, "snapshot_only_done")
    ]
    assert not _named(events, "source_connected"), "it streamed"


def test_initial_only_with_a_stored_position_exits_0_without_publishing(db, tmp_path) -> None:
    conn, name = db
    _table(conn, "(1, 'a')")
    daemon = _daemon(tmp_path, 7732, "initial_only", name)
    assert daemon.run_to_exit(timeout=60).returncode == 0
    stored = daemon.position()
    _insert(conn, "(2, 'b')")
    again = daemon.run_to_exit(timeout=60)
    assert again.returncode == 0, again.stderr.decode()
    events = _events(again.stderr)
    assert [m["op"] for m in daemon.messages()] == ["r"]  # the first run's read only
    assert daemon.position() == stored
    assert len(_named(events, "snapshot_only_done")) == 1
    assert not _named(events, "snapshot_started") and not _named(events, "source_connected")


def test_no_data_reads_nothing_and_streams_later_changes_with_their_columns(db, tmp_path) -> None:
    conn, name = db
    _table(conn, "(1, 'a'), (2, 'b')")
    daemon = _daemon(tmp_path, 7733, "no_data", name)
    _streamed_once(daemon, conn, "(3, 'c')")
    with conn.cursor() as cur:
        cur.execute("UPDATE k SET v = 'z' WHERE id = 1")  # after the stop: the next run's
    assert [(m["op"], m["after"]) for m in daemon.messages()] == [("c", {"id": 3, "v": "c"})]
    assert daemon.count("snapshot_started") == 0 and daemon.count("position_initial") == 1
    # A restart resumes from the stored position, without reading either.
    _streamed_once(daemon, conn, "(4, 'd')")
    assert [(m["op"], m["after"]["id"]) for m in daemon.messages()] == [
        ("c", 3),
        ("u", 1),
        ("c", 4),
    ]


def test_schema_only_is_accepted_as_no_data_with_a_warning(db, tmp_path) -> None:
    conn, name = db
    _table(conn, "(1, 'a')")
    daemon = _daemon(tmp_path, 7734, "schema_only", name)
    _streamed_once(daemon, conn, "(2, 'b')")
    assert [m["op"] for m in daemon.messages()] == ["c"]
    assert "schema_only is Debezium's old name for no_data" in daemon.err.read_text()


def test_always_reads_the_tables_again_at_a_restart(db, tmp_path) -> None:
    """The second start replaces the stored position with a new snapshot's: the row written
    while the daemon was stopped comes as a read, not as a change, and the log says what was
    replaced."""
    conn, name = db
    _table(conn, "(1, 'a'), (2, 'b')")
    daemon = _daemon(tmp_path, 7735, "always", name)
    _streamed_once(daemon, conn, "(3, 'c')")
    first = daemon.position()
    _insert(conn, "(4, 'd')")
    _streamed_once(daemon, conn, "(5, 'e')")
    ops = [(m["op"], m["after"]["id"]) for m in daemon.messages()]
    assert ops == [("r", 1), ("r", 2), ("c", 3), ("r", 1), ("r", 2), ("r", 3), ("r", 4), ("c", 5)]
    replaced = [e for e in daemon.log_events() if e.get("event") == "position_replaced"]
    assert first is not None and len(replaced) == 1
    assert replaced[0]["position"].startswith(f"{first['file']}:{first['pos']}")


def test_recovery_rebuilds_a_deleted_history_and_resumes(db, tmp_path) -> None:
    conn, name = db
    _table(conn, "(1, 'a')")
    daemon = _daemon(tmp_path, 7736, "initial", name)
    _streamed_once(daemon, conn, "(2, 'b')")
    stored = daemon.position()
    history = tmp_path / "position.schema-history.json"
    history.unlink()
    _set_mode(daemon, "initial", "recovery")
    _insert(conn, "(3, 'c')")  # while stopped: streamed from the stored position
    _streamed_once(daemon, conn, "(4, 'd')")
    ops = [(m["op"], m["after"]) for m in daemon.messages()]
    assert ops == [
        ("r", {"id": 1, "v": "a"}),
        ("c", {"id": 2, "v": "b"}),
        ("c", {"id": 3, "v": "c"}),
        ("c", {"id": 4, "v": "d"}),
    ]
    missing = [e for e in daemon.log_events() if e.get("event") == "schema_history_missing"]
    assert len(missing) == 1 and missing[0]["level"] == "warning"
    assert missing[0]["store"] == f"file {daemon.position_file}"
    assert any(
        e.get("event") == "position_loaded" and e["position"].startswith(stored["file"])
        for e in daemon.log_events()
    )
    assert history.exists()  # rebuilt and stored again


@pytest.mark.parametrize("mode", ["initial", "never", "no_data", "when_needed"])
def test_a_deleted_history_stops_every_other_mode_with_78(db, tmp_path, mode) -> None:
    conn, name = db
    _table(conn, "(1, 'a')")
    daemon = _daemon(tmp_path, 7737, "initial", name)
    _streamed_once(daemon, conn, "(2, 'b')")
    (tmp_path / "position.schema-history.json").unlink()
    _set_mode(daemon, "initial", mode)
    published = len(daemon.messages())
    result = daemon.run_to_exit(timeout=60)
    assert result.returncode == 78, result.stderr.decode()
    fatal = _named(_events(result.stderr), "fatal")
    assert len(fatal) == 1 and fatal[0]["kind"] == "SchemaHistoryMissingError"
    assert f"store=file {daemon.position_file}" in fatal[0]["error"]
    assert "snapshot.mode: recovery" in fatal[0]["error"]
    assert len(daemon.messages()) == published


def _snapshot_cli(
    daemon: DaemonProcess, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "replicad.cli", "snapshot", *args, "-c", str(daemon.config)],
        cwd=ROOT,
        env={**daemon.env, **(env or {})},
        capture_output=True,
        timeout=60,
    )


def _signal_table(conn: Any, name: str) -> str:
    """Table k, the signal table and its grant (docs/snapshots.md); the snapshot.signal YAML."""
    _table(conn, "(1, 'a')")
    with conn.cursor() as cur:
        cur.execute(
            "CREATE TABLE replicad_signal (id VARCHAR(128) NOT NULL PRIMARY KEY, "
            "kind VARCHAR(16) NOT NULL, window_id VARCHAR(64) NOT NULL, "
            "at TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3))"
        )
        cur.execute(
            f"GRANT INSERT, UPDATE, DELETE ON `{name}`.replicad_signal TO 'repl'@'127.0.0.1'"
        )
    return f", signal: {{database: {name}, table: replicad_signal}}"


def test_cancel_of_an_unknown_id_is_refused_and_queues_nothing(db, tmp_path) -> None:
    """`snapshot cancel ID` looks the id up where the pipeline keeps it: the requests not taken
    yet, then the stored progress (queued, active, recently finished). An id in neither is
    refused with 64, like a request for an unknown table; nothing is queued."""
    conn, name = db
    signal = _signal_table(conn, name)
    daemon = _daemon(tmp_path, 7738, "never", name, signal)
    requests = tmp_path / "position.requests"

    def queued() -> list[str]:
        return sorted(p.name for p in requests.glob("req-*.json"))

    unknown = _snapshot_cli(daemon, "cancel", "snap-nope")
    assert unknown.returncode == 64, unknown.stderr.decode()
    assert b"snap-nope" in unknown.stderr and b"no snapshot request" in unknown.stderr
    assert queued() == []
    # Not taken yet (the daemon is stopped): known from the queue.
    requested = _snapshot_cli(daemon, "request", f"{name}.k", "--json")
    assert requested.returncode == 0, requested.stderr.decode()
    snap_id = json.loads(requested.stdout)["request"]["id"]
    assert _snapshot_cli(daemon, "cancel", snap_id).returncode == 0
    assert len(queued()) == 2
    # Taken and cancelled by the pipeline: known from the stored progress (recently finished).
    daemon.start()
    # The progress is stored with the next transaction's mark: write until one carried it.
    for row in range(2, 60):
        _insert(conn, f"({row}, 'x')")
        if queued() == []:
            break
        time.sleep(0.5)
    wait_for(lambda: queued() == [], 10, "the pipeline to take both requests")
    assert daemon.stop() == 0
    stored = json.loads(daemon.position_file.read_text())["position"]
    assert snap_id in stored["snapshot"] and "cancelled" in stored["snapshot"]
    again = _snapshot_cli(daemon, "cancel", snap_id)
    assert again.returncode == 0, again.stderr.decode()
    assert _snapshot_cli(daemon, "cancel", "snap-nope").returncode == 64


def test_cancel_of_an_unknown_id_is_refused_under_zookeeper(db, zookeeper, zk_root, tmp_path):
    """The same lookup in ZooKeeper: the pipeline's pending commands, then its position node."""
    conn, name = db
    daemon = _daemon(tmp_path, 7739, "never", name, _signal_table(conn, name))
    zk = {
        "REPLICAD_COORDINATION__ZOOKEEPER__HOSTS": zookeeper,
        "REPLICAD_COORDINATION__ZOOKEEPER__ROOT": zk_root,
    }
    unknown = _snapshot_cli(daemon, "cancel", "snap-nope", env=zk)
    assert unknown.returncode == 64, unknown.stderr.decode()
    assert b"snap-nope" in unknown.stderr
    requested = _snapshot_cli(daemon, "request", f"{name}.k", "--json", env=zk)
    assert requested.returncode == 0, requested.stderr.decode()
    snap_id = json.loads(requested.stdout)["request"]["id"]
    cancelled = _snapshot_cli(daemon, "cancel", snap_id, "--json", env=zk)
    assert cancelled.returncode == 0, cancelled.stderr.decode()
    waiting = json.loads(_snapshot_cli(daemon, "status", "--json", env=zk).stdout)["waiting"]
    assert [(w["op"], w["id"]) for w in waiting] == [
        ("snapshot", snap_id),
        ("snapshot-cancel", snap_id),
    ]  # the refused one was not queued
    assert not (tmp_path / "position.requests").exists()  # queued in ZooKeeper, not locally
