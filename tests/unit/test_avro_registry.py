"""replicad.sinks.avro_registry.changed_fields: the columns a refused schema version changed,
named in the exit-78 error. Oracle: the two tables' column lists written here by hand."""

from __future__ import annotations

import pytest

from replicad.binlog.column_types import ColumnDescription, SqlType, table_description
from replicad.sinks.avro_schema import key_schema, value_schema
from replicad.sinks.debezium_values import DebeziumOptions

pytestmark = pytest.mark.unit

pytest.importorskip("confluent_kafka.schema_registry", reason="the test extra")

from replicad.sinks.avro_registry import changed_fields  # noqa: E402

OPTIONS = DebeziumOptions()


def _schemas(*columns: ColumnDescription) -> tuple[object, object]:
    table = table_description("shop", "t", columns, ("id",))
    return value_schema(table, "srv", OPTIONS), key_schema(table, "srv", OPTIONS)


ID = ColumnDescription("id", SqlType("int"), False)
QTY = ColumnDescription("qty", SqlType("int"), False)
NOTE = ColumnDescription("note", SqlType("text"), True)


def test_retyped_dropped_and_added_columns_are_named() -> None:
    old, _ = _schemas(ID, QTY, NOTE)
    new, _ = _schemas(
        ID,
        ColumnDescription("qty", SqlType("varchar", length=20), False),
        ColumnDescription("added", SqlType("bigint"), True),
    )
    assert changed_fields(old, new) == "qty (int -> string), note (dropped), added (added)"


def test_optional_and_named_types_are_shown_as_such() -> None:
    old, _ = _schemas(ID, NOTE)
    new, _ = _schemas(ID, ColumnDescription("note", SqlType("date"), True))
    assert changed_fields(old, new) == "note (string? -> io.debezium.time.Date?)"


def test_key_schemas_and_unchanged_ones() -> None:
    _, old_key = _schemas(ID, QTY)
    _, new_key = _schemas(ColumnDescription("id", SqlType("bigint"), False), QTY)
    assert changed_fields(old_key, new_key) == "id (int -> long)"
    same, _ = _schemas(ID, QTY)
    assert changed_fields(same, same) == ""
