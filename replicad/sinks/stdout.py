"""JSON-lines sink: standard output or a file (the embedded default without Kafka).

A transaction's messages count as delivered once they are written and flushed (and, for a
file, fsynced), which is when `commit()` returns; only then may the position move past it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import BinaryIO

from replicad.binlog.changes import RowChange
from replicad.errors import ReplicadError
from replicad.sinks.envelope import change_to_dict, dumps


class SinkError(ReplicadError):
    """A sink could not deliver (disk full, closed pipe, ...)."""


class JsonLinesSink:
    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path = Path(path) if path is not None else None
        self._out: BinaryIO
        if self.path is None:
            self._out = sys.stdout.buffer
        else:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._out = open(self.path, "ab")
            except OSError as exc:
                raise SinkError(
                    f"cannot open the output file: {exc.strerror}", file=str(self.path)
                ) from None

    def publish(self, change: RowChange) -> None:
        try:
            self._out.write(dumps(change_to_dict(change)) + b"\n")
        except OSError as exc:
            raise SinkError(f"cannot write a change: {exc.strerror}", file=self._name) from None

    def commit(self) -> None:
        """Make everything published so far durable enough to move the position past it."""
        try:
            self._out.flush()
            if self.path is not None:
                os.fsync(self._out.fileno())
        except OSError as exc:
            raise SinkError(f"cannot flush changes: {exc.strerror}", file=self._name) from None

    def close(self) -> None:
        if self.path is not None:
            self._out.close()

    @property
    def _name(self) -> str:
        return str(self.path) if self.path else "<stdout>"
