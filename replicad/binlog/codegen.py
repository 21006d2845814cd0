"""Compile a row-image decoder per (TABLE_MAP, columns-present bitmap).

Decoding rows is the hot path of the whole daemon. Calling one small function per column
costs more than the decoding itself, so for each table layout we generate one straight-line
Python function (as namedtuple and dataclasses do) in which the common types are inlined and
the rest call the pure per-type decoders. Which types are inlined, and by which routine of
`_ROUTINES`, is decided by the table in `column_decoders.py`. The generated function has the
signature ``decode(body, pos) -> (row_dict, next_pos)``; it never reads past a value it cannot
bound, and the caller checks that `next_pos` stays inside the event.

This module only generates; whether the generated or the compiled decoder is used is decided
in `decoder_choice.py`.
"""

from __future__ import annotations

import datetime as dt
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Context, Decimal
from typing import Any

from replicad.binlog.column_decoders import check_routines, make_decoder, routine_of
from replicad.binlog.values import (
    ColumnSpec,
    ColumnType,
    decimal_groups,
    format_date,
    format_datetime,
    fraction_reader,
    real_type_and_length,
)

ImageDecoder = Callable[[bytes, int], tuple[dict[str, Any], int]]

_INT_FORMATS = {
    ColumnType.TINY: ("b", "B", 1),
    ColumnType.SHORT: ("h", "H", 2),
    ColumnType.LONG: ("i", "I", 4),
    ColumnType.LONGLONG: ("q", "Q", 8),
}


@dataclass(slots=True)
class CompiledColumn:
    name: str
    spec: ColumnSpec


def _emit_decimal(src: _Source, indent: int, var: str, precision: int, scale: int) -> None:
    """Inline DECIMAL(p,s): the value is read as one big-endian integer (sign bit flipped,
    all bits inverted when negative) and its base-10^9 digit groups are cut out with shifts
    and combined into the unscaled integer; `scaleb` then places the decimal point without
    rounding (its context holds 100 digits, DECIMAL holds at most 65)."""
    groups = decimal_groups(precision, scale)
    size = sum(b for b, _ in groups)
    top = 8 * size - 1
    terms = []
    shift, digits_after = 8 * size, sum(d for _, d in groups)
    for nbytes, digits in groups:
        shift -= 8 * nbytes
        digits_after -= digits
        term = (
            f"(x >> {shift}) & {(1 << (8 * nbytes)) - 1}"
            if shift
            else f"x & {(1 << (8 * nbytes)) - 1}"
        )
        terms.append(f"({term}) * {10**digits_after}" if digits_after else f"({term})")
    unscaled = " + ".join(terms) or "0"
    emit = src.emit
    emit(indent, f"x = _from_bytes(body[pos:pos + {size}], 'big')")
    emit(indent, f"pos += {size}")
    emit(indent, f"if x >> {top}:")
    emit(indent + 1, f"x ^= {1 << top}")
    emit(indent + 1, f"n = {unscaled}")
    emit(indent, "else:")
    emit(indent + 1, f"x ^= {(1 << top) - 1}")
    emit(indent + 1, f"n = -({unscaled})")
    if scale:
        emit(indent, f"{var} = _Decimal(n).scaleb({-scale}, _DECIMAL_CONTEXT)")
    else:
        emit(indent, f"{var} = _Decimal(n)")


class _Source:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.env: dict[str, Any] = {}
        self._n = 0

    def bind(self, value: Any, hint: str = "k") -> str:
        self._n += 1
        name = f"_{hint}{self._n}"
        self.env[name] = value
        return name

    def emit(self, indent: int, text: str) -> None:
        self.lines.append("    " * indent + text)


def _emit_text(src: _Source, indent: int, var: str, spec: ColumnSpec, length_bytes: int) -> None:
    """A length-prefixed string: bytes for a binary collation, else UTF-8 (or the bytes when
    they are not valid UTF-8, as values.decode_text does)."""
    length = {1: "body[pos]", 2: "_u16(body, pos)[0]", 4: "_u32(body, pos)[0]"}.get(
        length_bytes, f"_from_bytes(body[pos:pos + {length_bytes}], 'little')"
    )
    emit = src.emit
    emit(indent, f"n = {length}")
    emit(indent, f"pos += {length_bytes}")
    if spec.charset_known and spec.codec is None:
        emit(indent, f"{var} = body[pos:pos + n]")
    else:
        emit(indent, "try:")
        emit(indent + 1, f"{var} = body[pos:pos + n].decode('utf-8')")
        emit(indent, "except UnicodeDecodeError:")
        emit(indent + 1, f"{var} = body[pos:pos + n]")
    emit(indent, "pos += n")


def _emit_seconds_and_fraction(
    src: _Source, indent: int, width: int, fsp: int, adjust: str = ""
) -> None:
    """DATETIME2/TIMESTAMP2: a big-endian integer of `width` bytes into `x`, then the
    fractional seconds (by precision) into `us` as microseconds."""
    frac_len, scale = fraction_reader(fsp)
    src.emit(indent, f"x = _from_bytes(body[pos:pos + {width}], 'big'){adjust}")
    end = width + frac_len
    us = f"_from_bytes(body[pos + {width}:pos + {end}], 'big') * {scale}" if frac_len else "0"
    src.emit(indent, f"us = {us}")
    src.emit(indent, f"pos += {end}")


# Every routine emits code that sets `var` and advances `pos` for one non-NULL value, and
# returns True; or emits nothing and returns False for a column it does not inline (the
# generated code then calls the column's pure decoder).
Emitter = Callable[["_Source", int, str, ColumnSpec], bool]


def _emit_integer(src: _Source, indent: int, var: str, spec: ColumnSpec) -> bool:
    signed, unsigned, size = _INT_FORMATS[spec.type_code]
    unpack = src.bind(struct.Struct("<" + (unsigned if spec.unsigned else signed)).unpack_from)
    src.emit(indent, f"{var} = {unpack}(body, pos)[0]")
    src.emit(indent, f"pos += {size}")
    return True


def _emit_int24(src: _Source, indent: int, var: str, spec: ColumnSpec) -> bool:
    src.emit(
        indent, f"{var} = _from_bytes(body[pos:pos + 3], 'little', signed={not spec.unsigned})"
    )
    src.emit(indent, "pos += 3")
    return True


def _emit_double(src: _Source, indent: int, var: str, spec: ColumnSpec) -> bool:
    src.emit(indent, f"{var} = _unpack_d(body, pos)[0]")
    src.emit(indent, "pos += 8")
    return True


def _emit_newdecimal(src: _Source, indent: int, var: str, spec: ColumnSpec) -> bool:
    precision, scale = spec.meta & 0xFF, spec.meta >> 8
    if not (0 < precision <= 65 and scale <= 30 and scale <= precision):
        return False  # beyond MySQL's limits: the pure decoder defines what happens
    _emit_decimal(src, indent, var, precision, scale)
    return True


def _emit_varchar(src: _Source, indent: int, var: str, spec: ColumnSpec) -> bool:
    if not (spec.codec in ("utf-8", None) or not spec.charset_known):
        return False  # other character sets: the pure decoder's codec
    _emit_text(src, indent, var, spec, 2 if spec.meta >= 256 else 1)
    return True


def _emit_string(src: _Source, indent: int, var: str, spec: ColumnSpec) -> bool:
    real, length = real_type_and_length(spec.type_code, spec.meta)
    if real != ColumnType.ENUM or length != 1 or spec.enum_values is None:
        return False  # only the common 1-byte ENUM with known members is inlined
    members = src.bind(("", *spec.enum_values), "enum")
    src.emit(indent, "try:")
    src.emit(indent + 1, f"{var} = {members}[body[pos]]")
    src.emit(indent, "except IndexError:")
    src.emit(indent + 1, f"{var} = body[pos]")
    src.emit(indent, "pos += 1")
    return True


def _emit_blob(src: _Source, indent: int, var: str, spec: ColumnSpec) -> bool:
    if spec.codec not in ("utf-8", None) or spec.meta not in (1, 2, 3, 4):
        return False
    _emit_text(src, indent, var, spec, spec.meta)
    return True


def _emit_datetime2(src: _Source, indent: int, var: str, spec: ColumnSpec) -> bool:
    _emit_seconds_and_fraction(src, indent, 5, spec.meta, " - 0x8000000000")
    src.emit(indent, "ymd = x >> 17; ym = ymd >> 5; hms = x & 0x1FFFF")
    args = "ym // 13, ym % 13, ymd & 31, hms >> 12, (hms >> 6) & 63, hms & 63, us"
    src.emit(indent, "try:")
    src.emit(indent + 1, f"{var} = _datetime({args})")
    src.emit(indent, "except ValueError:")
    src.emit(indent + 1, f"{var} = _format_datetime({args}, {spec.meta})")
    return True


def _emit_timestamp2(src: _Source, indent: int, var: str, spec: ColumnSpec) -> bool:
    _emit_seconds_and_fraction(src, indent, 4, spec.meta)
    zero = "0000-00-00 00:00:00" + ("." + "0" * spec.meta if spec.meta else "")
    src.emit(indent, "if x or us:")
    src.emit(indent + 1, f"{var} = _fromtimestamp(x, _UTC)")
    src.emit(indent + 1, "if us:")
    src.emit(indent + 2, f"{var} = {var}.replace(microsecond=us)")
    src.emit(indent, "else:")
    src.emit(indent + 1, f"{var} = {zero!r}")
    return True


def _emit_date(src: _Source, indent: int, var: str, spec: ColumnSpec) -> bool:
    src.emit(indent, "x = body[pos] | body[pos + 1] << 8 | body[pos + 2] << 16")
    src.emit(indent, "pos += 3")
    src.emit(indent, "try:")
    src.emit(indent + 1, f"{var} = _date(x >> 9, (x >> 5) & 15, x & 31)")
    src.emit(indent, "except ValueError:")
    src.emit(indent + 1, f"{var} = _format_date(x >> 9, (x >> 5) & 15, x & 31)")
    return True


# The routines by the names the table of column decoders gives them.
_ROUTINES: dict[str, Emitter] = {
    "integer": _emit_integer,
    "int24": _emit_int24,
    "double": _emit_double,
    "decimal": _emit_newdecimal,
    "varchar": _emit_varchar,
    "string": _emit_string,
    "blob": _emit_blob,
    "datetime2": _emit_datetime2,
    "timestamp2": _emit_timestamp2,
    "date": _emit_date,
}
check_routines("generated", _ROUTINES)


def _emit_value(src: _Source, indent: int, var: str, column: CompiledColumn, mariadb: bool):
    """Emit code that sets `var` and advances `pos` for one non-NULL value."""
    spec = column.spec
    routine = routine_of(spec, "generated")
    if routine is not None and _ROUTINES[routine](src, indent, var, spec):
        return
    decoder = src.bind(make_decoder(spec, mariadb=mariadb), "dec")
    src.emit(indent, f"{var}, pos = {decoder}(body, pos)")


def compile_python_decoder(columns: Sequence[CompiledColumn], *, mariadb: bool) -> ImageDecoder:
    """Generate and compile the pure-Python decoder of a layout."""
    src = _Source()
    src.env.update(
        _from_bytes=int.from_bytes,
        _unpack_d=struct.Struct("<d").unpack_from,
        _u16=struct.Struct("<H").unpack_from,
        _u32=struct.Struct("<I").unpack_from,
        _Decimal=Decimal,
        _DECIMAL_CONTEXT=Context(prec=100),
        _datetime=dt.datetime,
        _date=dt.date,
        _fromtimestamp=dt.datetime.fromtimestamp,
        _UTC=dt.UTC,
        _format_datetime=format_datetime,
        _format_date=format_date,
    )
    null_bytes = (len(columns) + 7) // 8
    src.emit(0, "def decode(body, pos):")
    if null_bytes:
        src.emit(1, f"nulls = _from_bytes(body[pos:pos + {null_bytes}], 'little')")
        src.emit(1, f"pos += {null_bytes}")
    for i, column in enumerate(columns):
        var = f"v{i}"
        src.emit(1, f"if nulls & {1 << i}:")
        src.emit(2, f"{var} = None")
        src.emit(1, "else:")
        _emit_value(src, 2, var, column, mariadb)
    items = ", ".join(f"{c.name!r}: v{i}" for i, c in enumerate(columns))
    src.emit(1, f"return {{{items}}}, pos")
    code = compile("\n".join(src.lines), "<replicad row decoder>", "exec")
    namespace: dict[str, Any] = dict(src.env)
    exec(code, namespace)
    return namespace["decode"]
