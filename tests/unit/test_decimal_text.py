"""DECIMAL values as text: plain digits with the column's scale, as MySQL and MariaDB print
them (SELECT CAST(d AS CHAR)), never Python's exponent form (str(Decimal) writes 0E-8,
1E-8, 1.23E-7 for values under 1e-6 or zeros of scale > 6). Checked where DECIMAL becomes
text: the pure envelope, the compiled envelope (and its fallback for coefficients wider
than C integers) and the snapshot's key literals, where `0E-8` would be a DOUBLE.
tests/integration/test_mysql_decimal_text.py holds the same against the real servers."""

from __future__ import annotations

from decimal import Decimal, localcontext

import pytest

from replicad.binlog.codegen import CompiledColumn, compile_python_decoder
from replicad.binlog.values import ColumnSpec, ColumnType, decimal_text
from replicad.sinks import writer_choice
from replicad.sinks.envelope import _dumps_row
from replicad.snapshot.columns import SnapshotColumn
from tests.helpers import events as ev

pytestmark = pytest.mark.unit

# (precision, scale, the text MySQL prints)
CASES = [
    (10, 8, "0.00000000"),
    (10, 8, "0.00000001"),
    (10, 8, "-0.00000001"),
    (10, 8, "0.00000010"),
    (20, 9, "0.000000123"),
    (20, 9, "-0.000001230"),
    (30, 30, "0.000000000000000000000000000001"),
    (12, 7, "0.0000000"),
    (12, 7, "0.0000010"),
    (10, 6, "0.000000"),
    (10, 2, "-1.25"),
    (10, 0, "0"),
    (10, 0, "-1234567890"),
    (65, 30, "0.000000000000000000000000000000"),
    (65, 30, "-0.000000000000000000000000000007"),
    # wider than C's integers: the compiled envelope leaves these to Python
    (65, 30, "-12345678901234567890123456789012345.123456789012345678901234567890"),
    (65, 30, "0.000000000000000000000000000001"),
    (65, 0, "99999999999999999999999999999999999999999999999999999999999999999"),
]


def _spec(precision: int, scale: int) -> ColumnSpec:
    return ColumnSpec(ColumnType.NEWDECIMAL, precision | scale << 8)


def _bin(text: str, precision: int, scale: int) -> bytes:
    """The column's binlog bytes; ev.decimal_bin formats the digits in the current context,
    whose default 28 digits would round a 65-digit value."""
    with localcontext() as context:
        context.prec = 100
        return ev.decimal_bin(text, precision, scale)


def _decoded(precision: int, scale: int, text: str) -> Decimal:
    decode = compile_python_decoder([CompiledColumn("d", _spec(precision, scale))], mariadb=False)
    row, _ = decode(b"\x00" + _bin(text, precision, scale), 0)
    value = row["d"]
    assert isinstance(value, Decimal) and value == Decimal(text)
    return value


@pytest.mark.parametrize(("precision", "scale", "text"), CASES)
def test_pure_envelope_prints_plain_digits(precision: int, scale: int, text: str) -> None:
    value = _decoded(precision, scale, text)
    assert decimal_text(value) == text
    assert _dumps_row({"d": value}) == b'{"d":"%s"}' % text.encode()


@pytest.mark.skipif(not writer_choice.available(), reason="_writer is not built")
@pytest.mark.parametrize(("precision", "scale", "text"), CASES)
def test_compiled_envelope_prints_plain_digits(precision: int, scale: int, text: str) -> None:
    from tests.unit.test_event_envelope import _encode

    columns = [CompiledColumn("d", _spec(precision, scale))]
    body = b"\x00" + _bin(text, precision, scale)
    [(_, _, _, value)], count = _encode(columns, body, 0, 0, (), False)
    assert count == 1
    assert value.startswith(b'{"before":null,"after":{"d":"%s"}' % text.encode())


@pytest.mark.parametrize(("precision", "scale", "text"), CASES)
def test_snapshot_key_literal_is_the_decimal(precision: int, scale: int, text: str) -> None:
    """A chunk's last key goes back into `WHERE d > <literal>`: `0E-8` there is a DOUBLE,
    which compares inexactly with a DECIMAL of more than 15 digits."""
    column = SnapshotColumn(
        "d", "decimal", f"decimal({precision},{scale})", False, precision, scale
    )
    value = column.parser()(text.encode())
    assert column.literal(value) == text
    assert _dumps_row({"d": value}) == b'{"d":"%s"}' % text.encode()
