"""Decoding relay segments with the binlog decoder, for `replicad dump`: what an input is
(binlog file, relay segment, relay directory) and the events of a segment, in order, with
its transaction boundaries.

A segment's events are the primary's bytes, so each one is decoded as the live stream is
(`BinlogParser.decode`): the parser first takes the segment header's FORMAT_DESCRIPTION event
(checksums as the header says), and an event's offset is its end offset on the primary
(`log_pos`) minus its size. A transaction's events are only decoded once its commit record
is known to exist, so a torn or damaged transaction is never printed in part.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from replicad.binlog.changes import (
    EventRows,
    RowChange,
    TableChange,
    TableChangesOf,
    expand_rows,
    iter_changes_by_event,
)
from replicad.binlog.events import Event
from replicad.binlog.parser import BINLOG_MAGIC, BinlogParser
from replicad.errors import RelayCorruptError, RelayTornError, ReplicadError
from replicad.relay.files import SegmentScan
from replicad.relay.inspect import read_manifest
from replicad.relay.manifest import MANIFEST, segment_number
from replicad.relay.reader import SegmentItem, SegmentOpened, TornTail, read_segments
from replicad.relay.records import HEADER_SIZE, FragmentType
from replicad.relay.segment import MAGIC, CommitRecord, RecordKind

InputKind = Literal["binlog", "relay-segment", "relay-directory"]

_SNIFF_BYTES = 4096


def input_kind(path: str | os.PathLike[str]) -> InputKind:
    """What `path` holds, by content: a directory is a relay directory; a file starting with a
    relay HEADER record (magic `replicad-relay`) is a relay segment; anything else is read as
    a binlog file (whose reader names a bad magic). Raises OSError if it cannot be read."""
    if os.path.isdir(path):
        return "relay-directory"
    with open(path, "rb") as f:
        head = f.read(_SNIFF_BYTES)
    if head[:4] == BINLOG_MAGIC:
        return "binlog"
    return "relay-segment" if looks_like_segment(head) else "binlog"


def looks_like_segment(head: bytes) -> bool:
    """The first fragment starts a record whose payload is a HEADER with the relay magic. The
    CRC is not checked here: a damaged header is still a relay segment, and reading it then
    reports the damage with its offset."""
    if len(head) < HEADER_SIZE + 5:
        return False
    if head[7] not in (FragmentType.FULL, FragmentType.FIRST):
        return False
    if head[HEADER_SIZE] != RecordKind.HEADER:
        return False
    return f'"magic":"{MAGIC}"'.encode() in head[HEADER_SIZE + 5 : _SNIFF_BYTES]


def relay_segments(directory: Path) -> list[Path]:
    """A relay directory's segments, oldest first: those its MANIFEST lists (a listed segment
    that is missing is an error when it is read); without a MANIFEST, every `relay-*.log`."""
    manifest = read_manifest(directory)
    if manifest is not None:
        return [directory / info.name for info in manifest.segments]
    found = sorted(
        (number, path)
        for path in directory.glob("relay-*.log")
        if (number := segment_number(path.name)) is not None
    )
    if not found:
        raise RelayCorruptError(
            "not a relay directory: no MANIFEST and no relay segments",
            file=str(directory / MANIFEST),
        )
    return [path for _, path in found]


# ---------------------------------------------------------------------------- items
@dataclass(slots=True, frozen=True)
class TransactionStart:
    segment: str
    offset: int  # of the transaction's first record
    file: str  # the primary's binlog file holding it (that of its commit position)


@dataclass(slots=True, frozen=True)
class TransactionEnd:
    segment: str
    offset: int
    end: int  # just after its last record
    commit: CommitRecord


RelayItem = Event | SegmentOpened | TransactionStart | TransactionEnd | TornTail


def iter_segment(path: Path, *, verify_checksum: bool = True) -> Iterator[RelayItem]:
    """The decoded events of one segment; a segment that ends inside a transaction raises
    RelayTornError (see iter_relay)."""
    return _decoded(read_segments([path], torn_tail=False), verify_checksum)


def iter_relay(path: Path, *, verify_checksum: bool = True) -> Iterator[RelayItem]:
    """A relay segment, or every segment of a relay directory in order. A directory's last
    segment may end inside a transaction (being written): that yields TornTail, not an
    error."""
    if not path.is_dir():
        return iter_segment(path, verify_checksum=verify_checksum)
    return _decoded(read_segments(relay_segments(path)), verify_checksum)


def _decoded(items: Iterator[SegmentItem], verify_checksum: bool) -> Iterator[RelayItem]:
    """Per segment SegmentOpened and the header's FORMAT_DESCRIPTION event, then per
    transaction TransactionStart, its events (those inside a TRANSACTION_PAYLOAD after it),
    TransactionEnd. Damage raises RelayCorruptError (segment, offset); a decoding error names
    the segment and the transaction's offset too."""
    parser: BinlogParser | None = None
    path = Path()
    tail = False
    current: int | None = None  # offset of the transaction being decoded
    for item in items:
        if isinstance(item, SegmentOpened):
            yield item
            path, tail = item.path, item.tail
            parser = BinlogParser(
                verify_checksum=verify_checksum, checksums=item.header.checksums, source=str(path)
            )
            yield from _decode(parser, item.header.format_description, item.name, 0)
        elif isinstance(item, TornTail):
            yield item
        else:
            assert parser is not None
            if current is None:
                current = item.start
                try:
                    commit = item.commit or _commit_ahead(path, item.start)
                except RelayTornError as exc:
                    if not tail:
                        raise
                    yield TornTail(path.name, item.start, exc.reason)
                    return
                yield TransactionStart(path.name, item.start, commit.position.file)
            for raw in item.events:
                yield from _decode(parser, raw, path.name, item.start)
            if item.commit is not None:
                yield TransactionEnd(path.name, item.start, item.end, item.commit)
                current = None


def _commit_ahead(path: Path, start: int) -> CommitRecord:
    """The commit of the transaction whose first record is at `start` but which spans several
    records: read ahead to its end (again from disk, so memory stays bounded). A transaction
    that does not end raises here, before any of its events is printed."""
    for chunk in SegmentScan(path).chunks(start):
        if chunk.commit is not None:
            return chunk.commit
    raise RelayTornError("the segment ends inside a transaction", segment=path.name, offset=start)


def _decode(parser: BinlogParser, raw: bytes, segment: str, txn_offset: int) -> Iterator[Event]:
    try:
        yield from parser.decode(raw)
    except ReplicadError as exc:
        raise exc.with_context(segment=segment, relay_offset=txn_offset) from None


# ---------------------------------------------------------------------------- output
def relay_changes(
    items: Iterable[RelayItem], table_changes: TableChangesOf | None = None
) -> Iterator[RowChange | TableChange]:
    """Row changes of relay items, each transaction named by its binlog file (as
    `iter_row_changes` names a file's changes)."""
    return expand_rows(relay_changes_by_event(items, table_changes))


def relay_changes_by_event(
    items: Iterable[RelayItem],
    table_changes: TableChangesOf | None = None,
    *,
    keep_query: bool = True,
) -> Iterator[EventRows | TableChange]:
    """As `relay_changes`, by ROWS event (`iter_changes_by_event`)."""
    iterator = iter(items)
    for item in iterator:
        if isinstance(item, TransactionStart):
            events = _transaction_events(iterator)
            yield from iter_changes_by_event(
                events, file=item.file, table_changes=table_changes, keep_query=keep_query
            )


def _transaction_events(iterator: Iterator[RelayItem]) -> Iterator[Event]:
    for item in iterator:
        if isinstance(item, TransactionEnd):
            return
        if isinstance(item, Event):
            yield item


def boundary_to_dict(item: SegmentOpened | TransactionEnd) -> dict[str, Any]:
    """The line `dump --events` prints for a segment's start or a transaction's commit."""
    if isinstance(item, SegmentOpened):
        header = item.header
        return {
            "type": "RELAY_SEGMENT",
            "segment": item.name,
            "number": header.number,
            "source": header.source,
            "checksums": header.checksums,
            "start": None if header.start is None else header.start.to_json(),
            "created_ms": header.created_ms,
        }
    commit = item.commit
    return {
        "type": "RELAY_COMMIT",
        "segment": item.segment,
        "offset": item.offset,
        "end": item.end,
        "position": commit.position.to_json(),
        "commit_ts": commit.commit_ts,
        "events": commit.events,
    }
