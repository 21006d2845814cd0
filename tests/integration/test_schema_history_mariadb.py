"""`replicad run` against the real MariaDB with binlog_row_metadata=MINIMAL: TABLE_MAPs carry
no column names, ENUM/SET members or primary key, so every name in the output comes from the
schema history (information_schema snapshot + DDL from the stream). Each change must carry
the columns it was written with, across ALTERs, a rename, a CREATE ... SELECT and a restart
with DDL + DML written while replicad was down. FULL metadata must work as before.

binlog_row_metadata is a global variable: it is set to MINIMAL only around each test's
writes and always restored to FULL.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.helpers.binlog_helpers import binlog_position, row_metadata, table_maps_since
from tests.helpers.daemon_process import wait_for
from tests.helpers.mariadb import connect_root
from tests.helpers.mariadb_run import Replicad

pytestmark = [pytest.mark.integration, pytest.mark.serial]  # sets global binlog_row_metadata


def ours(replicad: Replicad, db: str) -> list[dict[str, Any]]:
    return [c for c in replicad.changes() if c["source"]["db"] == db]


def rows_of(change: dict[str, Any]) -> tuple[str, str, Any, Any]:
    return change["source"]["table"], change["op"], change["before"], change["after"]


def schema_warnings(replicad: Replicad) -> list[dict[str, Any]]:
    return [
        e
        for e in replicad.log_events()
        if e["event"].startswith("schema_") and e.get("level") == "warning"
    ]


def run(cur, *statements: str) -> None:
    for sql in statements:
        cur.execute(sql)


def test_minimal_metadata_changes_carry_the_columns_they_were_written_with(
    db, mariadb, tmp_path
) -> None:
    conn, name = db
    with conn.cursor() as cur:
        cur.execute(
            "CREATE TABLE a (id INT PRIMARY KEY, v VARCHAR(40), n BIGINT UNSIGNED, "
            "color ENUM('red','green','blue'), tags SET('x','y'))"
        )
    replicad = Replicad(tmp_path, server_id=5201)
    with row_metadata(connect_root, "MINIMAL"):
        start = binlog_position(conn)
        replicad.start()
        try:
            with conn.cursor() as cur:
                run(
                    cur,
                    "INSERT INTO a VALUES (1, 'one', 18446744073709551615, 'green', 'x,y')",
                    "ALTER TABLE a ADD COLUMN extra INT DEFAULT 7 FIRST",
                    "INSERT INTO a (id, v, n, color, extra) VALUES (2, 'two', 2, 'blue', 8)",
                    "ALTER TABLE a DROP COLUMN v",
                    "UPDATE a SET n = 3 WHERE id = 2",
                    "ALTER TABLE a CHANGE n amount BIGINT UNSIGNED",
                    "DELETE FROM a WHERE id = 1",
                    "CREATE TABLE b (k VARCHAR(10) PRIMARY KEY, e ENUM('p','q'))",
                    "INSERT INTO b VALUES ('k1', 'q')",
                    # MariaDB logs the CREATE and its rows as one transaction
                    "CREATE TABLE c AS SELECT id, color, amount FROM a",
                )
            wait_for(lambda: len(ours(replicad, name)) >= 6, 30, "six changes")
        finally:
            assert replicad.stop() == 0
    maps = table_maps_since(conn, mariadb["binlog_dir"], start, name)
    assert len(maps) >= 6 and not any(m.has_names for m in maps), "MINIMAL was not in effect"
    assert [rows_of(c) for c in ours(replicad, name)] == [
        ("a", "c", None, {"id": 1, "v": "one", "n": 18446744073709551615, "color": "green",
                          "tags": "x,y"}),
        ("a", "c", None, {"extra": 8, "id": 2, "v": "two", "n": 2, "color": "blue",
                          "tags": None}),
        ("a", "u", {"extra": 8, "id": 2, "n": 2, "color": "blue", "tags": None},
                   {"extra": 8, "id": 2, "n": 3, "color": "blue", "tags": None}),
        ("a", "d", {"extra": 7, "id": 1, "amount": 18446744073709551615, "color": "green",
                    "tags": "x,y"}, None),
        ("b", "c", None, {"k": "k1", "e": "q"}),
        ("c", "c", None, {"id": 2, "color": "blue", "amount": 3}),
    ]  # fmt: skip
    first = ours(replicad, name)[1]["after"]
    assert list(first) == ["extra", "id", "v", "n", "color", "tags"], "column order"
    assert schema_warnings(replicad) == []
    events = [e["event"] for e in replicad.log_events()]
    assert events.count("schema_snapshot") == 1


def test_restart_decodes_what_was_written_while_down_with_the_historical_columns(
    db, tmp_path
) -> None:
    conn, name = db
    with conn.cursor() as cur:
        cur.execute(
            "CREATE TABLE a (id INT PRIMARY KEY, v VARCHAR(40), n INT, color ENUM('red','green'))"
        )
    replicad = Replicad(tmp_path, server_id=5202)
    with row_metadata(connect_root, "MINIMAL"), conn.cursor() as cur:
        replicad.start()
        run(
            cur,
            "INSERT INTO a VALUES (1, 'one', 1, 'red')",
            "ALTER TABLE a ADD COLUMN extra INT DEFAULT 7 FIRST",
            "INSERT INTO a VALUES (8, 2, 'two', 2, 'green')",
        )
        wait_for(lambda: len(ours(replicad, name)) >= 2, 30, "two changes")
        assert replicad.stop() == 0
        history = json.loads((tmp_path / "position.schema-history.json").read_text())
        assert history["format"] == "replicad-schema-history"
        # written while replicad is down: it must not see today's schema for these
        run(
            cur,
            "INSERT INTO a VALUES (9, 3, 'three', 3, 'red')",
            "ALTER TABLE a DROP COLUMN v",
            "UPDATE a SET n = 30 WHERE id = 3",
            "ALTER TABLE a CHANGE n total INT",
            "INSERT INTO a VALUES (10, 4, 4, 'green')",
            "ALTER TABLE a MODIFY color ENUM('red','green','blue') FIRST",
            "INSERT INTO a VALUES ('blue', 11, 5, 5)",
            "RENAME TABLE a TO a2",
            "DELETE FROM a2 WHERE id = 1",
        )
        replicad.start()
        try:
            wait_for(lambda: len(ours(replicad, name)) >= 7, 30, "seven changes")
        finally:
            assert replicad.stop() == 0
    assert [rows_of(c) for c in ours(replicad, name)] == [
        ("a", "c", None, {"id": 1, "v": "one", "n": 1, "color": "red"}),
        ("a", "c", None, {"extra": 8, "id": 2, "v": "two", "n": 2, "color": "green"}),
        ("a", "c", None, {"extra": 9, "id": 3, "v": "three", "n": 3, "color": "red"}),
        ("a", "u", {"extra": 9, "id": 3, "n": 3, "color": "red"},
                   {"extra": 9, "id": 3, "n": 30, "color": "red"}),
        ("a", "c", None, {"extra": 10, "id": 4, "total": 4, "color": "green"}),
        ("a", "c", None, {"color": "blue", "extra": 11, "id": 5, "total": 5}),
        ("a2", "d", {"color": "red", "extra": 7, "id": 1, "total": 1}, None),
    ]  # fmt: skip
    events = [e["event"] for e in replicad.log_events()]
    assert events.count("schema_snapshot") == 1, "a resume never takes a new snapshot"
    assert "schema_history_loaded" in events
    assert schema_warnings(replicad) == []


def test_full_metadata_is_unchanged_and_the_history_follows_anyway(db, mariadb, tmp_path) -> None:
    conn, name = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE a (id INT PRIMARY KEY, n INT, e ENUM('p','q'))")
    start = binlog_position(conn)
    replicad = Replicad(tmp_path, server_id=5203)
    replicad.start()
    try:
        with conn.cursor() as cur:
            run(
                cur,
                "INSERT INTO a VALUES (1, 1, 'q')",
                "ALTER TABLE a CHANGE n total INT, ADD s SET('x','y') FIRST",
                "INSERT INTO a VALUES ('y', 2, 2, 'p')",
            )
        wait_for(lambda: len(ours(replicad, name)) >= 2, 30, "two changes")
    finally:
        assert replicad.stop() == 0
    maps = table_maps_since(conn, mariadb["binlog_dir"], start, name)
    assert maps and all(m.has_names for m in maps)
    assert [rows_of(c) for c in ours(replicad, name)] == [
        ("a", "c", None, {"id": 1, "n": 1, "e": "q"}),
        ("a", "c", None, {"s": "y", "id": 2, "total": 2, "e": "p"}),
    ]
    history = json.loads((tmp_path / "position.schema-history.json").read_text())
    tables = history["base"]["tables"] + [
        t["definition"] for e in history["entries"] for t in e["tables"] if t["definition"]
    ]
    latest = [t for t in tables if t["schema"] == name and t["table"] == "a"][-1]
    assert [c["name"] for c in latest["columns"]] == ["s", "id", "total", "e"]
    assert latest["primary_key"] == ["id"]
