"""A MariaDB of a test's own (scripts/services.sh with a private state directory and port), so
that restarting it disturbs no other test using the shared server."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pymysql

from tests.helpers.daemon_process import ROOT


class PrivateMariaDB:
    def __init__(self, state: Path, port: int) -> None:
        self.env = {
            **os.environ,
            "REPLICAD_SERVICES_DIR": str(state),
            "REPLICAD_MARIADB_PORT": str(port),
        }
        self.port = port

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

    def connect(self) -> pymysql.connections.Connection:
        return pymysql.connect(
            host="127.0.0.1",
            port=self.port,
            user="root",
            password="root",
            charset="utf8mb4",
            autocommit=True,
        )
