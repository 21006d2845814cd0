"""The checkpoint rule (docs/architecture.md, "Positions and delivery"): store a checkpoint
only when the messages up to it, and all earlier ones, are acknowledged by every sink.

The pipeline places a numbered mark after each transaction (and every `checkpoint.rows` rows
inside a huge one), each with its checkpoint record (`checkpoint_record.Checkpoint`: the binlog
position and the incremental snapshots' progress); each sink reports the highest mark it has
fully delivered; the checkpoint of the lowest of those is stored, at most every
`checkpoint.interval_s` and at shutdown.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence

import structlog

from replicad.binlog.position import Position
from replicad.checkpoint_record import Checkpoint
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
        stored: Checkpoint | None,
        on_acked: Callable[[int], None] | None = None,
    ) -> None:
        self.sinks = sinks
        # Told the highest mark every sink acknowledged whenever it is looked up (metrics).
        self.on_acked = on_acked
        self.store = store
        self.history = history
        self.interval_s = interval_s
        self.stored = stored
        self._marks: deque[tuple[int, Checkpoint]] = deque()
        self._seq = 0
        self._last_save = time.monotonic()

    def mark(self, checkpoint: Checkpoint, transaction_end: bool = True) -> int:
        """Place the next mark; returns its number."""
        self._seq += 1
        self._marks.append((self._seq, checkpoint))
        for sink in self.sinks:
            sink.mark(self._seq, checkpoint, transaction_end)
        return self._seq

    @property
    def backlogged(self) -> bool:
        return len(self._marks) > MAX_PENDING_MARKS

    @property
    def pending_marks(self) -> int:
        return len(self._marks)

    def acknowledged(self) -> Checkpoint | None:
        """The checkpoint of the last mark every sink acknowledged (None: none new)."""
        acked = self.observe()
        checkpoint = None
        marks = self._marks
        while marks and marks[0][0] <= acked:
            checkpoint = marks.popleft()[1]
        return checkpoint

    def observe(self) -> int:
        """The highest mark every sink acknowledged (told to `on_acked` too)."""
        acked = min(sink.acked() for sink in self.sinks)
        if self.on_acked is not None:
            self.on_acked(acked)
        return acked

    def due(self) -> bool:
        return time.monotonic() - self._last_save >= self.interval_s

    def checkpoint(self) -> Checkpoint | None:
        """Store the acknowledged checkpoint if it moved; returns it (None: unchanged)."""
        self._last_save = time.monotonic()
        checkpoint = self.acknowledged()
        if checkpoint is None or checkpoint == self.stored:
            return None
        # The history first: it may be ahead of the stored position, never behind it. Only
        # entries at or before the position stored so far may be folded into its base.
        try:
            if self.history.dirty:
                self.store.save_history(self.history, self.stored_position)
                self.history.dirty = False
            self.store.save_checkpoint(checkpoint)
        except CoordinationUnavailableError as exc:
            # ZooKeeper is away or the lease is in doubt: the stored position stays where it
            # is (publishing pauses on the lease), and the next checkpoint tries again.
            self._marks.appendleft((0, checkpoint))
            log.warning("checkpoint_deferred", position=str(checkpoint), error=str(exc))
            return None
        self.stored = checkpoint
        return checkpoint

    @property
    def stored_position(self) -> Position | None:
        return None if self.stored is None else self.stored.position
