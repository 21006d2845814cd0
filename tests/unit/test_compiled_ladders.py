"""The two per-opcode ladders of the compiled modules against the one table of column types
(binlog/column_decoders.py): `ImageDecoder._value` (binlog/_speedups.pyx, Python values) and
`ImageWriter._json` (sinks/_writer.pyx, JSON text). Both end in SystemError for an opcode
they have no branch for, so one column of every type of the table - and of every opcode its
routines plan (`accel.ROUTINE_OPCODES`) and every text mode - is decoded and written here
and compared with the pure path. A type added to the table, or an opcode added to a
routine, without a sample here fails the coverage test; one without a ladder branch fails
the ladder tests."""

from __future__ import annotations

import struct

import pytest

from replicad.binlog import accel
from replicad.binlog.codegen import CompiledColumn, compile_python_decoder
from replicad.binlog.column_decoders import COLUMN_DECODERS, routine_of
from replicad.binlog.values import TYPE_NAMES, ColumnSpec
from replicad.binlog.values import ColumnType as T
from replicad.sinks import writer_choice
from tests.helpers.events import jsonb
from tests.unit.test_accel import (
    encode_date,
    encode_datetime2,
    encode_decimal,
    encode_time2,
    encode_timestamp2,
    le,
    same,
    string_meta,
)
from tests.unit.test_event_envelope import _encode, _expected

pytestmark = [
    pytest.mark.unit,
    pytest.mark.skipif(not writer_choice.available(), reason="_writer is not built"),
]


def _text(t: int, meta: int, data: bytes, prefix: int, **charset) -> tuple[ColumnSpec, bytes]:
    return ColumnSpec(t, meta, **charset), le(len(data), prefix) + data


def _decimal(precision: int, scale: int, unscaled: int) -> tuple[ColumnSpec, bytes]:
    return ColumnSpec(T.NEWDECIMAL, scale << 8 | precision), encode_decimal(
        unscaled, precision, scale
    )


UTF8 = {"codec": "utf-8", "charset_known": True}
SAMPLES: list[tuple[ColumnSpec, bytes]] = [
    (ColumnSpec(T.TINY, 0), le(-5, 1)),
    (ColumnSpec(T.TINY, 0, unsigned=True), le(250, 1)),
    (ColumnSpec(T.SHORT, 0), le(-300, 2)),
    (ColumnSpec(T.SHORT, 0, unsigned=True), le(65000, 2)),
    (ColumnSpec(T.INT24, 0), le(-70000, 3)),
    (ColumnSpec(T.INT24, 0, unsigned=True), le(2**24 - 1, 3)),
    (ColumnSpec(T.LONG, 0), le(-(2**31), 4)),
    (ColumnSpec(T.LONG, 0, unsigned=True), le(2**32 - 1, 4)),
    (ColumnSpec(T.LONGLONG, 0), le(-(2**63), 8)),
    (ColumnSpec(T.LONGLONG, 0, unsigned=True), le(2**64 - 1, 8)),
    (ColumnSpec(T.FLOAT, 4), struct.pack("<f", 0.1)),
    (ColumnSpec(T.DOUBLE, 8), struct.pack("<d", 1e-5)),
    _decimal(10, 2, -12345),  # a 64-bit coefficient
    _decimal(30, 5, 10**29 + 7),  # 128 bits
    _decimal(65, 30, -(10**64)),  # Python ints
    (ColumnSpec(T.NULL, 0), b""),
    (ColumnSpec(T.YEAR, 0), b"\x7c"),
    (ColumnSpec(T.DATE, 0), encode_date(2024, 2, 29)),
    (ColumnSpec(T.NEWDATE, 0), encode_date(0, 0, 0)),
    (ColumnSpec(T.TIMESTAMP, 0), le(1_700_000_000, 4)),
    (ColumnSpec(T.DATETIME, 0), le(20240102030405, 8)),
    (ColumnSpec(T.TIME, 0), le(102030, 3)),
    (ColumnSpec(T.TIMESTAMP2, 3), encode_timestamp2(3, 1_700_000_000, 123000)),
    (ColumnSpec(T.DATETIME2, 6), encode_datetime2(6, 2024, 1, 2, 3, 4, 5, 6)),
    (ColumnSpec(T.TIME2, 0), encode_time2(0, True, 1, 2, 3, 0)),
    (ColumnSpec(T.BIT, 1 << 8 | 3), b"\x05\x01"),
    # text, in each mode of the "str" opcode
    _text(T.VARCHAR, 20, "naïve\n".encode(), 1, **UTF8),  # utf8
    _text(T.VAR_STRING, 300, b"\x00\xff", 2, charset_known=True),  # bytes
    _text(T.VARCHAR, 20, "ab".encode("utf_16_be"), 1, codec="utf_16_be", charset_known=True),
    _text(T.VARCHAR, 20, b"\xe9t\xe9", 1, codec="cp1251", charset_known=True),  # table
    _text(T.STRING, string_meta(T.STRING, 4), b"ab", 1, charset_known=True),  # padded
    _text(T.BLOB, 2, b"caf\xc3\xa9", 2),  # no charset known: UTF-8 if valid
    _text(T.TINY_BLOB, 1, b"\xff", 1),
    _text(T.MEDIUM_BLOB, 3, b"x", 3, **UTF8),
    _text(T.LONG_BLOB, 4, b"y", 4, **UTF8),
    (ColumnSpec(T.STRING, T.ENUM << 8 | 1, enum_values=["a", "b"]), b"\x02"),
    (ColumnSpec(T.ENUM, 2, enum_values=["a"]), le(1, 2)),
    (ColumnSpec(T.STRING, T.SET << 8 | 1, set_values=["x", "y"]), b"\x03"),
    (ColumnSpec(T.SET, 2), le(513, 2)),
    _text(T.JSON, 4, jsonb({"a": [1, "b", None, True, 2.5]}), 4),
    _text(T.GEOMETRY, 4, le(4326, 4) + b"\x01\x01\x00\x00\x00" + bytes(16), 4),
    _text(T.VECTOR, 4, struct.pack("<ff", 1.0, -2.5), 4),
]
IDS = [
    f"{TYPE_NAMES[spec.type_code]}-{accel.plan_entry(spec, mariadb=False)[0]}"
    for spec, _ in SAMPLES
]


def test_the_extension_knows_every_opcode_the_table_plans() -> None:
    from replicad.binlog import _speedups

    assert set(_speedups.OPCODES) == accel.PLAN_OPCODES


def test_the_samples_cover_every_type_and_opcode_of_the_table() -> None:
    assert {spec.type_code for spec, _ in SAMPLES} == set(COLUMN_DECODERS)
    planned = {
        (routine_of(spec, "compiled"), accel.plan_entry(spec, mariadb=False)[0])
        for spec, _ in SAMPLES
    }
    declared = {(r, op) for r, ops in accel.ROUTINE_OPCODES.items() for op in ops}
    assert declared <= planned
    assert (None, "call") in planned  # the types only the pure decoder has
    modes = {accel.plan_entry(spec, mariadb=False)[2] for spec, _ in SAMPLES}
    from replicad.binlog import _speedups

    assert set(_speedups.MODES) <= modes


def _columns(spec: ColumnSpec) -> list[CompiledColumn]:
    return [CompiledColumn("v", spec)]


@pytest.mark.parametrize(("spec", "value"), SAMPLES, ids=IDS)
def test_the_value_ladder_decodes_every_opcode(spec: ColumnSpec, value: bytes) -> None:
    from replicad.binlog.decoder_choice import build_compiled_decoder

    body = b"\x00" + value
    compiled = build_compiled_decoder(_columns(spec), mariadb=False)
    assert compiled is not None
    expected = compile_python_decoder(_columns(spec), mariadb=False)(body, 0)
    assert same(compiled(body, 0), expected)


@pytest.mark.parametrize(("spec", "value"), SAMPLES, ids=IDS)
def test_the_json_ladder_writes_every_opcode(spec: ColumnSpec, value: bytes) -> None:
    body = b"\x00" + value + b"\x00" + value
    expected = _expected(_columns(spec), body, 0, 1, (), False)
    assert expected is not None
    messages, count = _encode(_columns(spec), body, 0, 1, (), False)
    assert count == 1 and messages == expected
