"""Read back what the server wrote to its binlog between two points."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

import pymysql

from replicad.binlog.changes import RowChange, iter_row_changes
from replicad.binlog.files import iter_file_events
from replicad.binlog.rows import RowsEvent, TableMapEvent


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
        events = list(
            iter_file_events(binlog_dir / name, start=first_pos if name == first_file else None)
        )
        for event in events:
            if isinstance(event, RowsEvent) and event.table_map and event.table_map.schema == db:
                # the compiled decoder and the per-column decoders must agree on every row
                assert list(event.rows()) == rows_by_column_decoders(event)
        out.extend(c for c in iter_row_changes(events, file=name) if c.db == db)
    return out


def rows_by_column_decoders(event: RowsEvent) -> list[tuple[dict | None, dict | None]]:
    """Decode a ROWS event with the per-column decoders of values.py instead of the compiled
    whole-image function, so that tests can hold the two implementations against each other."""
    table = event.table_map
    assert table is not None
    body, pos, out = event.body, event.rows_offset, []
    images = [table.image_decoder(event.present_before)]
    if event.op == "u":
        images.append(table.image_decoder(event.present_after))
    while pos < len(body):
        decoded = []
        for decoder in images:
            nulls = int.from_bytes(body[pos : pos + decoder.null_bytes], "little")
            pos += decoder.null_bytes
            row: dict = {}
            for i, (name, decode) in enumerate(decoder.columns):
                if nulls >> i & 1:
                    row[name] = None
                else:
                    row[name], pos = decode(body, pos)
            decoded.append(row)
        if event.op == "u":
            out.append((decoded[0], decoded[1]))
        elif event.op == "c":
            out.append((None, decoded[0]))
        else:
            out.append((decoded[0], None))
    assert pos == len(body)
    return out


@contextlib.contextmanager
def row_metadata(
    connect: Callable[[], pymysql.connections.Connection], value: str
) -> Iterator[None]:
    """The server's global binlog_row_metadata set to `value` inside, FULL again after (the
    tests beside a serial test expect FULL)."""
    root = connect()
    try:
        with root.cursor() as cur:
            cur.execute(f"SET GLOBAL binlog_row_metadata = '{value}'")
        yield
    finally:
        with root.cursor() as cur:
            cur.execute("SET GLOBAL binlog_row_metadata = 'FULL'")
        root.close()


def table_maps_since(
    conn: pymysql.connections.Connection, binlog_dir: Path, start: tuple[str, int], db: str
) -> list[TableMapEvent]:
    """The TABLE_MAP events of `db`'s tables written since `start` (file, pos)."""
    maps: list[TableMapEvent] = []
    for name in binlog_files_since(conn, start[0]):
        begin = start[1] if name == start[0] else None
        maps += [
            e
            for e in iter_file_events(binlog_dir / name, start=begin)
            if isinstance(e, TableMapEvent) and e.schema == db
        ]
    return maps
