"""Packet framing and the basic encodings of the MySQL client/server protocol (sans-IO).

A packet is `length u24 | sequence_id u8 | payload`. A payload of 0xFFFFFF bytes or more
travels as 0xFFFFFF-byte chunks followed by one shorter chunk (possibly empty), each with its
own header and the next sequence id. The sequence id starts at 0 with every command the client
sends and increases by one per packet in either direction, modulo 256.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from replicad.errors import ProtocolError, ServerError

MAX_CHUNK = 0xFFFFFF
HEADER_SIZE = 4
# MySQL and MariaDB cap max_allowed_packet (and slave_max_allowed_packet) at 1 GiB; anything
# larger is a corrupt length, and refusing it bounds the memory one packet can claim.
DEFAULT_MAX_PAYLOAD = 1 << 30

OK_HEADER = 0x00
EOF_HEADER = 0xFE
ERR_HEADER = 0xFF
LOCAL_INFILE_HEADER = 0xFB
NULL_COLUMN = 0xFB

_u16 = struct.Struct("<H")


# ---------------------------------------------------------------------- framing


def frame(payload: bytes, sequence_id: int) -> tuple[bytes, int]:
    """Wrap one payload in packet headers; returns the bytes and the next sequence id."""
    out = bytearray()
    view = memoryview(payload)
    seq = sequence_id & 0xFF
    start = 0
    while True:
        chunk = view[start : start + MAX_CHUNK]
        out += len(chunk).to_bytes(3, "little")
        out.append(seq)
        out += chunk
        seq = (seq + 1) & 0xFF
        start += len(chunk)
        # A full chunk promises a continuation, so an exact multiple ends with an empty one.
        if len(chunk) < MAX_CHUNK:
            return bytes(out), seq


class PacketReader:
    """Receive buffer that yields reassembled payloads and checks sequence ids.

    `expected_sequence` is the id the next packet must carry; None accepts any id (used while
    idle, where only an unsolicited ERR from the server can arrive).
    """

    def __init__(self, *, max_payload: int = DEFAULT_MAX_PAYLOAD) -> None:
        self.max_payload = max_payload
        self.expected_sequence: int | None = 0
        self._buffer = bytearray()
        self._pos = 0
        self._chunks: list[bytes] = []
        self._pending = 0  # bytes already collected in _chunks

    def feed(self, data: bytes) -> None:
        if self._pos and self._pos >= len(self._buffer) // 2:
            # Compact only once the consumed prefix dominates, so the cost stays linear.
            del self._buffer[: self._pos]
            self._pos = 0
        self._buffer += data

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as part of a payload."""
        return len(self._buffer) - self._pos + self._pending

    def read_payload(self) -> bytes | None:
        """The next complete payload, or None if more bytes are needed."""
        buf = self._buffer
        while True:
            pos = self._pos
            if len(buf) - pos < HEADER_SIZE:
                return None
            length = buf[pos] | buf[pos + 1] << 8 | buf[pos + 2] << 16
            seq = buf[pos + 3]
            if self.expected_sequence is not None and seq != self.expected_sequence:
                raise ProtocolError(
                    f"packet sequence id {seq}, expected {self.expected_sequence}",
                    chunk_length=length,
                )
            if self._pending + length > self.max_payload:
                raise ProtocolError(
                    f"packet payload exceeds the {self.max_payload}-byte limit",
                    length=self._pending + length,
                )
            end = pos + HEADER_SIZE + length
            if len(buf) < end:
                return None
            chunk = bytes(buf[pos + HEADER_SIZE : end])
            self._pos = end
            self.expected_sequence = (seq + 1) & 0xFF
            if length == MAX_CHUNK:
                self._chunks.append(chunk)
                self._pending += length
                continue
            if not self._chunks:
                return chunk
            self._chunks.append(chunk)
            payload = b"".join(self._chunks)
            self._chunks.clear()
            self._pending = 0
            return payload

    def take_rows(self, rows: list[bytes]) -> None:
        """Append the buffered complete payloads to `rows` while they are plain result-set
        rows: one chunk each, the expected sequence ids, not starting with 0xFE (an EOF or
        OK, or a row whose first value is 16 MiB or more) or 0xFF (an ERR). Whatever else
        comes next is left to `read_payload`. The snapshot's rows arrive here by the million:
        this is `read_payload` without a call, a check of `max_payload` (a single chunk is
        below it) or a reassembly per row, and in C where it is built (`_rows.scan_rows`)."""
        if self._chunks or self.expected_sequence is None:
            return
        self._pos, self.expected_sequence = scan_rows(
            self._buffer, self._pos, self.expected_sequence, rows
        )


def scan_rows_py(buffer: bytearray, pos: int, sequence: int, rows: list[bytes]) -> tuple[int, int]:
    """`take_rows`'s scan from offset `pos` expecting `sequence`: the offset of the first
    packet left and the sequence id it must carry (replicad/protocol/_rows.pyx in Python)."""
    size = len(buffer)
    append = rows.append
    while size - pos >= HEADER_SIZE:
        length = buffer[pos] | buffer[pos + 1] << 8 | buffer[pos + 2] << 16
        end = pos + HEADER_SIZE + length
        if (
            end > size
            or length == 0
            or length == MAX_CHUNK
            or buffer[pos + 3] != sequence
            or buffer[pos + HEADER_SIZE] >= EOF_HEADER
        ):
            break
        append(bytes(buffer[pos + HEADER_SIZE : end]))
        sequence = (sequence + 1) & 0xFF
        pos = end
    return pos, sequence


try:
    from replicad.protocol._rows import scan_rows
except ImportError:  # not compiled: the same scan in Python
    scan_rows = scan_rows_py


# ---------------------------------------------------------------------- encodings


def need(buf: bytes, pos: int, n: int, what: str) -> None:
    if n < 0 or pos + n > len(buf):
        raise ProtocolError(
            f"{what} needs {n} bytes at payload offset {pos}, only {max(len(buf) - pos, 0)} left"
        )


def read_lenenc_int(buf: bytes, pos: int) -> tuple[int, int]:
    """A length-encoded integer: its value and the offset after it."""
    need(buf, pos, 1, "length-encoded integer")
    first = buf[pos]
    if first < 0xFB:
        return first, pos + 1
    width = {0xFC: 2, 0xFD: 3, 0xFE: 8}.get(first)
    if width is None:
        # 0xFB is NULL and 0xFF starts an ERR packet: neither is a length in this position.
        raise ProtocolError(f"invalid length-encoded integer prefix {first:#04x}", offset=pos)
    need(buf, pos + 1, width, "length-encoded integer")
    return int.from_bytes(buf[pos + 1 : pos + 1 + width], "little"), pos + 1 + width


def read_lenenc_bytes(buf: bytes, pos: int) -> tuple[bytes, int]:
    length, pos = read_lenenc_int(buf, pos)
    need(buf, pos, length, "length-encoded string")
    return bytes(buf[pos : pos + length]), pos + length


def read_nul_bytes(buf: bytes, pos: int, what: str = "NUL-terminated string") -> tuple[bytes, int]:
    end = buf.find(b"\0", pos)
    if end < 0:
        raise ProtocolError(f"{what} has no terminating NUL", offset=pos)
    return bytes(buf[pos:end]), end + 1


def write_lenenc_int(value: int) -> bytes:
    if value < 0:
        raise ProtocolError(f"length-encoded integer cannot be negative: {value}")
    if value < 0xFB:
        return bytes((value,))
    if value < 1 << 16:
        return b"\xfc" + value.to_bytes(2, "little")
    if value < 1 << 24:
        return b"\xfd" + value.to_bytes(3, "little")
    if value < 1 << 64:
        return b"\xfe" + value.to_bytes(8, "little")
    raise ProtocolError(f"length-encoded integer too large: {value}")


def write_lenenc_bytes(value: bytes) -> bytes:
    return write_lenenc_int(len(value)) + value


# ---------------------------------------------------------------------- generic packets


@dataclass(frozen=True, slots=True)
class OkPacket:
    affected_rows: int
    last_insert_id: int
    status_flags: int
    warnings: int
    info: str


@dataclass(frozen=True, slots=True)
class EofPacket:
    warnings: int
    status_flags: int


def is_eof_packet(payload: bytes, deprecate_eof: bool) -> bool:
    """Whether a packet in row/column position is the terminator, not data.

    Without CLIENT_DEPRECATE_EOF the terminator is a 5-byte EOF packet; with it, an OK packet
    with an 0xFE header. A data packet can start with 0xFE only as the 8-byte lenenc prefix of
    a value of at least 16 MiB, so its payload is never shorter than a chunk.
    """
    if not payload or payload[0] != EOF_HEADER:
        return False
    if deprecate_eof:
        return len(payload) < MAX_CHUNK
    return len(payload) < 9


def parse_ok(payload: bytes) -> OkPacket:
    """OK packet (0x00, or 0xFE when it replaces EOF). Session-state tracking is never
    requested, so whatever follows the counters is the human-readable info."""
    need(payload, 0, 1, "OK packet")
    if payload[0] not in (OK_HEADER, EOF_HEADER):
        raise ProtocolError(f"expected an OK packet, got header {payload[0]:#04x}")
    affected, pos = read_lenenc_int(payload, 1)
    last_id, pos = read_lenenc_int(payload, pos)
    need(payload, pos, 4, "OK packet status and warnings")
    status, warnings = struct.unpack_from("<HH", payload, pos)
    info = bytes(payload[pos + 4 :]).decode("utf-8", "replace")
    return OkPacket(affected, last_id, status, warnings, info)


def parse_eof(payload: bytes) -> EofPacket:
    need(payload, 0, 1, "EOF packet")
    if payload[0] != EOF_HEADER:
        raise ProtocolError(f"expected an EOF packet, got header {payload[0]:#04x}")
    if len(payload) >= 5:
        warnings, status = struct.unpack_from("<HH", payload, 1)
        return EofPacket(warnings, status)
    # Pre-4.1 servers sent a bare 0xFE.
    return EofPacket(0, 0)


def parse_err(payload: bytes, **context: object) -> ServerError:
    """The ServerError an ERR packet describes (returned, so the caller decides the type)."""
    need(payload, 0, 3, "ERR packet")
    if payload[0] != ERR_HEADER:
        raise ProtocolError(f"expected an ERR packet, got header {payload[0]:#04x}")
    code = _u16.unpack_from(payload, 1)[0]
    pos = 3
    sqlstate: str | None = None
    # Errors sent before the capabilities are agreed (e.g. "too many connections" in place of
    # the greeting) have no '#' + SQLSTATE marker.
    if len(payload) >= 9 and payload[3] == 0x23:
        sqlstate = bytes(payload[4:9]).decode("ascii", "replace")
        pos = 9
    message = bytes(payload[pos:]).decode("utf-8", "replace")
    return ServerError(code, sqlstate, message, **context)
