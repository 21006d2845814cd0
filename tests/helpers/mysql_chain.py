"""Private MySQL 9.7 servers for failover tests: a primary and a GTID auto-position replica of
it, each its own mysqld with its own data directory and port, run in the Debian sid root that
`scripts/services.sh up mysql` built (the shared server on 3307 is left alone; only its file
system is reused, since building another root takes minutes).

Like services-mysql.sh, every mysqld runs inside a private mount namespace that mounts /proc
and /dev in the root and chroots there (`unshare --mount`); no mount is made in the host's
namespace. A server's files live under /srv/chain-<port> in the root and are removed by
`down()`.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

import pymysql

from tests.helpers.daemon_process import wait_for
from tests.helpers.mysql import MYSQL_FS_ROOT
from tests.helpers.ports import free_port_block

# As services-mysql.sh: mount /proc and /dev in the root given as $1, then exec the rest there.
_IN_ROOT = (
    'r=$1; shift\nmount -t proc proc "$r/proc" && mount --rbind /dev "$r/dev" || exit 125\n'
    'exec chroot "$r" "$@"'
)

_USERS = """
CREATE USER 'root'@'127.0.0.1' IDENTIFIED BY 'root';
GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;
CREATE USER 'repl'@'127.0.0.1' IDENTIFIED BY 'repl';
GRANT REPLICATION SLAVE, REPLICATION CLIENT, SELECT ON *.* TO 'repl'@'127.0.0.1';
RESET BINARY LOGS AND GTIDS;
"""


def _in_root(*command: str) -> list[str]:
    return [
        "unshare", "--mount", "--propagation", "private", "--",
        "sh", "-c", _IN_ROOT, "sh", str(MYSQL_FS_ROOT), *command,
    ]  # fmt: skip


class PrivateMySQL:
    def __init__(self, server_id: int) -> None:
        self.server_id = server_id
        self.port = free_port_block(1)
        self.home = f"/srv/chain-{self.port}"  # as mysqld sees it, inside the root
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def _host_home(self) -> Path:
        return MYSQL_FS_ROOT / self.home.lstrip("/")

    def _cnf(self) -> str:
        home = self.home
        return (
            f"[mysqld]\nuser=mysql\ndatadir={home}/data\ntmpdir={home}/tmp\n"
            f"socket={home}/mysqld.sock\npid-file={home}/mysqld.pid\n"
            f"log-error={home}/error.log\nsecure-file-priv={home}/tmp\n"
            f"port={self.port}\nbind-address=127.0.0.1\n"
            f"mysqlx=OFF\nskip-name-resolve\nserver-id={self.server_id}\n"
            f"log-bin={home}/data/binlog\nbinlog_row_metadata=FULL\ngtid_mode=ON\n"
            "enforce_gtid_consistency=ON\nlog_replica_updates=ON\n"
            "character_set_server=utf8mb4\ninnodb_buffer_pool_size=32M\n"
            "innodb_redo_log_capacity=32M\nperformance_schema=OFF\n"
        )

    def up(self) -> None:
        if not (MYSQL_FS_ROOT / "usr/sbin/mysqld").exists():
            raise AssertionError(
                f"no MySQL root at {MYSQL_FS_ROOT}: run scripts/services.sh up mysql"
            )
        (self._host_home / "tmp").mkdir(parents=True)
        (self._host_home / "my.cnf").write_text(self._cnf())
        cnf = f"--defaults-file={self.home}/my.cnf"
        subprocess.run(
            ["chroot", str(MYSQL_FS_ROOT), "chown", "-R", "mysql:mysql", self.home], check=True
        )
        self._run(_in_root("/usr/sbin/mysqld", cnf, "--initialize-insecure"), "initialize")
        log = open(self._host_home / "mysqld.out", "wb")
        self.proc = subprocess.Popen(
            _in_root("/usr/sbin/mysqld", cnf), stdout=log, stderr=log, start_new_session=True
        )
        wait_for(self._answers, 90, f"private mysqld on {self.port}")
        self._run(
            _in_root("mysql", "--no-defaults", f"--socket={self.home}/mysqld.sock", "-uroot"),
            "create users",
            stdin=_USERS,
        )

    def _run(self, command: list[str], what: str, stdin: str | None = None) -> None:
        done = subprocess.run(command, input=stdin, capture_output=True, text=True)
        if done.returncode != 0:
            errors = (self._host_home / "error.log").read_text(errors="replace")[-2000:]
            raise AssertionError(f"{what} failed: {done.stderr[-1000:]}\n{errors}")

    def _answers(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"mysqld exited {self.proc.returncode}: see {self._host_home}")
        return (self._host_home / "mysqld.sock").exists()

    def connect(self) -> pymysql.connections.Connection:
        return pymysql.connect(
            host="127.0.0.1", port=self.port, user="root", password="root",
            charset="utf8mb4", autocommit=True, connect_timeout=5,
        )  # fmt: skip

    def kill(self) -> None:
        """SIGKILL (a crash, no shutdown) and wait for the process to be gone."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)

    def down(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.kill()
        shutil.rmtree(self._host_home, ignore_errors=True)


def scalar(server: PrivateMySQL, sql: str) -> str:
    conn = server.connect()
    try:
        with conn.cursor() as cur:
            cur.execute(sql)
            row = cur.fetchone()
            return "" if row is None or row[0] is None else str(row[0])
    finally:
        conn.close()


def _execute(server: PrivateMySQL, *statements: str) -> None:
    conn = server.connect()
    try:
        with conn.cursor() as cur:
            for statement in statements:
                cur.execute(statement)
    finally:
        conn.close()


def follow(replica: PrivateMySQL, primary: PrivateMySQL) -> None:
    """`replica` replicates `primary` by GTID auto-position (both start with empty GTID sets,
    their users made before the sets were reset)."""
    _execute(
        replica,
        f"CHANGE REPLICATION SOURCE TO SOURCE_HOST='127.0.0.1', SOURCE_PORT={primary.port}, "
        "SOURCE_USER='repl', SOURCE_PASSWORD='repl', SOURCE_AUTO_POSITION=1, "
        "GET_SOURCE_PUBLIC_KEY=1",
        "START REPLICA",
    )


def caught_up(replica: PrivateMySQL, primary: PrivateMySQL, timeout: float = 30) -> None:
    target = scalar(primary, "SELECT @@gtid_executed")
    wait_for(
        lambda: scalar(replica, f"SELECT GTID_SUBSET('{target}', @@gtid_executed)") == "1",
        timeout,
        f"the replica to reach {target}",
    )


def stop_following(replica: PrivateMySQL) -> None:
    _execute(replica, "STOP REPLICA")


def promote(replica: PrivateMySQL) -> None:
    _execute(replica, "STOP REPLICA", "RESET REPLICA ALL")
