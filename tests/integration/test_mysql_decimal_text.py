"""DECIMAL(p,s) values as replicad publishes them equal the text the server prints
(SELECT CAST(d AS CHAR)), on the real MariaDB (3306) and MySQL 9.7 (3307): random precision,
scale and values (small ones often: those are where str(Decimal) writes 0E-8 or 1.2E-7),
written by the server, read back from its binlog and rendered by the pure envelope and by
the compiled one (`_writer.encode_rows`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pymysql
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from replicad.binlog.files import iter_file_events
from replicad.binlog.rows import RowsEvent
from replicad.binlog.values import decimal_text
from replicad.sinks import writer_choice
from replicad.sinks.envelope import value_json
from tests.helpers import binlog_helpers
from tests.helpers import mysql as mysql_helpers
from tests.helpers.mysql import mysql, mysql_db
from tests.unit.test_event_envelope import _encode

pytestmark = pytest.mark.integration
__all__ = ["mysql", "mysql_db"]  # fixtures, used by name


@dataclass
class Server:
    conn: pymysql.connections.Connection
    db: str
    binlog_dir: Path
    position: Callable[[pymysql.connections.Connection], tuple[str, int]]
    tables: set[str]


@pytest.fixture(params=["mariadb", "mysql"])
def server(request: pytest.FixtureRequest) -> Iterator[Server]:
    if request.param == "mariadb":
        conn, db = request.getfixturevalue("db")
        binlog_dir = request.getfixturevalue("mariadb")["binlog_dir"]
        yield Server(conn, db, binlog_dir, binlog_helpers.binlog_position, set())
    else:
        conn, db = request.getfixturevalue("mysql_db")
        binlog_dir = request.getfixturevalue("mysql").binlog_dir
        yield Server(conn, db, binlog_dir, mysql_helpers.binlog_position, set())


def _text(unscaled: int, scale: int) -> str:
    """The plain literal of unscaled * 10**-scale."""
    digits = str(abs(unscaled)).rjust(scale + 1, "0")
    whole, fraction = (digits[:-scale], digits[-scale:]) if scale else (digits, "")
    return ("-" if unscaled < 0 else "") + whole + ("." + fraction if fraction else "")


@st.composite
def columns(draw: st.DrawFn) -> tuple[int, int, list[str]]:
    """(precision, scale, literals): a DECIMAL(p,s) and 1-4 values that fit it."""
    precision = draw(st.integers(1, 65))
    scale = draw(st.integers(0, min(precision, 30)))
    bound = 10**precision - 1
    unscaled = st.one_of(st.integers(-1000, 1000), st.integers(-bound, bound))
    values = draw(st.lists(unscaled.filter(lambda v: abs(v) <= bound), min_size=1, max_size=4))
    return precision, scale, [_text(v, scale) for v in values]


def _rows_events(server: Server, start: tuple[str, int], table: str) -> list[RowsEvent]:
    out = []
    for name in binlog_helpers.binlog_files_since(server.conn, start[0]):
        first = start[1] if name == start[0] else None
        for event in iter_file_events(server.binlog_dir / name, start=first):
            if isinstance(event, RowsEvent) and event.table_map is not None:
                if (event.table_map.schema, event.table_map.table) == (server.db, table):
                    out.append(event)
    return out


def _compiled_texts(event: RowsEvent) -> list[Any]:
    """The column's text in the messages the compiled envelope writes for an insert event."""
    table = event.table_map
    assert table is not None
    specs = list(table.image_decoder(event.present_before).specs)
    messages, _ = _encode(specs, event.body, event.rows_offset, 0, (), table.mariadb)
    return [orjson.loads(value + b"}")["after"]["d"] for *_, value in messages]


@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@example((10, 8, ["0.00000000", "0.00000001", "-0.00000001"]))
@example((20, 9, ["0.000000123", "-0.000001000"]))
@example((65, 30, ["0.000000000000000000000000000001", _text(-(10**65 - 1), 30)]))
@given(column=columns())
def test_decimal_text_equals_the_servers(server: Server, column: tuple[int, int, list[str]]):
    precision, scale, literals = column
    table = f"d_{precision}_{scale}"
    with server.conn.cursor() as cur:
        if table not in server.tables:
            cur.execute(
                f"CREATE TABLE {table} (id INT AUTO_INCREMENT PRIMARY KEY, d DECIMAL"
                f"({precision},{scale}))"
            )
            server.tables.add(table)
        start = server.position(server.conn)
        cur.execute(f"INSERT INTO {table} (d) VALUES " + ", ".join(f"({v})" for v in literals))
        first = cur.lastrowid  # the first id of a multi-row INSERT
        cur.execute(f"SELECT CAST(d AS CHAR) FROM {table} WHERE id >= %s ORDER BY id", (first,))
        printed = [row[0] for row in cur.fetchall()]
    events = _rows_events(server, start, table)
    decoded = [after["d"] for event in events for _, after in event.rows()]
    assert [decimal_text(v) for v in decoded] == printed
    assert [value_json(v, False) for v in decoded] == [orjson.dumps(t) for t in printed]
    if writer_choice.available():
        assert [t for event in events for t in _compiled_texts(event)] == printed
