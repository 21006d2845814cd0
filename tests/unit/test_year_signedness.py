"""The SIGNEDNESS bitmap of a TABLE_MAP mapped onto columns per server version: MySQL 8.0.21+
(8.4, 9.x) and MariaDB give YEAR a bit (has_signedess_information_type in MySQL's
sql/field_common_properties.h; MariaDB's YEAR is a TINYINT underneath), MySQL 8.0.1-8.0.20
did not (is_numeric_type in sql/log_event.cc). The same bytes, read under the wrong rule,
shift every later numeric column onto its neighbour's bit: a signed INT -5 reads 4294967291.
Checked with the compiled and the pure-Python row decoders."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal

import pytest

from replicad.binlog import decoder_choice
from replicad.binlog.parser import BinlogParser
from replicad.binlog.rows import RowsEvent, TableMapEvent, year_has_signedness_bit
from tests.helpers import events as ev

pytestmark = pytest.mark.unit

# CREATE TABLE t (y YEAR, a INT, u INT UNSIGNED, b BIGINT, c TINYINT, d DECIMAL(10,2))
COLUMNS = [
    ev.Col(ev.T_YEAR),
    ev.Col(ev.T_LONG),
    ev.Col(ev.T_LONG),
    ev.Col(ev.T_LONGLONG),
    ev.Col(ev.T_TINY),
    ev.Col(ev.T_NEWDECIMAL, bytes([10, 2])),
]
NAMES = ["y", "a", "u", "b", "c", "d"]
ROW = {"y": 2024, "a": -5, "u": 4294967295, "b": -9000000000, "c": -3, "d": Decimal("-1.25")}
VALUES = [
    ev.year(2024),
    ev.int_le(-5, 4),
    ev.int_le(4294967295, 4),
    ev.int_le(-9000000000, 8),
    ev.int_le(-3, 1),
    ev.decimal_bin("-1.25", 10, 2),
]
# The bits each server writes for the columns above (YEAR is flagged unsigned where it has one).
WITH_YEAR_BIT = [True, False, True, False, False, False]
WITHOUT_YEAR_BIT = [False, True, False, False, False]


@pytest.fixture(autouse=True, params=["compiled", "python"])
def row_decoder(request: pytest.FixtureRequest) -> Iterator[None]:
    if request.param == "compiled" and not decoder_choice.available():
        pytest.skip("replicad.binlog._speedups is not built")
    previous = decoder_choice.enabled()
    decoder_choice.set_enabled(request.param == "compiled")
    try:
        yield
    finally:
        decoder_choice.set_enabled(previous)


def decode(server_version: str, signedness: list[bool]) -> tuple[TableMapEvent, dict]:
    """Parse FDE, TABLE_MAP (FULL metadata) and one WRITE_ROWS as `server_version` wrote them."""
    parser = BinlogParser()
    parser.parse(ev.fde_mysql8(server_version=server_version), 4)
    optional = ev.opt_signedness(signedness) + ev.opt_column_names(NAMES)
    table_map = parser.parse(
        ev.event(ev.TABLE_MAP, ev.table_map(7, "d", "t", COLUMNS, optional=optional)), 126
    )
    rows = parser.parse(
        ev.event(ev.WRITE_ROWS, ev.rows_v2(ev.WRITE_ROWS, 7, 6, ev.row_image(VALUES))), 300
    )
    assert isinstance(table_map, TableMapEvent) and isinstance(rows, RowsEvent)
    [(before, after)] = list(rows.rows())
    assert before is None
    return table_map, after


@pytest.mark.parametrize(
    "version", ["8.0.21", "8.0.36", "8.4.3", "9.7.4-2", "10.11.6-MariaDB-log", "11.4.2-MariaDB"]
)
def test_servers_that_give_year_a_bit(version: str) -> None:
    table_map, row = decode(version, WITH_YEAR_BIT)
    assert table_map.year_signedness
    assert row == ROW
    assert [c.unsigned for c in table_map.columns] == WITH_YEAR_BIT


@pytest.mark.parametrize("version", ["8.0.13", "8.0.20-debug"])
def test_mysql_before_8_0_21_gives_year_none(version: str) -> None:
    table_map, row = decode(version, WITHOUT_YEAR_BIT)
    assert not table_map.year_signedness
    assert row == ROW
    assert [c.unsigned for c in table_map.columns] == [False, *WITHOUT_YEAR_BIT]


def test_decoders_of_equal_layouts_are_not_shared_across_rules() -> None:
    """The same TABLE_MAP bytes mean other signedness under the other rule: a decoder cached
    for one server's reading must not serve the other's."""
    bits = [False, True, False, False, False, False]  # 6 bits: a is unsigned, or u is
    _, modern = decode("9.7.4", bits)
    _, old = decode("8.0.20", bits)
    assert (modern["a"], modern["u"]) == (4294967291, -1)
    assert (old["a"], old["u"]) == (-5, 4294967295)


def test_rule_by_version() -> None:
    assert year_has_signedness_bit((8, 0, 21), mariadb=False)
    assert year_has_signedness_bit((9, 7, 4), mariadb=False)
    assert not year_has_signedness_bit((8, 0, 20), mariadb=False)
    assert year_has_signedness_bit((10, 5, 0), mariadb=True)
