"""TABLE_MAP and ROWS events: column descriptions and compiled per-table row decoders.

A TABLE_MAP describes the table a following ROWS event changes. From it we build, once per
(table map, columns-present bitmap), a list of per-column value decoders; decoding a row is
then one pass over the row image with everything else precomputed.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from replicad.binlog import decoder_choice, jsonb
from replicad.binlog._bytes import msb_first_bits, need, read_lenenc
from replicad.binlog.charsets import BINARY_COLLATION, codec_of, decode_text
from replicad.binlog.codegen import CompiledColumn, ImageDecoder
from replicad.binlog.column_decoders import make_decoder, read_metadata
from replicad.binlog.events import Event, EventType
from replicad.binlog.payload import decompress_mariadb
from replicad.binlog.values import (
    CHARACTER_TYPES,
    NUMERIC_TYPES,
    TYPE_NAMES,
    ColumnSpec,
    ColumnType,
    Decoder,
    real_type_and_length,
)
from replicad.errors import BinlogError, JsonDecodeError, MalformedEventError

Row = dict[str, Any]


class OptionalMetadata:
    SIGNEDNESS = 1
    DEFAULT_CHARSET = 2
    COLUMN_CHARSET = 3
    COLUMN_NAME = 4
    SET_STR_VALUE = 5
    ENUM_STR_VALUE = 6
    GEOMETRY_TYPE = 7
    SIMPLE_PRIMARY_KEY = 8
    PRIMARY_KEY_WITH_PREFIX = 9
    ENUM_AND_SET_DEFAULT_CHARSET = 10
    ENUM_AND_SET_COLUMN_CHARSET = 11
    COLUMN_VISIBILITY = 12
    VECTOR_DIMENSIONALITY = 13


class RowsFlag:
    STMT_END = 0x0001
    NO_FOREIGN_KEY_CHECKS = 0x0002
    RELAXED_UNIQUE_CHECKS = 0x0004
    COMPLETE_ROWS = 0x0008


@dataclass(slots=True)
class Column:
    index: int
    name: str
    type_code: int  # the real type (STRING packing undone)
    meta: int
    nullable: bool
    unsigned: bool = False
    collation: int | None = None
    enum_values: list[str] | None = None
    set_values: list[str] | None = None
    geometry_type: int | None = None
    visible: bool = True
    vector_dimensions: int | None = None
    max_length: int | None = None

    @property
    def type_name(self) -> str:
        return TYPE_NAMES.get(self.type_code, str(self.type_code))


@dataclass(slots=True)
class RowImageDecoder:
    """Decoders for one columns-present bitmap: a compiled whole-image function for the hot
    path, and per-column decoders for images that need column-by-column handling."""

    specs: tuple[CompiledColumn, ...]
    decode: ImageDecoder
    null_bytes: int
    mariadb: bool
    _columns: tuple[tuple[str, Decoder], ...] | None = None

    @property
    def columns(self) -> tuple[tuple[str, Decoder], ...]:
        if self._columns is None:
            self._columns = tuple(
                (c.name, make_decoder(c.spec, mariadb=self.mariadb)) for c in self.specs
            )
        return self._columns


@dataclass(slots=True)
class TableMapEvent(Event):
    table_id: int = 0
    flags: int = 0
    schema: str = ""
    table: str = ""
    column_types: bytes = b""
    column_metas: tuple[int, ...] = ()
    null_bits: bytes = b""
    columns: list[Column] = field(default_factory=list)
    primary_key: tuple[int, ...] = ()
    primary_key_prefixes: tuple[int, ...] = ()
    has_names: bool = False
    has_charsets: bool = False
    default_charset: int | None = None
    mariadb: bool = False
    # Whether the SIGNEDNESS field gives YEAR a bit (see year_has_signedness_bit).
    year_signedness: bool = True
    layout_key: bytes = b""  # the event body after the table id: equal keys, equal layouts
    _decoders: dict[tuple[int, bool], RowImageDecoder] = field(default_factory=dict, repr=False)

    @property
    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]

    @property
    def primary_key_names(self) -> list[str]:
        return [self.columns[i].name for i in self.primary_key if i < len(self.columns)]

    def image_decoder(self, present: int) -> RowImageDecoder:
        # Decoders built with and without the compiled accelerator are never mixed up.
        accelerated = decoder_choice.active()
        decoder = self._decoders.get((present, accelerated))
        if decoder is None:
            # Every transaction repeats its TABLE_MAPs: share compiled decoders between
            # maps that describe the same layout (same bytes apart from the table id) and
            # read them the same way (the server's YEAR signedness rule).
            key = (self.layout_key, present, self.mariadb, self.year_signedness, accelerated)
            decoder = _SHARED_DECODERS.pop(key, None) or self._compile(present, accelerated)
            _SHARED_DECODERS[key] = decoder
            if len(_SHARED_DECODERS) > _SHARED_DECODERS_MAX:
                del _SHARED_DECODERS[next(iter(_SHARED_DECODERS))]
            self._decoders[(present, accelerated)] = decoder
        return decoder

    def named(self, table_schema: Any) -> TableMapEvent | str:
        """A copy of this map with its columns named from `table_schema` (see
        `apply_schema`), or why it cannot be; this map stays as the server wrote it."""
        copy = replace(self, columns=[replace(c) for c in self.columns], _decoders={})
        reason = copy.apply_schema(table_schema)
        return copy if reason is None else reason

    def apply_schema(self, table_schema: Any) -> str | None:
        """Name the columns of a TABLE_MAP written without COLUMN_NAME metadata
        (binlog_row_metadata=MINIMAL, MySQL 5.7, MariaDB < 10.5) from the schema the table
        had when the event was written (replicad.source.schema.TableSchema, duck-typed:
        `.columns` with `.name`, `.unsigned`, `.enum_values`, `.set_values`; `.primary_key`
        as column names). ENUM/SET members, signedness and the primary key are taken only
        where the map lacks them. Returns None when applied (or when the map has names:
        FULL metadata is authoritative), else why not; the map then keeps its `@N` names,
        never a guess. Re-applying (another schema) starts again from the map's own data."""
        if self.has_names:
            return None
        wanted = list(table_schema.columns)
        if len(wanted) != len(self.columns):
            return (
                f"the schema history has {len(wanted)} columns, the TABLE_MAP {len(self.columns)}"
            )
        for column, source in zip(self.columns, wanted, strict=True):
            if (column.type_code == ColumnType.ENUM) != (source.enum_values is not None) or (
                column.type_code == ColumnType.SET
            ) != (source.set_values is not None):
                return f"column {column.index + 1} ({source.name}) is {column.type_name} here"
        by_name = {source.name.casefold(): i for i, source in enumerate(wanted)}
        key_names = [name.casefold() for name in table_schema.primary_key]
        if any(name not in by_name for name in key_names):
            return f"primary key {list(table_schema.primary_key)} names unknown columns"
        # Which optional metadata fields did the server write? Walk the layout (the body
        # after the table id) to them; a schema applied before is a last field of type 0xFF.
        key, kinds = self.layout_key, set()
        if key[:1] == b"\xff":
            key = b""  # a synthetic map (no layout bytes) that was named before
        if key:
            pos = 2  # flags
            pos += key[pos] + 2  # schema: length byte, name, NUL
            pos += key[pos] + 2  # table
            count, pos = read_lenenc(key, pos)
            meta_len, pos = read_lenenc(key, pos + count)
            pos += meta_len + (count + 7) // 8
            while pos < len(key) and key[pos] != 0xFF:
                kinds.add(key[pos])
                length, pos = read_lenenc(key, pos + 1)
                pos += length
            key = key[:pos]
        # Copies: the parser hands out maps that share their columns and decoders with the
        # other maps of the same bytes (parser.py, `_table_map`); naming one must not name them.
        self.columns = [replace(c) for c in self.columns]
        self._decoders = {}
        for column, source in zip(self.columns, wanted, strict=True):
            column.name = source.name
            if column.type_code == ColumnType.ENUM and OptionalMetadata.ENUM_STR_VALUE not in kinds:
                column.enum_values = list(source.enum_values)
            if column.type_code == ColumnType.SET and OptionalMetadata.SET_STR_VALUE not in kinds:
                column.set_values = list(source.set_values)
            if OptionalMetadata.SIGNEDNESS not in kinds:
                column.unsigned = bool(source.unsigned)
        if not kinds & {
            OptionalMetadata.SIMPLE_PRIMARY_KEY,
            OptionalMetadata.PRIMARY_KEY_WITH_PREFIX,
        }:
            self.primary_key = tuple(by_name[name] for name in key_names)
            self.primary_key_prefixes = (0,) * len(self.primary_key)
        # Compiled decoders carry the names (and members, signedness): the shared cache must
        # not hand this map a decoder built for the same layout bytes under other names.
        described = [(c.name, c.enum_values, c.set_values, c.unsigned) for c in self.columns]
        self.layout_key = key + b"\xff" + repr((described, self.primary_key)).encode()
        return None

    def _compile(self, present: int, accelerated: bool) -> RowImageDecoder:
        specs = tuple(
            CompiledColumn(column.name, _spec(column, self))
            for column in self.columns
            if present >> column.index & 1
        )
        decode = decoder_choice.build_image_decoder(
            specs, mariadb=self.mariadb, compiled=accelerated
        )
        return RowImageDecoder(specs, decode, (len(specs) + 7) // 8, self.mariadb)


# Least-recently-used cache of compiled row decoders, shared by all parsers (it is keyed by
# the complete layout, so sharing is safe).
_SHARED_DECODERS: dict[tuple[bytes, int, bool, bool, bool], RowImageDecoder] = {}
_SHARED_DECODERS_MAX = 4096


def _spec(column: Column, table: TableMapEvent) -> ColumnSpec:
    codec = None
    if column.collation is not None:
        codec = codec_of(column.collation, mariadb=table.mariadb)
    raw_type = table.column_types[column.index]
    return ColumnSpec(
        type_code=raw_type,
        meta=column.meta,
        unsigned=column.unsigned,
        codec=codec,
        charset_known=column.collation is not None,
        enum_values=column.enum_values,
        set_values=column.set_values,
    )


def _strings(buf: bytes, pos: int, end: int) -> list[bytes]:
    out = []
    while pos < end:
        n, pos = read_lenenc(buf, pos)
        out.append(buf[pos : pos + n])
        pos += n
    return out


def _lenencs(buf: bytes, pos: int, end: int) -> list[int]:
    out = []
    while pos < end:
        v, pos = read_lenenc(buf, pos)
        out.append(v)
    return out


def _charset_field(buf: bytes, pos: int, end: int) -> tuple[int, dict[int, int]]:
    default, pos = read_lenenc(buf, pos)
    overrides = {}
    while pos < end:
        index, pos = read_lenenc(buf, pos)
        collation, pos = read_lenenc(buf, pos)
        overrides[index] = collation
    return default, overrides


def year_has_signedness_bit(server_version: tuple[int, int, int], mariadb: bool) -> bool:
    """Does a TABLE_MAP's SIGNEDNESS field hold a bit for each YEAR column? MariaDB's YEAR is
    an unsigned TINYINT underneath and always gets one. MySQL 8.0.1-8.0.20 wrote bits only
    for is_numeric_type() (integers, FLOAT, DOUBLE, NEWDECIMAL); from 8.0.21 (8.4, 9.x) the
    server uses has_signedess_information_type(), which adds YEAR (and the pre-5.0 DECIMAL,
    which no table made since can hold). A YEAR skipped or counted wrongly shifts the bits of
    every later numeric column: a signed INT -5 becomes 4294967291."""
    return mariadb or server_version >= (8, 0, 21)


def parse_table_map(
    header, body: bytes, table_id_size: int, mariadb: bool, *, year_signedness: bool = True
) -> TableMapEvent:
    need(body, 0, table_id_size + 2, "TABLE_MAP post-header")
    table_id = int.from_bytes(body[0:table_id_size], "little")
    flags = struct.unpack_from("<H", body, table_id_size)[0]
    pos = table_id_size + 2
    schema_len = body[pos]
    schema = body[pos + 1 : pos + 1 + schema_len].decode("utf-8", "replace")
    pos += schema_len + 2
    table_len = body[pos]
    table = body[pos + 1 : pos + 1 + table_len].decode("utf-8", "replace")
    pos += table_len + 2
    ncols, pos = read_lenenc(body, pos)
    need(body, pos, ncols, "column types")
    types = bytes(body[pos : pos + ncols])
    pos += ncols
    meta_len, pos = read_lenenc(body, pos)
    need(body, pos, meta_len, "column metadata")
    metas = read_metadata(types, body, pos, pos + meta_len)
    pos += meta_len
    null_len = (ncols + 7) // 8
    need(body, pos, null_len, "null bitmap")
    null_bits = bytes(body[pos : pos + null_len])
    pos += null_len
    event = TableMapEvent(
        header,
        table_id=table_id,
        flags=flags,
        schema=schema,
        table=table,
        column_types=types,
        column_metas=tuple(metas),
        null_bits=null_bits,
        mariadb=mariadb,
        year_signedness=year_signedness,
        layout_key=bytes(body[table_id_size:]),
    )
    columns = []
    for i, (t, m) in enumerate(zip(types, metas, strict=True)):
        real, length = real_type_and_length(t, m)
        columns.append(
            Column(
                index=i,
                name=f"@{i + 1}",
                type_code=real,
                meta=m,
                nullable=bool(null_bits[i >> 3] >> (i & 7) & 1),
                max_length=length if t == ColumnType.STRING else None,
            )
        )
    event.columns = columns
    _apply_optional_metadata(event, body, pos)
    return event


def _apply_optional_metadata(event: TableMapEvent, body: bytes, pos: int) -> None:
    columns = event.columns
    numeric_types = NUMERIC_TYPES | ({ColumnType.YEAR} if event.year_signedness else set())
    numeric = [c for c in columns if c.type_code in numeric_types]
    # MariaDB's GEOMETRY is a BLOB underneath and gets a charset slot; MySQL's does not, but
    # MySQL 9 gives VECTOR one (is_character_type() in its log_event.cc).
    character_types = CHARACTER_TYPES | (
        {ColumnType.GEOMETRY} if event.mariadb else {ColumnType.VECTOR}
    )
    character = [c for c in columns if c.type_code in character_types]
    enum_set = [c for c in columns if c.type_code in (ColumnType.ENUM, ColumnType.SET)]
    enums = [c for c in columns if c.type_code == ColumnType.ENUM]
    sets = [c for c in columns if c.type_code == ColumnType.SET]
    geometries = [c for c in columns if c.type_code == ColumnType.GEOMETRY]
    vectors = [c for c in columns if c.type_code == ColumnType.VECTOR]
    enum_set_collations: list[int | None] = [None] * len(enum_set)
    enum_raw: list[list[bytes]] = []
    set_raw: list[list[bytes]] = []
    end = len(body)
    while pos < end:
        kind = body[pos]
        length, pos = read_lenenc(body, pos + 1)
        need(body, pos, length, f"optional metadata field {kind}")
        stop = pos + length
        if kind == OptionalMetadata.SIGNEDNESS:
            for column, unsigned in zip(
                numeric, msb_first_bits(body[pos:stop], len(numeric)), strict=False
            ):
                column.unsigned = unsigned
        elif kind == OptionalMetadata.DEFAULT_CHARSET:
            default, overrides = _charset_field(body, pos, stop)
            event.default_charset = default
            for i, column in enumerate(character):
                column.collation = overrides.get(i, default)
            event.has_charsets = True
        elif kind == OptionalMetadata.COLUMN_CHARSET:
            for column, collation in zip(character, _lenencs(body, pos, stop), strict=False):
                column.collation = collation
            event.has_charsets = True
        elif kind == OptionalMetadata.COLUMN_NAME:
            for column, name in zip(columns, _strings(body, pos, stop), strict=False):
                column.name = name.decode("utf-8", "replace")
            event.has_names = True
        elif kind == OptionalMetadata.SET_STR_VALUE:
            set_raw = _value_lists(body, pos, stop)
        elif kind == OptionalMetadata.ENUM_STR_VALUE:
            enum_raw = _value_lists(body, pos, stop)
        elif kind == OptionalMetadata.GEOMETRY_TYPE:
            for column, gtype in zip(geometries, _lenencs(body, pos, stop), strict=False):
                column.geometry_type = gtype
        elif kind == OptionalMetadata.SIMPLE_PRIMARY_KEY:
            event.primary_key = tuple(_lenencs(body, pos, stop))
            event.primary_key_prefixes = (0,) * len(event.primary_key)
        elif kind == OptionalMetadata.PRIMARY_KEY_WITH_PREFIX:
            pairs = _lenencs(body, pos, stop)
            event.primary_key = tuple(pairs[0::2])
            event.primary_key_prefixes = tuple(pairs[1::2])
        elif kind == OptionalMetadata.ENUM_AND_SET_DEFAULT_CHARSET:
            default, overrides = _charset_field(body, pos, stop)
            enum_set_collations = [overrides.get(i, default) for i in range(len(enum_set))]
        elif kind == OptionalMetadata.ENUM_AND_SET_COLUMN_CHARSET:
            enum_set_collations = list(_lenencs(body, pos, stop))
        elif kind == OptionalMetadata.COLUMN_VISIBILITY:
            for column, visible in zip(
                columns, msb_first_bits(body[pos:stop], len(columns)), strict=False
            ):
                column.visible = visible
        elif kind == OptionalMetadata.VECTOR_DIMENSIONALITY:
            for column, dims in zip(vectors, _lenencs(body, pos, stop), strict=False):
                column.vector_dimensions = dims
        # Unknown field types are skipped by length, as the server's own reader does.
        pos = stop
    for column, member_collation in zip(enum_set, enum_set_collations, strict=False):
        column.collation = member_collation
    for group, raw in ((enums, enum_raw), (sets, set_raw)):
        for column, values in zip(group, raw, strict=False):
            names = [_decode_member(v, column, event.mariadb) for v in values]
            if column.type_code == ColumnType.ENUM:
                column.enum_values = names
            else:
                column.set_values = names


def _value_lists(body: bytes, pos: int, end: int) -> list[list[bytes]]:
    lists = []
    while pos < end:
        count, pos = read_lenenc(body, pos)
        values = []
        for _ in range(count):
            n, pos = read_lenenc(body, pos)
            values.append(bytes(body[pos : pos + n]))
            pos += n
        lists.append(values)
    return lists


def _decode_member(raw: bytes, column: Column, mariadb: bool) -> str:
    codec = None
    if column.collation is not None and column.collation != BINARY_COLLATION:
        codec = codec_of(column.collation, mariadb=mariadb)
    text = decode_text(raw, codec or "utf-8")
    return text if isinstance(text, str) else raw.decode("latin-1")


# ------------------------------------------------------------------------------------ ROWS

_WRITE = frozenset(
    {
        EventType.WRITE_ROWS_V1,
        EventType.WRITE_ROWS,
        EventType.WRITE_ROWS_COMPRESSED_V1,
        EventType.WRITE_ROWS_COMPRESSED,
    }
)
_UPDATE = frozenset(
    {
        EventType.UPDATE_ROWS_V1,
        EventType.UPDATE_ROWS,
        EventType.PARTIAL_UPDATE_ROWS,
        EventType.UPDATE_ROWS_COMPRESSED_V1,
        EventType.UPDATE_ROWS_COMPRESSED,
    }
)
_DELETE = frozenset(
    {
        EventType.DELETE_ROWS_V1,
        EventType.DELETE_ROWS,
        EventType.DELETE_ROWS_COMPRESSED_V1,
        EventType.DELETE_ROWS_COMPRESSED,
    }
)
ROWS_TYPES = _WRITE | _UPDATE | _DELETE
V2_TYPES = frozenset(
    {
        EventType.WRITE_ROWS,
        EventType.UPDATE_ROWS,
        EventType.DELETE_ROWS,
        EventType.PARTIAL_UPDATE_ROWS,
        EventType.WRITE_ROWS_COMPRESSED,
        EventType.UPDATE_ROWS_COMPRESSED,
        EventType.DELETE_ROWS_COMPRESSED,
    }
)
COMPRESSED_ROWS_TYPES = frozenset(range(166, 172))


@dataclass(slots=True)
class JsonPartialUpdate:
    """A JSON column's after-value given as diffs whose base document was not in the event."""

    diffs: list[jsonb.JsonDiff]


@dataclass(slots=True)
class RowsEvent(Event):
    table_id: int = 0
    flags: int = 0
    extra_data: bytes = b""
    column_count: int = 0
    present_before: int = 0
    present_after: int = 0
    body: bytes = b""
    rows_offset: int = 0
    table_map: TableMapEvent | None = None

    @property
    def op(self) -> str:
        t = self.header.type_code
        return "c" if t in _WRITE else "u" if t in _UPDATE else "d"

    @property
    def stmt_end(self) -> bool:
        return bool(self.flags & RowsFlag.STMT_END)

    @property
    def partial(self) -> bool:
        return self.header.type_code == EventType.PARTIAL_UPDATE_ROWS

    def rows(self, table: TableMapEvent | None = None) -> Iterator[tuple[Row | None, Row | None]]:
        """(before, after) per row; before is None for inserts, after None for deletes.
        `table` is the map to decode with when not the one the event came after (a copy with
        the columns named from the schema history). With the compiled decoder the whole
        event is decoded by this call; otherwise, or when an image does not fit, row by row
        as the rows are taken (the rows before a faulty image come out, then its error)."""
        table, first, second, decoded = self._decode_at_once(table)
        if decoded is not None:
            return iter(decoded)
        return self._rows_one_by_one(table, first, second)

    def decoded_rows(
        self, table: TableMapEvent | None = None
    ) -> list[tuple[Row | None, Row | None]] | None:
        """All of `rows()` at once when the compiled decoder can decode the whole event;
        None when it must go row by row (use `rows()`)."""
        return self._decode_at_once(table)[3]

    def _decode_at_once(
        self, table: TableMapEvent | None
    ) -> tuple[
        TableMapEvent,
        RowImageDecoder,
        RowImageDecoder | None,
        list[tuple[Row | None, Row | None]] | None,
    ]:
        table = table or self.table_map
        if table is None:
            raise MalformedEventError(
                f"no TABLE_MAP for table id {self.table_id} before this rows event",
                offset=self.header.pos,
            )
        if len(table.columns) != self.column_count:
            raise MalformedEventError(
                f"rows event has {self.column_count} columns, its TABLE_MAP "
                f"{table.schema}.{table.table} has {len(table.columns)}",
                offset=self.header.pos,
            )
        op = self.op
        first = table.image_decoder(self.present_before)
        second = table.image_decoder(self.present_after) if op == "u" else None
        decoded = None
        if not self.partial:
            decoded = decoder_choice.decode_event_rows(
                first.decode,
                None if second is None else second.decode,
                self.body,
                self.rows_offset,
                op == "c",
            )
        return table, first, second, decoded

    def _rows_one_by_one(
        self, table: TableMapEvent, first: RowImageDecoder, second: RowImageDecoder | None
    ) -> Iterator[tuple[Row | None, Row | None]]:
        body, pos, end = self.body, self.rows_offset, len(self.body)
        op = self.op
        try:
            decode_first = first.decode
            if second is None:
                insert = op == "c"
                while pos < end:
                    row, pos = decode_first(body, pos)
                    if pos > end:
                        break  # a value ran past the event: never hand out such a row
                    yield (None, row) if insert else (row, None)
            else:
                while pos < end:
                    row, pos = decode_first(body, pos)
                    if self.partial:
                        after, pos = _decode_partial_after(
                            body, pos, table, self.present_after, row
                        )
                    else:
                        after, pos = second.decode(body, pos)
                    if pos > end:
                        break
                    yield row, after
        except BinlogError as exc:
            raise exc.with_context(
                table=f"{table.schema}.{table.table}", offset=self.header.pos
            ) from None
        except (IndexError, struct.error, ValueError, OverflowError, TypeError) as exc:
            raise MalformedEventError(
                f"row image does not fit its columns: {exc}",
                table=f"{table.schema}.{table.table}",
                offset=self.header.pos,
            ) from exc
        if pos != end:
            raise MalformedEventError(
                f"row images overrun the event by {pos - end} bytes"
                if pos > end
                else f"row images stop {end - pos} bytes short of the event's end",
                table=f"{table.schema}.{table.table}",
                offset=self.header.pos,
            )


def _decode_partial_after(
    body: bytes, pos: int, table: TableMapEvent, present: int, before: Row
) -> tuple[Row, int]:
    """A PARTIAL_UPDATE_ROWS after image: value_options, then a bitmap over the table's JSON
    columns telling which carry a diff (Json_diff_vector) instead of a full value."""
    options, pos = read_lenenc(body, pos)
    if options > 1:
        raise MalformedEventError(f"unknown partial-update value options {options:#x}")
    json_columns = [c for c in table.columns if c.type_code == ColumnType.JSON]
    partial: set[int] = set()
    if options & 1:
        nbytes = (len(json_columns) + 7) // 8
        bits = int.from_bytes(body[pos : pos + nbytes], "little")
        pos += nbytes
        partial = {c.index for i, c in enumerate(json_columns) if bits >> i & 1}
    decoder = table.image_decoder(present)
    present_columns = [c for c in table.columns if present >> c.index & 1]
    nbytes = decoder.null_bytes
    nulls = int.from_bytes(body[pos : pos + nbytes], "little")
    pos += nbytes
    row: Row = {}
    for bit_index, (column, (name, decode)) in enumerate(
        zip(present_columns, decoder.columns, strict=True)
    ):
        if nulls >> bit_index & 1:
            row[name] = None
        elif column.index in partial:
            # Json_diff_vector::write_binary starts with a u32 length, which doubles as the
            # JSON column's 4-byte length prefix; every diff after it is decoded.
            diffs, pos = jsonb.decode_json_diffs(body, pos)
            base = before.get(name, _MISSING)
            if base is _MISSING:
                row[name] = JsonPartialUpdate(diffs)
            else:
                try:
                    row[name] = jsonb.apply_json_diffs(base, diffs)
                except JsonDecodeError as exc:
                    raise exc.with_context(column=name) from None
        else:
            row[name], pos = decode(body, pos)
    return row, pos


_MISSING = object()


def parse_rows(
    header,
    body: bytes,
    table_id_size: int,
    post_header_len: int,
    table_maps: dict[int, TableMapEvent],
) -> RowsEvent:
    type_code = header.type_code
    need(body, 0, table_id_size + 2, "rows post-header")
    table_id = int.from_bytes(body[0:table_id_size], "little")
    flags = struct.unpack_from("<H", body, table_id_size)[0]
    pos = table_id_size + 2
    extra = b""
    if type_code in V2_TYPES:
        extra_len = struct.unpack_from("<H", body, pos)[0]
        if extra_len < 2:
            raise MalformedEventError(f"rows v2 extra-data length {extra_len} < 2")
        need(body, pos, extra_len, "rows extra data")
        extra = bytes(body[pos + 2 : pos + extra_len])
        pos += extra_len
    elif post_header_len > pos:
        pos = post_header_len
    ncols, pos = read_lenenc(body, pos)
    nbytes = (ncols + 7) // 8
    need(body, pos, nbytes, "columns-present bitmap")
    before = int.from_bytes(body[pos : pos + nbytes], "little")
    pos += nbytes
    after = before
    if type_code in _UPDATE:
        need(body, pos, nbytes, "after-image columns-present bitmap")
        after = int.from_bytes(body[pos : pos + nbytes], "little")
        pos += nbytes
    if type_code in COMPRESSED_ROWS_TYPES:
        # MariaDB compresses only the row images; the column count and bitmaps stay plain.
        body = decompress_mariadb(body, pos)
        pos = 0
    return RowsEvent(
        header,
        table_id=table_id,
        flags=flags,
        extra_data=extra,
        column_count=ncols,
        present_before=before,
        present_after=after,
        body=body,
        rows_offset=pos,
        table_map=table_maps.get(table_id),
    )
