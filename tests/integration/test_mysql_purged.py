"""A stored GTID position whose transactions MySQL 9.7 has since purged: the real server's
ERR 1236 must end the run at once with exit 78, saying the position was purged and naming
it, and must not move the stored position (tests/integration/test_mysql8_peer.py proves the
same against a scripted peer; this is the server itself).

Serial: it purges the shared server's binary logs, which a test reading binlog files
beside it (the differential `dump` tests) would lose."""

from __future__ import annotations

from pathlib import Path

import pymysql
import pytest

from tests.helpers.daemon_process import wait_for
from tests.helpers.mariadb_run import Replicad
from tests.helpers.mysql import MYSQL_PORT, binlog_position, mysql, mysql_db

pytestmark = [pytest.mark.integration, pytest.mark.serial]
__all__ = ["mysql", "mysql_db"]  # fixtures, used by name

Db = tuple[pymysql.connections.Connection, str]


def _executed(conn: pymysql.connections.Connection) -> str:
    with conn.cursor() as cur:
        cur.execute("SELECT @@global.gtid_executed")
        return str(cur.fetchone()[0]).replace("\n", "")


def _subset(conn: pymysql.connections.Connection, inner: str, outer: str) -> bool:
    with conn.cursor() as cur:
        cur.execute("SELECT GTID_SUBSET(%s, %s)", (inner, outer))
        return bool(cur.fetchone()[0])


def _purge_all_but_the_current_file(conn: pymysql.connections.Connection) -> str:
    """Rotate, then purge every file before the new one; the server's gtid_purged now
    holds everything written so far."""
    with conn.cursor() as cur:
        cur.execute("FLUSH BINARY LOGS")
        current, _ = binlog_position(conn)
        cur.execute(f"PURGE BINARY LOGS TO '{current}'")
        cur.execute("SELECT @@global.gtid_purged")
        return str(cur.fetchone()[0]).replace("\n", "")


def test_a_purged_gtid_position_exits_78_naming_it_and_keeps_it(
    mysql_db: Db, tmp_path: Path
) -> None:
    conn, db = mysql_db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY)")
    replicad = Replicad(tmp_path, server_id=7951, port=MYSQL_PORT)
    replicad.start()
    try:
        with conn.cursor() as cur:
            cur.execute("INSERT INTO t VALUES (1)")
        executed = _executed(conn)
        wait_for(
            lambda: _subset(conn, executed, (replicad.position() or {}).get("gtid_set", "")),
            60,
            f"the stored position to reach {executed}",
        )
    finally:
        assert replicad.stop() == 0
    stored = replicad.position()
    assert stored is not None and stored["gtid_set"], stored
    with conn.cursor() as cur:  # written while replicad is stopped, then purged
        cur.execute("INSERT INTO t VALUES (2)")
    purged = _purge_all_but_the_current_file(conn)
    assert not _subset(conn, purged, stored["gtid_set"]), (purged, stored)

    result = replicad.run_to_exit(timeout=60)

    stderr = result.stderr.decode()
    assert result.returncode == 78, stderr
    assert "purged" in stderr, stderr
    # the advice for a lost position (a non-purge ERR 1236 must not give it: test_mysql8_peer)
    assert "Re-snapshot" in stderr, stderr
    first_range = stored["gtid_set"].split(",")[0]
    assert first_range in stderr, f"the message names the lost position {first_range}: {stderr}"
    assert replicad.position() == stored, "a refused start must not move the position"
    inserted = [c["after"]["id"] for c in replicad.changes() if c["source"]["db"] == db]
    assert inserted == [1], "nothing after the purge may be published"
