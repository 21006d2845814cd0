"""Optional compiled row-image decoder (`_speedups`, Cython) and the switch that selects it.

`build_decoder(columns, mariadb=...)` turns a layout into a *plan* - one entry per present
column, ``(opcode, arg1, arg2, arg3, obj, groups)`` - and hands it to the extension, which
decodes a whole row image in C. The plan mirrors the dispatch of `codegen._emit_value` and
`values.make_decoder` type by type, so that both paths return identical values; every type
without a native opcode keeps its `values.make_decoder` closure (opcode "call").

Opcodes (args not listed are 0 / None):
- "i8" "u8" "i16" "u16" "i24" "u24" "i32" "u32" "i64" "u64": little-endian integers;
- "double"; "float" (float32, shortest repr as `values.float32_shortest`); "year";
- "decimal": arg1 = bytes, arg2 = scale, arg3 = C integer bits for the unscaled value (64,
  128; 0 = Python int), groups = ((bytes, digits), ...);
- "str": arg1 = length-prefix bytes (1-4), arg2 = "bytes" | "utf8" | "codec" | "padded",
  arg3 = width to zero-pad to ("padded", BINARY(n)), obj = codec name as bytes ("codec");
- "date"; "datetime2" / "timestamp2" / "time2": arg1 = fraction bytes, arg2 = multiplier to
  microseconds, arg3 = fsp (metadata); "timestamp2" obj = the zero-date string;
- "enum": arg1 = 1 | 2 bytes, obj = member names or None;
- "set": arg1 = 0-8 bytes, obj = member names or None; "bit": arg1 = 0-8 bytes;
- "null": column type NULL; "call": obj = ``decoder(body, pos) -> (value, pos)``.

The accelerator is used when the extension imports and it is enabled: the environment
variable REPLICAD_PURE_PYTHON=1 disables it at start-up, `set_enabled()` switches it at run
time (tests). Row decoders are cached per layout *and* per `active()` value (rows.py).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from replicad.binlog.values import (
    ColumnSpec,
    ColumnType,
    decimal_groups,
    fraction_reader,
    make_decoder,
    real_type_and_length,
)

if TYPE_CHECKING:
    from replicad.binlog.codegen import CompiledColumn, ImageDecoder

try:
    from replicad.binlog import _speedups
except ImportError:  # not compiled (no compiler at install time): pure Python only
    _speedups = None

_enabled = os.environ.get("REPLICAD_PURE_PYTHON", "").strip() in ("", "0")

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
_BLOBS = (ColumnType.BLOB, ColumnType.TINY_BLOB, ColumnType.MEDIUM_BLOB, ColumnType.LONG_BLOB)


def available() -> bool:
    """Whether the compiled extension could be imported."""
    return _speedups is not None


def enabled() -> bool:
    return _enabled


def set_enabled(value: bool) -> None:
    """Use (True) or bypass (False) the compiled decoder for decoders built from now on."""
    global _enabled
    _enabled = bool(value)


def active() -> bool:
    """Whether newly built row decoders are the compiled ones."""
    return _enabled and _speedups is not None


def is_compiled(decode: Callable[..., Any]) -> bool:
    """Whether a row-image decoder is the compiled one."""
    owner = getattr(decode, "__self__", None)
    return _speedups is not None and isinstance(owner, _speedups.ImageDecoder)


def _decimal_width(groups: tuple[tuple[int, int], ...]) -> int:
    """64 or 128: the C integer (bits) that holds the largest unscaled value these groups can
    encode - every group at its byte maximum, corrupt or not -; 0: Python ints needed."""
    largest = 0
    for i, (nbytes, digits) in enumerate(groups):
        bits = 8 * nbytes - (1 if i == 0 else 0)  # the first byte's top bit is the sign
        largest = largest * 10**digits + (1 << bits) - 1
    return 64 if largest < 1 << 64 else 128 if largest < 1 << 128 else 0


def _text_mode(spec: ColumnSpec) -> tuple[str, Any] | None:
    """How `values._text_transform` / `_guess_text` treat this column's bytes; None when only
    the Python closure can (MySQL's latin1, a codec name that is not ASCII)."""
    if not spec.charset_known:
        return "utf8", None
    codec = spec.codec
    if codec is None:
        return "bytes", None
    if codec == "utf-8":
        return "utf8", None
    if codec == "mysql_latin1" or not codec.isascii():
        return None
    return "codec", codec.encode("ascii")


def _call(spec: ColumnSpec, mariadb: bool) -> PlanEntry:
    return ("call", 0, 0, 0, make_decoder(spec, mariadb=mariadb), ())


def _string(spec: ColumnSpec, prefix: int, mariadb: bool, pad: int | None = None) -> PlanEntry:
    if pad is not None:
        return ("str", prefix, "padded", pad, None, ())  # type: ignore[return-value]
    mode = _text_mode(spec)
    if mode is None:
        return _call(spec, mariadb)
    return ("str", prefix, mode[0], 0, mode[1], ())  # type: ignore[return-value]


def plan_entry(spec: ColumnSpec, *, mariadb: bool) -> PlanEntry:
    """The plan entry of one column (the same type dispatch as codegen / values)."""
    t, meta = spec.type_code, spec.meta
    if (t, bool(spec.unsigned)) in _INT_OPS:
        return (_INT_OPS[(t, bool(spec.unsigned))], 0, 0, 0, None, ())
    if t == ColumnType.DOUBLE:
        return ("double", 0, 0, 0, None, ())
    if t == ColumnType.FLOAT:
        return ("float", 0, 0, 0, None, ())
    if t == ColumnType.YEAR:
        return ("year", 0, 0, 0, None, ())
    if t == ColumnType.NULL:
        return ("null", 0, 0, 0, None, ())
    if t == ColumnType.NEWDECIMAL:
        precision, scale = meta & 0xFF, meta >> 8
        if 0 < precision <= 65 and scale <= 30 and scale <= precision:
            groups = decimal_groups(precision, scale)
            width = _decimal_width(groups)
            return ("decimal", sum(b for b, _ in groups), scale, width, None, groups)
        return _call(spec, mariadb)
    if t in (ColumnType.VARCHAR, ColumnType.VAR_STRING):
        return _string(spec, 1 if meta < 256 else 2, mariadb)
    if t in (ColumnType.STRING, ColumnType.ENUM, ColumnType.SET):
        real, length = real_type_and_length(t, meta)
        if real == ColumnType.ENUM:
            if length in (1, 2):
                names = None if spec.enum_values is None else tuple(spec.enum_values)
                return ("enum", length, 0, 0, names, ())
            return _call(spec, mariadb)
        if real == ColumnType.SET:
            if 0 <= length <= 8:
                names = None if spec.set_values is None else tuple(spec.set_values)
                return ("set", length, 0, 0, names, ())
            return _call(spec, mariadb)
        prefix = 1 if length < 256 else 2
        if spec.charset_known and spec.codec is None:
            return _string(spec, prefix, mariadb, pad=length)
        return _string(spec, prefix, mariadb)
    if t in _BLOBS:
        if meta in (1, 2, 3, 4):
            return _string(spec, meta, mariadb)
        return _call(spec, mariadb)
    if t in (ColumnType.DATE, ColumnType.NEWDATE):
        return ("date", 0, 0, 0, None, ())
    if t == ColumnType.DATETIME2:
        frac_len, scale = fraction_reader(meta)
        return ("datetime2", frac_len, scale, meta, None, ())
    if t == ColumnType.TIMESTAMP2:
        frac_len, scale = fraction_reader(meta)
        zero = "0000-00-00 00:00:00" + ("." + "0" * meta if meta else "")
        return ("timestamp2", frac_len, scale, meta, zero, ())
    if t == ColumnType.TIME2:
        frac_len, scale = fraction_reader(meta)
        return ("time2", frac_len, scale, meta, None, ())
    if t == ColumnType.BIT:
        nbytes = (meta >> 8) + (1 if meta & 0xFF else 0)
        if nbytes <= 8:
            return ("bit", nbytes, 0, 0, None, ())
        return _call(spec, mariadb)
    # DATETIME / TIMESTAMP / TIME (old formats), GEOMETRY, JSON, VECTOR, unknown types
    # (make_decoder raises UnsupportedError for those, as the generated code does).
    return _call(spec, mariadb)


def build_plan(columns: Sequence[CompiledColumn], *, mariadb: bool) -> list[PlanEntry]:
    return [plan_entry(c.spec, mariadb=mariadb) for c in columns]


def build_decoder(
    columns: Sequence[CompiledColumn],
    *,
    mariadb: bool,
    pure: Callable[[], ImageDecoder] | None = None,
) -> ImageDecoder | None:
    """The compiled ``decode(body, pos) -> (row, next_pos)`` of a layout, or None when the
    extension is not available. `pure` builds the pure-Python decoder, used for bodies that
    are not `bytes` (defaults to codegen's)."""
    if _speedups is None:
        return None
    if pure is None:

        def pure() -> ImageDecoder:
            from replicad.binlog.codegen import compile_python_decoder

            return compile_python_decoder(columns, mariadb=mariadb)

    plan = build_plan(columns, mariadb=mariadb)
    return _speedups.ImageDecoder([c.name for c in columns], plan, pure).decode
