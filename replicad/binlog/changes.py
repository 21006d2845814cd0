"""Events -> row changes with their source coordinates (file, offset, GTID, row index).

Sans-IO: takes any iterator of decoded events (a file, a dump stream, a relay segment).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from replicad.binlog.column_types import TableDescription, describe
from replicad.binlog.events import (
    AnnotateRowsEvent,
    Event,
    GtidEvent,
    MariaGtidEvent,
    QueryEvent,
    RotateEvent,
    RowsQueryEvent,
    XidEvent,
)
from replicad.binlog.jsonb import JsonDiff
from replicad.binlog.rows import JsonPartialUpdate, RowsEvent, TableMapEvent
from replicad.binlog.values import ColumnType


@dataclass(slots=True)
class RowChange:
    op: str  # "c" | "u" | "d" | "r" (a snapshot read)
    db: str
    table: str
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    file: str | None
    pos: int | None  # offset of the ROWS event holding this row (of its TRANSACTION_PAYLOAD)
    row: int  # index of the row among the rows at that offset
    gtid: str | None
    server_id: int
    ts_ms: int
    primary_key: tuple[str, ...] = ()
    json_columns: frozenset[str] = frozenset()  # MySQL JSON columns (decoded documents)
    schema: TableDescription | None = None  # the row image's columns and types
    thread: int | None = None  # the session that wrote it (MySQL's BEGIN carries it)
    query: str | None = None  # the statement, when the primary logs it with the rows
    snapshot: str = "false"  # a snapshot read: "true", "last" on a table's last row
    # Columns of the table the binlog's before and after image did not carry
    # (binlog_row_image MINIMAL or NOBLOB; a JSON column given as diffs without its base):
    # unknown, never null (docs/consumers.md, "Partial row images").
    absent: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())
    # A JSON column's after value given only as diffs (PARTIAL_JSON) whose base document
    # the before image did not carry; the column is in `absent[1]` and not in `after`.
    json_diffs: dict[str, list[JsonDiff]] | None = None
    # The transaction's commit time in microseconds where the binlog carries it (MySQL
    # 8.0.1+: the GTID event's original_commit_timestamp), else None; `ts_ms` stays the
    # event header's seconds, which every path (the compiled one too) writes.
    commit_us: int | None = None
    # source.ts_us as the envelope writes it; None: ts_ms * 1000. Set by the `debezium`
    # value mode to the commit time (as Debezium's source.ts_us).
    ts_us: int | None = None


@dataclass(slots=True)
class TableChange:
    """A table-level change, in order with the rows around it: `truncate` (the table's rows
    are gone; published as op "t" on the table's topic) or a schema change (`create`,
    `alter`, `drop`, `rename`: the DDL with the table's columns before and after, as the
    schema history knows them; None where the table is absent). Coordinates as a row's."""

    kind: str  # "truncate" | "create" | "alter" | "drop" | "rename"
    db: str
    table: str
    ddl: str
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    file: str | None
    pos: int | None  # offset of the QUERY event
    gtid: str | None
    server_id: int
    ts_ms: int
    thread: int | None = None


class RowNumbering:
    """Numbers rows so that (file, pos, row) names each change uniquely. Events inside one
    TRANSACTION_PAYLOAD all carry the payload's offset, so their rows are numbered on from
    one ROWS event to the next instead of restarting at 0."""

    __slots__ = ("_next", "_pos")

    def __init__(self) -> None:
        self._pos: int | None = None
        self._next = 0

    def first_row(self, pos: int | None) -> int:
        if pos is None or pos != self._pos:
            self._pos, self._next = pos, 0
        return self._next

    def advance(self, count: int) -> None:
        self._next += count


def iter_row_changes(events: Iterable[Event], *, file: str | None = None) -> Iterator[RowChange]:
    """The row changes of a run of events (a file, a relay), with their coordinates."""
    # iter_changes without table changes, two generator layers fewer per row: without
    # `table_changes`, iter_changes_by_event yields EventRows only.
    for item in iter_changes_by_event(events, file=file):
        assert isinstance(item, EventRows)
        yield from item.changes()


# What a statement (QUERY event) does to tables, given its event, file and GTID: the caller's
# schema history decides (this layer has none).
TableChangesOf = Callable[[QueryEvent, str | None, str | None], Iterable[TableChange]]


@dataclass(slots=True)
class EventRows:
    """The rows of one ROWS event with their coordinates, not yet decoded: what a consumer
    that encodes a whole event at once takes (the compiled envelope path); `changes()`
    decodes them one by one instead. Taken in order, before the next item is asked for (the
    row numbering is shared with the items after it)."""

    event: RowsEvent
    file: str | None
    gtid: str | None
    numbering: RowNumbering
    table: TableMapEvent | None = None
    thread: int | None = None
    query: str | None = None
    commit_us: int | None = None  # RowChange.commit_us

    def changes(self) -> Iterator[RowChange]:
        return changes_of(
            self.event,
            self.file,
            self.gtid,
            self.numbering,
            self.table,
            self.thread,
            self.query,
            self.commit_us,
        )


@dataclass(slots=True)
class ReadRows:
    """Rows a snapshot read with SELECT (op "r"), as the server's text-protocol row packets,
    not yet parsed: a consumer that encodes them at once takes them whole (the compiled read
    path, `sinks/read_envelope.py`); `changes()` parses them one by one instead. Every row
    carries the marker `snapshot`; they are numbered from `first_row` at (file, pos): the
    snapshot's position, so that `(file, pos, row, op)` stays unique per table."""

    schema: TableDescription  # the columns, in the order of the SELECT's values
    primary_key: tuple[str, ...]
    packets: list[bytes]
    # A packet -> the row as the binlog decoders give it (the snapshot's parser); per column,
    # the text of a non-NULL value -> that value.
    parse: Callable[[bytes], dict[str, Any]]
    parsers: tuple[Callable[[bytes], Any], ...]
    file: str | None
    pos: int | None
    server_id: int
    ts_ms: int
    first_row: int
    snapshot: str = "true"

    def change(self, row: dict[str, Any] | None, number: int) -> RowChange:
        """The read of `row` (None: the change that stands for them all) as row `number`."""
        schema = self.schema
        return RowChange(
            "r",
            schema.db,
            schema.table,
            None,
            row,
            self.file,
            self.pos,
            number,
            None,
            self.server_id,
            self.ts_ms,
            self.primary_key,
            schema=schema,
            snapshot=self.snapshot,
        )

    def changes(self) -> list[RowChange]:
        parse, first = self.parse, self.first_row
        return [self.change(parse(packet), first + i) for i, packet in enumerate(self.packets)]


def iter_changes(
    events: Iterable[Event],
    *,
    file: str | None = None,
    table_changes: TableChangesOf | None = None,
    keep_query: bool = True,
) -> Iterator[RowChange | TableChange]:
    """Row changes and, with `table_changes`, the table-level changes of the statements
    between them, in binlog order; `keep_query` False leaves `query` None (see
    `StatementContext`)."""
    return expand_rows(
        iter_changes_by_event(events, file=file, table_changes=table_changes, keep_query=keep_query)
    )


def expand_rows(items: Iterable[EventRows | TableChange]) -> Iterator[RowChange | TableChange]:
    """Each `EventRows` as its row changes, one by one."""
    for item in items:
        if isinstance(item, EventRows):
            yield from item.changes()
        else:
            yield item


def iter_changes_by_event(
    events: Iterable[Event],
    *,
    file: str | None = None,
    table_changes: TableChangesOf | None = None,
    keep_query: bool = True,
) -> Iterator[EventRows | TableChange]:
    """As `iter_changes`, with the rows of each ROWS event as one `EventRows`."""
    current_file = file
    gtid: str | None = None
    statement = StatementContext(keep_query=keep_query)
    numbering = RowNumbering()
    for event in events:
        if isinstance(event, RowsEvent):
            yield EventRows(
                event,
                current_file,
                gtid,
                numbering,
                None,
                statement.thread,
                statement.query,
                statement.commit_us,
            )
            continue
        statement.see(event)
        if isinstance(event, (GtidEvent, MariaGtidEvent)):
            gtid = event.gtid
        elif isinstance(event, XidEvent):
            gtid = None
        elif isinstance(event, QueryEvent):
            if table_changes is not None:
                yield from table_changes(event, current_file, gtid)
            if event.query == "COMMIT":
                gtid = None
        elif isinstance(event, RotateEvent) and event.next_file:
            current_file = event.next_file


class StatementContext:
    """What the events before a ROWS event say about its rows: the writing session's thread
    id (MySQL's BEGIN query; MariaDB logs no BEGIN for row transactions), the statement
    (ROWS_QUERY with binlog_rows_query_log_events, MariaDB's ANNOTATE_ROWS) and the
    transaction's commit time in microseconds (MySQL 8.0.1+'s GTID event; None on MariaDB,
    whose GTID event has no such field).

    `keep_query` False ignores the statement (`envelope.include_query` off, the default, as
    Debezium's `include.query`): a client's multi-row INSERT is one statement of tens of KB,
    which every row's message would otherwise carry."""

    __slots__ = ("commit_us", "keep_query", "query", "thread")

    def __init__(self, *, keep_query: bool = True) -> None:
        self.keep_query = keep_query
        self.thread: int | None = None
        self.query: str | None = None
        self.commit_us: int | None = None

    def see(self, event: Event) -> None:
        if isinstance(event, (RowsQueryEvent, AnnotateRowsEvent)):
            if self.keep_query:
                self.query = event.query
        elif isinstance(event, QueryEvent):
            if event.query == "BEGIN":
                self.thread, self.query = event.thread_id, None
            else:  # COMMIT, or DDL (which commits implicitly)
                self.thread = self.query = None
                if event.query == "COMMIT":  # not a SAVEPOINT inside the transaction
                    self.commit_us = None
        elif isinstance(event, GtidEvent):
            self.thread = self.query = None
            # The original commit (on the primary that ran the transaction; the same as the
            # immediate one there), as Debezium takes it. 0 means the field is unknown.
            self.commit_us = event.original_commit_ts_us or event.immediate_commit_ts_us or None
        elif isinstance(event, MariaGtidEvent):
            self.thread = self.query = self.commit_us = None
        elif isinstance(event, XidEvent):
            self.thread = self.query = self.commit_us = None


def changes_of(
    event: RowsEvent,
    file: str | None,
    gtid: str | None,
    numbering: RowNumbering,
    table: TableMapEvent | None = None,
    thread: int | None = None,
    query: str | None = None,
    commit_us: int | None = None,
) -> Iterator[RowChange]:
    """The row changes of one ROWS event, with their source coordinates; `table` decodes them
    instead of the event's own TABLE_MAP (a copy named from the schema history). Where the
    compiled decoder takes the whole event at once, the changes are built at once and the
    numbering moves past the event now; otherwise row by row, as they are taken."""
    table = table or event.table_map
    decoded = event.decoded_rows(table) if table is not None else None
    schema = describe(table) if table else None
    op = event.op
    header = event.header
    db = table.schema if table else ""
    name = table.table if table else ""
    pk = tuple(table.primary_key_names) if table else ()
    json_columns = frozenset(
        c.name for c in (table.columns if table else ()) if c.type_code == ColumnType.JSON
    )
    ts_ms = header.timestamp * 1000
    pos, server_id = header.pos, header.server_id
    images = ImageAbsence.of(event, table) if table is not None else None

    def changes(pairs: Iterable[tuple[Any, Any]], start: int) -> list[RowChange]:
        out = [
            RowChange(
                op,
                db,
                name,
                before,
                after,
                file,
                pos,
                index,
                gtid,
                server_id,
                ts_ms,
                pk,
                json_columns,
                schema,
                thread,
                query,
                commit_us=commit_us,
            )
            for index, (before, after) in enumerate(pairs, start)
        ]
        if images is not None:
            for change in out:
                images.note(change)
        return out

    first = numbering.first_row(pos)
    if decoded is not None:
        numbering.advance(len(decoded))
        return iter(changes(decoded, first))
    return _changes_one_by_one(event.rows(table), changes, first, numbering)


def _changes_one_by_one(
    rows: Iterator[tuple[Any, Any]],
    changes: Callable[[Iterable[tuple[Any, Any]], int], list[RowChange]],
    index: int,
    numbering: RowNumbering,
) -> Iterator[RowChange]:
    for pair in rows:
        numbering.advance(1)
        yield changes((pair,), index)[0]
        index += 1


@dataclass(frozen=True, slots=True)
class ImageAbsence:
    """Which columns a ROWS event's images leave out (docs/consumers.md, "Partial row
    images"): the bitmaps are per event, so this is worked out once per event. `fill`: key
    columns the before image has and an update's after image lacks - the update did not set
    them, so they are unchanged, and the after image gets them from the before image (else
    a consumer would see the key change to null and split the update into a delete)."""

    before: tuple[str, ...]
    after: tuple[str, ...]
    fill: tuple[str, ...]
    order: tuple[str, ...]  # the table's column names

    @classmethod
    def of(cls, event: RowsEvent, table: TableMapEvent) -> ImageAbsence | None:
        """None when every image has every column and no value can be a diff (the usual
        FULL image): nothing to note."""
        op = event.op
        # A write or delete has one image and one bitmap (parse_rows copies it to both).
        before = _left_out(table, event.present_before) if op != "c" else ()
        after = _left_out(table, event.present_after) if op != "d" else ()
        if not (before or after or event.partial):
            return None
        fill: tuple[str, ...] = ()
        if op == "u" and after:
            fill = tuple(k for k in table.primary_key_names if k in after and k not in before)
            after = tuple(n for n in after if n not in fill)
        return cls(before, after, fill, tuple(c.name for c in table.columns))

    def note(self, change: RowChange) -> None:
        """Complete one change of the event in place: key columns filled into the after
        image, the absent columns, and JSON diffs without a base taken out of the image."""
        after = change.after
        absent_after = self.after
        if after is not None:
            if self.fill and change.before is not None:
                known = {**{k: change.before.get(k) for k in self.fill}, **after}
                after = {n: known[n] for n in self.order if n in known}
            diffs = {n: v.diffs for n, v in after.items() if isinstance(v, JsonPartialUpdate)}
            if diffs:
                after = {n: v for n, v in after.items() if n not in diffs}
                absent_after = tuple(n for n in self.order if n in diffs or n in self.after)
                change.json_diffs = diffs
            change.after = after
        change.absent = (self.before, absent_after)


def _left_out(table: TableMapEvent, present: int) -> tuple[str, ...]:
    if present == (1 << len(table.columns)) - 1:
        return ()
    return tuple(c.name for c in table.columns if not present >> c.index & 1)
