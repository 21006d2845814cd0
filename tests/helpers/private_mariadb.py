"""A MariaDB of a test's own (scripts/services.sh with a private state directory and port), so
that restarting it disturbs no other test using the shared server."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pymysql

from tests.helpers.daemon_process import ROOT, wait_for


class PrivateMariaDB:
    def __init__(self, state: Path, port: int) -> None:
        self.env = {
            **os.environ,
            "REPLICAD_SERVICES_DIR": str(state),
            "REPLICAD_MARIADB_PORT": str(port),
        }
        self.port = port
        self.pid_file = state / "mariadb" / "mariadb.pid"

    def _services(self, command: str) -> None:
        subprocess.run(
            ["bash", str(ROOT / "scripts/services.sh"), command, "mariadb"],
            env=self.env,
            check=True,
            capture_output=True,
        )

    def up(self) -> None:
        self._services("up")

    def down(self) -> None:
        self._services("down")

    def crash(self) -> None:
        """SIGKILL the server, no shutdown: the next `up()` recovers InnoDB and the binlog
        (a transaction is committed there exactly when its binlog events are whole)."""
        pid = int(self.pid_file.read_text())
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: not Path(f"/proc/{pid}").exists(), 30, f"mariadbd {pid} to die")

    def connect(self) -> pymysql.connections.Connection:
        return pymysql.connect(
            host="127.0.0.1",
            port=self.port,
            user="root",
            password="root",
            charset="utf8mb4",
            autocommit=True,
        )
