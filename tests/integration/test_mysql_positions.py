"""Positions on the real MySQL 9.7 (and MariaDB where the behaviour is shared): an operator's
`file:pos` must be an event boundary, a MySQL pipeline started at a file offset carries the
executed GTID set and resumes by GTID, and what the daemon logs about its start and its
binlog retention says something true."""

from __future__ import annotations

import json
from pathlib import Path

import pymysql
import pytest

from tests.helpers import mariadb as mariadb_helpers
from tests.helpers import mysql as mysql_helpers
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
