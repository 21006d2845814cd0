"""MySQL table features a replica must follow, on the real MySQL 9.7 (3307), published by both
envelope paths (compiled and row by row, held byte-equal by `_messages`):

- invisible columns, and the generated invisible primary key (`my_row_id`) MySQL adds to a
  table created without one under `sql_generate_invisible_primary_key=ON`: the messages carry
  them as SELECT shows them when named, and the Kafka key is the GIPK;
- generated columns, stored and virtual: their values as SELECT computes them;
- TRANSACTION_PAYLOAD (`binlog_transaction_compression=ON`, zstd): the all-types differential
  of test_differential_mysql.py on compressed transactions decodes to the rows of the same
  statements written uncompressed.
"""

from __future__ import annotations

from typing import Any

import pymysql
import pytest

from replicad.binlog.events import EventType
from replicad.binlog.files import iter_file_events
from tests.helpers.binlog_helpers import binlog_files_since
from tests.helpers.mysql import MySQLServer, binlog_position, mysql, mysql_db
from tests.integration.test_differential_mariadb import (
    EDGE_CELLS,
    EDGE_ROWS,
    EDGE_UPDATES,
    _create,
    _roundtrip,
    row_decoder,
)
from tests.integration.test_mysql_row_images import _events, _keys, _messages, _run

pytestmark = pytest.mark.integration
__all__ = ["mysql", "mysql_db", "row_decoder"]  # fixtures, used by name

Conn = pymysql.connections.Connection
# a, h invisible; s stored and v virtual generated; my_row_id invisible, added by the server
COLUMNS = ["my_row_id", "a", "b", "h", "s", "v"]


def _selected(conn: Conn) -> dict[int, dict[str, Any]]:
    """The rows with every column named: SELECT * leaves invisible ones out."""
    with conn.cursor(pymysql.cursors.DictCursor) as cur:
        cur.execute(f"SELECT {', '.join(COLUMNS)} FROM g ORDER BY my_row_id")
        return {row["my_row_id"]: row for row in cur.fetchall()}


def test_mysql_gipk_invisible_and_generated_columns(mysql: MySQLServer, mysql_db) -> None:
    conn, db = mysql_db
    _run(
        conn,
        [
            "SET SESSION sql_generate_invisible_primary_key = ON",
            "CREATE TABLE g (a INT, b VARCHAR(20), h INT INVISIBLE,"
            " s INT AS (a * 2) STORED, v VARCHAR(30) AS (CONCAT(b, '!')) VIRTUAL)",
        ],
    )
    with conn.cursor() as cur:
        cur.execute(
            "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s"
            " AND TABLE_NAME = 'g' AND COLUMN_KEY = 'PRI' AND EXTRA LIKE '%%INVISIBLE%%'",
            (db,),
        )
        assert cur.fetchall() == (("my_row_id",),), "the server added no GIPK"
    start = binlog_position(conn)
    _run(conn, ["INSERT INTO g (a, b, h) VALUES (1, 'x', 10), (2, 'é', NULL), (3, NULL, 30)"])
    inserted = _selected(conn)
    _run(conn, ["UPDATE g SET a = a + 5, b = 'y', h = h + 1 WHERE a <> 2"])
    updated = _selected(conn)
    _run(conn, ["DELETE FROM g WHERE a = 2"])
    messages = _messages(conn, mysql.binlog_dir, start, db)

    assert [(m["op"], m["before"], m["after"]) for m in messages] == [
        *[("c", None, row) for row in inserted.values()],
        *[("u", inserted[k], updated[k]) for k in (1, 3)],
        ("d", updated[2], None),
    ]
    assert all(list(row) == COLUMNS for m in messages for row in (m["before"] or m["after"],))
    files = _events(conn, mysql.binlog_dir, start)
    assert _keys(files, db, compiled=True) == [{"my_row_id": k} for k in (1, 2, 3, 1, 3, 2)]


def _payload_events(conn: Conn, server: MySQLServer, start: tuple[str, int]) -> int:
    count = 0
    for name in binlog_files_since(conn, start[0]):
        first = start[1] if name == start[0] else None
        events = iter_file_events(server.binlog_dir / name, start=first, expand_payloads=False)
        count += sum(e.header.type_code == EventType.TRANSACTION_PAYLOAD for e in events)
    return count


def test_mysql_compressed_transactions_decode_as_uncompressed(mysql: MySQLServer, mysql_db) -> None:
    """The SELECT oracle holds on compressed transactions, and their rows are the rows of the
    same statements logged uncompressed."""
    conn, db = mysql_db
    runs = []
    for compression in ("OFF", "ON"):
        _run(conn, ["DROP TABLE IF EXISTS wide"])
        _create(conn)
        _run(conn, [f"SET SESSION binlog_transaction_compression = {compression}"])
        cells, start, changes = _roundtrip(
            conn, db, mysql.binlog_dir, EDGE_ROWS, EDGE_UPDATES, binlog_position
        )
        assert cells == EDGE_CELLS
        payloads = _payload_events(conn, mysql, start)
        assert (payloads > 0) == (compression == "ON"), (compression, payloads)
        runs.append([(c.op, c.before, c.after) for c in changes])
    assert runs[0] == runs[1]
