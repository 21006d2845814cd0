"""The real Oracle MySQL (9.7, Debian sid in a chroot) that `scripts/services.sh up mysql`
starts on 127.0.0.1:$REPLICAD_MYSQL_PORT (default 3307): connections, its binlog files as seen
from the host, and the fixtures of tests/integration/test_mysql_*.py.

The fixtures never skip: a MySQL test that cannot reach the server fails and says why (a
skipped test would hide that CI no longer runs against MySQL at all). Import the fixtures
into a test module to use them (`from tests.helpers.mysql import mysql, mysql_db`).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pymysql
import pytest

from tests.helpers.databases import fresh_database

ROOT = Path(__file__).resolve().parents[2]
MYSQL_PORT = int(os.environ.get("REPLICAD_MYSQL_PORT", "3307"))
# services-mysql.sh keeps the server's whole file system (a debootstrap root) here.
MYSQL_FS_ROOT = Path(os.environ.get("REPLICAD_SERVICES_DIR", ROOT / ".services")) / "mysql/root"


def connect_root(**kwargs: object) -> pymysql.connections.Connection:
    return pymysql.connect(
        host="127.0.0.1",
        port=MYSQL_PORT,
        user="root",
        password="root",
        charset="utf8mb4",
        autocommit=True,
        connect_timeout=5,
        **kwargs,  # type: ignore[arg-type]
    )


def binlog_position(conn: pymysql.connections.Connection) -> tuple[str, int]:
    """The current binlog file and offset: MySQL 8.4 removed SHOW MASTER STATUS."""
    with conn.cursor() as cur:
        cur.execute("SHOW BINARY LOG STATUS")
        row = cur.fetchone()
    return row[0], int(row[1])


@dataclass(frozen=True)
class MySQLServer:
    port: int
    version: str
    binlog_dir: Path  # on the host: the server's binlog directory inside its root


def _describe() -> MySQLServer:
    conn = connect_root()
    try:
        with conn.cursor() as cur:
            cur.execute(
                "SELECT @@version, @@log_bin_basename, @@binlog_format, @@binlog_row_image,"
                " @@binlog_row_metadata"
            )
            version, basename, *settings = cur.fetchone()
    finally:
        conn.close()
    assert settings == ["ROW", "FULL", "FULL"], f"MySQL on {MYSQL_PORT} logs {settings}"
    return MySQLServer(MYSQL_PORT, version, MYSQL_FS_ROOT / Path(basename).parent.relative_to("/"))


def ensure_mysql() -> MySQLServer:
    """The running MySQL, started by scripts/services.sh if it does not answer; a test
    failure (never a skip) naming the reason when it cannot be had."""
    try:
        return _describe()
    except pymysql.err.OperationalError:
        pass
    started = subprocess.run(
        ["bash", str(ROOT / "scripts/services.sh"), "up", "mysql"],
        capture_output=True,
        text=True,
        check=False,
    )
    if started.returncode != 0:
        tail = "\n".join(started.stderr.strip().splitlines()[-12:])
        pytest.fail(
            f"MySQL is not up on 127.0.0.1:{MYSQL_PORT} and `scripts/services.sh up mysql`"
            f" failed (exit {started.returncode}):\n{tail}",
            pytrace=False,
        )
    return _describe()


@pytest.fixture(scope="session")
def mysql() -> MySQLServer:
    """The shared MySQL 9.7 (binlog_format ROW, FULL images and metadata, GTIDs on)."""
    return ensure_mysql()


@pytest.fixture
def mysql_db(mysql: MySQLServer) -> Iterator[tuple[pymysql.connections.Connection, str]]:
    """A root connection to a fresh, uniquely named database on MySQL, dropped afterwards."""
    with fresh_database(connect_root) as database:
        yield database
