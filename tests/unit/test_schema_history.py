"""Schema history (replicad.source.schema): DDL applied to a snapshot, persistence with
trimming to the stored position, and TableMapEvent.apply_schema on MINIMAL-metadata maps built
from the byte fixtures of tests/helpers/events.py."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from structlog.testing import capture_logs

from replicad.binlog.events import QueryEvent
from replicad.binlog.gtid import GtidSet, MariaGtidPosition
from replicad.binlog.parser import BinlogParser
from replicad.binlog.position import Position
from replicad.binlog.rows import RowsEvent, TableMapEvent
from replicad.errors import DiskFullError
from replicad.source.schema import (
    COLUMNS_SQL,
    PRIMARY_KEYS_SQL,
    ColumnSchema,
    SchemaHistory,
    SchemaHistoryAheadError,
    SchemaHistoryError,
    TableSchema,
    at_or_before,
    default_history_path,
    snapshot,
)
from tests.helpers import events as ev

pytestmark = pytest.mark.unit

UUID_A = "3e11fa47-71ca-11e1-9e33-c80aa9429562"


def maria(seq: int, pos: int | None = None, file: str = "mariadb-bin.000001") -> Position:
    return Position(file, pos or 100 + seq, None, MariaGtidPosition.parse(f"0-1-{seq}"))


def names(history: SchemaHistory, db: str, table: str) -> list[str] | None:
    found = history.columns(db, table)
    return None if found is None else found.column_names


def col(history: SchemaHistory, db: str, table: str, name: str) -> ColumnSchema:
    found = history.columns(db, table)
    assert found is not None
    return next(c for c in found.columns if c.name == name)


def base(*statements: str, db: str = "d") -> SchemaHistory:
    history = SchemaHistory([], maria(1))
    for i, sql in enumerate(statements):
        history.apply(sql, db, maria(10 + i))
    return history


def warnings(logs: list[dict]) -> list[str]:
    return [e["event"] for e in logs if e["log_level"] == "warning"]


# ---------------------------------------------------------------------------- DDL


def test_create_table_with_enum_set_unsigned_and_primary_key() -> None:
    h = base(
        r"""CREATE TABLE t (
          id INT(10) UNSIGNED NOT NULL AUTO_INCREMENT,
          e ENUM('x', 'y z  ', 'it''s', 'back\\slash', _utf8mb4'in' 'tro', X'C3A9') NOT NULL,
          s SET('a','b,c') DEFAULT 'a',
          z TINYINT(1) ZEROFILL, big SERIAL, sig BIGINT SIGNED, d DEC(5,2) UNSIGNED,
          v VARCHAR(10) DEFAULT 'unsigned KEY', dp DOUBLE PRECISION UNSIGNED,
          cv CHARACTER VARYING(3), nc NATIONAL CHAR(2), lv LONG VARCHAR, b BOOLEAN,
          g INT GENERATED ALWAYS AS (id + 1) VIRTUAL CHECK (g > 0),
          PRIMARY KEY USING BTREE (id, e(3)), UNIQUE KEY u (v), KEY k (z),
          CONSTRAINT c1 CHECK (id > 0), FOREIGN KEY (z) REFERENCES o (z)
        ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COMMENT='SELECT'"""
    )
    t = h.columns("d", "t")
    assert t is not None
    assert t.column_names == [
        "id",
        "e",
        "s",
        "z",
        "big",
        "sig",
        "d",
        "v",
        "dp",
        "cv",
        "nc",
        "lv",
        "b",
        "g",
    ]
    assert t.primary_key == ("id", "e")
    assert [c.data_type for c in t.columns] == [
        "int",
        "enum",
        "set",
        "tinyint",
        "bigint",
        "bigint",
        "decimal",
        "varchar",
        "double",
        "varchar",
        "char",
        "mediumtext",
        "tinyint",
        "int",
    ]
    assert [c.name for c in t.columns if c.unsigned] == ["id", "z", "big", "d", "dp"]
    assert t.columns[1].enum_values == ("x", "y z", "it's", "back\\slash", "intro", "é")
    assert t.columns[2].set_values == ("a", "b,c")
    assert t.columns[0].enum_values is None and t.columns[1].set_values is None


def test_inline_primary_key_and_bare_key_attribute() -> None:
    h = base(
        "CREATE TABLE a (x INT, id BIGINT PRIMARY KEY)",
        "CREATE TABLE b (id INT KEY, y INT)",
        "CREATE TABLE c (id INT UNIQUE KEY, y INT)",
    )
    assert h.columns("d", "a").primary_key == ("id",)
    assert h.columns("d", "b").primary_key == ("id",)
    assert h.columns("d", "c").primary_key == ()


def test_alter_add_first_after_drop_change_modify_rename() -> None:
    h = base("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(40), n BIGINT)")
    h.apply("ALTER TABLE t ADD COLUMN extra INT DEFAULT 7 FIRST", "d", maria(20))
    assert names(h, "d", "t") == ["extra", "id", "v", "n"]
    h.apply("ALTER TABLE t ADD mid INT AFTER id, ADD COLUMN last INT", "d", maria(21))
    assert names(h, "d", "t") == ["extra", "id", "mid", "v", "n", "last"]
    h.apply("ALTER TABLE t DROP COLUMN v, DROP last", "d", maria(22))
    assert names(h, "d", "t") == ["extra", "id", "mid", "n"]
    h.apply("ALTER TABLE t CHANGE COLUMN n amount BIGINT UNSIGNED NOT NULL", "d", maria(23))
    assert names(h, "d", "t") == ["extra", "id", "mid", "amount"]
    assert col(h, "d", "t", "amount").unsigned
    h.apply("ALTER TABLE t CHANGE id ident INT FIRST", "d", maria(24))
    assert names(h, "d", "t") == ["ident", "extra", "mid", "amount"]
    assert h.columns("d", "t").primary_key == ("ident",), "the key follows the rename"
    h.apply("ALTER TABLE t MODIFY mid ENUM('p','q') AFTER amount", "d", maria(25))
    assert names(h, "d", "t") == ["ident", "extra", "amount", "mid"]
    assert col(h, "d", "t", "mid").enum_values == ("p", "q")
    h.apply("ALTER TABLE t MODIFY COLUMN amount INT", "d", maria(26))
    assert not col(h, "d", "t", "amount").unsigned
    h.apply(
        "ALTER TABLE t RENAME COLUMN ident TO k, DROP PRIMARY KEY, ADD PRIMARY KEY (k, mid)",
        "d",
        maria(27),
    )
    assert names(h, "d", "t") == ["k", "extra", "amount", "mid"]
    assert h.columns("d", "t").primary_key == ("k", "mid")
    h.apply("ALTER TABLE t DROP COLUMN mid", "d", maria(28))
    assert h.columns("d", "t").primary_key == ("k",), "a dropped column leaves the key"


def test_column_names_are_case_insensitive_table_names_exact_first() -> None:
    h = base("CREATE TABLE T (Id INT, Val INT)", "CREATE TABLE t (x INT)")
    h.apply("ALTER TABLE T DROP COLUMN VAL, CHANGE ID id2 INT", "d", maria(20))
    assert names(h, "d", "T") == ["id2"]
    assert names(h, "d", "t") == ["x"], "t and T are different tables here"
    h2 = base("CREATE TABLE Mixed (a INT)")
    assert names(h2, "d", "mixed") == ["a"], "a lower_case_table_names server's TABLE_MAP"


def test_qualified_names_and_the_query_events_default_schema() -> None:
    parser = BinlogParser()
    parser.parse(ev.fde_mysql8(), 4)

    def query(sql: str, schema: str) -> QueryEvent:
        event = parser.parse(ev.event(ev.QUERY, ev.query_body(sql, schema=schema)), 200)
        assert isinstance(event, QueryEvent)
        return event

    h = SchemaHistory([], maria(1))
    h.apply(query("CREATE TABLE t (a INT)", "one"), position=maria(2))
    h.apply(query("CREATE TABLE two.t (b INT)", "one"), position=maria(3))
    h.apply(query("ALTER TABLE `two`.t ADD c INT", "one"), position=maria(4))
    h.apply(query("ALTER TABLE t ADD z INT FIRST", "one"), position=maria(5))
    assert names(h, "one", "t") == ["z", "a"]
    assert names(h, "two", "t") == ["b", "c"]
    with capture_logs() as logs:
        h.apply(query("CREATE TABLE nodb (a INT)", ""), position=maria(6))
    assert warnings(logs) == ["schema_ddl_unparsed"]
    assert h.columns("", "nodb") is None


def test_backquoted_identifiers_with_odd_characters() -> None:
    h = base(
        "CREATE TABLE `we``ird 名.x` (`col``1` INT, `a b` TEXT, `first` INT, `key` INT, "
        "`select` INT, PRIMARY KEY (`col``1`))",
        db="odd`db",
    )
    assert names(h, "odd`db", "we`ird 名.x") == ["col`1", "a b", "first", "key", "select"]
    assert h.columns("odd`db", "we`ird 名.x").primary_key == ("col`1",)
    h.apply(
        "ALTER TABLE `odd``db`.`we``ird 名.x` ADD `after` INT AFTER `first`, "
        "ADD x INT AFTER `a b`, CHANGE `key` `new``key` INT FIRST",
        "",
        maria(30),
    )
    assert names(h, "odd`db", "we`ird 名.x") == [
        "new`key",
        "col`1",
        "a b",
        "x",
        "first",
        "after",
        "select",
    ]
    # ANSI_QUOTES: double-quoted names
    h.apply('ALTER TABLE "odd`db"."we`ird 名.x" DROP COLUMN "select"', "", maria(31))
    assert "select" not in names(h, "odd`db", "we`ird 名.x")


def test_comments_and_executable_comments() -> None:
    h = base(
        "/* leading */ CREATE TABLE t (a INT -- a comment, b INT\n, c INT # another\n"
        ") /*!50100 PARTITION BY HASH (a) PARTITIONS 2 */",
        "/*!40000 ALTER TABLE t ADD /* inner */ d INT UNSIGNED */",
        "ALTER TABLE t ADD e INT /*M!100301 FIRST */",
    )
    assert names(h, "d", "t") == ["e", "a", "c", "d"]
    assert col(h, "d", "t", "d").unsigned


def test_rename_table_forms_and_swaps() -> None:
    h = base("CREATE TABLE a (x INT)", "CREATE TABLE b (y INT)", "CREATE TABLE c (z INT)")
    h.apply("RENAME TABLE a TO a2, d.b TO other.b2", "d", maria(20))
    assert h.columns("d", "a") is None and names(h, "d", "a2") == ["x"]
    assert names(h, "other", "b2") == ["y"]
    h.apply("RENAME TABLE a2 TO tmp, c TO a2, tmp TO c", "d", maria(21))  # a swap
    assert names(h, "d", "a2") == ["z"] and names(h, "d", "c") == ["x"]
    h.apply("ALTER TABLE c RENAME TO third.c3, ADD w INT", "d", maria(22))
    assert h.columns("d", "c") is None and names(h, "third", "c3") == ["x", "w"]
    h.apply("ALTER TABLE third.c3 RENAME AS c4", "d", maria(23))
    assert names(h, "d", "c4") == ["x", "w"]


def test_drop_table_drop_database_truncate() -> None:
    h = base(
        "CREATE TABLE a (x INT)",
        "CREATE TABLE b (y INT)",
        "CREATE TABLE e.c (z INT)",
        "CREATE TABLE e.k (z INT)",
    )
    h.apply("TRUNCATE TABLE a", "d", maria(20))
    h.apply("CREATE DATABASE IF NOT EXISTS f", "d", maria(21))
    assert names(h, "d", "a") == ["x"]
    h.apply("DROP TABLE IF EXISTS `a`,`nosuch` /* generated by server */", "d", maria(22))
    assert h.columns("d", "a") is None and names(h, "d", "b") == ["y"]
    h.apply("DROP TEMPORARY TABLE IF EXISTS b", "d", maria(23))
    assert names(h, "d", "b") == ["y"], "a temporary table does not hide the real one"
    h.apply("DROP DATABASE e", "d", maria(24))
    assert h.columns("e", "c") is None and h.columns("e", "k") is None
    assert names(h, "d", "b") == ["y"]


def test_create_like_if_not_exists_or_replace() -> None:
    h = base("CREATE TABLE src (id INT PRIMARY KEY, e ENUM('a'))")
    h.apply("CREATE TABLE copy LIKE src", "d", maria(20))
    h.apply("CREATE TABLE other.copy2 (LIKE d.src)", "d", maria(21))
    assert h.columns("d", "copy") == TableSchema(
        "d", "copy", h.columns("d", "src").columns, ("id",)
    )
    assert names(h, "other", "copy2") == ["id", "e"]
    h.apply("CREATE TABLE IF NOT EXISTS copy (other INT)", "d", maria(22))
    assert names(h, "d", "copy") == ["id", "e"], "IF NOT EXISTS on an existing table: no-op"
    h.apply("CREATE OR REPLACE TABLE copy (other INT)", "d", maria(23))
    assert names(h, "d", "copy") == ["other"]


def test_unparseable_ddl_keeps_the_previous_schema_and_warns() -> None:
    h = base("CREATE TABLE t (id INT, v INT)")
    before = h.columns("d", "t")
    bad = [
        "ALTER TABLE t ADD COLUMN x INT AFTER nosuch",
        "ALTER TABLE t ADD COLUMN y INT, FROBNICATE",
        "ALTER TABLE t ADD COLUMN z ENUM('unterminated)",
        "ALTER TABLE t CHANGE nosuch other INT",
        "ALTER TABLE t ADD COLUMN (w INT",
    ]
    for i, sql in enumerate(bad):
        with capture_logs() as logs:
            assert h.apply(sql, "d", maria(20 + i)) == []
        assert warnings(logs) == ["schema_ddl_unparsed"], sql
        assert logs[0]["statement"] == sql and logs[0]["reason"]
        assert h.columns("d", "t") == before, sql
    assert h.entries == 1, "no entry for statements that changed nothing"


def test_create_table_select_makes_the_table_unknown() -> None:
    h = base("CREATE TABLE t (a INT)")
    with capture_logs() as logs:
        h.apply("CREATE OR REPLACE TABLE t (extra INT) SELECT a FROM src", "d", maria(20))
        h.apply("CREATE TABLE u AS SELECT 1", "d", maria(21))
    assert "schema_ddl_unparsed" in warnings(logs)
    assert h.columns("d", "t") is None, "stale columns would be a guess: the table is unknown"
    assert h.columns("d", "u") is None


def test_statements_that_change_no_columns_are_ignored_silently() -> None:
    h = base("CREATE TABLE t (a INT)")
    quiet = [
        "BEGIN",
        "COMMIT",
        "XA START 'x'",
        "INSERT INTO t VALUES (1)",
        "GRANT ALL ON *.* TO x",
        "CREATE VIEW v AS SELECT a FROM t",
        "CREATE INDEX i ON t (a)",
        "DROP VIEW v",
        "ALTER DATABASE d CHARACTER SET utf8mb4",
        "CREATE TEMPORARY TABLE tt (x INT)",
        "ALTER TABLE t ADD INDEX i2 (a), ALGORITHM=INPLACE, LOCK=NONE",
        "ALTER TABLE t ENGINE=InnoDB, FORCE",
        "ALTER TABLE t CONVERT TO CHARACTER SET utf8mb4",
        "ALTER TABLE t ALTER COLUMN a SET DEFAULT 3",
        "RENAME USER a TO b",
        "ALTER TABLE t DROP INDEX i2, DROP FOREIGN KEY f, RENAME INDEX i TO j",
        "CREATE USER 'x'@'%'",
        "FLUSH TABLES",
    ]
    with capture_logs() as logs:
        for i, sql in enumerate(quiet):
            h.apply(sql, "d", maria(20 + i))
    assert warnings(logs) == [], logs
    assert names(h, "d", "t") == ["a"] and h.columns("d", "tt") is None
    assert h.entries == 1, "nothing but the CREATE TABLE made an entry"


def test_repeated_ddl_is_idempotent() -> None:
    """DDL that the snapshot already holds (committed between SHOW MASTER STATUS and the
    snapshot) comes again from the stream: applying it twice must not change the result."""
    statements = [
        "ALTER TABLE t ADD COLUMN x INT FIRST",
        "ALTER TABLE t DROP COLUMN v",
        "ALTER TABLE t CHANGE n amount BIGINT",
        "ALTER TABLE t RENAME COLUMN amount TO total",
        "RENAME TABLE t TO t2",
    ]
    once = base("CREATE TABLE t (id INT, v INT, n INT)", *statements)
    with capture_logs() as logs:
        twice = base(
            "CREATE TABLE t (id INT, v INT, n INT)", *(s for s in statements for _ in (1, 2))
        )
    assert names(once, "d", "t2") == ["x", "id", "total"]
    assert list(twice.tables()) == list(once.tables())
    assert twice.entries == once.entries, "a repeat changes nothing"
    assert warnings(logs) == []


def test_alter_online_ignore_wait_if_exists_and_parenthesised_add() -> None:
    h = base("CREATE TABLE t (a INT)")
    h.apply(
        "ALTER ONLINE IGNORE TABLE IF EXISTS t WAIT 5 ADD COLUMN IF NOT EXISTS (b INT, "
        "c SET('x'), INDEX (b)), ADD COLUMN IF NOT EXISTS a INT FIRST, "
        "DROP COLUMN IF EXISTS nosuch, MODIFY COLUMN IF EXISTS nosuch INT",
        "d",
        maria(20),
    )
    assert names(h, "d", "t") == ["a", "b", "c"]


def test_system_versioning_columns() -> None:
    h = base(
        "CREATE TABLE v (a INT) WITH SYSTEM VERSIONING",
        "CREATE TABLE p (a INT, s TIMESTAMP(6) GENERATED ALWAYS AS ROW START, "
        "e TIMESTAMP(6) GENERATED ALWAYS AS ROW END, PERIOD FOR SYSTEM_TIME (s, e)) "
        "WITH SYSTEM VERSIONING",
    )
    assert names(h, "d", "v") == ["a", "row_start", "row_end"]
    assert names(h, "d", "p") == ["a", "s", "e"]
    h.apply("ALTER TABLE v ADD b INT", "d", maria(20))
    assert names(h, "d", "v") == ["a", "b", "row_start", "row_end"], "MariaDB adds before them"
    h.apply("ALTER TABLE v DROP SYSTEM VERSIONING", "d", maria(21))
    assert names(h, "d", "v") == ["a", "b"]
    h.apply("ALTER TABLE v ADD SYSTEM VERSIONING", "d", maria(22))
    assert names(h, "d", "v") == ["a", "b", "row_start", "row_end"]


def test_no_backslash_escapes_sql_mode() -> None:
    parser = BinlogParser()
    parser.parse(ev.fde_mysql8(), 4)
    sql = r"CREATE TABLE t (e ENUM('a\', 'b'))"  # NO_BACKSLASH_ESCAPES: 'a\' is a whole string
    body = ev.query_body(sql, schema="d", status=ev.q_sql_mode(1 << 21))
    event = parser.parse(ev.event(ev.QUERY, body), 200)
    h = SchemaHistory()
    h.apply(event, position=maria(2))
    assert col(h, "d", "t", "e").enum_values == ("a\\", "b")


def test_staged_ddl_is_visible_at_once_and_forgotten_on_rollback() -> None:
    h = base("CREATE TABLE t (a INT)")
    h.dirty = False
    h.apply("ALTER TABLE t ADD b INT", "d")  # no position: staged
    assert names(h, "d", "t") == ["a", "b"], "rows later in the transaction need it"
    assert not h.dirty and h.entries == 1
    h.rollback()
    assert names(h, "d", "t") == ["a"]
    h.apply("ALTER TABLE t ADD c INT", "d")
    h.apply("ALTER TABLE t ADD d INT", "d")
    h.commit(maria(30))
    assert names(h, "d", "t") == ["a", "c", "d"] and h.dirty and h.entries == 2


# ---------------------------------------------------------------------- persistence


def test_positions_are_ordered_by_gtids_else_by_binlog_file() -> None:
    assert at_or_before(maria(5), maria(5)) and at_or_before(maria(4), maria(5))
    assert at_or_before(maria(6), maria(5)) is False
    other = Position("x.000001", 4, None, MariaGtidPosition.parse("0-1-5,1-2-1"))
    assert at_or_before(other, maria(5)) is False, "a domain the stored position lacks"
    assert at_or_before(maria(5), other)
    s1 = Position("b.000001", 4, GtidSet.parse(f"{UUID_A}:1-5"))
    s2 = Position("a.000009", 4, GtidSet.parse(f"{UUID_A}:1-7"))
    assert at_or_before(s1, s2) and at_or_before(s2, s1) is False
    assert at_or_before(Position("bin.000009", 900), Position("bin.000010", 4))
    assert at_or_before(Position("bin.999999", 9), Position("bin.1000000", 4)), "numeric order"
    assert at_or_before(Position("bin.000002", 900), Position("bin.000002", 800)) is False
    assert at_or_before(Position("a.000001", 4), Position("b.000001", 4)) is None


def test_save_and_load_round_trip(tmp_path: Path) -> None:
    h = base(
        "CREATE TABLE t (id INT UNSIGNED PRIMARY KEY, e ENUM('x','y'), s SET('p'))",
        "CREATE TABLE v (a INT) WITH SYSTEM VERSIONING",
    )
    path = tmp_path / "sub" / "h.json"
    h.save(path)
    assert not h.dirty
    assert not list(path.parent.glob(".*.tmp")), "no temporary file left behind"
    loaded = SchemaHistory.load(path, maria(50))
    assert loaded is not None
    assert list(loaded.tables()) == list(h.tables()) and loaded.entries == h.entries
    assert loaded.base_position == h.base_position
    assert SchemaHistory.load(tmp_path / "missing.json", maria(50)) is None


def test_load_drops_entries_after_the_stored_position(tmp_path: Path) -> None:
    """A crash after the history was saved but before the position was: the DDL after the
    stored position will be read again from the stream, so the history must not hold it."""
    h = base("CREATE TABLE t (a INT)")  # entry at seq 10
    h.apply("ALTER TABLE t ADD b INT", "d", maria(11))
    h.apply("ALTER TABLE t CHANGE b c INT", "d", maria(12))
    h.apply("RENAME TABLE t TO u", "d", maria(13))
    path = tmp_path / "h.json"
    h.save(path)
    for stored, expected in [
        (11, ("t", ["a", "b"])),
        (12, ("t", ["a", "c"])),
        (13, ("u", ["a", "c"])),
        (10, ("t", ["a"])),
    ]:
        loaded = SchemaHistory.load(path, maria(stored, pos=999))
        assert loaded is not None
        assert names(loaded, "d", expected[0]) == expected[1], stored
        assert loaded.entries == stored - 9
        assert loaded.dirty == (stored < 13)
    # the same with file:pos positions (no GTIDs)
    h = SchemaHistory([], Position("bin.000001", 4))
    h.apply("CREATE TABLE t (a INT)", "d", Position("bin.000001", 500))
    h.apply("ALTER TABLE t ADD b INT", "d", Position("bin.000002", 300))
    h.save(path)
    assert names(SchemaHistory.load(path, Position("bin.000002", 299)), "d", "t") == ["a"]
    assert names(SchemaHistory.load(path, Position("bin.000002", 300)), "d", "t") == ["a", "b"]


def test_save_folds_entries_the_position_store_has_passed(tmp_path: Path) -> None:
    h = base("CREATE TABLE t (a INT)", "ALTER TABLE t ADD b INT", "ALTER TABLE t ADD c INT")
    path = tmp_path / "h.json"
    h.save(path, durable=maria(11))
    data = json.loads(path.read_text())
    assert len(data["entries"]) == 1 and data["base"]["position"]["mariadb_gtid"] == "0-1-11"
    assert data["base"]["tables"][0]["columns"] == [
        {"name": "a", "type": "int"},
        {"name": "b", "type": "int"},
    ]
    loaded = SchemaHistory.load(path, maria(12))
    assert names(loaded, "d", "t") == ["a", "b", "c"]
    assert names(SchemaHistory.load(path, maria(11)), "d", "t") == ["a", "b"]


def test_unusable_history_files_are_errors(tmp_path: Path) -> None:
    path = tmp_path / "h.json"
    base("CREATE TABLE t (a INT)").save(path, durable=maria(10))  # base now at seq 10
    with pytest.raises(SchemaHistoryAheadError, match="starts after the stored position"):
        SchemaHistory.load(path, maria(9))
    path.write_text("{not json")
    with pytest.raises(SchemaHistoryError, match="damaged"):
        SchemaHistory.load(path, maria(9))
    path.write_text(json.dumps({"format": "replicad-schema-history", "version": 99}))
    with pytest.raises(SchemaHistoryError, match="unknown format"):
        SchemaHistory.load(path, maria(9))
    path.write_text(json.dumps({"format": "replicad-schema-history", "version": 1}))
    with pytest.raises(SchemaHistoryError, match="damaged"):
        SchemaHistory.load(path, maria(9))


def test_a_failed_save_leaves_the_previous_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "h.json"
    h = base("CREATE TABLE t (a INT)")
    h.save(path)
    h.apply("ALTER TABLE t ADD b INT", "d", maria(30))

    def failing_replace(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(DiskFullError, match="No space left"):
        h.save(path)
    monkeypatch.undo()
    assert h.dirty, "still to be saved"
    assert names(SchemaHistory.load(path, maria(40)), "d", "t") == ["a"]
    assert not list(tmp_path.glob(".*.tmp"))


def test_default_path_is_beside_the_position_file() -> None:
    assert default_history_path("/var/lib/replicad/position.json") == Path(
        "/var/lib/replicad/position.schema-history.json"
    )


# ------------------------------------------------------------- TABLE_MAP.apply_schema

# CREATE TABLE shop.items (id INT UNSIGNED PRIMARY KEY, name VARCHAR(20),
#   color ENUM('red','green','blue'), tags SET('a','b','c'), n BIGINT)
# as binlog_row_metadata=MINIMAL writes it: types, SIGNEDNESS (one bit per numeric column:
# id, n) and the default charset, but no names, members or primary key. ENUM/SET are STRING
# in TABLE_MAP with the real type in the first metadata byte (Field_enum::do_save_field_metadata).
ITEMS_COLUMNS = [
    ev.Col(ev.T_LONG, nullable=False),
    ev.Col(ev.T_VARCHAR, ev.u16(80)),
    ev.Col(ev.T_STRING, bytes([247, 1])),
    ev.Col(ev.T_STRING, bytes([248, 1])),
    ev.Col(ev.T_LONGLONG),
]
MINIMAL = ev.opt_signedness([True, False]) + ev.opt_default_charset(ev.UTF8MB4_0900_AI_CI)
ITEMS = TableSchema(
    "shop",
    "items",
    (
        ColumnSchema("id", "int", unsigned=True),
        ColumnSchema("name", "varchar"),
        ColumnSchema("color", "enum", enum_values=("red", "green", "blue")),
        ColumnSchema("tags", "set", set_values=("a", "b", "c")),
        ColumnSchema("n", "bigint"),
    ),
    ("id",),
)
ROW = [ev.int_le(4_000_000_000, 4), ev.varchar("zoë", 80), b"\x02", b"\x05", ev.int_le(-5, 8)]


def _parser() -> BinlogParser:
    parser = BinlogParser()
    parser.parse(ev.fde_mysql8(), 4)
    return parser


def _map(parser: BinlogParser, optional: bytes = MINIMAL, columns=None) -> TableMapEvent:
    body = ev.table_map(42, "shop", "items", columns or ITEMS_COLUMNS, optional=optional)
    event = parser.parse(ev.event(ev.TABLE_MAP, body), 300)
    assert isinstance(event, TableMapEvent)
    return event


def _rows(parser: BinlogParser, values=ROW, table: TableMapEvent | None = None) -> list:
    body = ev.rows_v2(ev.WRITE_ROWS, 42, len(values), ev.row_image(values))
    event = parser.parse(ev.event(ev.WRITE_ROWS, body), 400)
    assert isinstance(event, RowsEvent)
    return [after for _, after in event.rows(table)]


def test_apply_schema_names_a_minimal_table_map() -> None:
    parser = _parser()
    table_map = _map(parser)
    assert not table_map.has_names
    assert table_map.apply_schema(ITEMS) is None
    assert _rows(parser) == [
        {"id": 4_000_000_000, "name": "zoë", "color": "green", "tags": "a,c", "n": -5}
    ]
    assert table_map.primary_key_names == ["id"]
    assert not table_map.has_names, "the event still says what the server wrote"


def test_map_metadata_wins_over_the_history() -> None:
    """SIGNEDNESS written by the server is kept even where the history disagrees; without it
    (MySQL 5.7, MariaDB < 10.5) signedness comes from the history."""
    signed_history = TableSchema(
        "shop",
        "items",
        tuple(
            ColumnSchema(c.name, c.data_type, False, c.enum_values, c.set_values)
            for c in ITEMS.columns
        ),
        ("id",),
    )
    parser = _parser()
    _map(parser).apply_schema(signed_history)
    assert _rows(parser)[0]["id"] == 4_000_000_000, "the map's SIGNEDNESS says unsigned"
    parser = _parser()
    _map(parser, optional=b"").apply_schema(signed_history)
    assert _rows(parser)[0]["id"] == -294_967_296, "no SIGNEDNESS: the history's (signed)"
    parser = _parser()
    _map(parser, optional=b"").apply_schema(ITEMS)
    assert _rows(parser)[0]["id"] == 4_000_000_000
    # members and primary key written by the server are kept too
    parser = _parser()
    own = MINIMAL + ev.opt_str_values(ev.OPT_ENUM_STR_VALUE, [["R", "G", "B"]])
    own += ev.opt_simple_primary_key([4])
    table_map = _map(parser, optional=own)
    table_map.apply_schema(ITEMS)
    assert _rows(parser)[0]["color"] == "G" and table_map.primary_key_names == ["n"]


def test_full_metadata_maps_are_left_alone() -> None:
    parser = _parser()
    full = MINIMAL + ev.opt_column_names(["A", "B", "C", "D", "E"])
    table_map = _map(parser, optional=full)
    assert table_map.apply_schema(ITEMS) is None
    assert SchemaHistory([ITEMS]).resolve(table_map) is table_map
    assert table_map.column_names == ["A", "B", "C", "D", "E"]


def test_shared_decoder_cache_never_mixes_names() -> None:
    """Maps with identical bytes share compiled decoders: one decoded before the history
    named it, one named, one named differently (a column renamed) must each keep theirs."""
    parser = _parser()
    _map(parser)
    assert list(_rows(parser)[0]) == ["@1", "@2", "@3", "@4", "@5"]
    _map(parser).apply_schema(ITEMS)
    assert list(_rows(parser)[0]) == ["id", "name", "color", "tags", "n"]
    renamed = TableSchema(
        "shop", "items", (*ITEMS.columns[:4], ColumnSchema("total", "bigint")), ("id",)
    )
    _map(parser).apply_schema(renamed)
    assert list(_rows(parser)[0]) == ["id", "name", "color", "tags", "total"]
    _map(parser)
    assert list(_rows(parser)[0]) == ["@1", "@2", "@3", "@4", "@5"]
    # a map that decoded rows already, then named (and named again): its own cache is reset
    table_map = _map(parser)
    assert list(_rows(parser)[0]) == ["@1", "@2", "@3", "@4", "@5"]
    table_map.apply_schema(ITEMS)
    assert list(_rows(parser)[0]) == ["id", "name", "color", "tags", "n"]
    table_map.apply_schema(renamed)
    assert list(_rows(parser)[0])[4] == "total"


def test_mismatches_keep_at_names_and_warn_once() -> None:
    parser = _parser()
    short = TableSchema("shop", "items", ITEMS.columns[:4], ("id",))
    table_map = _map(parser)
    reason = table_map.apply_schema(short)
    assert reason is not None and "4 columns" in reason and "5" in reason
    assert list(_rows(parser)[0]) == ["@1", "@2", "@3", "@4", "@5"]

    retyped = TableSchema(
        "shop", "items", (*ITEMS.columns[:4], ColumnSchema("n", "varchar")), ("id",)
    )
    not_enum = TableSchema(
        "shop",
        "items",
        (*ITEMS.columns[:2], ColumnSchema("color", "int"), *ITEMS.columns[3:]),
        ("id",),
    )
    assert _map(parser).apply_schema(not_enum) is not None, "ENUM in the map, not in history"
    for schema in (short, retyped):
        history = SchemaHistory([schema])
        with capture_logs() as logs:
            maps = [_map(parser) for _ in range(3)]
            results = [history.resolve(m) is not m for m in maps]
        assert results == [False] * 3
        assert warnings(logs) == ["schema_mismatch"], "once per table version, not per map"
        assert list(_rows(parser)[0]) == ["@1", "@2", "@3", "@4", "@5"]
    with capture_logs() as logs:
        unknown = _map(parser)
        assert SchemaHistory().resolve(unknown) is unknown
    assert warnings(logs) == ["schema_mismatch"]
    assert "does not know" in logs[0]["reason"]


def test_history_drives_the_map_through_an_alter() -> None:
    history = SchemaHistory([ITEMS], maria(1))
    parser = _parser()
    named = history.resolve(_map(parser))
    assert list(_rows(parser, table=named)[0]) == ["id", "name", "color", "tags", "n"]
    history.apply("ALTER TABLE items CHANGE n total BIGINT, ADD x INT FIRST", "shop", maria(2))
    columns = [ev.Col(ev.T_LONG), *ITEMS_COLUMNS]
    table_map = _map(parser, ev.opt_signedness([False, True, False]), columns=columns)
    named = history.resolve(table_map)
    assert named is not table_map and table_map.column_names[0] == "@1", "the event is unchanged"
    table_map = named
    assert table_map.column_names == ["x", "id", "name", "color", "tags", "total"]
    assert table_map.primary_key_names == ["id"]


# ----------------------------------------------------------------------------- snapshot


class FakeConnection:
    def __init__(self, results: dict[str, list[tuple]]) -> None:
        self.results = results
        self.queries: list[str] = []

    async def query(self, sql: str) -> SimpleNamespace:
        self.queries.append(sql)
        return SimpleNamespace(rows=self.results[sql])


def test_snapshot_from_information_schema() -> None:
    columns = [  # as the text protocol returns them: strings (bytes for binary ones)
        ("d", "t", "e", "2", "enum", r"enum('it''s','back\\slash','a,b')", "BASE TABLE", None),
        ("d", "t", "id", "1", "int", "int(10) unsigned", "BASE TABLE", None),
        ("d", "t", "s", "3", "set", "set('x','y')", "BASE TABLE", None),
        ("d", "t", "u", "4", "decimal", b"decimal(5,2) unsigned zerofill", "BASE TABLE", None),
        ("d", "v", "a", "1", "int", "int(11)", "SYSTEM VERSIONED", None),
        ("d", "p", "a", "1", "int", "int(11)", "SYSTEM VERSIONED", None),
        ("d", "p", "s", "2", "timestamp", "timestamp(6)", "SYSTEM VERSIONED", "ROW START"),
        ("d", "p", "e", "3", "timestamp", "timestamp(6)", "SYSTEM VERSIONED", "ROW END"),
    ]
    keys = [("d", "t", "e", "2"), ("d", "t", "id", "1")]
    status = [("mariadb-bin.000001", "900", "", "")]
    conn = FakeConnection(
        {COLUMNS_SQL: columns, PRIMARY_KEYS_SQL: keys, "SHOW MASTER STATUS": status}
    )
    start = maria(5, pos=800)
    history = asyncio.run(snapshot(conn, start))
    t = history.columns("d", "t")
    assert t.column_names == ["id", "e", "s", "u"] and t.primary_key == ("id", "e")
    assert t.columns[1].enum_values == ("it's", "back\\slash", "a,b")
    assert t.columns[2].set_values == ("x", "y")
    assert [c.unsigned for c in t.columns] == [True, False, False, True]
    assert names(history, "d", "v") == ["a", "row_start", "row_end"]
    assert names(history, "d", "p") == ["a", "s", "e"]
    assert history.base_position == start and history.dirty
    # The binlog moved while the snapshot was read: DDL up to there may be in it already.
    assert history.window_end == Position("mariadb-bin.000001", 900)
    with capture_logs() as logs:
        history.apply("ALTER TABLE t ADD z INT", "d", maria(6, pos=850))
        history.apply("ALTER TABLE t ADD y INT", "d", maria(7, pos=950))
    assert warnings(logs) == ["schema_ddl_in_snapshot_window"]
    assert history.window_end is None
    conn.results["SHOW MASTER STATUS"] = [("mariadb-bin.000001", "800", "", "")]
    assert asyncio.run(snapshot(conn, start)).window_end is None, "nothing moved: exact"


def test_drop_database_lists_its_tables_in_one_order_whatever_the_hash_seed() -> None:
    """The order of a DROP DATABASE's table changes is the order of the DDL records `dump`
    and the sinks write: it must not follow Python's string hashing (PYTHONHASHSEED)."""
    script = (
        "from tests.unit.test_schema_history import base, maria\n"
        "h = base(*[f'CREATE TABLE e.t{i} (id INT)' for i in range(12)])\n"
        "print(h.apply('DROP DATABASE e', 'd', maria(99)))\n"
    )
    root = Path(__file__).resolve().parents[2]
    outputs = {
        subprocess.run(
            [sys.executable, "-c", script],
            env={**os.environ, "PYTHONHASHSEED": str(seed), "PYTHONPATH": str(root)},
            capture_output=True,
            text=True,
            check=True,
            cwd=root,
        ).stdout.splitlines()[-1]  # after the log lines
        for seed in range(4)
    }
    assert len(outputs) == 1, outputs
    assert outputs.pop().startswith("[('e', 't0'), ('e', 't1'), ('e', 't10')")


def test_a_repeated_table_map_is_parsed_once_keeps_its_header_and_is_named_alone() -> None:
    """Every transaction repeats its TABLE_MAPs byte for byte; the parser parses a body once
    (replicad dump spent half its time there on small transactions). Each event still has
    its own header, and naming one map (apply_schema) names no other map of those bytes."""
    parser = _parser()
    body = ev.table_map(42, "shop", "items", ITEMS_COLUMNS, optional=MINIMAL)
    first = parser.parse(ev.event(ev.TABLE_MAP, body), 300)
    second = parser.parse(ev.event(ev.TABLE_MAP, body), 900)
    assert isinstance(first, TableMapEvent) and isinstance(second, TableMapEvent)
    assert (first.header.pos, second.header.pos) == (300, 900)
    assert second.columns is first.columns  # parsed once
    second.apply_schema(ITEMS)
    assert [c.name for c in second.columns] == ["id", "name", "color", "tags", "n"]
    assert [c.name for c in first.columns] == ["@1", "@2", "@3", "@4", "@5"]
    third = parser.parse(ev.event(ev.TABLE_MAP, body), 1500)
    assert isinstance(third, TableMapEvent)
    assert [c.name for c in third.columns] == ["@1", "@2", "@3", "@4", "@5"]
    assert list(_rows(parser)[0]) == ["@1", "@2", "@3", "@4", "@5"]
