"""The compiled read path: every message of a chunk of snapshot rows built in C at once.

A snapshot reads its rows with SELECT; the server sends each row as a text-protocol packet
(values as text, text columns in their own character set). `ReadEncoder.encode` writes a
`ReadRows`' packets straight as the envelope's op "r" messages (`_writer.encode_text_rows`,
reached through `writer_choice`): no dict per row, no Python object per value for integers,
DOUBLE, DECIMAL, dates, DATETIME/TIMESTAMP, text in UTF-8 or a single-byte charset and
binary strings. The bytes are those `EnvelopeWriter.value` writes for `ReadRows.changes()`
(tests/unit/test_read_envelope.py holds the two equal, type by type); the other columns
(FLOAT, BIT, TIME, spatial, MySQL JSON, text in a multi-byte charset other than UTF-8) and
the values these writers leave alone (zero dates, a short BINARY) take the snapshot's own
parser and the envelope's JSON of its value, per value.

`encode` returns None when the rows must take the row-by-row path: no compiled writer, the
values wrapped in Kafka Connect schemas, a packet that is not a row of the table (the row
path then raises the error that names it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from replicad.binlog.accel import json_table
from replicad.binlog.changes import ReadRows, RowChange
from replicad.binlog.charsets import CODEC_BY_CHARSET, SINGLE_BYTE_CODECS
from replicad.binlog.column_types import SqlType, TableDescription
from replicad.sinks import writer_choice
from replicad.sinks.envelope import EnvelopeWriter, value_json
from replicad.sinks.event_envelope import KEY_COLUMNS, KEY_NONE, column_prefixes

_INTEGERS = frozenset({"tinyint", "smallint", "mediumint", "int", "bigint"})
_TEXTS = frozenset({"char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum", "set"})
_BYTES = frozenset({"varbinary", "tinyblob", "blob", "mediumblob", "longblob"})
_TEMPORAL = frozenset({"date", "datetime", "timestamp"})  # their kinds have their names

_CACHED_LAYOUTS = 1024


def text_kind(sql_type: SqlType) -> tuple[str, int, bytes | None]:
    """How the compiled writer reads a column's text (a `_writer.TEXT_KINDS` name), the
    width of a BINARY and the JSON table of a single-byte charset."""
    data_type = sql_type.data_type
    if data_type in _INTEGERS:
        return ("unsigned" if sql_type.unsigned else "signed"), 0, None
    if data_type == "year":
        return "unsigned", 0, None
    if data_type in ("double", "decimal") or data_type in _TEMPORAL:
        return data_type, 0, None
    if data_type == "binary":
        return "padded", sql_type.length or 0, None
    if data_type in _BYTES:
        return "bytes", 0, None
    if data_type in _TEXTS:
        if sql_type.charset is None:
            return "bytes", 0, None
        codec = CODEC_BY_CHARSET.get(sql_type.charset)
        if codec == "utf-8":
            return "utf8", 0, None
        if codec in SINGLE_BYTE_CODECS:
            return "table", 0, json_table(codec)
    return "fallback", 0, None


class ReadEncoder:
    """Encodes chunks of snapshot rows with `writer`'s names and caches."""

    __slots__ = ("_layouts", "writer")

    def __init__(self, writer: EnvelopeWriter) -> None:
        self.writer = writer
        # by id() of the table description: the object is kept with its entry
        self._layouts: dict[tuple[int, tuple[str, ...]], tuple[TableDescription, Any]] = {}

    def encode(
        self,
        reads: ReadRows,
        now_ms: int,
        *,
        lines: bool,
        key: tuple[int, Any] = (KEY_NONE, None),
    ) -> tuple[Any, RowChange, int] | None:
        """The rows' messages, the change that stands for them (row = the first row's
        number) and the number of rows, or None (use `reads.changes()`). `lines` and `key`
        as `EventEncoder.encode`."""
        if self.writer.connect is not None or not writer_choice.active():
            return None
        key_mode, constant = key
        if key_mode == KEY_COLUMNS and not reads.primary_key:
            return None
        template = reads.change(None, reads.first_row)
        head, tail = self.writer.read_parts(template, now_ms)
        try:
            messages, count = writer_choice.encode_text_rows(
                self._layout(reads),
                reads.packets,
                head,
                tail,
                reads.first_row,
                key_mode,
                constant,
                lines,
            )
        except Exception:  # the row-by-row path raises the error that names it
            return None
        return messages, template, count

    def _layout(self, reads: ReadRows) -> Any:
        schema, primary_key = reads.schema, reads.primary_key
        cache_key = (id(schema), primary_key)
        cached = self._layouts.get(cache_key)
        if cached is not None and cached[0] is schema:
            return cached[1]
        kinds, widths, tables = zip(*(text_kind(c.type) for c in schema.columns), strict=True)
        names = [c.name for c in schema.columns]
        layout = writer_choice.text_layout(
            kinds,
            widths,
            tables,
            column_prefixes(names),
            _fallback(reads.parsers),
            column_prefixes(primary_key),
            tuple(names.index(k) for k in primary_key),
        )
        if len(self._layouts) >= _CACHED_LAYOUTS:
            self._layouts.clear()
        self._layouts[cache_key] = (schema, layout)
        return layout


def _fallback(parsers: tuple[Callable[[bytes], Any], ...]) -> Callable[[int, bytes], bytes]:
    def fallback(index: int, raw: bytes) -> bytes:
        return value_json(parsers[index](raw), False)

    return fallback
