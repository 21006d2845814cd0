"""The compiled envelope path: every message of one ROWS event built in C at once.

The compiled writer (`_writer.encode_rows`, reached through `writer_choice`) decodes the
event's row images straight into the envelope's JSON (docs/architecture.md, "Message
format") - no dict per row, no Python call per value for the common types, MySQL JSON
documents printed in C - and returns the messages with their keys. The bytes are those
`EnvelopeWriter.value` writes for each `RowChange` of the event (a test holds the two
equal, type by type); values the C writers do not cover (TIME, SET, FLOAT, zero dates, wide
DECIMALs, other charsets, JSON documents the C printer leaves to Python) go through the same
`_default` as the pure path.

`EventEncoder.encode` returns None when the event must take the row-by-row path: no
compiled writer, a PARTIAL_UPDATE_ROWS event, a table without its TABLE_MAP, a key that
is not a plain column copy, an update whose images do not both carry the key (MINIMAL: the
row path fills it in), a JSON column holding the document `null` (the row path notes it
per row), an image that does not fit (the row-by-row path then raises the error that
names it).
"""

from __future__ import annotations

from typing import Any

import orjson

from replicad.binlog.changes import EventRows, ImageAbsence, RowChange
from replicad.binlog.column_types import TableDescription, describe
from replicad.binlog.jsonb import JSON_NULL
from replicad.binlog.rows import Column, RowImageDecoder, TableMapEvent
from replicad.binlog.values import ColumnType
from replicad.sinks import writer_choice
from replicad.sinks.envelope import EnvelopeWriter, value_json

_KINDS = {"c": 0, "u": 1, "d": 2}


class _RowPathOnly(Exception):
    """A value the compiled path leaves to the row path (it writes per-row notes)."""


# Key columns whose equal values can have different JSON texts (-0.0 and 0.0; a NaN in a
# VECTOR is not even equal to itself in Python): an update of such a key is compared in
# Python, row by row.
_INEXACT_KEY_TYPES = frozenset({ColumnType.FLOAT, ColumnType.DOUBLE, ColumnType.VECTOR})

_CACHED_LAYOUTS = 1024

# How the message key is made (the C encoder's key_mode)
KEY_NONE, KEY_CONSTANT, KEY_COLUMNS = 0, 1, 2


class EventEncoder:
    """Encodes whole ROWS events with `writer`'s names and caches."""

    __slots__ = ("_described", "_plans", "writer")

    def __init__(self, writer: EnvelopeWriter) -> None:
        self.writer = writer
        # by id(): the objects are kept with their entry, so an id is never reused under it
        # the compiled writer's EventLayout of (first decoder, second decoder, primary key)
        self._plans: dict[tuple[int, int, tuple[str, ...]], tuple[Any, Any, Any]] = {}
        self._described: dict[int, tuple[list[Column], TableDescription]] = {}

    @staticmethod
    def available() -> bool:
        return writer_choice.active()

    def encode(
        self,
        rows: EventRows,
        now_ms: int | None,
        *,
        lines: bool,
        key: tuple[int, Any] = (KEY_NONE, None),
    ) -> tuple[Any, RowChange, int] | None:
        """The event's messages, the change that stands for its rows' source (row = the
        first row's number) and the number of rows, or None (use `rows.changes()`).
        `now_ms`: the envelope's top-level ts_ms (None: the commit time, as `replicad dump`
        prints). With `lines` one bytes object, a newline after each message; else a list of
        (op, row, key, value). `key`: (KEY_NONE, None), (KEY_CONSTANT, the key bytes) or
        (KEY_COLUMNS, None): the primary-key columns as a JSON object.
        The row numbering advances past the event only when it is encoded."""
        if self.writer.connect is not None or not self.available():
            return None
        event = rows.event
        table = rows.table or event.table_map
        if table is None or event.partial or len(table.columns) != event.column_count:
            return None
        op = event.op
        first = table.image_decoder(event.present_before)
        second = table.image_decoder(event.present_after) if op == "u" else None
        primary_key = tuple(table.primary_key_names)
        images = ImageAbsence.of(event, table)
        layout = self._plan(table, first, second, primary_key, op)
        if layout is None:
            return None
        key_mode, constant = key
        if key_mode == KEY_COLUMNS and not primary_key:
            return None
        header = event.header
        numbering = rows.numbering
        row0 = numbering.first_row(header.pos)
        template = RowChange(
            op,
            table.schema,
            table.table,
            None,
            None,
            rows.file,
            header.pos,
            row0,
            rows.gtid,
            header.server_id,
            header.timestamp * 1000,
            primary_key,
            frozenset(),
            self._describe(table),
            rows.thread,
            rows.query,
            absent=((), ()) if images is None else (images.before, images.after),
        )
        head, tails = self.writer.event_parts(
            template, template.ts_ms if now_ms is None else now_ms
        )
        try:
            messages, count = writer_choice.encode_rows(
                layout,
                event.body,
                event.rows_offset,
                _KINDS[op],
                head,
                tails,
                row0,
                key_mode,
                constant,
                lines,
            )
        except Exception:  # the row-by-row path raises the error that names it
            return None
        numbering.advance(count)
        return messages, template, count

    def _plan(
        self,
        table: TableMapEvent,
        first: RowImageDecoder,
        second: RowImageDecoder | None,
        primary_key: tuple[str, ...],
        op: str,
    ) -> Any:
        """The compiled writer's EventLayout: what encode_rows needs besides the event, per
        layout, or None (cached: every transaction repeats its TABLE_MAPs, the decoders are
        shared between equal layouts)."""
        key = (id(first), id(second), primary_key)
        cached = self._plans.get(key)
        if cached is not None and cached[0] is first and cached[1] is second:
            return cached[2]
        plan = None
        compiled_first = self._compiled(first)
        compiled_second = None if second is None else self._compiled(second)
        split = op == "u" and bool(primary_key)
        if (
            compiled_first is not None
            and (second is None or compiled_second is not None)
            and not (split and _inexact(table, primary_key))
            and not (split and _key_left_out(first, second, primary_key))
        ):
            # The key columns: what the key is made of, and what a split update compares.
            plan = writer_choice.event_layout(
                compiled_first,
                compiled_second,
                split,
                column_prefixes(primary_key),
                _indexes(first, primary_key),
                () if second is None else _indexes(second, primary_key),
            )
        if len(self._plans) >= _CACHED_LAYOUTS:
            self._plans.clear()
        self._plans[key] = (first, second, plan)
        return plan

    def _describe(self, table: TableMapEvent) -> TableDescription:
        # By the columns list: the maps of one TABLE_MAP body share it (the parser parses a
        # body once), and a named map has a list of its own.
        columns = table.columns
        cached = self._described.get(id(columns))
        if cached is not None and cached[0] is columns:
            return cached[1]
        if len(self._described) >= _CACHED_LAYOUTS:
            self._described.clear()
        description = describe(table)
        self._described[id(columns)] = (columns, description)
        return description

    def _compiled(self, decoder: RowImageDecoder) -> Any:
        """The compiled writer of a layout, or None when its decoder is not compiled."""
        names = [c.name for c in decoder.specs]
        json_flags = tuple(c.spec.type_code == ColumnType.JSON for c in decoder.specs)
        return writer_choice.image_writer(
            decoder.decode, column_prefixes(names), _fallback(json_flags)
        )


def column_prefixes(names: Any) -> tuple[bytes, ...]:
    return tuple((b"," if i else b"{") + orjson.dumps(n) + b":" for i, n in enumerate(names))


def _indexes(decoder: RowImageDecoder, names: tuple[str, ...]) -> tuple[int, ...]:
    present = {c.name: i for i, c in enumerate(decoder.specs)}
    return tuple(present.get(n, -1) for n in names)


def _key_left_out(
    first: RowImageDecoder, second: RowImageDecoder | None, names: tuple[str, ...]
) -> bool:
    """An update image without a key column (binlog_row_image MINIMAL): the row path fills
    the after image's key from the before image and compares only what both carry."""
    return second is not None and -1 in _indexes(first, names) + _indexes(second, names)


def _inexact(table: TableMapEvent, names: tuple[str, ...]) -> bool:
    types = {c.name: table.column_types[c.index] for c in table.columns}
    return any(types.get(n) in _INEXACT_KEY_TYPES for n in names)


def _fallback(json_flags: tuple[bool, ...]) -> Any:
    def fallback(index: int, value: Any) -> bytes:
        if value is JSON_NULL:
            # Declines the event (encode returns None): the row path notes it per row.
            raise _RowPathOnly("a JSON null document")
        return value_json(value, json_flags[index])

    return fallback
