"""A YEAR column before numeric columns on the real MySQL 9.7: its TABLE_MAP's SIGNEDNESS
field has a bit for YEAR (MySQL 8.0.21+), so the signedness of every later numeric column
depends on counting it. Rows decoded from the binlog, by the compiled and the pure-Python
decoder, must equal what SELECT returns."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from replicad.binlog.files import iter_file_events
from replicad.binlog.rows import TableMapEvent
from tests.helpers.binlog_helpers import changes_since
from tests.helpers.mysql import MySQLServer, binlog_position, mysql, mysql_db
from tests.integration.test_differential_mariadb import row_decoder

pytestmark = pytest.mark.integration
__all__ = ["mysql", "mysql_db", "row_decoder"]  # fixtures, used by name

TABLES = {
    # the layout of the report: every column after YEAR is signed
    "s": "(id INT PRIMARY KEY, y YEAR, a INT, b BIGINT, c TINYINT, d DECIMAL(10,2))",
    # signed and unsigned after YEAR: a shifted bitmap gives each its neighbour's bit
    "m": "(id INT PRIMARY KEY, y YEAR, a INT, u INT UNSIGNED, c TINYINT,"
    " ub BIGINT UNSIGNED, d DECIMAL(10,2) UNSIGNED, f DOUBLE)",
}
ROWS = {
    "s": [
        (1, 2024, -5, -9000000000, -3, Decimal("-1.25")),
        (2, 1901, -2147483648, -9223372036854775808, -128, Decimal("-99999999.99")),
        (3, 0, 7, 1, 127, Decimal("0.01")),
        (4, None, None, None, None, None),
    ],
    "m": [
        (1, 2155, -1, 4294967295, -1, 18446744073709551615, Decimal("12.50"), -0.5),
        (2, 2000, 2147483647, 0, -128, 1, Decimal("0.00"), 1e300),
    ],
}


def _select(conn: Any, table: str) -> list[dict[str, Any]]:
    with conn.cursor() as cur:
        cur.execute(f"SELECT * FROM {table} ORDER BY id")
        names = [d[0] for d in cur.description]
        return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


@pytest.mark.parametrize("table", sorted(TABLES))
def test_rows_after_year_decode_as_selected(mysql: MySQLServer, mysql_db, table: str) -> None:
    conn, db = mysql_db
    with conn.cursor() as cur:
        cur.execute(f"CREATE TABLE {table} {TABLES[table]}")
        start = binlog_position(conn)
        marks = ", ".join(["%s"] * len(ROWS[table][0]))
        cur.executemany(f"INSERT INTO {table} VALUES ({marks})", ROWS[table])
    changes = changes_since(conn, mysql.binlog_dir, start, db)
    assert [c.after for c in changes] == _select(conn, table)


def test_table_map_counts_the_year_bit(mysql: MySQLServer, mysql_db) -> None:
    """The bitmap as the server wrote it: YEAR holds a bit, and the one after it is `u`'s."""
    conn, db = mysql_db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE t (y YEAR, u INT UNSIGNED, a INT)")
        start = binlog_position(conn)
        cur.execute("INSERT INTO t VALUES (2024, 1, -1)")
    maps = [
        e
        for e in iter_file_events(mysql.binlog_dir / start[0], start=start[1])
        if isinstance(e, TableMapEvent) and e.schema == db
    ]
    assert maps and maps[0].year_signedness
    assert [(c.name, c.unsigned) for c in maps[0].columns] == [
        ("y", True),  # MySQL flags YEAR unsigned
        ("u", True),
        ("a", False),
    ]
