"""The checkpoint rule (docs/architecture.md, "Positions and delivery"): store a position
only when the messages up to it, and all earlier ones, are acknowledged by every sink.

The pipeline places a numbered mark after each transaction (and every `checkpoint.rows` rows
inside a huge one); each sink reports the highest mark it has fully delivered; the position of
the lowest of those is stored, at most every `checkpoint.interval_s` and at shutdown.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence

import structlog

from replicad.binlog.position import Position
from replicad.coordination.store import PipelineStore
from replicad.errors import CoordinationUnavailableError
from replicad.sinks.base import Sink
from replicad.source.schema import SchemaHistory

log = structlog.get_logger("replicad.checkpoint")

# Marks waiting for acknowledgement; beyond this the pipeline waits (transactions that publish
# nothing still leave a mark, so a Kafka outage must not let them pile up).
MAX_PENDING_MARKS = 100_000


class Checkpointer:
    def __init__(
        self,
        sinks: Sequence[Sink],
        store: PipelineStore,
        history: SchemaHistory,
        interval_s: float,
        stored: Position | None,
        on_acked: Callable[[int], None] | None = None,
    ) -> None:
        self.sinks = sinks
        # Told the highest mark every sink acknowledged whenever it is looked up (metrics).
        self.on_acked = on_acked
        self.store = store
        self.history = history
        self.interval_s = interval_s
        self.stored = stored
        self._marks: deque[tuple[int, Position]] = deque()
        self._seq = 0
        self._last_save = time.monotonic()

    def mark(self, position: Position, transaction_end: bool = True) -> int:
        """Place the next mark; returns its number."""
        self._seq += 1
        self._marks.append((self._seq, position))
        for sink in self.sinks:
            sink.mark(self._seq, position, transaction_end)
        return self._seq

    @property
    def backlogged(self) -> bool:
        return len(self._marks) > MAX_PENDING_MARKS

    @property
    def pending_marks(self) -> int:
        return len(self._marks)

    def acknowledged(self) -> Position | None:
        """The position after the last mark every sink acknowledged (None: none new)."""
        acked = self.observe()
        position = None
        marks = self._marks
        while marks and marks[0][0] <= acked:
            position = marks.popleft()[1]
        return position

    def observe(self) -> int:
        """The highest mark every sink acknowledged (told to `on_acked` too)."""
        acked = min(sink.acked() for sink in self.sinks)
        if self.on_acked is not None:
            self.on_acked(acked)
        return acked

    def due(self) -> bool:
        return time.monotonic() - self._last_save >= self.interval_s

    def checkpoint(self) -> Position | None:
        """Store the acknowledged position if it moved; returns it (None: unchanged)."""
        self._last_save = time.monotonic()
        position = self.acknowledged()
        if position is None or position == self.stored:
            return None
        # The history first: it may be ahead of the stored position, never behind it. Only
        # entries at or before the position stored so far may be folded into its base.
        try:
            if self.history.dirty:
                self.store.save_history(self.history, self.stored)
                self.history.dirty = False
            self.store.save_position(position)
        except CoordinationUnavailableError as exc:
            # ZooKeeper is away or the lease is in doubt: the stored position stays where it
            # is (publishing pauses on the lease), and the next checkpoint tries again.
            self._marks.appendleft((0, position))
            log.warning("checkpoint_deferred", position=str(position), error=str(exc))
            return None
        self.stored = position
        return position
