"""snapshot.py's 10-column table and its rows, rendered server-side from seq_1_to_N (also
used by publish.py, spark.py and peers.py)."""

from __future__ import annotations

from typing import Any

COLUMNS_SQL = """(
    id BIGINT PRIMARY KEY, n INT, s VARCHAR(64), d DECIMAL(12,2), at DATETIME(6),
    f DOUBLE, tx TEXT, u TINYINT UNSIGNED, day DATE, j JSON)"""


def create_table(name: str = "t") -> str:
    """The CREATE TABLE of the 10-column table named `name`."""
    return f"CREATE TABLE {name} {COLUMNS_SQL}"


def insert_rows(first: int, last: int, table: str = "t") -> str:
    """The INSERT of rows `first`..`last` of the 10-column table."""
    return (
        f"INSERT INTO {table} SELECT seq, seq % 1000, CONCAT('name-', seq), seq / 7, "
        "'2024-01-02 03:04:05.123456' + INTERVAL seq SECOND, seq / 3, REPEAT('x', 40), "
        "seq % 256, '2024-01-01' + INTERVAL (seq % 1000) DAY, "
        f"CONCAT('{{\"k\": ', seq, '}}') FROM seq_{first}_to_{last}"
    )


def recreate_database(cur: Any, database: str) -> None:
    """`database` dropped and created empty, and made the session's default."""
    cur.execute(f"DROP DATABASE IF EXISTS {database}")
    cur.execute(f"CREATE DATABASE {database}")
    cur.execute(f"USE {database}")
