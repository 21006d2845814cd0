"""JSON-lines sink: standard output or a file (the embedded default without Kafka). A line is
the value Kafka would get for the same message (`EnvelopeLines`); tombstones and the schema
topic's table records are Kafka's alone.

Lines are written as rows are decoded; a mark counts as delivered once everything before it
is flushed (and, for a file, fsynced), which `acked()` does — at each checkpoint, so a file
is fsynced at most once per `checkpoint.interval_s`.
"""

from __future__ import annotations

import dataclasses
import os
import stat
import sys
import time
from pathlib import Path
from typing import BinaryIO

import structlog

from replicad.binlog.changes import EventRows, ReadRows, RowChange, TableChange
from replicad.checkpoint_record import Checkpoint
from replicad.errors import write_error
from replicad.sinks.base import SinkError
from replicad.sinks.envelope import EnvelopeLines
from replicad.sinks.event_envelope import EventEncoder
from replicad.sinks.read_envelope import ReadEncoder
from replicad.sinks.routing import ChangeFilter
from replicad.sinks.value_modes import ValueMode

__all__ = ["JsonLinesSink", "SinkError"]

log = structlog.get_logger("replicad.sinks.stdout")


class JsonLinesSink:
    backlogged = False

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        change_filter: ChangeFilter | None = None,
        name: str = "replicad",
        values: ValueMode | None = None,
    ) -> None:
        self.path = Path(path) if path is not None else None
        self.filter = change_filter
        self.name = name  # the envelope's source.name (the pipeline)
        self.values = values or ValueMode()
        self.lines = EnvelopeLines(name, self.values.connect)
        self._events = EventEncoder(self.lines.writer)
        self._reads = ReadEncoder(self.lines.writer)
        self._marked = 0
        self._regular = False  # fsync only a regular file (not /dev/null, a FIFO, a tty)
        self._out: BinaryIO
        if self.path is None:
            self._out = sys.stdout.buffer
        else:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._out = open(self.path, "ab")
                self._regular = stat.S_ISREG(os.fstat(self._out.fileno()).st_mode)
                if self._regular:
                    _drop_torn_line(self._out, self.path)
            except OSError as exc:
                raise SinkError(
                    f"cannot open the output file: {exc.strerror}", file=str(self.path)
                ) from None

    def publish(self, change: RowChange) -> None:
        change = self.values.convert(change)
        if self.filter is not None and self.filter.touches_columns:
            before, after = self.filter.rows(change)
            change = dataclasses.replace(change, before=before, after=after)
        self._write(self.lines.row(change))

    def publish_event(self, rows: EventRows) -> int | None:
        """Every row change of one ROWS event through the compiled path (`event_envelope`):
        the lines `publish` writes for each; None (nothing written) where it cannot."""
        if self._rewrites:
            return None
        encoded = self._events.encode(rows, int(time.time() * 1000), lines=True)
        if encoded is None:
            return None
        lines, _, count = encoded
        self._write(lines)
        return count

    def publish_reads(self, reads: ReadRows) -> int | None:
        """Snapshot rows through the compiled read path (`read_envelope`): the lines
        `publish` writes for each of `reads.changes()`; None (nothing written) where it
        cannot."""
        if self._rewrites:
            return None
        encoded = self._reads.encode(reads, int(time.time() * 1000), lines=True)
        if encoded is None:
            return None
        lines, _, count = encoded
        self._write(lines)
        return count

    @property
    def _rewrites(self) -> bool:
        """Whether the value mode or the filters rewrite changes: then no compiled path
        writes them (it writes the changes as they are)."""
        return self.values.options is not None or (
            self.filter is not None and self.filter.rewrites_changes
        )

    async def publish_table(self, change: TableChange) -> None:
        self._write(self.lines.table(change))

    def _write(self, data: bytes) -> None:
        try:
            self._out.write(data)
        except OSError as exc:
            raise write_error(SinkError, "cannot write a change", exc, file=self._name) from None

    def mark(self, seq: int, checkpoint: Checkpoint, transaction_end: bool) -> None:
        self._marked = seq

    def acked(self) -> int:
        """Make everything written so far durable enough to move the position past it."""
        try:
            self._out.flush()
            if self._regular:
                os.fsync(self._out.fileno())
        except OSError as exc:
            raise write_error(SinkError, "cannot flush changes", exc, file=self._name) from None
        return self._marked

    async def wait_for_room(self) -> None:
        return None

    async def maintain(self) -> None:
        return None

    async def drain(self, timeout_s: float, failed: bool = False) -> None:
        self.acked()

    def abandon(self) -> None:
        """Leadership lost: what the buffer still holds is not written (the new leader
        writes it again from the stored position)."""
        if self.path is not None:
            try:
                os.close(self._out.fileno())  # the buffered writer is discarded unflushed
            except OSError:
                pass

    def close(self) -> None:
        if self.path is None:
            return
        try:
            self._out.close()
        except OSError as exc:  # what the buffer held was never acknowledged: sent again
            log.warning("sink_close_failed", file=self._name, error=exc.strerror)

    @property
    def _name(self) -> str:
        return str(self.path) if self.path else "<stdout>"


def _drop_torn_line(out: BinaryIO, path: Path) -> None:
    """Cut a last line without its newline: a write that failed midway (a full disk, a
    crash) left it, and it was never acknowledged, so it comes again whole; appending after
    it would glue two messages into one line."""
    size = end = out.seek(0, os.SEEK_END)
    with open(path, "rb") as reader:
        while end > 0:
            start = max(0, end - 65536)
            reader.seek(start)
            newline = reader.read(end - start).rfind(b"\n")
            if newline >= 0:
                end = start + newline + 1
                break
            end = start
    if end < size:
        out.truncate(end)
        log.warning("output_torn_line_dropped", file=str(path), bytes=size - end)
