"""The local MariaDB of scripts/services.sh: connecting, starting it, reading the binlog
position and server settings, and the paced writer some benchmarks load it with."""

from __future__ import annotations

import argparse
import subprocess
import threading
import time
from dataclasses import dataclass
from typing import Any

from bench.harness.paths import SERVICES_SCRIPT

MARIADB_PORT = 3306  # scripts/services.sh's server, root/root


def connect(database: str | None = None) -> Any:
    import pymysql  # only the benchmarks that write need it

    return pymysql.connect(
        host="127.0.0.1",
        port=MARIADB_PORT,
        user="root",
        password="root",
        database=database,
        autocommit=False,
    )


def prepare_load_database(database: str, probe_columns: str, probe_row: str) -> None:
    """`database` afresh with `load_rows` (the paced writer's) and a one-row `probe` table."""
    conn = connect()
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {database}")
        cur.execute(f"CREATE DATABASE {database}")
        cur.execute(f"USE {database}")
        cur.execute("CREATE TABLE load_rows (id BIGINT PRIMARY KEY, v INT, note VARCHAR(40))")
        cur.execute(f"CREATE TABLE probe ({probe_columns})")
        cur.execute(f"INSERT INTO probe VALUES ({probe_row})")
    conn.commit()
    conn.close()


def paced_writer(
    database: str, rate: int, stop: threading.Event, committed: list[int], first: int = 0
) -> None:
    """`rate` rows/s into load_rows in transactions of 100 on an absolute schedule, upserts
    over a bounded key range; `committed[0]` counts the rows committed."""
    conn = connect(database)
    next_id = first
    period = 100 / rate
    began = time.perf_counter()
    sent = 0
    with conn.cursor() as cur:
        while not stop.is_set():
            values = ", ".join(
                f"({(next_id + i) % 200_000}, {i}, 'n{next_id + i}')" for i in range(100)
            )
            cur.execute(f"REPLACE INTO load_rows VALUES {values}")
            conn.commit()
            next_id += 100
            sent += 1
            committed[0] += 100
            delay = began + sent * period - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
    conn.close()


@dataclass(frozen=True, slots=True)
class Server:
    host: str
    port: int
    user: str
    password: str
    repl_user: str
    repl_password: str
    server_id: int

    def connect(self, *, repl: bool = False) -> Any:
        import pymysql

        return pymysql.connect(
            host=self.host,
            port=self.port,
            user=self.repl_user if repl else self.user,
            password=self.repl_password if repl else self.password,
            charset="utf8mb4",
            autocommit=True,
        )


def binlog_index(name: str) -> int:
    return int(name.rsplit(".", 1)[1])


def scalar(cur: Any, sql: str) -> Any:
    cur.execute(sql)
    return cur.fetchone()[0]


def ensure_server(server: Server) -> None:
    try:
        server.connect().close()
    except Exception:  # any failure: start it, then retry once
        subprocess.run(["bash", str(SERVICES_SCRIPT), "up", "mariadb"], check=True)
        server.connect().close()


def set_net_timeouts(server: Server, seconds: int | None) -> tuple[int, int]:
    """Set the global net write/read timeouts (None: leave); the previous values."""
    conn = server.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT @@GLOBAL.net_write_timeout, @@GLOBAL.net_read_timeout")
            previous = cur.fetchone()
            if seconds is not None:
                cur.execute(
                    "SET GLOBAL net_write_timeout = %s, GLOBAL net_read_timeout = %s",
                    (seconds, seconds),
                )
    finally:
        conn.close()
    return int(previous[0]), int(previous[1])


def restore_net_timeouts(server: Server, previous: tuple[int, int]) -> None:
    conn = server.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SET GLOBAL net_write_timeout = %s, GLOBAL net_read_timeout = %s", previous)
    finally:
        conn.close()


def server_of(args: argparse.Namespace) -> Server:
    return Server(
        args.host,
        args.port,
        args.user,
        args.password,
        args.repl_user,
        args.repl_password,
        args.server_id,
    )


def server_args(server: Server) -> list[str]:
    return [
        f"--host={server.host}",
        f"--port={server.port}",
        f"--repl-user={server.repl_user}",
        f"--repl-password={server.repl_password}",
        f"--server-id={server.server_id}",
    ]


def master_status(cur: Any) -> tuple[str, int]:
    cur.execute("SHOW MASTER STATUS")
    row = cur.fetchone()
    return str(row[0]), int(row[1])
