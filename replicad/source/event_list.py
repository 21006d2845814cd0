"""The primary's own listing of a binlog file (`SHOW BINLOG EVENTS`), read page by page: where
its events start, and the GTIDs it holds. Used to check an operator's `file:pos` and to work
out a MySQL GTID set at a file offset (source/start.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

from replicad.protocol.commands import cell_text
from replicad.protocol.transport import AsyncConnection

# Events per SHOW BINLOG EVENTS page: the server reads the file for each page from the
# page's first offset, so a page is cheap to start and bounded in memory.
PAGE_EVENTS = 2000


@dataclass(frozen=True, slots=True)
class ListedEvent:
    pos: int  # where the event starts in the file
    end: int  # End_log_pos: where the next one starts (0 for events packed in a payload)
    kind: str  # Event_type as the server names it (Gtid, Previous_gtids, Query, ...)
    info: str


def quote(file: str) -> str:
    """A binlog file name as a SQL string literal."""
    return "'" + file.replace("\\", "\\\\").replace("'", "\\'") + "'"


async def listed_events(
    conn: AsyncConnection, file: str, *, until: int | None = None
) -> AsyncIterator[ListedEvent]:
    """The events of `file` from its first (offset 4), in order, up to the first that starts
    at or after `until`, which is yielded too (it is the next boundary)."""
    start = 4
    while True:
        result = await conn.query(
            f"SHOW BINLOG EVENTS IN {quote(file)} FROM {start} LIMIT {PAGE_EVENTS}"
        )
        furthest = start
        for row in result.rows:
            event = ListedEvent(
                int(cell_text(row[1])),
                int(cell_text(row[4])),
                cell_text(row[2]),
                "" if row[5] is None else cell_text(row[5]),
            )
            yield event
            if until is not None and event.pos >= until:
                return
            furthest = max(furthest, event.end)
        # The next page starts where the last whole event of this one ends; a page that
        # did not move on is the end of the file.
        if len(result.rows) < PAGE_EVENTS or furthest <= start:
            return
        start = furthest


async def event_at(conn: AsyncConnection, file: str, pos: int) -> int | None:
    """The offset of the event the server lists for `FROM pos`: `pos` itself at a boundary.
    MySQL lists the next event for some offsets inside one (it skips what it cannot read as
    a header), so the answer must be compared; None when it lists nothing."""
    result = await conn.query(f"SHOW BINLOG EVENTS IN {quote(file)} FROM {int(pos)} LIMIT 1")
    return int(cell_text(result.rows[0][1])) if result.rows else None


async def nearest_boundaries(
    conn: AsyncConnection, file: str, pos: int, size: int
) -> tuple[int, int]:
    """The event starts just before and just after `pos` (the file's size when no event
    follows: the end of a file is where the next one continues)."""
    before, after = 4, size
    async for event in listed_events(conn, file, until=pos + 1):
        if event.pos < pos:
            before = max(before, event.pos)
        elif event.pos > pos:
            after = event.pos
            break
    return before, after
