"""Fixtures of the integration layer: `workdb`, the tables a and b of tests.helpers.mariadb_run."""

from __future__ import annotations

from collections.abc import Iterator

import pymysql
import pytest


@pytest.fixture
def workdb(db) -> Iterator[tuple[pymysql.connections.Connection, str]]:
    conn, name = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE a (id INT PRIMARY KEY, v VARCHAR(40), n BIGINT)")
        cur.execute("CREATE TABLE b (k VARCHAR(20) PRIMARY KEY, d DECIMAL(10,2), t DATETIME(3))")
    yield conn, name
