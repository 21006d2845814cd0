"""Table-level changes for consumers (issue 15): what a statement does to which table
(`SchemaHistory.follow` → `table_changes`), the statement context of rows (thread, query), and
the SQL types of TABLE_MAP columns (`binlog/column_types.py`). The SQL types are also checked
against information_schema on the real server (tests/integration/test_consumer_contract.py)."""

from __future__ import annotations

import pytest

from replicad.binlog.changes import StatementContext
from replicad.binlog.column_types import SqlType, describe, sql_type_of
from replicad.binlog.events import AnnotateRowsEvent, EventHeader, QueryEvent, XidEvent
from replicad.binlog.rows import Column, TableMapEvent
from replicad.binlog.values import ColumnType as T
from replicad.source.schema import SchemaHistory, table_changes

pytestmark = pytest.mark.unit


def query(sql: str, schema: str = "d", thread: int = 42, pos: int = 900) -> QueryEvent:
    header = EventHeader(
        timestamp=1_700_000_000, type_code=2, server_id=9, event_size=0, log_pos=pos + 50, flags=0
    )
    header.pos = pos
    return QueryEvent(header, thread_id=thread, schema=schema, query=sql)


def follow(history: SchemaHistory, sql: str, schema: str = "d") -> list[tuple]:
    event = query(sql, schema)
    changes = table_changes(history.follow(event), event, "bin.000003", "0-9-77")
    return [(c.kind, c.db, c.table, c.before is not None, c.after is not None) for c in changes]


def test_each_ddl_kind_names_its_tables_with_before_and_after() -> None:
    h = SchemaHistory()
    assert follow(h, "CREATE TABLE a (id INT PRIMARY KEY, v TEXT)") == [
        ("create", "d", "a", False, True)
    ]
    assert follow(h, "ALTER TABLE a ADD COLUMN w INT") == [("alter", "d", "a", True, True)]
    assert follow(h, "TRUNCATE TABLE a") == [("truncate", "d", "a", False, False)]
    assert follow(h, "truncate other.b") == [("truncate", "other", "b", False, False)]
    assert follow(h, "RENAME TABLE a TO b") == [
        ("rename", "d", "a", True, False),
        ("rename", "d", "b", False, True),
    ]
    assert follow(h, "DROP TABLE b") == [("drop", "d", "b", True, False)]
    # statements that change no table's columns: nothing for consumers
    assert follow(h, "CREATE INDEX i ON x (y)") == []
    assert follow(h, "INSERT INTO a VALUES (1)") == []
    assert follow(h, "DROP TABLE IF EXISTS never_seen") == []


def test_a_table_change_carries_the_statement_and_its_coordinates() -> None:
    h = SchemaHistory()
    h.follow("CREATE TABLE a (id INT PRIMARY KEY, v VARCHAR(3))", "d")
    event = query("ALTER TABLE a DROP COLUMN v", thread=7, pos=1234)
    (change,) = table_changes(h.follow(event), event, "bin.000003", "0-9-77")
    assert change.ddl == "ALTER TABLE a DROP COLUMN v"
    assert (change.file, change.pos, change.gtid, change.server_id) == (
        "bin.000003",
        1234,
        "0-9-77",
        9,
    )
    assert (change.ts_ms, change.thread) == (1_700_000_000_000, 7)
    assert change.before is not None and change.after is not None
    assert [c["name"] for c in change.before["columns"]] == ["id", "v"]
    assert [c["name"] for c in change.after["columns"]] == ["id"]
    assert change.after["primary_key"] == ["id"]


def test_statement_context_follows_begin_annotations_and_commits() -> None:
    context = StatementContext()
    context.see(query("BEGIN", thread=11))
    assert (context.thread, context.query) == (11, None)
    context.see(AnnotateRowsEvent(EventHeader(0, 160, 1, 0, 0, 0), query="UPDATE t SET a=1"))
    assert (context.thread, context.query) == (11, "UPDATE t SET a=1")
    context.see(XidEvent(EventHeader(0, 16, 1, 0, 0, 0), xid=5))
    assert (context.thread, context.query) == (None, None)


def column(type_code: int, meta: int = 0, **kw) -> Column:
    return Column(
        index=0, name=kw.pop("name", "c"), type_code=type_code, meta=meta, nullable=True, **kw
    )


@pytest.mark.parametrize(
    ("col", "sql"),
    [
        (column(T.LONGLONG, unsigned=True), "bigint unsigned"),
        (column(T.TINY), "tinyint"),
        (column(T.NEWDECIMAL, (4 << 8) | 12), "decimal(12,4)"),  # meta: precision | scale<<8
        (column(T.NEWDECIMAL, 5), "decimal(5,0)"),
        (column(T.DATETIME2, 6), "datetime(6)"),
        (column(T.TIMESTAMP2, 0), "timestamp"),
        (column(T.TIME2, 3), "time(3)"),
        (column(T.BIT, (1 << 8) | 4), "bit(12)"),  # 1 whole byte + 4 bits
        (column(T.VARCHAR, 160, collation=45), "varchar(160)"),  # bytes, utf8mb4
        (column(T.VARCHAR, 16, collation=63), "varbinary(16)"),
        (column(T.STRING, 0, collation=63, max_length=4), "binary(4)"),
        (column(T.BLOB, 2, collation=63), "blob"),
        (column(T.BLOB, 4, collation=45), "longtext"),
        (column(T.BLOB, 1, collation=45), "tinytext"),
        (column(T.ENUM, 1, enum_values=["x", "it's"]), "enum('x','it''s')"),
        (column(T.SET, 1, set_values=["a", "b"]), "set('a','b')"),
        (column(T.JSON), "json"),
        (column(T.YEAR), "year"),
    ],
)
def test_sql_types_of_table_map_columns(col: Column, sql: str) -> None:
    assert sql_type_of(col, mariadb=False).sql() == sql


def test_character_set_names_come_from_the_collation() -> None:
    assert sql_type_of(column(T.VARCHAR, 40, collation=45), mariadb=False).charset == "utf8mb4"
    assert sql_type_of(column(T.VARCHAR, 40, collation=8), mariadb=False).charset == "latin1"
    assert sql_type_of(column(T.VARCHAR, 40, collation=63), mariadb=False).charset is None


def test_decimal_json_keeps_scale_zero() -> None:
    assert SqlType("decimal", precision=5, scale=0).to_json() == {
        "type": "decimal",
        "sql": "decimal(5,0)",
        "precision": 5,
        "scale": 0,
    }


def test_description_versions_follow_the_shape_not_the_object() -> None:
    def table_map(*columns: Column, pk: tuple[int, ...] = (0,)) -> TableMapEvent:
        return TableMapEvent(
            EventHeader(0, 19, 1, 0, 0, 0),
            table_id=5,
            schema="d",
            table="t",
            columns=list(columns),
            primary_key=pk,
            has_names=True,
        )

    a = describe(table_map(column(T.LONG, name="id"), column(T.VARCHAR, 40, name="v")))
    same = describe(table_map(column(T.LONG, name="id"), column(T.VARCHAR, 40, name="v")))
    wider = describe(table_map(column(T.LONG, name="id"), column(T.VARCHAR, 80, name="v")))
    renamed = describe(table_map(column(T.LONG, name="id"), column(T.VARCHAR, 40, name="w")))
    no_key = describe(table_map(column(T.LONG, name="id"), column(T.VARCHAR, 40, name="v"), pk=()))
    assert a.version == same.version
    assert len({a.version, wider.version, renamed.version, no_key.version}) == 4
    assert a.primary_key == ("id",) and no_key.primary_key == ()
    assert [c.to_json()["sql"] for c in a.columns] == ["int", "varchar(40)"]
