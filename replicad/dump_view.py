"""What `replicad dump` prints: one JSON line per row change (the envelope the Kafka sink
publishes) or, with --events, per event, for a binlog file or a relay (whose segment and
commit boundaries get lines of their own). A relay's torn tail is noted on stderr, not printed.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from replicad.binlog.changes import EventRows, TableChange, iter_changes_by_event
from replicad.binlog.events import Event, QueryEvent
from replicad.binlog.files import iter_file_events
from replicad.binlog.gtid import GtidSet
from replicad.binlog.rows import Column, RowsEvent, TableMapEvent
from replicad.relay.decode import (
    InputKind,
    TransactionEnd,
    boundary_to_dict,
    iter_relay,
    relay_changes_by_event,
)
from replicad.relay.reader import SegmentOpened, TornTail
from replicad.sinks.envelope import EnvelopeLines, dumps
from replicad.sinks.event_envelope import EventEncoder
from replicad.source.schema import SchemaHistory, table_changes


def dump_input(
    out: BinaryIO,
    path: str,
    kind: InputKind,
    *,
    start: int | None,
    stop: int | None,
    events: bool,
    verify_checksum: bool,
    history: DumpHistory | None = None,
    include_query: bool = False,
) -> None:
    """Decode one input (`kind` from relay.decode.input_kind) and write its lines to `out`.
    `history`: shared by the inputs of one dump, in order (a DDL's before-image may come from
    an earlier file). `include_query`: rows carry their statement in `source.query`, as the
    daemon's messages do with `envelope.include_query`. Raises what decoding raises
    (ReplicadError, OSError) for the caller."""
    history = history or DumpHistory()
    if kind == "binlog":
        decoded = iter_file_events(path, start=start, stop=stop, verify_checksum=verify_checksum)
        if events:
            write_events(out, decoded, path)
        else:
            changes = iter_changes_by_event(
                decoded,
                file=os.path.basename(path),
                table_changes=history,
                keep_query=include_query,
            )
            write_changes(out, changes)
        return
    items = iter_relay(Path(path), verify_checksum=verify_checksum)
    if events:
        write_events(out, items, path)
    else:
        torn_noted = _note_torn(path, items)
        write_changes(out, relay_changes_by_event(torn_noted, history, keep_query=include_query))


def write_events(out: BinaryIO, items: Iterable[Any], path: str) -> None:
    """Events of a binlog file, or a relay's events with its segment and commit lines."""
    for item in items:
        if isinstance(item, (SegmentOpened, TransactionEnd)):
            out.write(dumps(boundary_to_dict(item)) + b"\n")
        elif isinstance(item, TornTail):
            _print_torn(path, item)
        elif isinstance(item, Event):
            out.write(dumps(event_to_dict(item)) + b"\n")


def write_changes(out: BinaryIO, changes: Iterable[EventRows | TableChange]) -> None:
    """The messages Kafka would get (`EnvelopeLines`), one per line; a whole ROWS event at
    once through the compiled path where it can (`EventEncoder`), row by row otherwise."""
    lines = EnvelopeLines("replicad", replay=True)
    encoder = EventEncoder(lines.writer)
    for change in changes:
        if isinstance(change, EventRows):
            encoded = encoder.encode(change, None, lines=True)
            if encoded is not None:  # (lines, source, rows)
                out.write(encoded[0])
                continue
            for row in change.changes():
                out.write(lines.row(row))
        else:
            out.write(lines.table(change))


class DumpHistory:
    """The schema history of one `dump`: the binlog's own DDL from an empty start, so that
    TRUNCATE and schema changes come out as Kafka would get them (before-images of tables
    created before the dumped range are unknown: null)."""

    def __init__(self) -> None:
        self.history = SchemaHistory()

    def __call__(self, event: QueryEvent, file: str | None, gtid: str | None) -> list[TableChange]:
        outcome = self.history.follow(event)
        return table_changes(outcome, event, file, gtid) if outcome.verb else []


def _note_torn(path: str, items: Iterable[Any]) -> Iterator[Any]:
    for item in items:
        if isinstance(item, TornTail):
            _print_torn(path, item)
        yield item


def _print_torn(path: str, item: TornTail) -> None:
    """A relay directory's current segment ends inside a transaction: not an error."""
    sys.stdout.buffer.flush()  # the note lands after the lines printed before it
    print(
        f"replicad dump: {path}: {item.segment} at offset {item.offset}: {item.reason} "
        "(being written, or torn by a crash): not printed",
        file=sys.stderr,
    )


# Decoder internals and raw bytes: not part of what an operator reads (columns are rendered
# on their own for a TABLE_MAP).
_SKIPPED_FIELDS = {"header", "body", "table_map", "_decoders", "payload", "columns"}


def event_to_dict(event: Event) -> dict[str, Any]:
    header = event.header
    out: dict[str, Any] = {
        "type": header.type_name,
        "pos": header.pos,
        "next_pos": header.next_pos,
        "timestamp": header.timestamp,
        "server_id": header.server_id,
        "log_pos": header.log_pos,
        "header_flags": header.flags,
    }
    for f in dataclasses.fields(event):
        if f.name in _SKIPPED_FIELDS:
            continue
        value = getattr(event, f.name)
        if f.name in ("present_before", "present_after"):
            value = [i for i in range(value.bit_length()) if value >> i & 1]
        elif isinstance(value, GtidSet):
            value = str(value)
        elif isinstance(value, list) and value and dataclasses.is_dataclass(value[0]):
            value = [str(v) for v in value]
        out[f.name] = value
    gtid = getattr(event, "gtid", None)
    if isinstance(gtid, str):
        out["gtid"] = gtid
    if isinstance(event, TableMapEvent):
        out["columns"] = [_column_dict(c) for c in event.columns]
        out["primary_key"] = event.primary_key_names
    if isinstance(event, RowsEvent):
        out["op"] = event.op
        out["rows"] = list(_rows(event))
    return out


def _column_dict(column: Column) -> dict[str, Any]:
    data = {
        "name": column.name,
        "type": column.type_name,
        "meta": column.meta,
        "nullable": column.nullable,
        "unsigned": column.unsigned,
    }
    for key in ("collation", "enum_values", "set_values", "geometry_type", "vector_dimensions"):
        value = getattr(column, key)
        if value is not None:
            data[key] = value
    if not column.visible:
        data["visible"] = False
    return data


def _rows(event: RowsEvent) -> Iterator[dict[str, Any]]:
    for before, after in event.rows():
        yield {"before": before, "after": after}
