"""The differential all-types test of tests/integration/test_differential_mariadb.py on the
real MySQL 9.7 (3307): the same table, values and oracle (what `SELECT` returns at the same
moment), read back from MySQL's binlog by both row decoders, and by `replicad dump` (a
separate process, with the same decoder): its messages must carry the images the decoder
gave, which equal SELECT. VECTOR, which MariaDB 10.11 does not have, is its own test."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pymysql
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from replicad.binlog.changes import RowChange
from replicad.sinks.envelope import EnvelopeLines
from tests.helpers.binlog_helpers import binlog_files_since, changes_since
from tests.helpers.mysql import MySQLServer, binlog_position, mysql, mysql_db
from tests.integration.test_differential_mariadb import (
    EDGE_CELLS,
    EDGE_MAX,
    EDGE_MIN,
    EDGE_ROWS,
    EDGE_UPDATES,
    ROUNDTRIP_SETTINGS,
    _create,
    _roundtrip,
    _row_strategy,
    row_decoder,
)

pytestmark = pytest.mark.integration
__all__ = ["mysql", "mysql_db", "row_decoder"]  # fixtures, used by name

ROOT = Path(__file__).resolve().parents[2]
Conn = pymysql.connections.Connection
NOTES = ("op", "before", "after", "absent", "json_null", "json_diffs")


def dumped(conn: Conn, binlog_dir: Path, start: tuple[str, int], db: str, decoder: str):
    """The messages of `db` that `replicad dump` prints for the binlog range from `start`,
    decoded by the compiled or the pure-Python decoder as the test runs."""
    files = [binlog_dir / name for name in binlog_files_since(conn, start[0])]
    env = {**os.environ, "REPLICAD_PURE_PYTHON": "1" if decoder == "python" else "0"}
    command = [sys.executable, "-m", "replicad.cli", "dump", "--start-position", str(start[1])]
    result = subprocess.run(
        [*command, *map(str, files)], capture_output=True, env=env, cwd=ROOT, timeout=300
    )
    assert result.returncode == 0, result.stderr.decode()
    messages = [orjson.loads(line) for line in result.stdout.splitlines()]
    return [m for m in messages if m["source"]["db"] == db]


def assert_dump_carries(messages: list[dict], changes: list[RowChange]) -> None:
    """Each dumped message is the envelope of the decoded change (whose images equal SELECT),
    rendered in-process by the row path: same op, images and notes, in binlog order."""
    lines = EnvelopeLines("dump", replay=True)
    expected = [orjson.loads(line) for c in changes for line in lines.row(c).splitlines()]

    def shape(message: dict) -> dict:
        return {k: message[k] for k in NOTES if k in message}

    assert len(messages) == len(expected)
    for ours, theirs in zip(messages, expected, strict=True):
        assert shape(ours) == shape(theirs), ours["source"]


def test_mysql_edges_round_trip(mysql: MySQLServer, mysql_db, row_decoder: str) -> None:
    conn, db = mysql_db
    _create(conn)
    cells, start, changes = _roundtrip(
        conn, db, mysql.binlog_dir, EDGE_ROWS, EDGE_UPDATES, binlog_position
    )
    assert cells == EDGE_CELLS
    assert_dump_carries(dumped(conn, mysql.binlog_dir, start, db, row_decoder), changes)


@ROUNDTRIP_SETTINGS
@given(
    rows=st.lists(_row_strategy(), min_size=1, max_size=6),
    updates=st.lists(_row_strategy(), min_size=1, max_size=6),
)
@example(rows=[EDGE_MAX], updates=[EDGE_MIN])
def test_mysql_random_values_round_trip(
    mysql: MySQLServer, mysql_db, row_decoder: str, rows, updates
) -> None:
    conn, db = mysql_db
    with conn.cursor() as cur:
        cur.execute("DROP TABLE IF EXISTS wide")
    _create(conn)
    _, start, changes = _roundtrip(conn, db, mysql.binlog_dir, rows, updates, binlog_position)
    assert_dump_carries(dumped(conn, mysql.binlog_dir, start, db, row_decoder), changes)


FLOAT32 = st.floats(width=32, allow_nan=False, allow_infinity=False)


@ROUNDTRIP_SETTINGS
@given(vectors=st.lists(st.lists(FLOAT32, min_size=3, max_size=3), min_size=1, max_size=5))
@example(vectors=[[0.0, -0.0, 3.4028234663852886e38], [1e-45, -1.1754943508222875e-38, 0.1]])
def test_mysql_vector_round_trip(mysql: MySQLServer, mysql_db, row_decoder: str, vectors):
    """VECTOR(3): the server stores the float32 array it was given; the decoder and `dump`
    must give those floats (compared as float32 bit patterns, -0.0 and subnormals kept)."""
    conn, db = mysql_db
    with conn.cursor() as cur:
        cur.execute("DROP TABLE IF EXISTS vec")
        cur.execute("CREATE TABLE vec (id INT PRIMARY KEY, v VECTOR(3), n VECTOR(3))")
        start = binlog_position(conn)
        for rid, vector in enumerate(vectors, 1):
            # as bytes: STRING_TO_VECTOR refuses subnormal floats, which a VECTOR stores
            data = struct.pack("<3f", *vector)
            cur.execute("INSERT INTO vec VALUES (%s, %s, NULL)", (rid, data))
        # HEX: PyMySQL cannot read a VECTOR column; the hex digits are the stored bytes
        cur.execute("SELECT id, HEX(v), n IS NULL FROM vec ORDER BY id")
        selected = {rid: (bytes.fromhex(v), None) for rid, v, null in cur.fetchall() if null}
    changes = changes_since(conn, mysql.binlog_dir, start, db)

    def packed(value: Any) -> bytes:
        return struct.pack(f"<{len(value)}f", *value)

    assert {c.after["id"]: (packed(c.after["v"]), c.after["n"]) for c in changes} == selected
    messages = dumped(conn, mysql.binlog_dir, start, db, row_decoder)
    assert {m["after"]["id"]: (packed(m["after"]["v"]), m["after"]["n"]) for m in messages} == (
        selected
    )
    assert_dump_carries(messages, changes)
