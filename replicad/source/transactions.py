"""Events -> transactions, sans-IO.

`UnitAssembler.feed(raw, events)` groups what the primary sends into `TransactionUnit`s: one
committed transaction with the primary's bytes, the decoded events, its start and end
positions, GTID and commit time. It is the one assembler of the path: the source yields its
units, the relay stores and replays them, the pipeline publishes them. A transaction larger
than `part_bytes` comes out as several parts of one unit (only the last has `end`), so memory
stays bounded however large a transaction is.

`TransactionAssembler.feed(event)` returns what the event means for the transaction stream:
`Begin`, `Rows`, `Commit` (with the position *after* the commit), or nothing. A transaction
is never held in memory: its ROWS events flow out as they arrive, and the consumer counts the
rows since `Begin` to know each row's index (what a resume inside a huge transaction skips).

Boundaries follow what the server writes:
- MySQL: GTID/ANONYMOUS_GTID/GTID_TAGGED, then QUERY "BEGIN" ... XID (or QUERY "COMMIT"), or a
  single DDL QUERY; XA: "XA START" ... "XA END" + XA_PREPARE, later a standalone "XA COMMIT".
- MariaDB: GTID (no BEGIN) ... XID / QUERY "COMMIT"; a GTID with the STANDALONE flag is
  followed by exactly one QUERY (DDL) that ends the transaction.
The position after a commit is the commit event's end offset on the primary (`log_pos`);
events inside a TRANSACTION_PAYLOAD have log_pos 0 and take the payload event's end instead.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from replicad.binlog.events import (
    Event,
    GtidEvent,
    MariaGtidEvent,
    QueryEvent,
    RotateEvent,
    TransactionPayloadEvent,
    XaPrepareEvent,
    XidEvent,
)
from replicad.binlog.gtid import Gtid, MariaGtid
from replicad.binlog.position import Position
from replicad.binlog.rows import RowsEvent

AnyGtid = Gtid | MariaGtid | None


@dataclass(slots=True)
class Begin:
    gtid: AnyGtid
    position: Position  # where this transaction starts (the previous commit's position)
    timestamp: int


@dataclass(slots=True)
class Rows:
    event: RowsEvent


@dataclass(slots=True)
class Commit:
    gtid: AnyGtid
    position: Position  # after this transaction
    xid: int | None = None
    statement: QueryEvent | None = None  # the DDL/statement of a statement-only transaction
    xa_prepare: bool = False


Item = Begin | Rows | Commit

_BEGIN = frozenset({"BEGIN", "XA START"})
_END = frozenset({"COMMIT", "ROLLBACK"})


def _query_word(query: str) -> str:
    head = query.lstrip()[:16].upper()
    if head.startswith("XA START"):
        return "XA START"
    if head.startswith("XA END"):
        return "XA END"
    return head.split(" ", 1)[0].rstrip(";")


def _opens_transaction(query: str) -> bool:
    """MySQL 8.0.21+ logs CREATE TABLE ... SELECT as `CREATE TABLE ... START TRANSACTION`
    followed by the rows and an XID: the statement opens the transaction, it does not end it."""
    return query.rstrip().rstrip(";").upper().endswith("START TRANSACTION")


class TransactionAssembler:
    def __init__(self, position: Position) -> None:
        self.position = position  # after the last complete transaction
        self.file = position.file
        self._in_transaction = False
        # A group opened by BEGIN / XA START / a MariaDB non-standalone GTID / a bare ROWS
        # event: statements inside it are not boundaries. Otherwise (after a MySQL GTID or a
        # MariaDB standalone GTID) the next QUERY is the whole transaction.
        self._group = False
        self._gtid: AnyGtid = None
        self._payload_end: int | None = None

    @property
    def in_transaction(self) -> bool:
        return self._in_transaction

    def feed(self, event: Event) -> list[Item]:
        if isinstance(event, RowsEvent):
            items: list[Item] = []
            if not self._in_transaction:
                items.append(self._begin(None, event, group=True))
            items.append(Rows(event))
            return items
        if isinstance(event, GtidEvent):
            gtid = None if event.anonymous else Gtid(uuid.UUID(event.uuid), event.tag, event.gno)
            return [self._begin(gtid, event, group=False)]
        if isinstance(event, MariaGtidEvent):
            maria = MariaGtid(event.domain_id, event.header.server_id, event.seq_no)
            return [self._begin(maria, event, group=not event.standalone)]
        if isinstance(event, XidEvent):
            return self._commit(event, xid=event.xid)
        if isinstance(event, XaPrepareEvent):
            return self._commit(event, xa_prepare=True)
        if isinstance(event, QueryEvent):
            return self._query(event)
        if isinstance(event, TransactionPayloadEvent):
            self._payload_end = self._end_offset(event)
            return []
        if isinstance(event, RotateEvent):
            self.file = event.next_file or self.file
            if not self._in_transaction and event.next_file:
                # After a rotation the next transaction starts in the new file.
                self.position = Position(
                    event.next_file,
                    max(event.position, 4),
                    self.position.mysql_gtids,
                    self.position.mariadb_gtids,
                )
            return []
        return []

    def _query(self, event: QueryEvent) -> list[Item]:
        word = _query_word(event.query)
        if word in _BEGIN or _opens_transaction(event.query):
            items: list[Item] = [] if self._in_transaction else [self._begin(None, event)]
            self._group = True
            return items
        if word in _END and self._in_transaction:
            return self._commit(event)
        if word == "XA END" or (self._in_transaction and self._group):
            return []  # XA_PREPARE ends an XA part; other statements inside a group are not ends
        items = [] if self._in_transaction else [self._begin(None, event)]
        return items + self._commit(event, statement=event)

    def _begin(self, gtid: AnyGtid, event: Event, *, group: bool = False) -> Begin:
        self._in_transaction = True
        self._group = group
        self._gtid = gtid
        return Begin(gtid, self.position, event.header.timestamp)

    def _commit(
        self,
        event: Event,
        *,
        xid: int | None = None,
        statement: QueryEvent | None = None,
        xa_prepare: bool = False,
    ) -> list[Item]:
        end = self._end_offset(event)
        self.position = self.position.after_commit(self.file, end, self._gtid)
        commit = Commit(self._gtid, self.position, xid, statement, xa_prepare)
        self._in_transaction = False
        self._group = False
        self._gtid = None
        self._payload_end = None
        return [commit]

    def _end_offset(self, event: Event) -> int:
        header = event.header
        if header.log_pos:
            return header.log_pos
        if self._payload_end is not None:
            return self._payload_end
        if header.next_pos is not None:
            return header.next_pos
        return self.position.pos


PART_BYTES = 1 << 20  # of the primary's bytes: a larger transaction is handed on in parts


@dataclass(slots=True)
class TransactionUnit:
    """One committed transaction as it flows from the primary to the sinks, or a part of one
    too large to hold at once: every part but the last has `end` None. The events before a
    transaction that belong to none (ROTATE, FORMAT_DESCRIPTION, PREVIOUS_GTIDS) travel with
    the next one, as the relay stores them; heartbeats are not in any unit."""

    start: Position  # after the previous transaction: a resume reads this one again whole
    end: Position | None  # after its commit (the last part only)
    gtid: AnyGtid
    timestamp: int  # of its first event (the statement's start on the primary)
    commit_ts: int  # of its commit event (0 on a part that is not the last)
    file: str  # the primary's binlog file that holds it
    raw: list[bytes]  # the primary's bytes of its events; events inside a payload have none
    events: list[Event]  # decoded, with the events inside a TRANSACTION_PAYLOAD after it
    size: int  # len of all `raw`
    part: int = 0

    @property
    def first(self) -> bool:
        return self.part == 0


class UnitAssembler:
    """Groups the primary's events into `TransactionUnit`s (see the module's docstring).
    `position` is after the last complete unit handed out: where reading resumes."""

    def __init__(self, position: Position, *, part_bytes: int = PART_BYTES) -> None:
        self.position = position
        self.part_bytes = part_bytes
        self._boundaries = TransactionAssembler(position)
        self._raw: list[bytes] = []
        self._events: list[Event] = []
        self._size = 0
        self._part = 0
        self._gtid: AnyGtid = None
        self._timestamp = 0

    def feed(self, raw: bytes, events: Iterable[Event]) -> TransactionUnit | None:
        """Take one event as read (`raw`, its bytes, and what `BinlogParser.decode` made of
        them); returns a unit or a part when one is complete."""
        self._raw.append(raw)
        self._size += len(raw)
        commit: Commit | None = None
        commit_ts = 0
        for event in events:
            self._events.append(event)
            for item in self._boundaries.feed(event):
                if isinstance(item, Begin):
                    self._gtid, self._timestamp = item.gtid, item.timestamp
                elif isinstance(item, Commit):
                    commit, commit_ts = item, event.header.timestamp
        if commit is not None:
            return self._hand_out(commit, commit_ts)
        if self._size >= self.part_bytes and self._boundaries.in_transaction:
            return self._hand_out(None, 0)
        return None

    def _hand_out(self, commit: Commit | None, commit_ts: int) -> TransactionUnit:
        unit = TransactionUnit(
            self.position,
            None if commit is None else commit.position,
            self._gtid,
            self._timestamp,
            commit_ts,
            self._boundaries.file,
            self._raw,
            self._events,
            self._size,
            self._part,
        )
        self._raw, self._events, self._size = [], [], 0
        if commit is None:
            self._part += 1
        else:
            self.position = commit.position
            self._part = 0
            self._gtid, self._timestamp = None, 0
        return unit
