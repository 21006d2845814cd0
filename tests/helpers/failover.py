"""What the promoted-replica tests share, for either server kind (the private servers of
tests/helpers/mariadb_chain.py and mysql_chain.py: anything with `port` and `connect()`): the
database they write, replicad listing the servers, the workload, and the repeat count."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Protocol

import pymysql

from tests.helpers.daemon_process import DaemonProcess
from tests.helpers.mariadb_run import random_workload


class Server(Protocol):
    port: int

    def connect(self) -> pymysql.connections.Connection: ...


def scalar(server: Server, sql: str) -> str:
    conn = server.connect()
    try:
        with conn.cursor() as cur:
            cur.execute(sql)
            row = cur.fetchone()
            return "" if row is None or row[0] is None else str(row[0])
    finally:
        conn.close()


def create_database(primary: Server) -> str:
    """A fresh database with the tables random_workload writes."""
    name = f"f_{os.getpid()}_{int(time.time() * 1000) % 100000}"
    conn = primary.connect()
    try:
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE {name}")
            cur.execute(f"CREATE TABLE {name}.a (id INT PRIMARY KEY, v VARCHAR(40), n BIGINT)")
            cur.execute(
                f"CREATE TABLE {name}.b (k VARCHAR(20) PRIMARY KEY, d DECIMAL(10,2), t DATETIME(3))"
            )
    finally:
        conn.close()
    return name


def replicad_over(
    tmp: Path, server_id: int, *servers: Server, extra_yaml: str = ""
) -> DaemonProcess:
    """replicad with `source.hosts` listing `servers` in order, reconnecting fast."""
    hosts = ", ".join(f"'127.0.0.1:{server.port}'" for server in servers)
    return DaemonProcess(
        tmp,
        pipeline="test",
        source_yaml=(
            f"  hosts: [{hosts}]\n  user: repl\n  server_id: {server_id}\n  start: latest\n"
            "  heartbeat_s: 1\n  reconnect: {initial_s: 0.05, max_s: 0.5}\n" + extra_yaml
        ),
        password="repl",
    )


def write(server: Server, db: str, transactions: int, seed: int) -> None:
    conn = server.connect()
    try:
        random_workload(conn, db, transactions=transactions, seed=seed)
    finally:
        conn.close()


def repeated(changes: list[dict[str, Any]], db: str) -> int:
    """Row changes delivered more than once. Coordinates cannot say it (file:pos differ per
    server, and `row` counts within one rows event), so a change is its GTID and content:
    the workload never makes the same change twice in one transaction (random 64-bit values;
    an UPDATE or upsert that changes nothing is not logged)."""
    seen: set[tuple[str, ...]] = set()
    count = 0
    for change in changes:
        source = change["source"]
        if source["db"] != db:
            continue
        key = (
            source["gtid"],
            source["table"],
            change["op"],
            json.dumps(change["before"], sort_keys=True),
            json.dumps(change["after"], sort_keys=True),
        )
        count += key in seen
        seen.add(key)
    return count
