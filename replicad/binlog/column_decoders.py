"""The one table of column decoders: per MySQL column type, how TABLE_MAP metadata is read
and which routine decodes its values on each of the three decoding paths.

The three paths must return identical values (tests/unit/test_accel.py holds them against
each other):
- pure: one `values.py` closure per column, called per value (`make_decoder`). Partial JSON
  updates decode column by column with it, and the two other paths fall back to it;
- generated: `codegen.py` writes one Python function per layout and inlines the types whose
  entry names a `generated` routine;
- compiled: `accel.py` describes a layout as a plan for the Cython decoder (`_speedups.pyx`),
  natively for the types whose entry names a `compiled` routine.

A type is added or changed here. Each path keeps its routines in a dict under the names used
here and passes it to `check_routines` at import, so a name that is missing on either side
fails loudly instead of silently falling back. A routine may still decline one column (it
returns None: a character set only Python can decode, a DECIMAL beyond MySQL's limits...);
that column then uses the pure decoder, which defines the behaviour for everything.
Which path is used at run time is decided in `decoder_choice.py`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Literal

from replicad.binlog import values
from replicad.binlog.values import TYPE_NAMES, ColumnSpec, ColumnType, Decoder
from replicad.errors import DecoderTableError, MalformedEventError, UnsupportedError

PureFactory = Callable[[ColumnSpec, bool], Decoder]  # (spec, mariadb) -> decoder
Path = Literal["generated", "compiled"]


class Metadata(Enum):
    """How a type's TABLE_MAP metadata is stored: (bytes, big-endian)."""

    NONE = (0, False)
    ONE_BYTE = (1, False)
    TWO_BYTES = (2, False)
    # STRING / ENUM / SET: real type first (see values.real_type_and_length).
    TWO_BYTES_BIG_ENDIAN = (2, True)

    @property
    def length(self) -> int:
        return self.value[0]


@dataclass(frozen=True, slots=True)
class ColumnDecoders:
    """Everything replicad knows about decoding one column type."""

    type_code: int
    metadata: Metadata
    pure: PureFactory
    generated: str | None = None  # codegen routine that inlines the value; None: call `pure`
    compiled: str | None = None  # accel routine that plans a native opcode; None: call `pure`

    @property
    def name(self) -> str:
        return TYPE_NAMES.get(self.type_code, str(self.type_code))


T = ColumnType
M = Metadata
_ENTRIES = (
    ColumnDecoders(T.TINY, M.NONE, values.integer_decoder, "integer", "integer"),
    ColumnDecoders(T.SHORT, M.NONE, values.integer_decoder, "integer", "integer"),
    ColumnDecoders(T.INT24, M.NONE, values.integer_decoder, "int24", "integer"),
    ColumnDecoders(T.LONG, M.NONE, values.integer_decoder, "integer", "integer"),
    ColumnDecoders(T.LONGLONG, M.NONE, values.integer_decoder, "integer", "integer"),
    ColumnDecoders(T.FLOAT, M.ONE_BYTE, values.float_decoder, None, "float"),
    ColumnDecoders(T.DOUBLE, M.ONE_BYTE, values.double_decoder, "double", "double"),
    ColumnDecoders(T.NEWDECIMAL, M.TWO_BYTES, values.decimal_decoder, "decimal", "decimal"),
    ColumnDecoders(T.NULL, M.NONE, values.null_decoder, None, "null"),
    ColumnDecoders(T.YEAR, M.NONE, values.year_decoder, None, "year"),
    ColumnDecoders(T.DATE, M.NONE, values.date_decoder, "date", "date"),
    ColumnDecoders(T.NEWDATE, M.NONE, values.date_decoder, "date", "date"),
    # The pre-5.6 temporal formats are rare: pure only.
    ColumnDecoders(T.TIMESTAMP, M.NONE, values.timestamp_v1_decoder),
    ColumnDecoders(T.DATETIME, M.NONE, values.datetime_v1_decoder),
    ColumnDecoders(T.TIME, M.NONE, values.time_v1_decoder),
    ColumnDecoders(T.TIMESTAMP2, M.ONE_BYTE, values.timestamp2_decoder, "timestamp2", "timestamp2"),
    ColumnDecoders(T.DATETIME2, M.ONE_BYTE, values.datetime2_decoder, "datetime2", "datetime2"),
    ColumnDecoders(T.TIME2, M.ONE_BYTE, values.time2_decoder, None, "time2"),
    ColumnDecoders(T.BIT, M.TWO_BYTES, values.bit_decoder, None, "bit"),
    ColumnDecoders(T.VARCHAR, M.TWO_BYTES, values.varchar_decoder, "varchar", "varchar"),
    ColumnDecoders(T.VAR_STRING, M.TWO_BYTES, values.varchar_decoder, "varchar", "varchar"),
    # MySQL logs CHAR, ENUM and SET as STRING; the generated code inlines only 1-byte ENUMs.
    ColumnDecoders(T.STRING, M.TWO_BYTES_BIG_ENDIAN, values.string_decoder, "string", "string"),
    ColumnDecoders(T.ENUM, M.TWO_BYTES_BIG_ENDIAN, values.string_decoder, None, "string"),
    ColumnDecoders(T.SET, M.TWO_BYTES_BIG_ENDIAN, values.string_decoder, None, "string"),
    # TEXT/BLOB of every size is logged as BLOB; the other codes only appear in odd binlogs.
    ColumnDecoders(T.BLOB, M.ONE_BYTE, values.blob_decoder, "blob", "blob"),
    ColumnDecoders(T.TINY_BLOB, M.ONE_BYTE, values.blob_decoder, None, "blob"),
    ColumnDecoders(T.MEDIUM_BLOB, M.ONE_BYTE, values.blob_decoder, None, "blob"),
    ColumnDecoders(T.LONG_BLOB, M.ONE_BYTE, values.blob_decoder, None, "blob"),
    ColumnDecoders(T.GEOMETRY, M.ONE_BYTE, values.geometry_decoder),
    # MySQL's binary JSON: the compiled envelope prints common documents itself.
    ColumnDecoders(T.JSON, M.ONE_BYTE, values.json_decoder, None, "json"),
    ColumnDecoders(T.VECTOR, M.ONE_BYTE, values.vector_decoder),
)
del T, M

COLUMN_DECODERS: Mapping[int, ColumnDecoders] = {entry.type_code: entry for entry in _ENTRIES}
if len(COLUMN_DECODERS) != len(_ENTRIES):
    raise DecoderTableError("a column type has two entries in the table of column decoders")

# read_metadata runs for every TABLE_MAP (each transaction repeats them): one lookup per type.
_METADATA_FORMATS = {entry.type_code: entry.metadata.value for entry in _ENTRIES}
_NO_METADATA = Metadata.NONE.value

# Types that have a code but no decoder: a TABLE_MAP naming one is decoded up to its rows,
# whose decoding then fails with UnsupportedError (old DECIMAL is pre-5.0; TYPED_ARRAY exists
# only inside MySQL's server).
UNSUPPORTED_TYPES = frozenset({ColumnType.DECIMAL, ColumnType.TYPED_ARRAY})


def make_decoder(spec: ColumnSpec, *, mariadb: bool) -> Decoder:
    """The pure decoder of one column, or UnsupportedError for a type without one."""
    entry = COLUMN_DECODERS.get(spec.type_code)
    if entry is None:
        name = TYPE_NAMES.get(spec.type_code, spec.type_code)
        raise UnsupportedError(f"column type {name} cannot be decoded", type_code=spec.type_code)
    return entry.pure(spec, mariadb)


def routine_of(spec: ColumnSpec, path: Path) -> str | None:
    """The name of the routine `path` decodes this column with; None: the pure decoder."""
    entry = COLUMN_DECODERS.get(spec.type_code)
    return None if entry is None else getattr(entry, path)


def check_routines(path: Path, routines: Mapping[str, object]) -> None:
    """Fail unless `routines` are exactly those the table names for `path`."""
    named = {getattr(entry, path) for entry in _ENTRIES} - {None}
    missing, unused = named - routines.keys(), routines.keys() - named
    if missing or unused:
        raise DecoderTableError(
            f"the {path} decoders and the table of column decoders disagree",
            missing=sorted(missing) or None,
            unused=sorted(unused) or None,
        )


def read_metadata(types: bytes, buf: bytes, pos: int, end: int) -> list[int]:
    """The metadata of each column of a TABLE_MAP (`types`), stored in buf[pos:end]; 0 for
    types that carry none (unknown types included: the length check below then catches a
    type that does carry some)."""
    metas = []
    for t in types:
        length, big_endian = _METADATA_FORMATS.get(t, _NO_METADATA)
        if length == 1:
            metas.append(buf[pos])
        elif length == 2:
            if big_endian:
                metas.append(buf[pos] << 8 | buf[pos + 1])
            else:
                metas.append(buf[pos] | buf[pos + 1] << 8)
        else:
            metas.append(0)
        pos += length
    if pos != end:
        raise MalformedEventError(
            f"column metadata is {end - pos:+d} bytes off the declared length "
            f"(unknown column type among {sorted(set(types))}?)"
        )
    return metas
