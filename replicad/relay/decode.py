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

from replicad.binlog.changes import RowChange, iter_row_changes
from replicad.binlog.events import Event
from replicad.binlog.parser import BINLOG_MAGIC, BinlogParser
from replicad.errors import RelayCorruptError, RelayTornError, ReplicadError
from replicad.relay.files import SegmentScan
from replicad.relay.inspect import read_manifest
from replicad.relay.manifest import MANIFEST, segment_number
from replicad.relay.records import HEADER_SIZE, FragmentType
from replicad.relay.segment import MAGIC, CommitRecord, RecordKind, SegmentHeader

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
class SegmentStart:
    segment: str
    header: SegmentHeader
    header_end: int


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


@dataclass(slots=True, frozen=True)
class TornTail:
    """The last segment of a directory ends inside a transaction: being written, or torn by a
    crash (the writer cuts it at its next open). Like the relay reader, it is not served."""

    segment: str
    offset: int
    reason: str


RelayItem = Event | SegmentStart | TransactionStart | TransactionEnd | TornTail


def iter_segment(path: Path, *, verify_checksum: bool = True) -> Iterator[RelayItem]:
    """The decoded events of one segment, between its boundaries: SegmentStart, the header's
    FORMAT_DESCRIPTION event, then per transaction TransactionStart, its events (those inside
    a TRANSACTION_PAYLOAD after it), TransactionEnd. Damage raises RelayCorruptError (segment,
    offset); a decoding error names the segment and the transaction's offset too."""
    name = path.name
    scan = SegmentScan(path)
    header = scan.read_header()
    yield SegmentStart(name, header, scan.header_end)
    parser = BinlogParser(
        verify_checksum=verify_checksum, checksums=header.checksums, source=str(path)
    )
    yield from _decode(parser, header.format_description, name, 0)
    current: int | None = None  # offset of the transaction being decoded
    for chunk in scan.chunks():
        if current is None:
            current = chunk.start
            commit = chunk.commit or _commit_ahead(path, chunk.start)
            yield TransactionStart(name, chunk.start, commit.position.file)
        for raw in chunk.events:
            yield from _decode(parser, raw, name, chunk.start)
        if chunk.commit is not None:
            yield TransactionEnd(name, chunk.start, chunk.end, chunk.commit)
            current = None


def iter_relay(path: Path, *, verify_checksum: bool = True) -> Iterator[RelayItem]:
    """A relay segment, or every segment of a relay directory in order. A directory's last
    segment may end inside a transaction (being written): that yields TornTail, not an
    error."""
    if not path.is_dir():
        yield from iter_segment(path, verify_checksum=verify_checksum)
        return
    segments = relay_segments(path)
    for index, segment in enumerate(segments):
        try:
            yield from iter_segment(segment, verify_checksum=verify_checksum)
        except RelayTornError as exc:
            if index != len(segments) - 1:
                raise
            offset = exc.context.get("offset")
            yield TornTail(segment.name, offset if isinstance(offset, int) else 0, exc.reason)


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
def relay_row_changes(items: Iterable[RelayItem]) -> Iterator[RowChange]:
    """Row changes of relay items, each transaction named by its binlog file (as
    `iter_row_changes` names a file's changes)."""
    iterator = iter(items)
    for item in iterator:
        if isinstance(item, TransactionStart):
            yield from iter_row_changes(_transaction_events(iterator), file=item.file)


def _transaction_events(iterator: Iterator[RelayItem]) -> Iterator[Event]:
    for item in iterator:
        if isinstance(item, TransactionEnd):
            return
        if isinstance(item, Event):
            yield item


def boundary_to_dict(item: SegmentStart | TransactionEnd) -> dict[str, Any]:
    """The line `dump --events` prints for a segment's start or a transaction's commit."""
    if isinstance(item, SegmentStart):
        header = item.header
        return {
            "type": "RELAY_SEGMENT",
            "segment": item.segment,
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
