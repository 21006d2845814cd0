"""The compiled path: a layout as a *plan* for the Cython row decoder (`_speedups.pyx`).

`build_decoder(extension, columns, mariadb=...)` turns a layout into a plan - one entry per
present column, ``(opcode, arg1, arg2, arg3, obj, groups)`` - and hands it to the extension,
which decodes a whole row image in C. Which types get a native opcode, and from which routine
of `_ROUTINES`, is decided by the table in `column_decoders.py`; every other column keeps its
pure decoder (opcode "call"), so both paths return identical values.

This module does not import the extension nor decide whether it is used: `decoder_choice.py`
does both and passes the extension in.

Opcodes (args not listed are 0 / None):
- "i8" "u8" "i16" "u16" "i24" "u24" "i32" "u32" "i64" "u64": little-endian integers;
- "double"; "float" (float32, shortest repr as `values.float32_shortest`); "year";
- "decimal": arg1 = bytes, arg2 = scale, arg3 = C integer bits for the unscaled value (64,
  128; 0 = Python int), groups = ((bytes, digits), ...);
- "str": arg1 = length-prefix bytes (1-4), arg2 = "bytes" | "utf8" | "codec" | "padded" |
  "table", arg3 = width to zero-pad to ("padded", BINARY(n)), obj = codec name as bytes
  ("codec"), or for a single-byte character set ("table": MySQL's latin1, cp1251 ...) the
  pair (`charsets.decoding_table` of the codec, `json_table` of it);
- "date"; "datetime2" / "timestamp2" / "time2": arg1 = fraction bytes, arg2 = multiplier to
  microseconds, arg3 = fsp (metadata); "timestamp2" obj = the zero-date string;
- "enum": arg1 = 1 | 2 bytes, obj = member names or None;
- "set": arg1 = 0-8 bytes, obj = member names or None; "bit": arg1 = 0-8 bytes;
- "null": column type NULL; "call": obj = ``decoder(body, pos) -> (value, pos)``;
- "mysqljson": arg1 = length bytes (1-4), obj = the pure decoder (rows as dicts use it; the
  compiled envelope prints the binary document itself where it can).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

import orjson

from replicad.binlog.charsets import SINGLE_BYTE_CODECS, UNDEFINED, decoding_table
from replicad.binlog.column_decoders import check_routines, make_decoder, routine_of
from replicad.binlog.values import (
    ColumnSpec,
    ColumnType,
    decimal_groups,
    fraction_reader,
    real_type_and_length,
)
from replicad.errors import DecoderTableError

if TYPE_CHECKING:
    from replicad.binlog.codegen import CompiledColumn, ImageDecoder

PlanEntry = tuple[str, int, int, int, Any, tuple[tuple[int, int], ...]]

_INT_OPS = {
    (ColumnType.TINY, False): "i8",
    (ColumnType.TINY, True): "u8",
    (ColumnType.SHORT, False): "i16",
    (ColumnType.SHORT, True): "u16",
    (ColumnType.INT24, False): "i24",
    (ColumnType.INT24, True): "u24",
    (ColumnType.LONG, False): "i32",
    (ColumnType.LONG, True): "u32",
    (ColumnType.LONGLONG, False): "i64",
    (ColumnType.LONGLONG, True): "u64",
}


def _decimal_width(groups: tuple[tuple[int, int], ...]) -> int:
    """64 or 128: the C integer (bits) that holds the largest unscaled value these groups can
    encode - every group at its byte maximum, corrupt or not -; 0: Python ints needed."""
    largest = 0
    for i, (nbytes, digits) in enumerate(groups):
        bits = 8 * nbytes - (1 if i == 0 else 0)  # the first byte's top bit is the sign
        largest = largest * 10**digits + (1 << bits) - 1
    return 64 if largest < 1 << 64 else 128 if largest < 1 << 128 else 0


JSON_ENTRY = 8  # bytes per byte value in a json_table: up to 7 of text, then its length


@functools.cache
def json_table(codec: str) -> bytes:
    """For each byte 0x00-0xFF of a single-byte codec, the JSON string text of the character
    it decodes to, as orjson writes it inside a string (UTF-8; quote, backslash and controls
    below 0x20 escaped), zero-padded to 7 bytes, then its length; length 0: the codec
    rejects that byte (the value is then bytes, as `charsets.decode_text` gives)."""
    out = bytearray()
    for char in decoding_table(codec):
        text = b"" if char == UNDEFINED else orjson.dumps(char)[1:-1]
        if not 0 < len(text) < JSON_ENTRY and char != UNDEFINED:
            raise ValueError(f"{char!r} of {codec} does not fit a table entry")
        out += text.ljust(JSON_ENTRY - 1, b"\0") + bytes([len(text)])
    return bytes(out)


def _text_mode(spec: ColumnSpec) -> tuple[str, Any] | None:
    """How `values._text_transform` / `_guess_text` treat this column's bytes; None when only
    the Python closure can (a codec name that is not ASCII)."""
    if not spec.charset_known:
        return "utf8", None
    codec = spec.codec
    if codec is None:
        return "bytes", None
    if codec == "utf-8":
        return "utf8", None
    if codec in SINGLE_BYTE_CODECS:
        return "table", (decoding_table(codec), json_table(codec))
    if not codec.isascii():
        return None
    return "codec", codec.encode("ascii")


def _call(spec: ColumnSpec, mariadb: bool) -> PlanEntry:
    return ("call", 0, 0, 0, make_decoder(spec, mariadb=mariadb), ())


def _string(spec: ColumnSpec, prefix: int, pad: int | None = None) -> PlanEntry | None:
    if pad is not None:
        return ("str", prefix, "padded", pad, None, ())  # type: ignore[return-value]
    mode = _text_mode(spec)
    if mode is None:
        return None
    return ("str", prefix, mode[0], 0, mode[1], ())  # type: ignore[return-value]


# Every routine returns the plan entry of one column, or None for a column it has no opcode
# for (the plan then calls the column's pure decoder).
PlanRoutine = Callable[[ColumnSpec], PlanEntry | None]


def _plan_integer(spec: ColumnSpec) -> PlanEntry | None:
    return (_INT_OPS[(spec.type_code, bool(spec.unsigned))], 0, 0, 0, None, ())


def _plan_double(spec: ColumnSpec) -> PlanEntry | None:
    return ("double", 0, 0, 0, None, ())


def _plan_float(spec: ColumnSpec) -> PlanEntry | None:
    return ("float", 0, 0, 0, None, ())


def _plan_year(spec: ColumnSpec) -> PlanEntry | None:
    return ("year", 0, 0, 0, None, ())


def _plan_null(spec: ColumnSpec) -> PlanEntry | None:
    return ("null", 0, 0, 0, None, ())


def _plan_decimal(spec: ColumnSpec) -> PlanEntry | None:
    precision, scale = spec.meta & 0xFF, spec.meta >> 8
    if not (0 < precision <= 65 and scale <= 30 and scale <= precision):
        return None  # beyond MySQL's limits: the pure decoder defines what happens
    groups = decimal_groups(precision, scale)
    width = _decimal_width(groups)
    return ("decimal", sum(b for b, _ in groups), scale, width, None, groups)


def _plan_varchar(spec: ColumnSpec) -> PlanEntry | None:
    return _string(spec, 1 if spec.meta < 256 else 2)


def _plan_string(spec: ColumnSpec) -> PlanEntry | None:
    """CHAR/BINARY, ENUM and SET (MySQL logs all three as STRING)."""
    real, length = real_type_and_length(spec.type_code, spec.meta)
    if real == ColumnType.ENUM:
        if length in (1, 2):
            names = None if spec.enum_values is None else tuple(spec.enum_values)
            return ("enum", length, 0, 0, names, ())
        return None
    if real == ColumnType.SET:
        if 0 <= length <= 8:
            names = None if spec.set_values is None else tuple(spec.set_values)
            return ("set", length, 0, 0, names, ())
        return None
    prefix = 1 if length < 256 else 2
    if spec.charset_known and spec.codec is None:
        return _string(spec, prefix, pad=length)
    return _string(spec, prefix)


def _plan_blob(spec: ColumnSpec) -> PlanEntry | None:
    return _string(spec, spec.meta) if spec.meta in (1, 2, 3, 4) else None


def _plan_date(spec: ColumnSpec) -> PlanEntry | None:
    return ("date", 0, 0, 0, None, ())


def _plan_datetime2(spec: ColumnSpec) -> PlanEntry | None:
    frac_len, scale = fraction_reader(spec.meta)
    return ("datetime2", frac_len, scale, spec.meta, None, ())


def _plan_timestamp2(spec: ColumnSpec) -> PlanEntry | None:
    frac_len, scale = fraction_reader(spec.meta)
    zero = "0000-00-00 00:00:00" + ("." + "0" * spec.meta if spec.meta else "")
    return ("timestamp2", frac_len, scale, spec.meta, zero, ())


def _plan_time2(spec: ColumnSpec) -> PlanEntry | None:
    frac_len, scale = fraction_reader(spec.meta)
    return ("time2", frac_len, scale, spec.meta, None, ())


def _plan_json(spec: ColumnSpec) -> PlanEntry | None:
    # The decoder (obj) is filled in by plan_entry: it depends on the server kind.
    return ("mysqljson", spec.meta, 0, 0, None, ()) if spec.meta in (1, 2, 3, 4) else None


def _plan_bit(spec: ColumnSpec) -> PlanEntry | None:
    nbytes = (spec.meta >> 8) + (1 if spec.meta & 0xFF else 0)
    return ("bit", nbytes, 0, 0, None, ()) if nbytes <= 8 else None


# The routines by the names the table of column decoders gives them.
_ROUTINES: dict[str, PlanRoutine] = {
    "integer": _plan_integer,
    "double": _plan_double,
    "float": _plan_float,
    "year": _plan_year,
    "null": _plan_null,
    "decimal": _plan_decimal,
    "varchar": _plan_varchar,
    "string": _plan_string,
    "blob": _plan_blob,
    "date": _plan_date,
    "datetime2": _plan_datetime2,
    "timestamp2": _plan_timestamp2,
    "time2": _plan_time2,
    "bit": _plan_bit,
    "json": _plan_json,
}
check_routines("compiled", _ROUTINES)

# The opcodes each routine's plan entries use; any routine may also decline a column, which
# is then a "call". Both per-opcode ladders of the extensions - `ImageDecoder._value`
# (Python values, binlog/_speedups.pyx) and `ImageWriter._json` (JSON text,
# sinks/_writer.pyx) - handle exactly these and raise SystemError on any other:
# tests/unit/test_compiled_ladders.py runs a column of every type of the table, and of
# every opcode named here, through both.
ROUTINE_OPCODES: dict[str, frozenset[str]] = {
    "integer": frozenset(_INT_OPS.values()),
    "double": frozenset({"double"}),
    "float": frozenset({"float"}),
    "year": frozenset({"year"}),
    "null": frozenset({"null"}),
    "decimal": frozenset({"decimal"}),
    "varchar": frozenset({"str"}),
    "string": frozenset({"str", "enum", "set"}),
    "blob": frozenset({"str"}),
    "date": frozenset({"date"}),
    "datetime2": frozenset({"datetime2"}),
    "timestamp2": frozenset({"timestamp2"}),
    "time2": frozenset({"time2"}),
    "bit": frozenset({"bit"}),
    "json": frozenset({"mysqljson"}),
}
check_routines("compiled", ROUTINE_OPCODES)
# Every opcode a plan can hold: what the extension's OPCODES must be.
PLAN_OPCODES = frozenset({"call"}).union(*ROUTINE_OPCODES.values())


def plan_entry(spec: ColumnSpec, *, mariadb: bool) -> PlanEntry:
    """The plan entry of one column: its native opcode, or a call of its pure decoder (which
    raises UnsupportedError for types that have none, as the generated code does)."""
    routine = routine_of(spec, "compiled")
    entry = _ROUTINES[routine](spec) if routine is not None else None
    if routine is not None and entry is not None and entry[0] not in ROUTINE_OPCODES[routine]:
        raise DecoderTableError(
            f"the compiled routine {routine!r} planned opcode {entry[0]!r}, not one of its own"
        )
    if entry is not None and entry[0] == "mysqljson":
        if mariadb:  # MariaDB's JSON is text (values.json_decoder); it never logs type 245
            return _call(spec, mariadb)
        # Rows as dicts decode the document with the pure decoder; only the compiled
        # envelope prints it in C (falling back to this decoder where it cannot).
        return (*entry[:4], make_decoder(spec, mariadb=mariadb), ())
    return entry if entry is not None else _call(spec, mariadb)


def build_plan(columns: Sequence[CompiledColumn], *, mariadb: bool) -> list[PlanEntry]:
    return [plan_entry(c.spec, mariadb=mariadb) for c in columns]


def build_decoder(
    extension: ModuleType,
    columns: Sequence[CompiledColumn],
    *,
    mariadb: bool,
    pure: Callable[[], ImageDecoder],
) -> ImageDecoder:
    """The compiled ``decode(body, pos) -> (row, next_pos)`` of a layout, made by `extension`
    (replicad.binlog._speedups). `pure` builds the generated decoder, used for bodies that are
    not `bytes`."""
    plan = build_plan(columns, mariadb=mariadb)
    return extension.ImageDecoder([c.name for c in columns], plan, pure).decode
