"""What relay records hold, sans-IO: the encoding of a segment's header, its transactions and
its footer, and the grammar that reassembles transactions from records.

A segment is: HEADER, then transactions, then (once sealed) FOOTER. A transaction is zero or
more TXN_PART records and one TXN_END record; each holds a run of raw binlog events exactly as
the primary sent them (header and checksum included), so the binlog decoder reads them as it
reads the live stream. A huge transaction is written as parts of about `part_bytes`, so
neither the writer nor a reader ever holds it whole.

Record payload = kind (1 byte) | body:
    HEADER   json_len (4) | JSON meta | FORMAT_DESCRIPTION event bytes
    TXN_PART events
    TXN_END  json_len (4) | JSON {position, commit_ts, events} | events
    FOOTER   JSON {first, last, max_commit_ts, transactions, events, sealed_ms}
events = count (4) | (length (4) | event bytes) * count   (all little-endian)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

import orjson

from replicad.binlog.position import Position
from replicad.errors import RelayCorruptError
from replicad.relay.records import Record

MAGIC = "replicad-relay"
VERSION = 1


class RecordKind(IntEnum):
    HEADER = 1
    TXN_PART = 2
    TXN_END = 3
    FOOTER = 4


@dataclass(slots=True, frozen=True)
class SegmentHeader:
    number: int
    created_ms: int
    source: str  # host:port of the primary, for the operator
    checksums: bool  # the events carry a CRC32 trailer (binlog_checksum=CRC32)
    start: Position | None  # the position before the segment's first transaction
    format_description: bytes  # the raw FORMAT_DESCRIPTION event in force


@dataclass(slots=True, frozen=True)
class CommitRecord:
    """What a segment's END record says about a relayed transaction (the live stream's
    counterpart is `source.transactions.Commit`)."""

    position: Position  # after the transaction
    commit_ts: int  # the primary's timestamp of the commit event (seconds)
    events: int  # events in the whole transaction


@dataclass(slots=True, frozen=True)
class Footer:
    first: Position | None  # after the first transaction
    last: Position | None  # after the last transaction
    max_commit_ts: int
    transactions: int
    events: int
    sealed_ms: int


@dataclass(slots=True)
class TxnChunk:
    """A run of one transaction's events; `commit` is set on the last chunk. `start` is the
    offset of the transaction's first record (a clean cut point), `end` where this chunk's
    record ends."""

    events: list[bytes]
    start: int
    end: int
    commit: CommitRecord | None = None


def _events(events: Sequence[bytes]) -> bytes:
    out = [len(events).to_bytes(4, "little")]
    for raw in events:
        out.append(len(raw).to_bytes(4, "little"))
        out.append(raw)
    return b"".join(out)


def _with_json(kind: RecordKind, meta: dict[str, Any], rest: bytes) -> bytes:
    blob = orjson.dumps(meta)
    return bytes((kind,)) + len(blob).to_bytes(4, "little") + blob + rest


def encode_header(header: SegmentHeader) -> bytes:
    meta = {
        "magic": MAGIC,
        "version": VERSION,
        "segment": header.number,
        "created_ms": header.created_ms,
        "source": header.source,
        "checksums": header.checksums,
        "start": None if header.start is None else header.start.to_json(),
    }
    return _with_json(RecordKind.HEADER, meta, header.format_description)


def encode_part(events: Sequence[bytes]) -> bytes:
    return bytes((RecordKind.TXN_PART,)) + _events(events)


def encode_end(commit: CommitRecord, events: Sequence[bytes]) -> bytes:
    meta = {
        "position": commit.position.to_json(),
        "commit_ts": commit.commit_ts,
        "events": commit.events,
    }
    return _with_json(RecordKind.TXN_END, meta, _events(events))


def encode_footer(footer: Footer) -> bytes:
    meta = {
        "first": None if footer.first is None else footer.first.to_json(),
        "last": None if footer.last is None else footer.last.to_json(),
        "max_commit_ts": footer.max_commit_ts,
        "transactions": footer.transactions,
        "events": footer.events,
        "sealed_ms": footer.sealed_ms,
    }
    return bytes((RecordKind.FOOTER,)) + orjson.dumps(meta)


# ---------------------------------------------------------------------------- decoding
class _Body:
    """A cursor over one record's payload; errors name the segment and record offset."""

    __slots__ = ("data", "offset", "pos", "segment")

    def __init__(self, data: bytes, segment: str, offset: int) -> None:
        self.data, self.pos, self.segment, self.offset = data, 1, segment, offset

    def error(self, reason: str) -> RelayCorruptError:
        return RelayCorruptError(reason, segment=self.segment, offset=self.offset)

    def u32(self) -> int:
        if self.pos + 4 > len(self.data):
            raise self.error("record ends inside a length field")
        value = int.from_bytes(self.data[self.pos : self.pos + 4], "little")
        self.pos += 4
        return value

    def take(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise self.error(f"record ends inside a field of {n} bytes")
        value = self.data[self.pos : self.pos + n]
        self.pos += n
        return value

    def json(self) -> dict[str, Any]:
        blob = self.take(self.u32())
        try:
            value = orjson.loads(blob)
        except orjson.JSONDecodeError as exc:
            raise self.error(f"record metadata is not JSON ({exc})") from None
        if not isinstance(value, dict):
            raise self.error("record metadata is not an object")
        return value

    def events(self) -> list[bytes]:
        count = self.u32()
        out = [self.take(self.u32()) for _ in range(count)]
        if self.pos != len(self.data):
            raise self.error(f"{len(self.data) - self.pos} stray bytes after the events")
        return out


def _position(body: _Body, value: Any, what: str) -> Position | None:
    if value is None:
        return None
    try:
        return Position.from_json(value)
    except (KeyError, TypeError, ValueError) as exc:  # InvalidPositionError is a ValueError
        raise body.error(f"bad {what} position in the record ({exc})") from None


def decode_header(record: Record, segment: str) -> SegmentHeader:
    body = _Body(record.payload, segment, record.offset)
    if not record.payload or record.payload[0] != RecordKind.HEADER:
        raise body.error("the segment does not start with a header record")
    meta = body.json()
    if meta.get("magic") != MAGIC:
        raise body.error(f"not a relay segment (magic {meta.get('magic')!r})")
    if meta.get("version") != VERSION:
        raise body.error(f"relay segment version {meta.get('version')} is not supported")
    try:
        return SegmentHeader(
            number=int(meta["segment"]),
            created_ms=int(meta["created_ms"]),
            source=str(meta["source"]),
            checksums=bool(meta["checksums"]),
            start=_position(body, meta.get("start"), "start"),
            format_description=body.data[body.pos :],
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise body.error(f"bad segment header ({exc!r})") from None


def decode_footer(record: Record, segment: str) -> Footer:
    body = _Body(record.payload, segment, record.offset)
    try:
        meta = orjson.loads(record.payload[1:])
        return Footer(
            first=_position(body, meta["first"], "first"),
            last=_position(body, meta["last"], "last"),
            max_commit_ts=int(meta["max_commit_ts"]),
            transactions=int(meta["transactions"]),
            events=int(meta["events"]),
            sealed_ms=int(meta["sealed_ms"]),
        )
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise body.error(f"bad segment footer ({exc!r})") from None


@dataclass(slots=True)
class TransactionGrammar:
    """Turns the records after a segment's header into transaction chunks and, at the end,
    its footer. `open_start` is the offset of the transaction not yet committed (None when
    the last record ended a transaction): a torn tail is cut there."""

    segment: str
    open_start: int | None = None
    footer: Footer | None = None
    _events_seen: int = field(default=0)

    def feed(self, record: Record) -> TxnChunk | None:
        kind = record.payload[0] if record.payload else 0
        body = _Body(record.payload, self.segment, record.offset)
        if self.footer is not None:
            raise body.error("a record after the segment footer")
        if kind == RecordKind.TXN_PART:
            start = record.offset if self.open_start is None else self.open_start
            self.open_start = start
            events = body.events()
            self._events_seen += len(events)
            return TxnChunk(events, start, record.end)
        if kind == RecordKind.TXN_END:
            start = record.offset if self.open_start is None else self.open_start
            meta = body.json()
            events = body.events()
            self._events_seen += len(events)
            position = _position(body, meta.get("position"), "commit")
            try:
                commit_ts, count = int(meta["commit_ts"]), int(meta["events"])
            except (KeyError, TypeError, ValueError):
                raise body.error("transaction end record without valid counts") from None
            if position is None:
                raise body.error("transaction end record without a position")
            if count != self._events_seen:
                raise body.error(
                    f"transaction says {count} events, its records hold {self._events_seen}"
                )
            self.open_start, self._events_seen = None, 0
            commit = CommitRecord(position, commit_ts, count)
            return TxnChunk(events, start, record.end, commit)
        if kind == RecordKind.FOOTER:
            if self.open_start is not None:
                raise body.error("segment footer inside a transaction")
            self.footer = decode_footer(record, self.segment)
            return None
        if kind == RecordKind.HEADER:
            raise body.error("a second segment header")
        raise body.error(f"unknown relay record kind {kind}")
