"""Two private MariaDB servers in a replication chain (a primary and a GTID replica of it),
started by scripts/services.sh with private state dirs and ports, for failover tests."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from tests.faults.test_primary_restart import PrivateMariaDB
from tests.helpers.daemon_process import wait_for
from tests.helpers.failover import scalar
from tests.helpers.ports import free_port_block


def private_mariadb(state: Path, *, server_id: int, replica: bool) -> PrivateMariaDB:
    server = PrivateMariaDB(state, free_port_block(1))
    server.env["REPLICAD_MARIADB_SERVER_ID"] = str(server_id)
    # A replica's binlog must hold the primary's GTIDs to be able to serve them once promoted.
    server.env["REPLICAD_MARIADB_LOG_SLAVE_UPDATES"] = "ON" if replica else "OFF"
    return server


def follow(replica: PrivateMariaDB, primary: PrivateMariaDB) -> None:
    """Make `replica` replicate `primary` by GTID from the primary's current state (each
    server's own setup transactions stay out of the other's binlog)."""
    state = scalar(primary, "SELECT @@gtid_binlog_pos")
    conn = replica.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("RESET MASTER")
            cur.execute(f"SET GLOBAL gtid_binlog_state = '{state}'")
            cur.execute(f"SET GLOBAL gtid_slave_pos = '{state}'")
            cur.execute(
                f"CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT={primary.port}, "
                "MASTER_USER='repl', MASTER_PASSWORD='repl', MASTER_USE_GTID=slave_pos"
            )
            cur.execute("START SLAVE")
    finally:
        conn.close()


def caught_up(replica: PrivateMariaDB, primary: PrivateMariaDB, timeout: float = 30) -> None:
    target = scalar(primary, "SELECT @@gtid_binlog_pos")
    wait_for(
        lambda: scalar(replica, "SELECT @@gtid_binlog_pos") == target,
        timeout,
        f"the replica to reach {target}",
    )


def stop_following(replica: PrivateMariaDB) -> None:
    conn = replica.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("STOP SLAVE")
    finally:
        conn.close()


def promote(replica: PrivateMariaDB) -> None:
    conn = replica.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("STOP SLAVE")
            cur.execute("RESET SLAVE ALL")
    finally:
        conn.close()


def kill(server: PrivateMariaDB) -> None:
    """SIGKILL the server (no shutdown: a crash), then wait until its port is closed."""
    pid_file = Path(server.env["REPLICAD_SERVICES_DIR"]) / "mariadb" / "mariadb.pid"
    pid = int(pid_file.read_text().strip())
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    raise AssertionError(f"mariadbd {pid} still alive after SIGKILL")
