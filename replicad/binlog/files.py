"""Read binlog files from disk, one event at a time (memory bounded by the largest event)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

from replicad.binlog.events import Event, EventType
from replicad.binlog.parser import BINLOG_MAGIC, HEADER_LENGTH, BinlogParser, parse_header
from replicad.errors import MalformedEventError, TruncatedError

_READ_BUFFER = 1 << 20
# The largest event a server writes: max_allowed_packet, whose maximum is 1 GiB (MySQL and
# MariaDB). A length above it, or above the whole file's size, is not a torn tail but bytes
# that are not an event header (a file with the magic and then something else).
MAX_EVENT_LENGTH = 1 << 30


def implausible_length(size: int, file_size: int | None) -> bool:
    """Whether an event header's length cannot be one a server wrote into a file of
    `file_size` bytes (None: unknown, e.g. a pipe)."""
    return size > MAX_EVENT_LENGTH or (file_size is not None and size > file_size)


@dataclass(slots=True)
class RawEvent:
    pos: int
    data: bytes


def iter_raw_events(
    stream: BinaryIO, *, source: str, start: int = 4, stop: int | None = None
) -> Iterator[RawEvent]:
    """Frame the events of an open binlog file positioned anywhere: reads the magic, then
    yields complete events from `start` (an event boundary) until EOF or `stop`."""
    stream.seek(0)
    magic = stream.read(4)
    if magic != BINLOG_MAGIC:
        raise MalformedEventError(
            f"not a binlog file (magic {magic.hex() or 'missing'})", source=source, offset=0
        )
    pos = max(start, 4)
    file_size = _size_of(stream)
    stream.seek(pos)
    while stop is None or pos < stop:
        head = stream.read(HEADER_LENGTH)
        if not head:
            return
        if len(head) < HEADER_LENGTH:
            raise TruncatedError(
                f"file ends inside an event header ({len(head)} of {HEADER_LENGTH} bytes)",
                source=source,
                offset=pos,
            )
        size = int.from_bytes(head[9:13], "little")
        if size < HEADER_LENGTH:
            raise MalformedEventError(
                f"event size {size} is smaller than the header", source=source, offset=pos
            )
        if implausible_length(size, file_size):
            file_size = _size_of(stream)  # a file still being written may have grown since
        if implausible_length(size, file_size):
            raise MalformedEventError(
                f"implausible event length {size} at offset {pos} (not a binlog?)",
                source=source,
                offset=pos,
            )
        rest = stream.read(size - HEADER_LENGTH)
        if len(rest) < size - HEADER_LENGTH:
            raise TruncatedError(
                f"file ends inside an event: {HEADER_LENGTH + len(rest)} of {size} bytes",
                source=source,
                offset=pos,
                event_type=parse_header(head, pos).type_name,
            )
        yield RawEvent(pos, head + rest)
        pos += size


def _size_of(stream: BinaryIO) -> int | None:
    try:
        return os.fstat(stream.fileno()).st_size
    except (OSError, AttributeError, ValueError):  # not a file (io.BytesIO has no fileno)
        return None


def iter_file_events(
    path: str | os.PathLike[str],
    *,
    start: int | None = None,
    stop: int | None = None,
    verify_checksum: bool = True,
    parser: BinlogParser | None = None,
    expand_payloads: bool = True,
) -> Iterator[Event]:
    """Decode the events of one binlog file.

    With `start`, the FORMAT_DESCRIPTION at offset 4 is still read first (everything after it
    depends on it), then decoding continues at `start`, which must be an event boundary.
    Events inside a TRANSACTION_PAYLOAD follow the payload event when `expand_payloads`.
    """
    name = os.fspath(path)
    parser = parser or BinlogParser(verify_checksum=verify_checksum, source=name)
    parser.source = name
    with open(name, "rb", buffering=_READ_BUFFER) as stream:
        if start is not None and start > 4:
            for raw in iter_raw_events(stream, source=name, start=4):
                event = parser.parse(raw.data, raw.pos)
                if event.header.type_code == EventType.FORMAT_DESCRIPTION:
                    break
                if raw.pos + len(raw.data) >= start:
                    break
        for raw in iter_raw_events(stream, source=name, start=start or 4, stop=stop):
            if expand_payloads:
                yield from parser.decode(raw.data, raw.pos)
            else:
                yield parser.parse(raw.data, raw.pos)
