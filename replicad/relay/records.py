"""Record framing of relay segments, sans-IO (the LevelDB log format, in our own words).

A segment is a sequence of 64 KiB blocks. A record is stored as one or more fragments, none
crossing a block boundary; each fragment is

    masked crc32c (4, little-endian) | length (3, little-endian) | type (1) | payload

where the CRC covers the type byte and the payload. FULL holds a whole record; a longer one is
FIRST, MIDDLE..., LAST. A block's last < 8 bytes are zero padding. A reader can therefore
resynchronise at any block boundary, and a crash can only damage the tail.

The CRC is masked (rotated and offset) so that a CRC computed over bytes that themselves
contain CRCs does not degenerate.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from enum import IntEnum

from replicad.errors import RelayCorruptError, RelayTornError

BLOCK_SIZE = 64 * 1024
HEADER_SIZE = 8
MAX_FRAGMENT = BLOCK_SIZE - HEADER_SIZE
_MASK_DELTA = 0xA282EAD8


class FragmentType(IntEnum):
    ZERO = 0  # padding; never a real fragment
    FULL = 1
    FIRST = 2
    MIDDLE = 3
    LAST = 4


def mask_crc(crc: int) -> int:
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def unmask_crc(masked: int) -> int:
    rot = (masked - _MASK_DELTA) & 0xFFFFFFFF
    return ((rot >> 17) | (rot << 15)) & 0xFFFFFFFF


def fragment_crc(kind: int, body: memoryview | bytes) -> int:
    """The CRC32C of a fragment's type byte and body, unmasked."""
    # Imported here: the crc32c package reads its own version through importlib.metadata
    # when imported (about 20 ms), and `replicad dump` of a binlog never touches a relay.
    from crc32c import crc32c

    return crc32c(body, crc32c(bytes((kind,))))


def _fragment(kind: FragmentType, payload: memoryview | bytes) -> bytes:
    crc = mask_crc(fragment_crc(kind, payload))
    return crc.to_bytes(4, "little") + len(payload).to_bytes(3, "little") + bytes((kind,)) + payload


def encode_record(payload: bytes | memoryview, offset: int) -> bytes:
    """The bytes that append one record to a segment whose current size is `offset`
    (padding included). The record may be empty."""
    view = memoryview(payload)
    out: list[bytes] = []
    first = True
    while True:
        room = BLOCK_SIZE - offset % BLOCK_SIZE
        if room < HEADER_SIZE:  # no room for a header: pad to the next block
            out.append(bytes(room))
            offset += room
            room = BLOCK_SIZE
        take = min(len(view), room - HEADER_SIZE)
        last = take == len(view)
        if first and last:
            kind = FragmentType.FULL
        elif first:
            kind = FragmentType.FIRST
        elif last:
            kind = FragmentType.LAST
        else:
            kind = FragmentType.MIDDLE
        out.append(_fragment(kind, view[:take]))
        offset += HEADER_SIZE + take
        view = view[take:]
        first = False
        if last:
            return b"".join(out)


def encoded_size(payload_len: int, offset: int) -> int:
    """How many bytes `encode_record` would append (for sizing without encoding)."""
    end = offset
    remaining = payload_len
    first = True
    while first or remaining:
        room = BLOCK_SIZE - end % BLOCK_SIZE
        if room < HEADER_SIZE:
            end += room
            room = BLOCK_SIZE
        take = min(remaining, room - HEADER_SIZE)
        end += HEADER_SIZE + take
        remaining -= take
        first = False
    return end - offset


@dataclass(slots=True, frozen=True)
class Record:
    offset: int  # where its first fragment starts
    end: int  # the offset just after its last fragment
    payload: bytes


class RecordReader:
    """Feed a segment's bytes (in any chunks) from `start` (a record boundary); take whole
    records out. Raises RelayCorruptError for a fragment that fails its CRC or breaks the
    FULL / FIRST-MIDDLE-LAST grammar; `finish()` says whether the data ended cleanly.

    Memory holds the unread input and the fragments of the record being assembled: a
    record is as large as its writer made it (the segment layer keeps them bounded)."""

    def __init__(self, start: int = 0, *, segment: str = "?") -> None:
        self.segment = segment
        self._buf = bytearray()
        self._buf_offset = start  # file offset of _buf[0]
        self._parts: list[bytes] = []
        self._record_start: int | None = None

    @property
    def offset(self) -> int:
        """The file offset of the next unconsumed byte."""
        return self._buf_offset

    @property
    def record_start(self) -> int:
        """Where the record being read (or the next one) starts: a clean cut point."""
        return self._buf_offset if self._record_start is None else self._record_start

    def feed(self, data: bytes | memoryview) -> None:
        self._buf += data

    def _corrupt(self, reason: str, offset: int) -> RelayCorruptError:
        return RelayCorruptError(reason, segment=self.segment, offset=offset)

    def records(self) -> Iterator[Record]:
        """Yield every whole record the fed bytes complete."""
        buf = self._buf
        pos = 0
        try:
            while True:
                at = self._buf_offset + pos
                room = BLOCK_SIZE - at % BLOCK_SIZE
                if room < HEADER_SIZE:
                    if len(buf) - pos < room:
                        return
                    if any(buf[pos : pos + room]):
                        raise self._corrupt("non-zero bytes in a block's padding", at)
                    pos += room
                    continue
                if len(buf) - pos < HEADER_SIZE:
                    return
                length = int.from_bytes(buf[pos + 4 : pos + 7], "little")
                kind = buf[pos + 7]
                if kind == FragmentType.ZERO or kind > FragmentType.LAST:
                    raise self._corrupt(f"fragment type {kind} is not a record fragment", at)
                if HEADER_SIZE + length > room:
                    raise self._corrupt(f"fragment length {length} crosses the block boundary", at)
                if len(buf) - pos < HEADER_SIZE + length:
                    return
                body = bytes(buf[pos + HEADER_SIZE : pos + HEADER_SIZE + length])
                stored = int.from_bytes(buf[pos : pos + 4], "little")
                if unmask_crc(stored) != fragment_crc(kind, body):
                    raise self._corrupt("fragment CRC32C mismatch", at)
                pos += HEADER_SIZE + length
                record = self._assemble(FragmentType(kind), body, at)
                if record is not None:
                    yield Record(record[0], self._buf_offset + pos, record[1])
        finally:
            del buf[:pos]
            self._buf_offset += pos

    def _assemble(self, kind: FragmentType, body: bytes, at: int) -> tuple[int, bytes] | None:
        if kind in (FragmentType.FULL, FragmentType.FIRST):
            if self._record_start is not None:
                raise self._corrupt(f"{kind.name} fragment inside a record", at)
            if kind == FragmentType.FULL:
                return at, body
            self._record_start = at
            self._parts = [body]
            return None
        if self._record_start is None:
            raise self._corrupt(f"{kind.name} fragment without a FIRST", at)
        self._parts.append(body)
        if kind == FragmentType.MIDDLE:
            return None
        start, payload = self._record_start, b"".join(self._parts)
        self._record_start, self._parts = None, []
        return start, payload

    def finish(self) -> None:
        """The input ended: raise RelayTornError if anything is left over (the writer writes
        a record's padding and fragments together, so leftovers are a torn write)."""
        if self._record_start is not None or self._buf:
            raise RelayTornError(
                "the segment ends inside a record", segment=self.segment, offset=self.record_start
            )
