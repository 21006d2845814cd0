"""MySQL and MariaDB global transaction identifiers.

MySQL names a transaction ``uuid[:tag]:gno`` and summarises what a server has
executed as a GTID set; MariaDB names it ``domain-server-seq`` and summarises
a position as the last GTID of each replication domain.  This module parses,
formats, encodes and decodes those values.  Everything here is pure: values
are immutable and functions take bytes or text and return values, so the same
code serves the binlog reader, the replication protocol and the checkpoint
store.

Binary layouts follow the MySQL server sources (``sql/rpl_gtid_set.cc``,
``libs/mysql/gtid/``, ``libs/mysql/serialization/`` and
``libs/mysql/binlog/event/control_events.h``) and the MariaDB server's
``Gtid_list_log_event``.
"""

from __future__ import annotations

import re
import struct
from bisect import bisect_right
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Final
from uuid import UUID

from replicad.errors import GtidError

__all__ = [
    "GNO_END",
    "GNO_MAX",
    "GTID_LIST_FLAG_IGN_GTIDS",
    "GTID_LIST_FLAG_UNTIL_REACHED",
    "TAG_MAX_LENGTH",
    "Gtid",
    "GtidListInfo",
    "GtidSet",
    "MariaGtid",
    "MariaGtidPosition",
    "TaggedGtidInfo",
    "decode_gtid_list",
    "decode_gtid_tagged",
    "encode_gtid_tagged",
]

# MySQL keeps GNOs in a signed 64-bit integer and reserves INT64_MAX as the
# exclusive end of the largest possible interval, so the largest GNO is one
# less than that (rpl_gtid.h: GNO_END = INT64_MAX).
GNO_END: Final = 2**63 - 1
GNO_MAX: Final = GNO_END - 1
TAG_MAX_LENGTH: Final = 32

_U8_MAX: Final = 2**8 - 1
_U32_MAX: Final = 2**32 - 1
_U64_MAX: Final = 2**64 - 1

# ASCII only: without re.ASCII, IGNORECASE would let the Kelvin sign match "k".
_TAG_RE: Final = re.compile(r"[a-z_][a-z0-9_]{0,31}", re.IGNORECASE | re.ASCII)
_UUID36_RE: Final = re.compile(
    r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
    re.IGNORECASE | re.ASCII,
)
_UUID32_RE: Final = re.compile(r"[0-9a-f]{32}", re.IGNORECASE | re.ASCII)
_DECIMAL_RE: Final = re.compile(r"[0-9]+", re.ASCII)

# MySQL's SKIP_WHITESPACE uses the C locale's isspace(), not Unicode spaces.
_WHITESPACE: Final = frozenset(" \t\n\r\f\v")
_UUID_CHARS: Final = frozenset("0123456789abcdefABCDEF-")
_DIGITS: Final = frozenset("0123456789")
_TAG_CHARS: Final = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")

# A gno never needs more digits than this; checking the length first also keeps
# int() away from Python's limit on huge digit strings (a ValueError).
_GNO_MAX_DIGITS: Final = len(str(GNO_MAX))

_Key = tuple[UUID, str]
_Interval = tuple[int, int]


def _snippet(text: str, offset: int) -> str:
    """The text an error points at, short enough for a log line."""
    if offset >= len(text):
        return "<end of text>"
    return text[offset : offset + 24]


def _as_bytes(buf: bytes | bytearray | memoryview) -> bytes:
    if isinstance(buf, bytes):
        return buf
    if isinstance(buf, bytearray | memoryview):
        return bytes(buf)
    raise TypeError(f"expected bytes-like input, got {type(buf).__name__}")


def _is_int(value: object) -> bool:
    # bool is an int subclass, and never a meaningful GTID number.
    return isinstance(value, int) and not isinstance(value, bool)


def _check_tag(tag: object, **context: object) -> str:
    """Validate a tag and return MySQL's canonical (lower-case) spelling."""
    if not isinstance(tag, str):
        raise GtidError("GTID tag must be a string", value=repr(tag), **context)
    if tag == "":
        return tag
    if _TAG_RE.fullmatch(tag) is None:
        raise GtidError(
            "malformed GTID tag: expected a letter or '_' then up to 31 letters, digits or '_'",
            value=tag,
            **context,
        )
    return tag.lower()


def _check_gno(gno: object, **context: object) -> int:
    if not isinstance(gno, int) or not _is_int(gno):
        raise GtidError("GTID transaction number must be an int", value=repr(gno), **context)
    if gno < 1 or gno > GNO_MAX:
        raise GtidError(f"GTID transaction number out of range 1..{GNO_MAX}", value=gno, **context)
    return gno


def _parse_uuid(token: str, offset: int | None = None) -> UUID:
    # uuid.UUID() alone also accepts braces, "urn:uuid:" and misplaced
    # hyphens, none of which MySQL accepts inside a GTID.
    if _UUID36_RE.fullmatch(token) is None and _UUID32_RE.fullmatch(token) is None:
        raise GtidError("malformed UUID in GTID", value=token or "<empty>", offset=offset)
    return UUID(token)


def _merge(intervals: Iterable[_Interval]) -> tuple[_Interval, ...]:
    """Sort half-open intervals and fuse those that overlap or touch."""
    merged: list[list[int]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return tuple((start, end) for start, end in merged)


def _key_order(key: _Key) -> tuple[bytes, str]:
    # MySQL sorts TSIDs by UUID bytes then tag; the empty (untagged) tag sorts
    # first, which is also the order its text format prints them in.
    return (key[0].bytes, key[1])


# --------------------------------------------------------------------------
# MySQL serialization library varints (libs/mysql/serialization/
# variable_length_integers.h).  The number of trailing one bits in the first
# byte, plus one, is the total length; 9 bytes (first byte 0xff) carry a full
# 64-bit value in the following 8 bytes.
# --------------------------------------------------------------------------


def _encode_varuint(value: int) -> bytes:
    if value < 0 or value > _U64_MAX:
        raise GtidError("value does not fit an unsigned 64-bit varint", value=value)
    bits = value.bit_length()
    if bits > 56:
        return b"\xff" + value.to_bytes(8, "little")
    length = max(1, -(-bits // 7))
    marker = (1 << (length - 1)) - 1
    return ((value << length) | marker).to_bytes(length, "little")


def _encode_varint(value: int) -> bytes:
    if value < -(2**63) or value >= 2**63:
        raise GtidError("value does not fit a signed 64-bit varint", value=value)
    # Zig-zag keeps small negative numbers short: the sign goes to bit 0.
    zigzag = (value << 1) if value >= 0 else (((-(value + 1)) << 1) | 1)
    return _encode_varuint(zigzag)


def _read_varuint(buf: bytes, pos: int, limit: int, what: str) -> tuple[int, int]:
    if pos >= limit:
        raise GtidError(f"input ends before the {what}", offset=pos)
    first = buf[pos]
    length = 1
    while length <= 8 and (first >> (length - 1)) & 1:
        length += 1
    if pos + length > limit:
        raise GtidError(f"input ends inside the {what}", offset=pos, needed=length)
    if length == 9:
        value = int.from_bytes(buf[pos + 1 : pos + 9], "little")
    else:
        rest = int.from_bytes(buf[pos + 1 : pos + length], "little")
        value = (first >> length) | (rest << (8 - length))
    return value, pos + length


def _zigzag_decode(value: int) -> int:
    return -(value >> 1) - 1 if value & 1 else value >> 1


# --------------------------------------------------------------------------
# MySQL GTIDs
# --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, order=True)
class Gtid:
    """One MySQL transaction id: ``uuid:gno`` or, from MySQL 8.3, ``uuid:tag:gno``."""

    uuid: UUID
    tag: str
    gno: int

    def __post_init__(self) -> None:
        if not isinstance(self.uuid, UUID):
            raise TypeError(f"Gtid.uuid must be a uuid.UUID, got {type(self.uuid).__name__}")
        # Normalise here so that equal GTIDs compare and hash equal however
        # the tag was spelled.
        object.__setattr__(self, "tag", _check_tag(self.tag))
        _check_gno(self.gno)

    @classmethod
    def parse(cls, text: str) -> Gtid:
        """Parse ``uuid:gno`` or ``uuid:tag:gno`` (whitespace around parts is ignored)."""
        if not isinstance(text, str):
            raise TypeError(f"expected str, got {type(text).__name__}")
        parts = [part.strip() for part in text.split(":")]
        if len(parts) == 2:
            uuid_text, tag, gno_text = parts[0], "", parts[1]
        elif len(parts) == 3:
            uuid_text, tag, gno_text = parts
            if tag == "":
                raise GtidError("empty tag in GTID", value=text)
        else:
            raise GtidError("malformed GTID: expected uuid:gno or uuid:tag:gno", value=text)
        sid = _parse_uuid(uuid_text)
        return cls(sid, _check_tag(tag, gtid=text), _parse_decimal_gno(gno_text, text))

    def __str__(self) -> str:
        if self.tag:
            return f"{self.uuid}:{self.tag}:{self.gno}"
        return f"{self.uuid}:{self.gno}"


def _parse_decimal_gno(token: str, whole: str) -> int:
    if _DECIMAL_RE.fullmatch(token) is None:
        raise GtidError("malformed GTID transaction number", value=token or "<empty>", gtid=whole)
    if len(token) > _GNO_MAX_DIGITS:
        raise GtidError(f"GTID transaction number out of range 1..{GNO_MAX}", value=token)
    return _check_gno(int(token), gtid=whole)


class _SetTextParser:
    """Scanner for MySQL's GTID set text syntax, remembering where it is for errors.

    Grammar (MySQL ``Gtid_set::add_gtid_text``): sets separated by commas,
    empty ones allowed; each is ``uuid`` followed by ``:item`` where an item is
    an interval ``N`` / ``N-M`` or a tag that applies to the intervals after it.
    Whitespace is accepted around every separator.
    """

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.found: dict[_Key, list[_Interval]] = {}

    def error(self, reason: str, offset: int, value: str | None = None) -> GtidError:
        return GtidError(
            reason,
            value=value if value is not None else _snippet(self.text, offset),
            offset=offset,
        )

    def peek(self) -> str:
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def skip_whitespace(self) -> None:
        text = self.text
        while self.pos < len(text) and text[self.pos] in _WHITESPACE:
            self.pos += 1

    def take(self, allowed: frozenset[str]) -> str:
        start = self.pos
        text = self.text
        while self.pos < len(text) and text[self.pos] in allowed:
            self.pos += 1
        return text[start : self.pos]

    def number(self) -> int:
        start = self.pos
        token = self.take(_DIGITS)
        if not token:
            raise self.error("expected a GTID transaction number", start)
        # MySQL reads numbers with strtoll(base 0), which would take "010" as
        # octal; refusing leading zeros avoids silently disagreeing with it.
        if len(token) > 1 and token[0] == "0":
            raise self.error("GTID transaction number has leading zeros", start, token)
        if len(token) > _GNO_MAX_DIGITS:
            raise self.error(f"GTID transaction number out of range 1..{GNO_MAX}", start, token)
        value = int(token)
        if value == 0:
            raise self.error("GTID transaction number 0 is not valid", start, token)
        if value > GNO_MAX:
            raise self.error(f"GTID transaction number out of range 1..{GNO_MAX}", start, token)
        return value

    def interval(self, sid: UUID, tag: str) -> None:
        start_offset = self.pos
        first = self.number()
        self.skip_whitespace()
        last = first
        if self.peek() == "-":
            self.pos += 1
            self.skip_whitespace()
            last = self.number()
            self.skip_whitespace()
        if last < first:
            # MySQL silently drops such an interval; a CDC daemon resuming from
            # it would skip or replay transactions, so refuse instead.
            raise self.error(
                "GTID interval ends before it starts",
                start_offset,
                self.text[start_offset : self.pos].strip(),
            )
        self.found.setdefault((sid, tag), []).append((first, last + 1))

    def tag(self) -> str:
        start = self.pos
        token = self.take(_TAG_CHARS)
        if not token:
            raise self.error("expected a GTID interval or tag after ':'", start)
        if _TAG_RE.fullmatch(token) is None:
            raise self.error(
                "malformed GTID tag: expected a letter or '_' then up to 31 letters, digits or '_'",
                start,
                token,
            )
        self.skip_whitespace()
        return token.lower()

    def uuid_set(self) -> None:
        start = self.pos
        sid = _parse_uuid(self.take(_UUID_CHARS) or _snippet(self.text, start), start)
        self.skip_whitespace()
        tag = ""
        while self.peek() == ":":
            self.pos += 1
            self.skip_whitespace()
            if self.peek() in _DIGITS:
                self.interval(sid, tag)
            else:
                tag = self.tag()

    def parse(self) -> dict[_Key, list[_Interval]]:
        self.skip_whitespace()
        while True:
            while self.peek() == ",":
                self.pos += 1
                self.skip_whitespace()
            if self.pos >= len(self.text):
                return self.found
            self.uuid_set()
            if self.pos < len(self.text) and self.peek() != ",":
                raise self.error("unexpected character in GTID set", self.pos)


class GtidSet:
    """An immutable MySQL GTID set.

    Internally a mapping from ``(uuid, tag)`` to sorted, disjoint,
    non-adjacent half-open intervals ``[start, end)``; equal sets therefore
    have equal representations, which makes equality and hashing cheap.
    """

    __slots__ = ("_entries", "_hash")

    _entries: dict[_Key, tuple[_Interval, ...]]
    _hash: int | None

    def __init__(self, entries: Mapping[_Key, Iterable[_Interval]] | None = None) -> None:
        """Build a set from ``{(uuid, tag): [(start, end_exclusive), ...]}``.

        Intervals may overlap or come in any order; they are merged.
        """
        collected: dict[_Key, list[_Interval]] = {}
        for (sid, tag), intervals in (entries or {}).items():
            if not isinstance(sid, UUID):
                raise TypeError(f"GtidSet keys need a uuid.UUID, got {type(sid).__name__}")
            key = (sid, _check_tag(tag))
            bucket = collected.setdefault(key, [])
            for start, end in intervals:
                _check_interval(start, end, uuid=sid, tag=key[1])
                bucket.append((start, end))
        self._init_trusted(collected)

    def _init_trusted(self, collected: Mapping[_Key, Iterable[_Interval]]) -> None:
        merged = ((key, _merge(ivs)) for key, ivs in collected.items())
        self._entries = {
            key: ivs for key, ivs in sorted(merged, key=lambda kv: _key_order(kv[0])) if ivs
        }
        self._hash = None

    @classmethod
    def _trusted(cls, collected: Mapping[_Key, Iterable[_Interval]]) -> GtidSet:
        # For callers that already validated every key and interval.
        obj = cls.__new__(cls)
        obj._init_trusted(collected)
        return obj

    # -- construction -----------------------------------------------------

    @classmethod
    def parse(cls, text: str) -> GtidSet:
        """Parse MySQL's text form, e.g. ``@@gtid_executed`` output."""
        if not isinstance(text, str):
            raise TypeError(f"expected str, got {type(text).__name__}")
        return cls._trusted(_SetTextParser(text).parse())

    @classmethod
    def from_gtids(cls, gtids: Iterable[Gtid]) -> GtidSet:
        collected: dict[_Key, list[_Interval]] = {}
        for gtid in gtids:
            collected.setdefault((gtid.uuid, gtid.tag), []).append((gtid.gno, gtid.gno + 1))
        return cls._trusted(collected)

    @classmethod
    def decode(cls, buf: bytes | bytearray | memoryview) -> GtidSet:
        """Decode MySQL's binary GTID set (PREVIOUS_GTIDS body, COM_BINLOG_DUMP_GTID).

        Mirrors ``Gtid_set::add_gtid_encoding``: the top byte of the 8-byte
        header selects the format; the whole buffer must be consumed.
        """
        data = _as_bytes(buf)
        size = len(data)
        if size < 8:
            raise GtidError(
                "GTID set encoding is shorter than its 8-byte header",
                offset=0,
                length=size,
            )
        header = int.from_bytes(data[:8], "little")
        encoding_format = header >> 56
        if encoding_format == 0:
            count = header & (2**56 - 1)
            tagged = False
        elif encoding_format == 1:
            # Tagged header: byte 0 and byte 7 both hold the format, bytes 1-6
            # the entry count (Gtid_set encode_nsids_format).
            count = (header >> 8) & (2**48 - 1)
            tagged = True
        else:
            raise GtidError("unknown GTID set encoding format", value=encoding_format, offset=7)
        pos = 8
        min_entry = 16 + 8 + (1 if tagged else 0)
        if count > (size - pos) // min_entry:
            raise GtidError(
                "GTID set encoding declares more entries than its bytes can hold",
                value=count,
                offset=0,
                length=size,
            )
        collected: dict[_Key, list[_Interval]] = {}
        for index in range(count):
            if size - pos < 16:
                raise GtidError("GTID set encoding ends inside an entry", entry=index, offset=pos)
            sid = UUID(bytes=data[pos : pos + 16])
            pos += 16
            tag = ""
            if tagged:
                tag, pos = _decode_set_tag(data, pos, size)
            if size - pos < 8:
                raise GtidError(
                    "GTID set encoding ends before an interval count",
                    entry=index,
                    offset=pos,
                )
            n_intervals = int.from_bytes(data[pos : pos + 8], "little")
            if n_intervals > (size - pos - 8) // 16:
                raise GtidError(
                    "GTID set entry declares more intervals than the remaining bytes hold",
                    value=n_intervals,
                    entry=index,
                    offset=pos,
                )
            pos += 8
            bucket = collected.setdefault((sid, tag), [])
            last_end = 0
            for start, end in struct.iter_unpack("<QQ", data[pos : pos + 16 * n_intervals]):
                # MySQL reads these as signed: anything >= 2**63 is negative
                # there and fails the same check.  Intervals must ascend
                # strictly, not even touching the previous one.
                if start <= last_end or end <= start or end > GNO_END:
                    raise GtidError(
                        "GTID set encoding has an empty, overlapping or unordered interval",
                        value=f"[{start}, {end})",
                        entry=index,
                        uuid=sid,
                        offset=pos,
                    )
                bucket.append((start, end))
                last_end = end
                pos += 16
        if pos != size:
            raise GtidError("GTID set encoding has trailing bytes", offset=pos, length=size)
        return cls._trusted(collected)

    # -- text and binary forms -------------------------------------------

    def format(self, separator: str = ",") -> str:
        """Canonical MySQL text; MySQL itself separates UUIDs with ``",\\n"``."""
        groups: list[str] = []
        current: UUID | None = None
        parts: list[str] = []
        for (sid, tag), intervals in self._entries.items():
            if sid != current:
                if parts:
                    groups.append(":".join(parts))
                parts = [str(sid)]
                current = sid
            if tag:
                parts.append(tag)
            parts.extend(f"{s}-{e - 1}" if e - s > 1 else str(s) for s, e in intervals)
        if parts:
            groups.append(":".join(parts))
        return separator.join(groups)

    def __str__(self) -> str:
        return self.format()

    def __repr__(self) -> str:
        return f"GtidSet.parse({self.format()!r})"

    def encode(self) -> bytes:
        """MySQL's binary form; the tagged format only when some entry has a tag.

        Servers older than 8.3 cannot read the tagged format, so it is used
        only when it is needed, as ``Gtid_set::encode`` does.
        """
        tagged = any(tag for _, tag in self._entries)
        count = len(self._entries)
        out = bytearray()
        if tagged:
            if count >= 2**48:
                raise GtidError("too many GTID set entries for the tagged encoding", value=count)
            out += b"\x01" + count.to_bytes(6, "little") + b"\x01"
        else:
            out += count.to_bytes(8, "little")
        for (sid, tag), intervals in self._entries.items():
            out += sid.bytes
            if tagged:
                raw = tag.encode("ascii")
                out += _encode_varuint(len(raw)) + raw
            out += len(intervals).to_bytes(8, "little")
            for start, end in intervals:
                out += struct.pack("<QQ", start, end)
        return bytes(out)

    # -- algebra ------------------------------------------------------------

    def union(self, other: GtidSet) -> GtidSet:
        if not isinstance(other, GtidSet):
            raise TypeError(f"expected GtidSet, got {type(other).__name__}")
        if not other._entries:
            return self
        if not self._entries:
            return other
        collected: dict[_Key, list[_Interval]] = {k: list(v) for k, v in self._entries.items()}
        for key, intervals in other._entries.items():
            collected.setdefault(key, []).extend(intervals)
        return GtidSet._trusted(collected)

    def __or__(self, other: object) -> GtidSet:
        if not isinstance(other, GtidSet):
            return NotImplemented
        return self.union(other)

    def with_gtid(self, gtid: Gtid) -> GtidSet:
        """A new set that also holds ``gtid``."""
        if gtid in self:
            return self
        # Called once per replicated transaction: only the touched entry is
        # re-merged, and keys are re-sorted only when a new one appears.
        key = (gtid.uuid, gtid.tag)
        entries = dict(self._entries)
        entries[key] = _merge((*entries.get(key, ()), (gtid.gno, gtid.gno + 1)))
        obj = GtidSet.__new__(GtidSet)
        if key in self._entries:
            obj._entries = entries
        else:
            obj._entries = dict(sorted(entries.items(), key=lambda kv: _key_order(kv[0])))
        obj._hash = None
        return obj

    def contains(self, gtid: Gtid) -> bool:
        intervals = self._entries.get((gtid.uuid, gtid.tag))
        if not intervals:
            return False
        index = bisect_right(intervals, (gtid.gno, GNO_END + 1)) - 1
        return index >= 0 and gtid.gno < intervals[index][1]

    def __contains__(self, item: object) -> bool:
        return isinstance(item, Gtid) and self.contains(item)

    def issuperset(self, other: GtidSet) -> bool:
        for key, theirs in other._entries.items():
            mine = self._entries.get(key)
            if not mine:
                return False
            for start, end in theirs:
                # Ours are merged, so a covered interval lies inside one of ours.
                index = bisect_right(mine, (start, GNO_END + 1)) - 1
                if index < 0 or mine[index][1] < end:
                    return False
        return True

    def issubset(self, other: GtidSet) -> bool:
        return other.issuperset(self)

    def __ge__(self, other: object) -> bool:
        if not isinstance(other, GtidSet):
            return NotImplemented
        return self.issuperset(other)

    def __le__(self, other: object) -> bool:
        if not isinstance(other, GtidSet):
            return NotImplemented
        return other.issuperset(self)

    # -- inspection ---------------------------------------------------------

    def intervals(self, uuid: UUID | str, tag: str = "") -> tuple[_Interval, ...]:
        """The half-open intervals ``[start, end)`` held for one uuid and tag."""
        sid = uuid if isinstance(uuid, UUID) else _parse_uuid(uuid)
        return self._entries.get((sid, _check_tag(tag)), ())

    def is_empty(self) -> bool:
        return not self._entries

    def __bool__(self) -> bool:
        return bool(self._entries)

    def __iter__(self) -> Iterator[tuple[UUID, str, int, int]]:
        """Yield ``(uuid, tag, start, end_exclusive)`` in canonical order."""
        for (sid, tag), intervals in self._entries.items():
            for start, end in intervals:
                yield sid, tag, start, end

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, GtidSet):
            return NotImplemented
        return self._entries == other._entries

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(tuple(self._entries.items()))
        return self._hash


def _check_interval(start: object, end: object, **context: object) -> None:
    if not (_is_int(start) and _is_int(end)) or not (
        isinstance(start, int) and isinstance(end, int)
    ):
        raise GtidError(
            "GTID interval bounds must be ints", value=f"[{start!r}, {end!r})", **context
        )
    if not 1 <= start < end <= GNO_END:
        raise GtidError(
            f"GTID interval must satisfy 1 <= start < end <= {GNO_END}",
            value=f"[{start}, {end})",
            **context,
        )


def _decode_set_tag(data: bytes, pos: int, size: int) -> tuple[str, int]:
    # Tag::decode_tag: a serialization-library string, i.e. a varint length
    # followed by that many bytes, at most 32 of them.
    length, after = _read_varuint(data, pos, size, "GTID tag length")
    if length > TAG_MAX_LENGTH:
        raise GtidError("GTID tag longer than 32 characters", value=length, offset=pos)
    if after + length > size:
        raise GtidError("input ends inside a GTID tag", offset=pos, needed=length)
    raw = data[after : after + length]
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError:
        raise GtidError("GTID tag is not ASCII", value=raw.hex(), offset=after) from None
    return _check_tag(text, offset=after), after + length


# --------------------------------------------------------------------------
# GTID_TAGGED_LOG_EVENT (MySQL 8.3+)
#
# The body is one mysql::serialization message:
#   varint  format version (field id of the top-level message, always 1)
#   varint  message size in bytes, counted from the version byte
#   varint  last non-ignorable field id + 1 (0 when every field is ignorable)
#   then (varint field id, value) pairs with ascending ids; absent ids are
#   optional fields left out.  Simple values carry no type or length, so a
#   field this decoder does not know cannot be skipped on its own: new fields
#   are always appended, and the message size lets the reader jump over all of
#   them at once.
# --------------------------------------------------------------------------

_MESSAGE_FORMAT_VERSION: Final = 1

_F_FLAGS: Final = 0
_F_UUID: Final = 1
_F_GNO: Final = 2
_F_TAG: Final = 3
_F_LAST_COMMITTED: Final = 4
_F_SEQUENCE_NUMBER: Final = 5
_F_IMMEDIATE_COMMIT_TS: Final = 6
_F_ORIGINAL_COMMIT_TS: Final = 7
_F_TRANSACTION_LENGTH: Final = 8
_F_IMMEDIATE_SERVER_VERSION: Final = 9
_F_ORIGINAL_SERVER_VERSION: Final = 10
_F_COMMIT_GROUP_TICKET: Final = 11
_LAST_KNOWN_FIELD: Final = _F_COMMIT_GROUP_TICKET

# Unsigned fields and the C++ type bound the server's reader enforces.
_UNSIGNED_FIELDS: Final[dict[int, tuple[str, int]]] = {
    _F_FLAGS: ("flags", _U8_MAX),
    _F_IMMEDIATE_COMMIT_TS: ("immediate_commit_ts_us", _U64_MAX),
    _F_ORIGINAL_COMMIT_TS: ("original_commit_ts_us", _U64_MAX),
    _F_TRANSACTION_LENGTH: ("transaction_length", _U64_MAX),
    _F_IMMEDIATE_SERVER_VERSION: ("immediate_server_version", _U32_MAX),
    _F_ORIGINAL_SERVER_VERSION: ("original_server_version", _U32_MAX),
    _F_COMMIT_GROUP_TICKET: ("commit_group_ticket", _U64_MAX),
}
_SIGNED_FIELDS: Final[dict[int, str]] = {
    _F_GNO: "gno",
    _F_LAST_COMMITTED: "last_committed",
    _F_SEQUENCE_NUMBER: "sequence_number",
}


@dataclass(frozen=True, slots=True)
class TaggedGtidInfo:
    """The contents of a GTID_TAGGED_LOG_EVENT body."""

    flags: int
    uuid: UUID
    gno: int
    tag: str
    last_committed: int = 0
    sequence_number: int = 0
    immediate_commit_ts_us: int = 0
    original_commit_ts_us: int = 0
    transaction_length: int = 0
    immediate_server_version: int = 0
    original_server_version: int = 0
    commit_group_ticket: int | None = None

    @property
    def gtid(self) -> Gtid:
        return Gtid(self.uuid, self.tag, self.gno)


def decode_gtid_tagged(body: bytes | bytearray | memoryview) -> TaggedGtidInfo:
    """Decode a GTID_TAGGED_LOG_EVENT body (after the common header, without CRC)."""
    data = _as_bytes(body)
    limit = len(data)
    version, pos = _read_varuint(data, 0, limit, "serialization format version")
    if version != _MESSAGE_FORMAT_VERSION:
        raise GtidError(
            "unsupported GTID_TAGGED_LOG_EVENT serialization format version",
            value=version,
            offset=0,
        )
    size_offset = pos
    size, pos = _read_varuint(data, pos, limit, "message size")
    lnif_offset = pos
    last_non_ignorable, pos = _read_varuint(data, pos, limit, "last non-ignorable field id")
    if size < pos:
        raise GtidError(
            "GTID_TAGGED_LOG_EVENT declares a size smaller than its own header",
            value=size,
            offset=size_offset,
        )
    if size > limit:
        raise GtidError(
            "GTID_TAGGED_LOG_EVENT is shorter than its declared size",
            value=size,
            length=limit,
            offset=size_offset,
        )
    if last_non_ignorable > _LAST_KNOWN_FIELD + 1:
        raise GtidError(
            "GTID_TAGGED_LOG_EVENT has fields this decoder does not know and may not ignore",
            value=last_non_ignorable,
            offset=lnif_offset,
        )

    unsigned: dict[str, int] = {}
    signed: dict[str, int] = {}
    sid: UUID | None = None
    tag = ""
    next_id = 0
    # Like the server, the declared end is only consulted between fields: its
    # writer can under-count the size varint by a byte, so a field that starts
    # inside the message may end just past the declared size.
    while pos < size:
        field_offset = pos
        field_id, pos = _read_varuint(data, pos, limit, "field id")
        if field_id > _LAST_KNOWN_FIELD:
            break
        if field_id < next_id:
            raise GtidError(
                "GTID_TAGGED_LOG_EVENT field ids are not ascending",
                value=field_id,
                offset=field_offset,
            )
        next_id = field_id + 1
        if field_id in _UNSIGNED_FIELDS:
            name, bound = _UNSIGNED_FIELDS[field_id]
            value, pos = _read_varuint(data, pos, limit, name)
            if value > bound:
                raise GtidError(
                    f"GTID_TAGGED_LOG_EVENT {name} out of range",
                    value=value,
                    offset=field_offset,
                )
            unsigned[name] = value
        elif field_id in _SIGNED_FIELDS:
            name = _SIGNED_FIELDS[field_id]
            value, pos = _read_varuint(data, pos, limit, name)
            signed[name] = _zigzag_decode(value)
        elif field_id == _F_UUID:
            # The UUID is a std::array<unsigned char, 16>: the serializer
            # writes each byte as its own varint, so it takes 16 to 32 bytes.
            raw = bytearray()
            for _ in range(16):
                byte_offset = pos
                value, pos = _read_varuint(data, pos, limit, "uuid byte")
                if value > _U8_MAX:
                    raise GtidError(
                        "GTID_TAGGED_LOG_EVENT uuid byte out of range",
                        value=value,
                        offset=byte_offset,
                    )
                raw.append(value)
            sid = UUID(bytes=bytes(raw))
        else:  # _F_TAG
            tag, pos = _decode_set_tag(data, pos, limit)

    if sid is None:
        raise GtidError("GTID_TAGGED_LOG_EVENT has no uuid field", offset=0)
    if "gno" not in signed:
        raise GtidError("GTID_TAGGED_LOG_EVENT has no gno field", offset=0)
    gno = _check_gno(signed["gno"], uuid=sid)
    immediate_ts = unsigned.get("immediate_commit_ts_us", 0)
    immediate_version = unsigned.get("immediate_server_version", 0)
    return TaggedGtidInfo(
        # Absent flags mean FLAG_MAY_HAVE_SBR, the server's constructor default.
        flags=unsigned.get("flags", 1),
        uuid=sid,
        gno=gno,
        tag=tag,
        last_committed=signed.get("last_committed", 0),
        sequence_number=signed.get("sequence_number", 0),
        immediate_commit_ts_us=immediate_ts,
        # The writer leaves out "original" values equal to the immediate ones.
        original_commit_ts_us=unsigned.get("original_commit_ts_us", immediate_ts),
        transaction_length=unsigned.get("transaction_length", 0),
        immediate_server_version=immediate_version,
        original_server_version=unsigned.get("original_server_version", immediate_version),
        commit_group_ticket=unsigned.get("commit_group_ticket"),
    )


def encode_gtid_tagged(info: TaggedGtidInfo) -> bytes:
    """Encode a GTID_TAGGED_LOG_EVENT body; used to build test fixtures.

    Optional fields are left out the way the server leaves them out: original
    values equal to the immediate ones, and an absent (None) group ticket.
    """

    def unsigned(name: str, value: object, bound: int) -> bytes:
        if not isinstance(value, int) or not _is_int(value) or not 0 <= value <= bound:
            raise GtidError(f"{name} out of range 0..{bound}", value=repr(value))
        return _encode_varuint(value)

    def signed(name: str, value: object) -> bytes:
        if not isinstance(value, int) or not _is_int(value):
            raise GtidError(f"{name} must be an int", value=repr(value))
        return _encode_varint(value)

    if not isinstance(info.uuid, UUID):
        raise GtidError("uuid must be a uuid.UUID", value=repr(info.uuid))
    gno = _check_gno(info.gno)
    tag = _check_tag(info.tag).encode("ascii")

    fields: list[tuple[int, bytes]] = [
        (_F_FLAGS, unsigned("flags", info.flags, _U8_MAX)),
        (_F_UUID, b"".join(_encode_varuint(byte) for byte in info.uuid.bytes)),
        (_F_GNO, _encode_varint(gno)),
        (_F_TAG, _encode_varuint(len(tag)) + tag),
        (_F_LAST_COMMITTED, signed("last_committed", info.last_committed)),
        (_F_SEQUENCE_NUMBER, signed("sequence_number", info.sequence_number)),
        (
            _F_IMMEDIATE_COMMIT_TS,
            unsigned("immediate_commit_ts_us", info.immediate_commit_ts_us, _U64_MAX),
        ),
    ]
    if info.original_commit_ts_us != info.immediate_commit_ts_us:
        fields.append(
            (
                _F_ORIGINAL_COMMIT_TS,
                unsigned("original_commit_ts_us", info.original_commit_ts_us, _U64_MAX),
            )
        )
    fields.append(
        (
            _F_TRANSACTION_LENGTH,
            unsigned("transaction_length", info.transaction_length, _U64_MAX),
        )
    )
    fields.append(
        (
            _F_IMMEDIATE_SERVER_VERSION,
            unsigned("immediate_server_version", info.immediate_server_version, _U32_MAX),
        )
    )
    if info.original_server_version != info.immediate_server_version:
        fields.append(
            (
                _F_ORIGINAL_SERVER_VERSION,
                unsigned("original_server_version", info.original_server_version, _U32_MAX),
            )
        )
    if info.commit_group_ticket is not None:
        fields.append(
            (
                _F_COMMIT_GROUP_TICKET,
                unsigned("commit_group_ticket", info.commit_group_ticket, _U64_MAX),
            )
        )

    payload = b"".join(_encode_varuint(field_id) + value for field_id, value in fields)
    version = _encode_varuint(_MESSAGE_FORMAT_VERSION)
    all_ignorable = _encode_varuint(0)
    fixed = len(version) + len(all_ignorable) + len(payload)
    # The size counts its own varint, whose length depends on the size: grow
    # the guess until it is self-consistent (at most a couple of rounds).
    size = fixed + 1
    while fixed + len(_encode_varuint(size)) != size:
        size = fixed + len(_encode_varuint(size))
    return version + _encode_varuint(size) + all_ignorable + payload


# --------------------------------------------------------------------------
# MariaDB GTIDs
# --------------------------------------------------------------------------


def _check_unsigned(name: str, value: object, bound: int) -> int:
    if not isinstance(value, int) or not _is_int(value) or not 0 <= value <= bound:
        raise GtidError(f"MariaDB GTID {name} out of range 0..{bound}", value=repr(value))
    return value


@dataclass(frozen=True, slots=True, order=True)
class MariaGtid:
    """A MariaDB GTID ``domain-server-seq``."""

    domain_id: int
    server_id: int
    seq_no: int

    def __post_init__(self) -> None:
        _check_unsigned("domain_id", self.domain_id, _U32_MAX)
        _check_unsigned("server_id", self.server_id, _U32_MAX)
        _check_unsigned("seq_no", self.seq_no, _U64_MAX)

    @classmethod
    def parse(cls, text: str) -> MariaGtid:
        if not isinstance(text, str):
            raise TypeError(f"expected str, got {type(text).__name__}")
        parts = text.strip().split("-")
        if len(parts) != 3 or any(_DECIMAL_RE.fullmatch(part) is None for part in parts):
            raise GtidError("malformed MariaDB GTID: expected domain-server-seq", value=text)
        # 20 digits hold any u64; longer strings would only trip int()'s limit.
        if any(len(part) > 20 for part in parts):
            raise GtidError("MariaDB GTID component out of range", value=text)
        domain_id, server_id, seq_no = (int(part) for part in parts)
        return cls(domain_id, server_id, seq_no)

    def __str__(self) -> str:
        return f"{self.domain_id}-{self.server_id}-{self.seq_no}"


class MariaGtidPosition:
    """A MariaDB replication position: at most one GTID per domain.

    The value of ``@@gtid_binlog_pos`` / ``@slave_connect_state``.  Sequence
    numbers are ordered within a domain only; the server id takes no part in
    ordering.
    """

    __slots__ = ("_by_domain",)

    _by_domain: dict[int, MariaGtid]

    def __init__(self, gtids: Iterable[MariaGtid] = ()) -> None:
        by_domain: dict[int, MariaGtid] = {}
        for gtid in gtids:
            if not isinstance(gtid, MariaGtid):
                raise TypeError(f"expected MariaGtid, got {type(gtid).__name__}")
            if gtid.domain_id in by_domain:
                raise GtidError(
                    "MariaDB GTID position has two GTIDs for one domain",
                    value=f"{by_domain[gtid.domain_id]},{gtid}",
                    domain=gtid.domain_id,
                )
            by_domain[gtid.domain_id] = gtid
        self._by_domain = dict(sorted(by_domain.items()))

    @classmethod
    def parse(cls, text: str) -> MariaGtidPosition:
        """Parse ``"0-1-100,1-2-5"``; whitespace is tolerated, "" is the empty position."""
        if not isinstance(text, str):
            raise TypeError(f"expected str, got {type(text).__name__}")
        if text.strip() == "":
            return cls()
        gtids = []
        for item in text.split(","):
            if item.strip() == "":
                raise GtidError("empty entry in MariaDB GTID position", value=text)
            gtids.append(MariaGtid.parse(item))
        return cls(gtids)

    def advance(self, gtid: MariaGtid) -> MariaGtidPosition:
        """A new position whose entry for ``gtid``'s domain is ``gtid``."""
        by_domain = dict(self._by_domain)
        by_domain[gtid.domain_id] = gtid
        return MariaGtidPosition(by_domain.values())

    def get(self, domain_id: int) -> MariaGtid | None:
        return self._by_domain.get(domain_id)

    def covers(self, gtid: MariaGtid) -> bool:
        """Whether the position already includes ``gtid`` (same domain, seq_no not past ours)."""
        mine = self._by_domain.get(gtid.domain_id)
        return mine is not None and gtid.seq_no <= mine.seq_no

    def __str__(self) -> str:
        return ",".join(str(gtid) for gtid in self._by_domain.values())

    def __repr__(self) -> str:
        return f"MariaGtidPosition.parse({str(self)!r})"

    def __iter__(self) -> Iterator[MariaGtid]:
        return iter(self._by_domain.values())

    def __len__(self) -> int:
        return len(self._by_domain)

    def __bool__(self) -> bool:
        return bool(self._by_domain)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MariaGtidPosition):
            return NotImplemented
        return self._by_domain == other._by_domain

    def __hash__(self) -> int:
        return hash(tuple(self._by_domain.values()))


# Flags of GTID_LIST, as the top four bits of the count word shifted down.
GTID_LIST_FLAG_UNTIL_REACHED: Final = 1
GTID_LIST_FLAG_IGN_GTIDS: Final = 2


@dataclass(frozen=True, slots=True)
class GtidListInfo:
    """A MariaDB GTID_LIST event: flags (0..15) and the GTIDs in event order.

    The list is the binlog state, so a domain may appear once per server id.
    """

    flags: int
    gtids: tuple[MariaGtid, ...]


def decode_gtid_list(body: bytes | bytearray | memoryview) -> GtidListInfo:
    """Decode a MariaDB GTID_LIST event body (after the common header, without CRC)."""
    data = _as_bytes(body)
    if len(data) < 4:
        raise GtidError(
            "GTID_LIST body is shorter than its 4-byte count",
            offset=0,
            length=len(data),
        )
    word = int.from_bytes(data[:4], "little")
    count = word & 0x0FFF_FFFF
    flags = word >> 28
    needed = 4 + 16 * count
    if len(data) < needed:
        raise GtidError(
            "GTID_LIST body is shorter than its GTID count needs",
            value=count,
            offset=len(data),
            needed=needed,
        )
    # Bytes past the list are ignored, as the server's own reader does.
    gtids = tuple(
        MariaGtid(domain_id, server_id, seq_no)
        for domain_id, server_id, seq_no in struct.iter_unpack("<IIQ", data[4:needed])
    )
    return GtidListInfo(flags=flags, gtids=gtids)
