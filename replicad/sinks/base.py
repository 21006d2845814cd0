"""What the pipeline asks of a sink, and the bookkeeping of acknowledgements.

The pipeline publishes rows as it decodes them and, at the end of every transaction (and every
`checkpoint.rows` rows inside a huge one), calls `mark(seq, position)`. A sink reports through
`acked()` the highest mark whose messages, and those of every earlier mark, are delivered;
the pipeline stores the position of the lowest such mark over all its sinks (ARCHITECTURE §3).
"""

from __future__ import annotations

from collections import deque
from typing import Any, Protocol

from replicad.binlog.changes import RowChange
from replicad.errors import ReplicadError
from replicad.source.position import Position


class SinkError(ReplicadError):
    """A sink could not deliver (disk full, closed pipe, message rejected, ...). The position
    stays at the last acknowledged transaction."""


class SinkUnavailableError(SinkError):
    """A transient failure (e.g. a Kafka transaction that had to be aborted): the pipeline
    stops and a restart resumes from the stored position."""


class ProducerFencedError(SinkError):
    """Another replicad instance took over this pipeline's Kafka transactional id."""


class Sink(Protocol):
    def publish(self, change: RowChange) -> None:
        """Hand one row change over; may only queue it."""

    def mark(self, seq: int, position: Position, transaction_end: bool) -> None:
        """Everything published so far belongs to marks <= seq; `position` is where a restart
        would continue after them (a row index inside a transaction when not at its end)."""

    def acked(self) -> int:
        """The highest mark fully delivered along with all earlier ones (0: none). Raises the
        sink's delivery failure, if any."""

    @property
    def backlogged(self) -> bool:
        """True when `wait_for_room()` must run before the next publish."""

    async def wait_for_room(self) -> None: ...

    async def maintain(self) -> None:
        """Periodic work while the source is quiet (serve callbacks, close a due batch)."""

    async def drain(self, timeout_s: float) -> None:
        """At shutdown: deliver everything marked, for at most `timeout_s`."""

    def close(self) -> None: ...


class DeliveryTracker:
    """Counts undelivered messages per mark. Each message is registered with the open unit
    (`sent()` returns its callback); `close(seq)` ends the unit. Units complete in any order
    (different partitions ack independently) but are reported in order."""

    __slots__ = ("_acked", "_open", "_units", "failure")

    def __init__(self) -> None:
        self._units: deque[_Unit] = deque()
        self._open = _Unit(self)
        self._acked = 0
        self.failure: SinkError | None = None

    @property
    def current(self) -> _Unit:
        """The unit a message published now belongs to: pass its `delivered` as the delivery
        callback, then count the message with `unit.outstanding += 1` once it is queued."""
        return self._open

    def close(self, seq: int) -> None:
        self._open.seq = seq
        self._units.append(self._open)
        self._open = _Unit(self)

    def acked(self) -> int:
        if self.failure is not None:
            raise self.failure
        units = self._units
        while units and units[0].outstanding == 0:
            self._acked = units.popleft().seq
        return self._acked

    @property
    def outstanding(self) -> int:
        return sum(u.outstanding for u in self._units) + self._open.outstanding

    @property
    def open_messages(self) -> int:
        """Messages published since the last mark."""
        return self._open.outstanding


class _Unit:
    __slots__ = ("outstanding", "seq", "tracker")

    def __init__(self, tracker: DeliveryTracker) -> None:
        self.tracker = tracker
        self.outstanding = 0
        self.seq = 0

    def delivered(self, err: Any, msg: Any) -> None:
        """librdkafka's delivery report (called from `poll()`/`flush()` on our thread)."""
        self.outstanding -= 1
        if err is not None and self.tracker.failure is None:
            self.tracker.failure = SinkError(
                f"Kafka rejected a message: {err.str()}",
                topic=msg.topic(),
                partition=msg.partition(),
                key=_short(msg.key()),
                source=_source_of(msg),
            )


def _short(data: bytes | None) -> str | None:
    if data is None:
        return None
    text = data.decode("utf-8", "replace")
    return text if len(text) <= 200 else text[:197] + "..."


def _source_of(msg: Any) -> str | None:
    """file:pos:row (and GTID) of a message, from its replicad.* headers."""
    headers = {name: bytes(value or b"").decode() for name, value in msg.headers() or ()}
    if "replicad.file" not in headers:
        return None
    text = ":".join(headers.get(f"replicad.{n}", "?") for n in ("file", "pos", "row"))
    gtid = headers.get("replicad.gtid")
    return text + (f" gtid {gtid}" if gtid else "")
