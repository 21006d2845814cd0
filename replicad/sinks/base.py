"""What the pipeline asks of a sink, and the bookkeeping of acknowledgements.

The pipeline publishes rows as it decodes them and, at the end of every transaction (and every
`checkpoint.rows` rows inside a huge one), calls `mark(seq, position)`. A sink reports through
`acked()` the highest mark whose messages, and those of every earlier mark, are delivered;
the pipeline stores the position of the lowest such mark over all its sinks
(docs/architecture.md, "Positions and delivery").
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from replicad.binlog.changes import EventRows, ReadRows, RowChange, TableChange
from replicad.binlog.position import Position
from replicad.checkpoint_record import Checkpoint
from replicad.errors import ReplicadError
from replicad.exit_codes import EXIT_CONFIG, EXIT_TEMPFAIL


class SinkError(ReplicadError):
    """A sink could not deliver (disk full, closed pipe, message rejected, ...). The position
    stays at the last acknowledged transaction."""

    exit_code = EXIT_CONFIG  # a message Kafka refuses for good: too large, not authorised


class TopicDeletedError(SinkError):
    """A topic the sink had written to is gone from the cluster (deleted under the running
    pipeline). Not transient: re-creating it would hide that its consumers lost what it held,
    so an operator decides (restore the topic, or reset the position and re-snapshot)."""


class SinkUnavailableError(SinkError):
    """A transient failure (e.g. a Kafka transaction that had to be aborted): the pipeline
    stops and a restart resumes from the stored position."""

    exit_code = EXIT_TEMPFAIL


class ProducerFencedError(SinkUnavailableError):
    """Another replicad instance took over this pipeline's Kafka transactional id. Transient
    for this process: under ZooKeeper it is how a deposed leader learns of its successor (it
    returns to standby with a fresh producer); without ZooKeeper a restart resumes from the
    stored position."""


class Sink(Protocol):
    def publish(self, change: RowChange) -> None:
        """Hand one row change over; may only queue it."""

    async def publish_table(self, change: TableChange) -> None:
        """Hand one table-level change over (TRUNCATE, a schema change), in order with the
        rows; counted towards the open mark like a row."""

    def mark(self, seq: int, checkpoint: Checkpoint, transaction_end: bool) -> None:
        """Everything published so far belongs to marks <= seq; `checkpoint` is where a
        restart would continue after them (a row index inside a transaction when not at its
        end)."""

    def acked(self) -> int:
        """The highest mark fully delivered along with all earlier ones (0: none). Raises the
        sink's delivery failure, if any."""

    @property
    def backlogged(self) -> bool:
        """True when `wait_for_room()` must run before the next publish."""

    async def wait_for_room(self) -> None: ...

    async def maintain(self) -> None:
        """Periodic work while the source is quiet (serve callbacks, close a due batch)."""

    async def drain(self, timeout_s: float, failed: bool = False) -> None:
        """At shutdown: deliver everything marked, for at most `timeout_s`. After a failure
        (`failed`): only settle what was already handed over, start nothing new."""

    def abandon(self) -> None:
        """Leadership lost: send nothing more, drop what is queued, no final acknowledgement."""

    def close(self) -> None: ...


@runtime_checkable
class EventSink(Sink, Protocol):
    """A sink that also takes the rows of a whole ROWS event at once."""

    def publish_event(self, rows: EventRows) -> int | None:
        """Publish every row change of the event (the same messages as `publish` of each);
        the number of row changes, or None when it cannot and nothing was published: the
        caller then publishes `rows.changes()` one by one."""

    def publish_reads(self, reads: ReadRows) -> int | None:
        """Publish snapshot rows (the same messages as `publish` of each of
        `reads.changes()`); the number of rows, or None when it cannot and nothing was
        published: the caller then publishes `reads.changes()` one by one."""


class DeliveryTracker:
    """Counts undelivered messages per mark. Each message is registered with the open unit
    (`sent()` returns its callback); `close(seq)` ends the unit. Units complete in any order
    (different partitions ack independently) but are reported in order."""

    __slots__ = ("_acked", "_open", "_units", "failure", "failure_of")

    def __init__(
        self, failure_of: Callable[[Any, Any, DeliveryUnit], SinkError] | None = None
    ) -> None:
        """`failure_of(err, msg, unit)`: the error to raise for a failed delivery report."""
        self.failure_of = failure_of or _delivery_failure
        self._units: deque[DeliveryUnit] = deque()
        self._open = DeliveryUnit(self)
        self._acked = 0
        self.failure: SinkError | None = None

    @property
    def current(self) -> DeliveryUnit:
        """The unit a message published now belongs to: pass its `delivered` as the delivery
        callback, then count the message with `unit.outstanding += 1` once it is queued."""
        return self._open

    def close(self, seq: int, position: Position | None = None) -> None:
        """End the open unit at mark `seq`; the next unit's messages follow `position`."""
        self._open.seq = seq
        self._units.append(self._open)
        self._open = DeliveryUnit(self)
        self._open.after = position

    def acked(self) -> int:
        if self.failure is not None:
            raise self.failure
        units = self._units
        while units and units[0].outstanding == 0:
            self._acked = units.popleft().seq
        return self._acked

    def settle(self) -> None:
        """Every message counted so far is delivered, reported or not (a committed Kafka
        transaction: its successful deliveries are not reported one by one)."""
        if self.failure is not None:
            raise self.failure
        if self._units:
            self._acked = self._units[-1].seq
        self._units.clear()
        self._open.outstanding = 0

    @property
    def outstanding(self) -> int:
        return sum(u.outstanding for u in self._units) + self._open.outstanding


class DeliveryUnit:
    __slots__ = ("after", "outstanding", "seq", "tracker")

    def __init__(self, tracker: DeliveryTracker) -> None:
        self.tracker = tracker
        self.outstanding = 0
        self.seq = 0
        # The position the unit's messages follow (the previous mark): where a restart resumes.
        # Delivery reports carry no headers, so this is how a failure names its binlog place.
        self.after: Position | None = None

    def delivered(self, err: Any, msg: Any) -> None:
        """librdkafka's delivery report (called from `poll()`/`flush()` on our thread)."""
        self.outstanding -= 1
        if err is not None and self.tracker.failure is None:
            self.tracker.failure = self.tracker.failure_of(err, msg, self)


def _delivery_failure(err: Any, msg: Any, unit: DeliveryUnit) -> SinkError:
    return SinkError(
        f"a message was not delivered: {err}",
        topic=msg.topic(),
        after=None if unit.after is None else str(unit.after),
    )
