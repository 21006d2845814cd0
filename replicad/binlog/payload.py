"""Compressed event bodies: MySQL TRANSACTION_PAYLOAD (zstd) and MariaDB compressed events (zlib).

Both are decompressed as streams so that memory stays bounded by one inner event, not by the
size of the transaction.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator

import zstandard

from replicad.binlog._bytes import read_lenenc
from replicad.errors import MalformedEventError, TruncatedError, UnsupportedError

HEADER_LENGTH = 19
COMPRESSION_ZSTD = 0
COMPRESSION_NONE = 255


class PayloadField:
    END = 0
    PAYLOAD_SIZE = 1
    COMPRESSION_TYPE = 2
    UNCOMPRESSED_SIZE = 3


def parse_payload_header(body: bytes) -> tuple[int, int, int, int]:
    """TRANSACTION_PAYLOAD header fields: (compression, payload_size, uncompressed_size,
    payload offset). Each field is `type lenenc | length lenenc | value`; numeric values are
    lenenc integers; unknown fields are skipped by their length as the server does."""
    pos = 0
    compression, payload_size, uncompressed = COMPRESSION_NONE, None, 0
    end = len(body)
    while pos < end:
        kind, pos = read_lenenc(body, pos)
        if kind == PayloadField.END:
            break
        length, pos = read_lenenc(body, pos)
        if pos + length > end:
            raise MalformedEventError(f"payload header field {kind} overruns the event")
        if kind == PayloadField.PAYLOAD_SIZE:
            payload_size = read_lenenc(body, pos)[0]
        elif kind == PayloadField.COMPRESSION_TYPE:
            compression = read_lenenc(body, pos)[0]
        elif kind == PayloadField.UNCOMPRESSED_SIZE:
            uncompressed = read_lenenc(body, pos)[0]
        pos += length
    if payload_size is None:
        payload_size = end - pos
    if pos + payload_size > end:
        raise MalformedEventError(
            f"payload of {payload_size} bytes overruns the event ({end - pos} left)"
        )
    return compression, payload_size, uncompressed, pos


_CHUNK = 1 << 16


def iter_payload_events(
    compression: int, payload: bytes, uncompressed_size: int = 0
) -> Iterator[bytes]:
    """Yield the raw inner events (header included, no checksum) of a transaction payload.

    Decompression is incremental (64 KiB of input at a time), so memory is bounded by the
    largest inner event. A frame that ends early, or inner events that do not tile the
    announced uncompressed size exactly, are errors: a truncated payload must never look
    like a shorter transaction."""
    if compression == COMPRESSION_ZSTD:
        chunks = _zstd_chunks(payload)
    elif compression == COMPRESSION_NONE:
        chunks = iter([payload])
    else:
        raise UnsupportedError(f"transaction payload compression type {compression} is unknown")
    buffer = bytearray()
    offset = 0  # of buffer[0] within the uncompressed payload
    for chunk in chunks:
        buffer += chunk
        while len(buffer) >= HEADER_LENGTH:
            size = int.from_bytes(buffer[9:13], "little")
            if size < HEADER_LENGTH:
                raise MalformedEventError(
                    f"inner event size {size} is smaller than a header", payload_offset=offset
                )
            if len(buffer) < size:
                break
            yield bytes(buffer[:size])
            del buffer[:size]
            offset += size
    if buffer:
        raise TruncatedError(
            f"transaction payload ends inside an inner event ({len(buffer)} bytes left over)",
            payload_offset=offset,
        )
    if uncompressed_size and offset != uncompressed_size:
        raise MalformedEventError(
            f"transaction payload holds {offset} bytes of events, "
            f"its header announced {uncompressed_size}"
        )


def _zstd_chunks(payload: bytes) -> Iterator[bytes]:
    decompressor = zstandard.ZstdDecompressor().decompressobj()
    try:
        for start in range(0, len(payload), _CHUNK):
            out = decompressor.decompress(payload[start : start + _CHUNK])
            if out:
                yield out
    except zstandard.ZstdError as exc:
        raise MalformedEventError(f"zstd: {exc}") from exc
    if not decompressor.eof:
        raise TruncatedError("zstd frame of the transaction payload is incomplete")


def decompress_mariadb(data: bytes, pos: int = 0) -> bytes:
    """MariaDB's compressed body: `0x80 | alg << 4 | lenlen`, a big-endian uncompressed
    length of lenlen bytes, then a zlib stream (alg 0 is the only one MariaDB defines)."""
    if pos >= len(data):
        raise MalformedEventError("compressed event body is empty")
    first = data[pos]
    if not first & 0x80:
        raise MalformedEventError(f"compressed body header byte {first:#04x} lacks 0x80")
    alg, lenlen = (first >> 4) & 0x07, first & 0x07
    if alg != 0:
        raise UnsupportedError(f"MariaDB compression algorithm {alg} is unknown")
    if not 1 <= lenlen <= 4:
        raise MalformedEventError(f"compressed body length field of {lenlen} bytes")
    start = pos + 1 + lenlen
    expected = int.from_bytes(data[pos + 1 : start], "big")
    try:
        out = zlib.decompress(data[start:])
    except zlib.error as exc:
        raise MalformedEventError(f"zlib: {exc}") from exc
    if len(out) != expected:
        raise MalformedEventError(
            f"decompressed {len(out)} bytes where the header announced {expected}"
        )
    return out
