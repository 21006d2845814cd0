"""Reading relay segment files: header, transaction chunks, footer. Reads in 1 MiB slices,
so memory is bounded by the largest record (a transaction part), never by the segment."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from replicad.errors import RelayCorruptError, RelayError, RelayTornError
from replicad.relay.records import RecordReader
from replicad.relay.segment import (
    CommitRecord,
    Footer,
    SegmentHeader,
    TransactionGrammar,
    TxnChunk,
    decode_header,
)

READ_BYTES = 1 << 20


@dataclass(slots=True)
class SegmentScan:
    """Reads one segment. After iterating `chunks()`: `end` is the offset after the last
    complete transaction (or the header, or the footer), `last` its commit, and `footer`
    the footer if the segment is sealed. A torn or corrupt record raises (RelayTornError /
    RelayCorruptError) with the segment and offset; `end` still says where the good part
    ends."""

    path: Path
    header: SegmentHeader | None = None
    header_end: int = 0
    end: int = 0
    last: CommitRecord | None = None
    first: CommitRecord | None = None
    footer: Footer | None = None
    transactions: int = 0
    events: int = 0
    max_commit_ts: int = 0
    _started: bool = field(default=False)

    @property
    def name(self) -> str:
        return self.path.name

    def read_header(self) -> SegmentHeader:
        reader = RecordReader(0, segment=self.name)
        with _open(self.path) as f:
            while True:
                data = f.read(READ_BYTES)
                reader.feed(data)
                for record in reader.records():
                    self.header = decode_header(record, self.name)
                    self.header_end = self.end = record.end
                    return self.header
                if not data:
                    reader.finish()
                    raise RelayTornError("the segment holds no header", segment=self.name, offset=0)

    def chunks(
        self, start: int | None = None, stop: int | Callable[[], int | None] | None = None
    ) -> Iterator[TxnChunk]:
        """The transaction chunks from `start` (a transaction boundary; default: after the
        header) up to `stop` (default: the end of the file; a callable is asked before each
        read, for a segment being written). A transaction cut by `stop` or by the end of the
        file raises RelayTornError at its start."""
        if self.header is None:
            self.read_header()
        offset = self.header_end if start is None else start
        self.end = offset
        reader = RecordReader(offset, segment=self.name)
        grammar = TransactionGrammar(self.name)
        with _open(self.path) as f:
            f.seek(offset)
            at = offset  # file position of the next read (the reader may hold unread bytes)
            while True:
                limit = stop() if callable(stop) else stop
                want = READ_BYTES if limit is None else min(READ_BYTES, limit - at)
                data = f.read(want) if want > 0 else b""
                at += len(data)
                reader.feed(data)
                for record in reader.records():
                    chunk = grammar.feed(record)
                    if grammar.footer is not None:
                        self.footer = grammar.footer
                        self.end = record.end
                        continue
                    assert chunk is not None
                    if chunk.commit is not None:
                        self._committed(chunk.commit, chunk.end)
                    yield chunk
                if not data:
                    break
        if grammar.open_start is not None:
            raise RelayTornError(
                "the segment ends inside a transaction",
                segment=self.name,
                offset=grammar.open_start,
            )
        reader.finish()

    def _committed(self, commit: CommitRecord, end: int) -> None:
        self.end = end
        self.transactions += 1
        self.events += commit.events
        self.first = self.first or commit
        self.last = commit
        self.max_commit_ts = max(self.max_commit_ts, commit.commit_ts)

    def transactions_iter(
        self, start: int | None = None, stop: int | Callable[[], int | None] | None = None
    ) -> Iterator[tuple[list[bytes], CommitRecord, int, int]]:
        """Whole transactions (events, commit, start, end): for tools and tests, which hold
        a transaction in memory. The daemon streams chunks instead."""
        events: list[bytes] = []
        for chunk in self.chunks(start, stop):
            events.extend(chunk.events)
            if chunk.commit is not None:
                yield events, chunk.commit, chunk.start, chunk.end
                events = []


def _open(path: Path) -> BinaryIO:
    try:
        return open(path, "rb", buffering=0)  # the caller closes it
    except FileNotFoundError:
        raise _missing(path) from None
    except OSError as exc:
        raise RelayError(f"cannot read a relay segment: {exc.strerror}", file=str(path)) from None


def file_size(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        raise _missing(path) from None


def _missing(path: Path) -> RelayCorruptError:
    return RelayCorruptError("a relay segment is missing", segment=path.name, file=str(path))
