"""A fresh, uniquely named database for one test, on whichever server `connect` reaches."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pymysql


@contextmanager
def fresh_database(
    connect: Callable[[], pymysql.connections.Connection],
) -> Iterator[tuple[pymysql.connections.Connection, str]]:
    """A connection using a new database (utf8mb4, session time zone UTC), dropped after."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    conn = connect()
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{name}` DEFAULT CHARACTER SET utf8mb4")
        cur.execute(f"USE `{name}`")
        cur.execute("SET time_zone = '+00:00'")
    try:
        yield conn, name
    finally:
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
        conn.close()
