"""Positions on the real MySQL 9.7 (and MariaDB where the behaviour is shared): an operator's
`file:pos` must be an event boundary, a MySQL pipeline started at a file offset carries the
executed GTID set and resumes by GTID, and what the daemon logs about its start and its
binlog retention says something true."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pymysql
import pytest

from tests.helpers import mariadb as mariadb_helpers
from tests.helpers import mysql as mysql_helpers
from tests.helpers.daemon_process import wait_for
from tests.helpers.mariadb_run import Replicad
from tests.helpers.mysql import MYSQL_PORT, mysql, mysql_db
from tests.helpers.position_cli import cli

pytestmark = pytest.mark.integration
__all__ = ["mysql", "mysql_db"]  # fixtures, used by name


def _events(conn: pymysql.connections.Connection, file: str) -> list[tuple[int, int, str]]:
    """(start, end, type) of the first events of `file`, as the server lists them."""
    with conn.cursor() as cur:
        cur.execute(f"SHOW BINLOG EVENTS IN '{file}' LIMIT 8")
        return [(int(r[1]), int(r[4]), str(r[2])) for r in cur.fetchall()]


def _inside_offsets(events: list[tuple[int, int, str]]) -> list[tuple[int, int, int]]:
    """(offset inside an event, the boundary before, the one after) for every listed event
    longer than one byte after the first (the format description)."""
    return [(start + 1, start, end) for start, end, _ in events[1:] if end - start > 1]


@pytest.mark.parametrize("flavour", ["mysql", "mariadb"])
def test_set_refuses_an_offset_inside_an_event(
    flavour: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    if flavour == "mysql":
        request.getfixturevalue("mysql")
        conn = mysql_helpers.connect_root()
        file, _ = mysql_helpers.binlog_position(conn)
        replicad = Replicad(tmp_path, server_id=7401, port=MYSQL_PORT)
    else:
        request.getfixturevalue("mariadb")
        conn = mariadb_helpers.connect_root()
        with conn.cursor() as cur:
            cur.execute("SHOW MASTER STATUS")
            file = str(cur.fetchone()[0])
        replicad = Replicad(tmp_path, server_id=7402)
    events = _events(conn, file)
    conn.close()
    offsets = _inside_offsets(events)
    assert offsets, f"{file} lists no event to aim inside: {events}"
    for inside, before, after in offsets:
        out = cli(replicad, "position", "set", f"{file}:{inside}")
        assert out.returncode == 64, (inside, out.returncode, out.stdout, out.stderr)
        assert "not the start of an event" in out.stderr, out.stderr
        assert f"{file}:{before} and {file}:{after}" in out.stderr, (events, out.stderr)
        assert not replicad.position_file.exists(), f"{file}:{inside} wrote a position"
    # The boundaries it names are accepted.
    _, before, after = offsets[0]
    for pos in (4, before, after):
        out = cli(replicad, "position", "set", f"{file}:{pos}", "--json")
        assert out.returncode == 0, (pos, out.stderr)
        assert json.loads(out.stdout)["new"]["pos"] == pos


def _executed(conn: pymysql.connections.Connection) -> str:
    with conn.cursor() as cur:
        cur.execute("SELECT @@GLOBAL.gtid_executed")
        return str(cur.fetchone()[0]).replace("\n", "")


def _ids(replicad: Replicad, db: str) -> list[int]:
    return [c["after"]["id"] for c in replicad.changes() if c["source"]["db"] == db]


@pytest.mark.serial  # compares with the server-wide @@gtid_executed: needs a quiet primary
def test_a_file_start_carries_the_gtid_set_and_resumes_by_gtid(
    mysql_db: tuple[pymysql.connections.Connection, str], tmp_path: Path
) -> None:
    conn, db = mysql_db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY)")
    file, pos = mysql_helpers.binlog_position(conn)
    replicad = Replicad(
        tmp_path, server_id=7403, port=MYSQL_PORT, start=f"{{file: {file}, pos: {pos}}}"
    )
    replicad.start()
    with conn.cursor() as cur:
        for i in range(1, 6):
            cur.execute("INSERT INTO t VALUES (%s)", (i,))
    wait_for(lambda: len(_ids(replicad, db)) == 5, 30, "the first five rows")
    executed = _executed(conn)
    wait_for(
        lambda: (replicad.position() or {}).get("gtid_set") == executed,
        20,
        f"the stored position to carry the executed set {executed}: {replicad.position()}",
    )
    assert replicad.stop() == 0
    assert (replicad.position() or {}).get("gtid_set") == _executed(conn)
    with conn.cursor() as cur:  # while it is stopped
        for i in range(6, 9):
            cur.execute("INSERT INTO t VALUES (%s)", (i,))
    replicad.start()
    wait_for(lambda: len(_ids(replicad, db)) >= 8, 30, "the rows written while stopped")
    connected = [e for e in replicad.log_events() if e["event"] == "source_connected"]
    assert connected[-1]["dump"] == "gtid", connected[-1]
    assert "gtid=" in connected[-1]["start"], connected[-1]
    assert replicad.stop() == 0
    assert _ids(replicad, db) == list(range(1, 9)), "lost or repeated rows across the restart"


def test_an_empty_gtid_start_says_so(mysql: mysql_helpers.MySQLServer, tmp_path: Path) -> None:
    replicad = Replicad(tmp_path, server_id=7404, port=MYSQL_PORT, start="{gtid: ''}")
    replicad.start()
    stopped = replicad.stop()
    events = replicad.log_events()
    (connected, *_) = [e for e in events if e["event"] == "source_connected"]
    assert connected["start"] == "gtid:(empty)", connected
    assert connected["dump"] == "gtid", connected
    if stopped != 0:
        # An empty set asks for every transaction: once test_mysql_purged has purged the
        # shared server's first binlogs, the server refuses it, and that must be said.
        fatal = [e for e in events if e["event"] == "fatal"]
        assert [e["kind"] for e in fatal] == ["PositionLostError"], events[-3:]
        assert "gtid:(empty)" in fatal[0]["error"], fatal


def test_no_retention_warning_for_young_binlogs(
    mysql: mysql_helpers.MySQLServer, tmp_path: Path
) -> None:
    """MySQL's default expiry (720 h, auto purge on) takes a file once it is that old: a
    stored position one file after the oldest is not near purging on a server younger than
    that, however few files precede it."""
    conn = mysql_helpers.connect_root()
    with conn.cursor() as cur:
        cur.execute("SELECT @@binlog_expire_logs_seconds, @@binlog_expire_logs_auto_purge")
        assert cur.fetchone() == (2592000, 1), "this test needs MySQL's default expiry"
        cur.execute("SHOW BINARY LOGS")
        logs = [row[0] for row in cur.fetchall()]
        if len(logs) < 2:
            cur.execute("FLUSH BINARY LOGS")
            logs.append(mysql_helpers.binlog_position(conn)[0])
    conn.close()
    file = logs[min(1, len(logs) - 2)]  # at most one file before it, and not the newest
    replicad = Replicad(
        tmp_path, server_id=7405, port=MYSQL_PORT, start=f"{{file: {file}, pos: 4}}"
    )
    replicad.config.write_text(
        replicad.config.read_text() + "heartbeat: {retention_check_s: 0.2}\n"
    )
    assert cli(replicad, "position", "set", f"{file}:4").returncode == 0
    replicad.start()
    try:
        wait_for(
            lambda: (
                (replicad.position() or {}).get("file") != file
                or replicad.count("binlog_retention_near") > 0
            ),
            30,
            "the pipeline to read past the file",
        )
        time.sleep(1)  # a few more checks
    finally:
        assert replicad.stop() == 0
    warned = [e for e in replicad.log_events() if e["event"] == "binlog_retention_near"]
    assert warned == [], warned
