"""`source.query`, the statement logged with the rows, on the real servers: off by default
(Debezium's `include.query`), so a client's multi-row INSERT is not repeated in each of its
rows' messages; with `envelope.include_query: true` every row carries exactly the statement
the client sent. MariaDB logs it by default (`binlog_annotate_row_events`) and sends it only
to a replica that asks; MySQL logs it with `binlog_rows_query_log_events` (set here for the
writing session only). `replicad dump` follows the same default (`--include-query`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pymysql
import pytest

from tests.helpers.binlog_helpers import binlog_files_since
from tests.helpers.daemon_process import wait_for
from tests.helpers.databases import fresh_database
from tests.helpers.mariadb import connect_root as mariadb_root
from tests.helpers.mariadb_run import Replicad
from tests.helpers.mysql import MYSQL_PORT, binlog_position, ensure_mysql, mysql
from tests.helpers.mysql import connect_root as mysql_root

pytestmark = pytest.mark.integration
__all__ = ["mysql"]  # a fixture, used by name

ROOT = Path(__file__).resolve().parents[2]
ROWS = 40
Conn = pymysql.connections.Connection


def _position(conn: Conn, flavour: str) -> tuple[str, int]:
    if flavour == "mysql":
        return binlog_position(conn)
    with conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        row = cur.fetchone()
    return str(row[0]), int(row[1])


def _write(conn: Conn, flavour: str) -> list[str]:
    """A client library's multi-row INSERT (PyMySQL's executemany), then an UPDATE; returns
    the two statements as the server received them."""
    with conn.cursor() as cur:
        if flavour == "mysql":
            cur.execute("SET SESSION binlog_rows_query_log_events = ON")
        else:
            cur.execute("SELECT @@binlog_annotate_row_events")
            assert cur.fetchone()[0] == 1, "MariaDB's default annotates rows"
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, note VARCHAR(40))")
        cur.executemany(
            "INSERT INTO t (id, note) VALUES (%s, %s)",
            [(i, f"row number {i}") for i in range(1, ROWS + 1)],
        )
        insert = bytes(cur._executed).decode()  # the one statement PyMySQL built
        update = "UPDATE t SET note = 'changed' WHERE id <= 3"
        cur.execute(update)
    assert insert.count("),(") == ROWS - 1, insert[:200]
    return [insert, update]


def _queries(changes: list[dict[str, Any]], db: str) -> list[str | None]:
    rows = [c for c in changes if c["source"]["db"] == db and c.get("op") in ("c", "u", "d")]
    return [c["source"]["query"] for c in rows]


def _expected(statements: list[str]) -> list[str]:
    return [statements[0]] * ROWS + [statements[1]] * 3


@pytest.mark.parametrize("flavour", ["mariadb", "mysql"])
def test_the_statement_is_published_only_when_asked(
    flavour: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    request.getfixturevalue(flavour)  # the server is up, or the test fails saying why
    connect = mysql_root if flavour == "mysql" else mariadb_root
    port = {"port": MYSQL_PORT} if flavour == "mysql" else {}
    base = 7960 if flavour == "mysql" else 7970
    for name in ("default", "asked"):
        (tmp_path / name).mkdir()
    default = Replicad(tmp_path / "default", server_id=base, **port)
    asked = Replicad(tmp_path / "asked", server_id=base + 1, **port)
    asked.config.write_text(asked.config.read_text() + "envelope: {include_query: true}\n")
    for daemon in (default, asked):
        daemon.start()
    try:
        with fresh_database(connect) as (conn, db):
            start = _position(conn, flavour)
            statements = _write(conn, flavour)
            for daemon in (default, asked):
                wait_for(
                    lambda d=daemon: len(_queries(d.changes(), db)) >= ROWS + 3,
                    60,
                    f"{ROWS + 3} rows of {db}",
                )
            dumped = {f: _dump(conn, flavour, start, db, f) for f in ((), ("--include-query",))}
    finally:
        for daemon in (default, asked):
            assert daemon.stop() == 0
    assert _queries(default.changes(), db) == [None] * (ROWS + 3)
    assert _queries(asked.changes(), db) == _expected(statements)
    assert _queries(dumped[()], db) == [None] * (ROWS + 3)
    assert _queries(dumped[("--include-query",)], db) == _expected(statements)


def _dump(conn: Conn, flavour: str, start: tuple[str, int], db: str, flags: tuple[str, ...]):
    """`replicad dump` of the binlog from `start`: the messages it prints."""
    if flavour == "mysql":
        binlog_dir = ensure_mysql().binlog_dir
    else:
        with conn.cursor() as cur:
            cur.execute("SELECT @@log_bin_basename")
            binlog_dir = Path(str(cur.fetchone()[0])).parent
    files = [str(binlog_dir / name) for name in binlog_files_since(conn, start[0])]
    command = [sys.executable, "-m", "replicad.cli", "dump", "--start-position", str(start[1])]
    result = subprocess.run(
        [*command, *flags, *files], capture_output=True, cwd=ROOT, timeout=120, env=os.environ
    )
    assert result.returncode == 0, result.stderr.decode()
    return [orjson.loads(line) for line in result.stdout.splitlines()]
