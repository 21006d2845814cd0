"""A full disk under `replicad run`: the relay directory and the position file on a small
tmpfs that fills up while rows arrive. The daemon stops with an error that names the path, the
stored position never moves past what was delivered, and once space is freed a restart
delivers every row (issue 37, item 3)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from replicad.exit_codes import EXIT_TEMPFAIL
from tests.helpers.daemon_process import DaemonProcess, kill_leftovers, wait_for
from tests.helpers.databases import fresh_database
from tests.helpers.mariadb import MARIADB_PORT
from tests.helpers.mariadb import connect_root as mariadb_root
from tests.helpers.small_disk import SmallDiskError, fill, mounted_tmpfs

pytestmark = pytest.mark.faults
ROWS = 400


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    try:
        with mounted_tmpfs(tmp_path / "disk") as mount:
            try:
                yield mount
            finally:
                kill_leftovers()
    except SmallDiskError as exc:
        raise AssertionError(str(exc)) from exc


def _daemon(tmp: Path, disk: Path, db: str, placed: str) -> DaemonProcess:
    """`placed`: what lives on the small disk - the relay and the position file, the position
    file alone (no relay), or the JSON-lines output the sink writes."""
    relay = (
        f"relay: {{enabled: true, directory: '{disk / 'relay'}', fsync: transaction,"
        " segment_bytes: 262144}\n"
        if placed == "relay"
        else ""
    )
    out = disk / "changes.jsonl" if placed == "sink" else tmp / "changes.jsonl"
    daemon = DaemonProcess(
        tmp,
        pipeline="diskfull",
        source_yaml=f"  host: 127.0.0.1\n  port: {MARIADB_PORT}\n  user: repl\n  server_id: 7390\n"
        "  start: latest\n  reconnect: {initial_s: 0.05, max_s: 0.5}\n",
        password="repl",
        sinks_yaml=f"  stdout: {{path: {out}}}",
        extra_yaml=f"filters: {{include: ['{db}\\..*']}}\ncheckpoint: {{interval_s: 0.1}}\n"
        + relay,
    )
    daemon.out = out
    if placed != "sink":
        daemon.position_file = disk / "position.json"
        config = daemon.config.read_text()
        daemon.config.write_text(
            config.replace(str(tmp / "position.json"), str(daemon.position_file))
        )
    return daemon


def _ids(daemon: DaemonProcess) -> list[int]:
    return [m["after"]["id"] for m in daemon.changes() if m["op"] == "c"]


@pytest.mark.parametrize("placed", ["relay", "position", "sink"])
def test_a_full_disk_stops_with_the_path_and_a_restart_loses_nothing(
    tmp_path: Path, small_disk: Path, placed: str
) -> None:
    with fresh_database(mariadb_root) as (conn, db):
        with conn.cursor() as cur:
            cur.execute("CREATE TABLE t (id INT PRIMARY KEY, pad VARCHAR(2000))")
        daemon = _daemon(tmp_path, small_disk, db, placed)
        daemon.start()
        with conn.cursor() as cur:
            cur.execute("INSERT INTO t VALUES (0, 'before')")
        wait_for(lambda: _ids(daemon) == [0], 20, "the first row")
        wait_for(lambda: (daemon.position() or {}).get("file") is not None, 10, "a position")
        filler = fill(small_disk)
        committed = {}  # id -> the sequence number of its transaction's GTID
        with conn.cursor() as cur:
            for i in range(1, ROWS + 1):
                cur.execute("INSERT INTO t VALUES (%s, REPEAT('x', 2000))", (i,))
                cur.execute("SELECT @@last_gtid")
                committed[i] = int(str(cur.fetchone()[0]).split("-")[2])
        assert daemon.proc is not None
        daemon.proc.wait(timeout=60)
        log = daemon.err.read_text()
        assert daemon.proc.returncode == EXIT_TEMPFAIL, log[-3000:]
        assert "No space left on device" in log or "ENOSPC" in log, log[-3000:]
        assert str(small_disk) in log, f"the error does not name the path:\n{log[-3000:]}"
        delivered = set(_ids(daemon))
        stored = daemon.position()  # whole: the old record or the new one
        assert stored is not None
        # The position never passed a row that did not reach the output.
        stored_seq = int(stored["mariadb_gtid"].split("-")[2])
        passed = {i for i, seq in committed.items() if seq <= stored_seq}
        assert passed <= delivered, f"stored {stored}, rows not delivered: {passed - delivered}"
        # Free the disk and start again: every row arrives, the first ones not lost.
        os.unlink(filler)
        daemon.start()
        wait_for(lambda: set(_ids(daemon)) >= set(range(ROWS + 1)), 60, "every row after restart")
        assert delivered <= set(range(ROWS + 1))
        assert daemon.stop() == 0
