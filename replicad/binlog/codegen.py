"""Compile a row-image decoder per (TABLE_MAP, columns-present bitmap).

Decoding rows is the hot path of the whole daemon. Calling one small function per column
costs more than the decoding itself, so for each table layout we generate one straight-line
Python function (as namedtuple and dataclasses do) in which the common types are inlined and
the rest call the per-type decoders of `values.py`. The generated function has the signature
``decode(body, pos) -> (row_dict, next_pos)``; it never reads past a value it cannot bound,
and the caller checks that `next_pos` stays inside the event.
"""

from __future__ import annotations

import datetime as dt
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Context, Decimal
from typing import Any

from replicad.binlog import accel
from replicad.binlog.values import (
    ColumnSpec,
    ColumnType,
    decimal_groups,
    format_date,
    format_datetime,
    fraction_reader,
    make_decoder,
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


def _emit_value(src: _Source, indent: int, var: str, column: CompiledColumn, mariadb: bool):
    """Emit code that sets `var` and advances `pos` for one non-NULL value."""
    spec = column.spec
    t = spec.type_code
    emit = src.emit
    if t in _INT_FORMATS:
        signed, unsigned, size = _INT_FORMATS[t]
        unpack = src.bind(struct.Struct("<" + (unsigned if spec.unsigned else signed)).unpack_from)
        emit(indent, f"{var} = {unpack}(body, pos)[0]")
        emit(indent, f"pos += {size}")
        return
    if t == ColumnType.INT24:
        emit(
            indent,
            f"{var} = _from_bytes(body[pos:pos + 3], 'little', signed={not spec.unsigned})",
        )
        emit(indent, "pos += 3")
        return
    if t == ColumnType.DOUBLE:
        emit(indent, f"{var} = _unpack_d(body, pos)[0]")
        emit(indent, "pos += 8")
        return
    if t == ColumnType.NEWDECIMAL:
        precision, scale = spec.meta & 0xFF, spec.meta >> 8
        if 0 < precision <= 65 and scale <= 30 and scale <= precision:
            _emit_decimal(src, indent, var, precision, scale)
            return
    if t in (ColumnType.VARCHAR, ColumnType.VAR_STRING) and (
        spec.codec in ("utf-8", None) or not spec.charset_known
    ):
        _emit_text(src, indent, var, spec, 2 if spec.meta >= 256 else 1)
        return
    if t == ColumnType.STRING:
        real, length = real_type_and_length(t, spec.meta)
        if real == ColumnType.ENUM and length == 1 and spec.enum_values is not None:
            members = src.bind(("", *spec.enum_values), "enum")
            emit(indent, "try:")
            emit(indent + 1, f"{var} = {members}[body[pos]]")
            emit(indent, "except IndexError:")
            emit(indent + 1, f"{var} = body[pos]")
            emit(indent, "pos += 1")
            return
    if t == ColumnType.BLOB and spec.codec in ("utf-8", None) and spec.meta in (1, 2, 3, 4):
        _emit_text(src, indent, var, spec, spec.meta)
        return
    if t == ColumnType.DATETIME2:
        _emit_seconds_and_fraction(src, indent, 5, spec.meta, " - 0x8000000000")
        emit(indent, "ymd = x >> 17; ym = ymd >> 5; hms = x & 0x1FFFF")
        args = "ym // 13, ym % 13, ymd & 31, hms >> 12, (hms >> 6) & 63, hms & 63, us"
        emit(indent, "try:")
        emit(indent + 1, f"{var} = _datetime({args})")
        emit(indent, "except ValueError:")
        emit(indent + 1, f"{var} = _format_datetime({args}, {spec.meta})")
        return
    if t == ColumnType.TIMESTAMP2:
        _emit_seconds_and_fraction(src, indent, 4, spec.meta)
        zero = "0000-00-00 00:00:00" + ("." + "0" * spec.meta if spec.meta else "")
        emit(indent, "if x or us:")
        emit(indent + 1, f"{var} = _fromtimestamp(x, _UTC)")
        emit(indent + 1, "if us:")
        emit(indent + 2, f"{var} = {var}.replace(microsecond=us)")
        emit(indent, "else:")
        emit(indent + 1, f"{var} = {zero!r}")
        return
    if t in (ColumnType.DATE, ColumnType.NEWDATE):
        emit(indent, "x = body[pos] | body[pos + 1] << 8 | body[pos + 2] << 16")
        emit(indent, "pos += 3")
        emit(indent, "try:")
        emit(indent + 1, f"{var} = _date(x >> 9, (x >> 5) & 15, x & 31)")
        emit(indent, "except ValueError:")
        emit(indent + 1, f"{var} = _format_date(x >> 9, (x >> 5) & 15, x & 31)")
        return
    decoder = src.bind(make_decoder(spec, mariadb=mariadb), "dec")
    emit(indent, f"{var}, pos = {decoder}(body, pos)")


def compile_image_decoder(
    columns: Sequence[CompiledColumn], *, mariadb: bool, accelerated: bool | None = None
) -> ImageDecoder:
    """The row-image decoder of a layout: the compiled one of `accel` when it is available and
    enabled (or `accelerated` is True), else the generated Python function. Both return
    identical rows."""
    if accelerated is None:
        accelerated = accel.active()
    if accelerated:
        decode = accel.build_decoder(
            columns, mariadb=mariadb, pure=lambda: compile_python_decoder(columns, mariadb=mariadb)
        )
        if decode is not None:
            return decode
    return compile_python_decoder(columns, mariadb=mariadb)


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
