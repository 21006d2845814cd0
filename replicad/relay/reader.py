"""Reading the relay log from disk: every whole transaction after a position, across
segments. The last segment may end in a transaction still being written (or torn by a
crash, until the writer's recovery cuts it): that one is not served. Damage anywhere else is
a RelayCorruptError naming the segment and offset."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from replicad.binlog.position import Position
from replicad.errors import RelayCorruptError, RelayTornError
from replicad.relay.files import SegmentScan
from replicad.relay.manifest import Manifest, SegmentInfo, load_manifest
from replicad.relay.segment import CommitRecord


@dataclass(slots=True, frozen=True)
class RelayTransaction:
    events: list[bytes]
    commit: CommitRecord
    segment: str
    start: int
    end: int


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


class RelayReader:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        manifest = load_manifest(directory)
        if manifest is None:
            raise RelayCorruptError("no relay MANIFEST", directory=str(directory))
        self.manifest: Manifest = manifest

    def transactions(self, after: Position | None = None) -> Iterator[RelayTransaction]:
        """Whole transactions committed after `after` (all of them if None), in order."""
        segments = self.manifest.segments
        for i in range(first_segment(segments, after), len(segments)):
            info = segments[i]
            last_segment = i == len(segments) - 1
            scan = SegmentScan(self.directory / info.name)
            try:
                for events, commit, start, end in scan.transactions_iter():
                    if after is not None and binlog_key(commit.position) <= binlog_key(after):
                        continue
                    yield RelayTransaction(events, commit, info.name, start, end)
            except RelayTornError:
                if not last_segment:
                    raise
                return  # being written (or torn, until recovery): not served
