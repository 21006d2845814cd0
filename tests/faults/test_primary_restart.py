"""The primary restarted under `replicad run`, and binlogs purged past the stored position.

These tests start their own private MariaDB (scripts/services.sh with a private state dir and
port) so that restarting it does not disturb the shared server other tests use.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pymysql
import pytest

from tests.helpers.daemon_process import wait_for
from tests.helpers.mariadb_run import Replicad, assert_converged, duplicates, random_workload
from tests.helpers.ports import free_port_block
from tests.helpers.private_mariadb import PrivateMariaDB

pytestmark = pytest.mark.faults
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def primary(tmp_path_factory) -> Iterator[PrivateMariaDB]:
    server = PrivateMariaDB(tmp_path_factory.mktemp("mariadb"), free_port_block(1))
    server.up()
    try:
        yield server
    finally:
        server.down()


@pytest.fixture
def workdb(primary: PrivateMariaDB) -> Iterator[tuple[pymysql.connections.Connection, str]]:
    conn = primary.connect()
    name = f"r_{os.getpid()}_{int(time.time() * 1000) % 100000}"
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {name}")
        cur.execute(f"CREATE TABLE {name}.a (id INT PRIMARY KEY, v VARCHAR(40), n BIGINT)")
        cur.execute(
            f"CREATE TABLE {name}.b (k VARCHAR(20) PRIMARY KEY, d DECIMAL(10,2), t DATETIME(3))"
        )
    yield conn, name
    conn.close()


def _resumes(replicad: Replicad) -> list[dict]:
    return [e for e in replicad.log_events() if e["event"] == "source_resumed"]


@pytest.mark.parametrize("how", ["restart", "crash"])
def test_primary_restarted_twice_under_load(
    primary: PrivateMariaDB, workdb, tmp_path, how: str
) -> None:
    """`restart`: a clean shutdown. `crash`: SIGKILL with the writer inside transactions;
    the recovered primary keeps exactly the transactions whose binlog events are whole, and
    the topics must fold to its tables: nothing it rolled back was published, nothing lost."""
    _, db = workdb
    replicad = Replicad(tmp_path, server_id=5301, port=primary.port)
    replicad.start()
    stop = threading.Event()
    committed = 0

    def writer() -> None:
        nonlocal committed
        seed = 0
        while not stop.is_set():
            try:
                conn = primary.connect()
                while not stop.is_set():
                    seed += 1
                    random_workload(conn, db, transactions=1, seed=seed)
                    committed += 1
            except pymysql.err.Error:
                time.sleep(0.1)  # the server is restarting

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        for _ in range(2):
            wait_for(lambda: committed > 20, 30, "some transactions before the restart")
            resumes = len(_resumes(replicad))
            primary.crash() if how == "crash" else primary.down()
            time.sleep(0.5)
            primary.up()
            target = committed + 20
            wait_for(lambda target=target: committed > target, 60, "writes after the restart")
            wait_for(
                lambda resumes=resumes: len(_resumes(replicad)) > resumes,
                60,
                "replicad to reconnect after the restart",
            )
    finally:
        stop.set()
        thread.join(30)
    conn = primary.connect()
    try:
        assert_converged(replicad, conn, db, timeout=90)
    finally:
        conn.close()
        assert replicad.stop() == 0
    reconnects = [e for e in replicad.log_events() if e["event"] == "source_resumed"]
    assert len(reconnects) >= 2, "each restart must have cost replicad its connection"
    assert duplicates(replicad.changes(), db) == 0


def test_binlogs_purged_past_the_position(primary: PrivateMariaDB, workdb, tmp_path) -> None:
    conn, db = workdb
    replicad = Replicad(tmp_path, server_id=5302, port=primary.port)
    replicad.start()
    random_workload(conn, db, transactions=5, seed=1)
    assert_converged(replicad, conn, db)
    assert replicad.stop(signal.SIGTERM) == 0
    # While replicad is down: more changes, rotations, and a purge of everything before.
    random_workload(conn, db, transactions=5, seed=2)
    with conn.cursor() as cur:
        cur.execute("FLUSH BINARY LOGS")
        random_workload(conn, db, transactions=2, seed=3)
        cur.execute("FLUSH BINARY LOGS")
        cur.execute("SHOW MASTER STATUS")
        (current, _pos, *_rest) = cur.fetchone()
        cur.execute(f"PURGE BINARY LOGS TO '{current}'")
    result = subprocess.run(
        [sys.executable, "-m", "replicad.cli", "run", "-c", str(replicad.config)],
        cwd=ROOT,
        env={**os.environ, "TEST_REPLICAD_PASSWORD": "repl"},
        capture_output=True,
        timeout=60,
    )
    assert result.returncode == 78, result.stderr.decode()[-2000:]
    err = result.stderr.decode()
    assert "purged" in err and "Re-snapshot" in err
