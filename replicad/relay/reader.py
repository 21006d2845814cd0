"""The one relay segment reader: the transaction chunks of a run of segments, in order, after a
position. The daemon's catch-up reads (`RelayedStream`), `replicad dump` of a relay and the
`RelayReader` of tools and tests all iterate `read_segments`; they differ only in what they
make of the chunks (docs/relay-format.md has the byte layout).

The last segment may end in a transaction still being written (or torn by a crash, until the
writer's recovery cuts it): that one is not served, and `TornTail` says where it begins. Damage
anywhere else is a RelayCorruptError naming the segment and offset."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from replicad.binlog.position import Position
from replicad.errors import RelayCorruptError, RelayTornError
from replicad.relay.files import SegmentScan
from replicad.relay.manifest import Manifest, SegmentInfo, load_manifest
from replicad.relay.segment import CommitRecord, SegmentHeader, TxnChunk


def binlog_key(position: Position) -> tuple[str, int, int]:
    """Relay order: binlog coordinates (every position has them). The file's numeric
    extension compares as a number: after `.999999` the server goes on with `.1000000`."""
    base, dot, extension = position.file.rpartition(".")
    if dot and extension.isdigit():
        return base, int(extension), position.pos
    return position.file, -1, position.pos


def first_segment(segments: Sequence[SegmentInfo], after: Position | None) -> int:
    """The index of the segment that holds the transaction after `after`: the last one
    starting at or before it (0 for None)."""
    first = 0
    if after is not None:
        key = binlog_key(after)
        for i, info in enumerate(segments):
            if info.start is None or binlog_key(info.start) <= key:
                first = i
    return first


@dataclass(slots=True, frozen=True)
class SegmentOpened:
    """A segment begins: its header (format description, checksums, start position) and the
    offset where its transactions begin. Comes before the segment's chunks, also while the
    reader is still skipping up to `after`."""

    path: Path
    header: SegmentHeader
    header_end: int
    tail: bool  # the last segment read, whose end may be torn (with `torn_tail`)

    @property
    def name(self) -> str:
        return self.path.name


@dataclass(slots=True, frozen=True)
class TornTail:
    """The last segment ends inside a transaction (being written, or torn by a crash: the
    writer cuts it at its next open). Nothing of that transaction was served."""

    segment: str
    offset: int
    reason: str


SegmentItem = SegmentOpened | TxnChunk | TornTail


def read_segments(
    paths: Sequence[Path],
    *,
    after: Position | None = None,
    stop: Callable[[str], int | None] | None = None,
    torn_tail: bool = True,
) -> Iterator[SegmentItem]:
    """SegmentOpened for each segment, then the chunks of every transaction that commits after
    `after` (a unit boundary; None: all of them). `stop(name)` bounds a segment being written
    (asked before each read; None: to its end). With `torn_tail`, the last segment may end
    inside a transaction: that yields TornTail and ends; anywhere else it raises
    RelayTornError, as damage raises RelayCorruptError."""
    key = None if after is None else binlog_key(after)

    def reached(position: Position) -> bool:
        return key is None or binlog_key(position) >= key

    serving = key is None
    for index, path in enumerate(paths):
        scan = SegmentScan(path)
        try:
            header = scan.read_header()
            yield SegmentOpened(
                path, header, scan.header_end, torn_tail and index == len(paths) - 1
            )
            if not serving and header.start is not None:
                serving = reached(header.start)
            limit = None if stop is None else functools.partial(stop, path.name)
            for chunk in scan.chunks(stop=limit):
                if serving:
                    yield chunk
                elif chunk.commit is not None:
                    # Skipping until the commit that ends at `after` has gone by.
                    serving = reached(chunk.commit.position)
        except RelayTornError as exc:
            if not torn_tail or index != len(paths) - 1:
                raise
            offset = exc.context.get("offset")
            yield TornTail(path.name, offset if isinstance(offset, int) else 0, exc.reason)
            return


@dataclass(slots=True, frozen=True)
class RelayTransaction:
    events: list[bytes]
    commit: CommitRecord
    segment: str
    start: int
    end: int


class RelayReader:
    """Whole transactions of a relay directory (the segments its MANIFEST lists), each held in
    memory: for tools and tests. The daemon streams chunks instead."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        manifest = load_manifest(directory)
        if manifest is None:
            raise RelayCorruptError("no relay MANIFEST", directory=str(directory))
        self.manifest: Manifest = manifest

    def transactions(self, after: Position | None = None) -> Iterator[RelayTransaction]:
        """Whole transactions committed after `after` (all of them if None), in order."""
        segments = self.manifest.segments[first_segment(self.manifest.segments, after) :]
        paths = [self.directory / info.name for info in segments]
        events: list[bytes] = []
        segment = ""
        for item in read_segments(paths, after=after):
            if isinstance(item, SegmentOpened):
                segment = item.name
            elif isinstance(item, TxnChunk):
                events.extend(item.events)
                if item.commit is not None:
                    yield RelayTransaction(events, item.commit, segment, item.start, item.end)
                    events = []
