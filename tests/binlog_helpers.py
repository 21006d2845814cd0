"""Read back what the server wrote to its binlog between two points."""

from __future__ import annotations

from pathlib import Path

import pymysql

from replicad.binlog.changes import RowChange, iter_row_changes
from replicad.binlog.files import iter_file_events


def binlog_position(conn: pymysql.connections.Connection) -> tuple[str, int]:
    with conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        row = cur.fetchone()
    return row[0], int(row[1])


def binlog_files_since(conn: pymysql.connections.Connection, first: str) -> list[str]:
    with conn.cursor() as cur:
        cur.execute("SHOW BINARY LOGS")
        names = [r[0] for r in cur.fetchall()]
    return [n for n in names if n >= first]


def changes_since(
    conn: pymysql.connections.Connection, binlog_dir: Path, start: tuple[str, int], db: str
) -> list[RowChange]:
    out: list[RowChange] = []
    first_file, first_pos = start
    for name in binlog_files_since(conn, first_file):
        events = iter_file_events(
            binlog_dir / name, start=first_pos if name == first_file else None
        )
        out.extend(c for c in iter_row_changes(events, file=name) if c.db == db)
    return out
