"""Events -> row changes with their source coordinates (file, offset, GTID, row index).

Sans-IO: takes any iterator of decoded events (a file, a dump stream, a relay segment).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from replicad.binlog.events import (
    Event,
    GtidEvent,
    MariaGtidEvent,
    QueryEvent,
    RotateEvent,
    XidEvent,
)
from replicad.binlog.rows import RowsEvent, TableMapEvent
from replicad.binlog.values import ColumnType


@dataclass(slots=True)
class RowChange:
    op: str  # "c" | "u" | "d"
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
    current_file = file
    gtid: str | None = None
    numbering = RowNumbering()
    for event in events:
        if isinstance(event, RowsEvent):
            yield from changes_of(event, current_file, gtid, numbering)
        elif isinstance(event, (GtidEvent, MariaGtidEvent)):
            gtid = event.gtid
        elif isinstance(event, XidEvent):
            gtid = None
        elif isinstance(event, QueryEvent) and event.query == "COMMIT":
            gtid = None
        elif isinstance(event, RotateEvent) and event.next_file:
            current_file = event.next_file


def changes_of(
    event: RowsEvent,
    file: str | None,
    gtid: str | None,
    numbering: RowNumbering,
    table: TableMapEvent | None = None,
) -> Iterator[RowChange]:
    """The row changes of one ROWS event, with their source coordinates; `table` decodes them
    instead of the event's own TABLE_MAP (a copy named from the schema history)."""
    table = table or event.table_map
    op = event.op
    header = event.header
    db = table.schema if table else ""
    name = table.table if table else ""
    pk = tuple(table.primary_key_names) if table else ()
    json_columns = frozenset(
        c.name for c in (table.columns if table else ()) if c.type_code == ColumnType.JSON
    )
    ts_ms = header.timestamp * 1000
    first = numbering.first_row(header.pos)
    for index, (before, after) in enumerate(event.rows(table), first):
        numbering.advance(1)
        yield RowChange(
            op,
            db,
            name,
            before,
            after,
            file,
            header.pos,
            index,
            gtid,
            header.server_id,
            ts_ms,
            pk,
            json_columns,
        )
