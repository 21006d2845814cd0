"""The shared MariaDB that scripts/services.sh starts: its port and a root connection."""

from __future__ import annotations

import os

import pymysql

MARIADB_PORT = int(os.environ.get("REPLICAD_MARIADB_PORT", "3306"))


def connect_root(**kwargs: object) -> pymysql.connections.Connection:
    return pymysql.connect(
        host="127.0.0.1",
        port=MARIADB_PORT,
        user="root",
        password="root",
        charset="utf8mb4",
        autocommit=True,
        **kwargs,  # type: ignore[arg-type]
    )
