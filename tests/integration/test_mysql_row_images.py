"""Row images that do not carry every column, and JSON documents that are `null`, on the real
MySQL 9.7 (and MariaDB where it has the feature), published by both envelope paths: the
compiled one (`EventEncoder`, whole events) and the row-by-row one (`EnvelopeLines.row`)
must write the same bytes, and those bytes must say what the binlog said
(docs/consumers.md, "Partial row images" and "JSON null").

- `binlog_row_image=MINIMAL`/`NOBLOB` set per session: an update stays an update, its key
  is the before image's, columns the image does not carry are listed in `absent`;
- a PARTIAL_JSON update without its base document: the column is absent from `after`, its
  diffs are in `json_diffs`;
- a JSON `null` document is not SQL NULL: `json_null` lists it (exact mode), Debezium mode
  writes the string "null".
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pymysql
import pytest

from replicad.binlog.changes import EventRows, iter_changes_by_event
from replicad.binlog.files import iter_file_events
from replicad.config import EnvelopeConfig, KafkaSinkConfig
from replicad.sinks.envelope import EnvelopeLines, row_messages
from replicad.sinks.event_envelope import KEY_COLUMNS, EventEncoder
from replicad.sinks.routing import KafkaRouting
from replicad.sinks.value_modes import ValueMode
from tests.helpers import mariadb as mariadb_helpers
from tests.helpers.binlog_helpers import binlog_files_since
from tests.helpers.databases import fresh_database
from tests.helpers.mysql import MySQLServer, binlog_position, mysql, mysql_db
from tests.integration.test_differential_mariadb import row_decoder

pytestmark = pytest.mark.integration
__all__ = ["mysql", "mysql_db", "row_decoder"]  # fixtures, used by name

Conn = pymysql.connections.Connection


def _events(conn: Conn, binlog_dir: Path, start: tuple[str, int]) -> list[tuple[str, list]]:
    out = []
    for name in binlog_files_since(conn, start[0]):
        first = start[1] if name == start[0] else None
        out.append((name, list(iter_file_events(binlog_dir / name, start=first))))
    return out


def _items(files: list[tuple[str, list]], db: str) -> Iterator[EventRows]:
    for name, events in files:
        for item in iter_changes_by_event(events, file=name):
            assert isinstance(item, EventRows)
            table = item.event.table_map
            if table is not None and table.schema == db:
                yield item


def _published(files: list[tuple[str, list]], db: str, *, compiled: bool) -> list[bytes]:
    """The JSON lines of every change of `db`, whole events through the compiled encoder
    where it takes them (as the JSON-lines sink does) or every row through the row path."""
    lines = EnvelopeLines("p", replay=True)
    encoder = EventEncoder(lines.writer)
    out = b""
    for item in _items(files, db):
        encoded = encoder.encode(item, None, lines=True) if compiled else None
        if encoded is not None:
            out += encoded[0]
        else:
            out += b"".join(lines.row(change) for change in item.changes())
    return out.splitlines()


def _keys(files: list[tuple[str, list]], db: str, *, compiled: bool) -> list[Any]:
    """The Kafka message keys of every change, as the Kafka sink makes them."""
    routing = KafkaRouting(KafkaSinkConfig(bootstrap_servers="k:9092"), "p")
    encoder = EventEncoder(EnvelopeLines("p", replay=True).writer)
    keys: list[Any] = []
    for item in _items(files, db):
        encoded = (
            encoder.encode(item, None, lines=False, key=(KEY_COLUMNS, None)) if compiled else None
        )
        if encoded is not None:
            keys.extend(orjson.loads(key) for _, _, key, _ in encoded[0])
            continue
        for change in item.changes():
            for op, before, after in row_messages(change):
                keys.append(routing.key(change, before if op == "d" else after))
    return keys


def _messages(conn: Conn, binlog_dir: Path, start: tuple[str, int], db: str) -> list[dict]:
    """The published messages, after checking both paths wrote the same bytes and keys."""
    files = _events(conn, binlog_dir, start)
    compiled = _published(files, db, compiled=True)
    assert compiled == _published(files, db, compiled=False)
    assert _keys(files, db, compiled=True) == _keys(files, db, compiled=False)
    return [orjson.loads(line) for line in compiled]


def _shape(message: dict) -> dict:
    """What a consumer acts on: op, images and replicad's image notes."""
    notes = ("absent", "json_null", "json_diffs")
    return {
        "op": message["op"],
        "before": message["before"],
        "after": message["after"],
        **{k: message[k] for k in notes if k in message},
    }


def _run(conn: Conn, statements: list[str]) -> None:
    with conn.cursor() as cur:
        for statement in statements:
            cur.execute(statement)


def _minimal_updates(
    conn: Conn, binlog_dir: Path, db: str, position: Callable[[Conn], tuple[str, int]]
) -> None:
    _run(
        conn,
        [
            "CREATE TABLE t (id INT PRIMARY KEY, a INT, b VARCHAR(20), c TEXT)",
            "INSERT INTO t VALUES (7, 1, 'x', 'long'), (8, 1, 'y', 'text')",
            "SET SESSION binlog_row_image = 'MINIMAL'",
        ],
    )
    start = position(conn)
    _run(conn, ["UPDATE t SET a = 2 WHERE id = 7", "DELETE FROM t WHERE id = 8"])
    messages = _messages(conn, binlog_dir, start, db)
    assert [_shape(m) for m in messages] == [
        {
            "op": "u",
            "before": {"id": 7},
            "after": {"id": 7, "a": 2},
            "absent": {"before": ["a", "b", "c"], "after": ["b", "c"]},
        },
        {"op": "d", "before": {"id": 8}, "after": None, "absent": {"before": ["a", "b", "c"]}},
    ]
    files = _events(conn, binlog_dir, start)
    assert _keys(files, db, compiled=True) == [{"id": 7}, {"id": 8}]


def test_mysql_minimal_update_stays_an_update(mysql: MySQLServer, mysql_db) -> None:
    conn, db = mysql_db
    _minimal_updates(conn, mysql.binlog_dir, db, binlog_position)


def test_mariadb_minimal_update_stays_an_update(mariadb: dict[str, Any]) -> None:
    with fresh_database(mariadb_helpers.connect_root) as (conn, db):
        _minimal_updates(conn, Path(mariadb["binlog_dir"]), db, _mariadb_position)


def _mariadb_position(conn: Conn) -> tuple[str, int]:
    with conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        row = cur.fetchone()
    return row[0], int(row[1])


def test_mysql_noblob_update_lists_the_blob_absent(mysql: MySQLServer, mysql_db) -> None:
    conn, db = mysql_db
    _run(
        conn,
        [
            "CREATE TABLE t (id INT PRIMARY KEY, a INT, c TEXT)",
            "INSERT INTO t VALUES (1, 1, 'long')",
            "SET SESSION binlog_row_image = 'NOBLOB'",
        ],
    )
    start = binlog_position(conn)
    _run(conn, ["UPDATE t SET a = 2 WHERE id = 1"])
    messages = _messages(conn, mysql.binlog_dir, start, db)
    assert [_shape(m) for m in messages] == [
        {
            "op": "u",
            "before": {"id": 1, "a": 1},
            "after": {"id": 1, "a": 2},
            "absent": {"before": ["c"], "after": ["c"]},
        }
    ]


def test_mysql_minimal_insert_lists_what_it_left_out(mysql: MySQLServer, mysql_db) -> None:
    """An insert's image under MINIMAL: whatever MySQL left out is listed, never null."""
    conn, db = mysql_db
    _run(
        conn,
        [
            "CREATE TABLE t (id INT PRIMARY KEY, a INT DEFAULT 5, b TEXT)",
            "SET SESSION binlog_row_image = 'MINIMAL'",
        ],
    )
    start = binlog_position(conn)
    _run(conn, ["INSERT INTO t (id) VALUES (1)"])
    [message] = _messages(conn, mysql.binlog_dir, start, db)
    after = message["after"]
    absent = message.get("absent", {}).get("after", [])
    assert message["op"] == "c" and after["id"] == 1
    assert sorted([*after, *absent]) == ["a", "b", "id"] and not set(after) & set(absent)


def test_mysql_partial_json_without_base(mysql: MySQLServer, mysql_db) -> None:
    conn, db = mysql_db
    _run(
        conn,
        [
            "CREATE TABLE t (id INT PRIMARY KEY, n INT, j JSON)",
            """INSERT INTO t VALUES (1, 0, '{"a": 1, "b": [1, 2], "c": "x"}')""",
            "SET SESSION binlog_row_image = 'MINIMAL'",
            "SET SESSION binlog_row_value_options = 'PARTIAL_JSON'",
        ],
    )
    start = binlog_position(conn)
    _run(
        conn,
        [
            """UPDATE t SET n = 1, j = JSON_REMOVE(JSON_SET(j, '$.a', 5, '$.b[1]', null),
             '$.c') WHERE id = 1"""
        ],
    )
    [message] = _messages(conn, mysql.binlog_dir, start, db)
    assert _shape(message) == {
        "op": "u",
        "before": {"id": 1},
        "after": {"id": 1, "n": 1},
        "absent": {"before": ["n", "j"], "after": ["j"]},
        "json_diffs": {
            "j": [
                {"op": "replace", "path": "$.a", "value": 5},
                {"op": "replace", "path": "$.b[1]", "value": None},
                {"op": "remove", "path": "$.c"},
            ]
        },
    }


def _json_null_rows(conn: Conn) -> tuple[str, int]:
    _run(conn, ["CREATE TABLE t (id INT PRIMARY KEY, j JSON)"])
    start = binlog_position(conn)
    _run(
        conn,
        [
            "INSERT INTO t VALUES (1, 'null'), (2, NULL), (3, '[null]')",
            "UPDATE t SET j = CASE id WHEN 1 THEN NULL WHEN 2 THEN 'null' ELSE j END",
        ],
    )
    return start


def test_mysql_json_null_document_is_not_sql_null(mysql: MySQLServer, mysql_db) -> None:
    conn, db = mysql_db
    start = _json_null_rows(conn)
    messages = _messages(conn, mysql.binlog_dir, start, db)
    assert [_shape(m) for m in messages] == [
        {"op": "c", "before": None, "after": {"id": 1, "j": None}, "json_null": {"after": ["j"]}},
        {"op": "c", "before": None, "after": {"id": 2, "j": None}},
        {"op": "c", "before": None, "after": {"id": 3, "j": [None]}},
        {
            "op": "u",
            "before": {"id": 1, "j": None},
            "after": {"id": 1, "j": None},
            "json_null": {"before": ["j"], "after": []},
        },
        {
            "op": "u",
            "before": {"id": 2, "j": None},
            "after": {"id": 2, "j": None},
            "json_null": {"before": [], "after": ["j"]},
        },
    ]


def test_mysql_json_null_document_in_debezium_mode(mysql: MySQLServer, mysql_db) -> None:
    """Debezium's io.debezium.data.Json is the document's text: "null" for a JSON null
    document, null for SQL NULL."""
    conn, db = mysql_db
    start = _json_null_rows(conn)
    mode = ValueMode(EnvelopeConfig(values="debezium"))
    lines = EnvelopeLines("p", replay=True)
    images = []
    for item in _items(_events(conn, mysql.binlog_dir, start), db):
        for change in item.changes():
            for line in lines.row(mode.convert(change)).splitlines():
                message = orjson.loads(line)
                assert "json_null" not in message
                images.append((message["before"], message["after"]))
    assert images == [
        (None, {"id": 1, "j": "null"}),
        (None, {"id": 2, "j": None}),
        (None, {"id": 3, "j": "[null]"}),
        ({"id": 1, "j": "null"}, {"id": 1, "j": None}),
        ({"id": 2, "j": None}, {"id": 2, "j": "null"}),
    ]
