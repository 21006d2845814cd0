"""Compressed event bodies: MySQL TRANSACTION_PAYLOAD (zstd) and MariaDB compressed events (zlib).

Both are decompressed as streams so that memory stays bounded by one inner event, not by the
size of the transaction.
"""

from __future__ import annotations

import io
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


def iter_payload_events(compression: int, payload: bytes) -> Iterator[bytes]:
    """Yield the raw inner events (header included, no checksum) of a transaction payload."""
    if compression == COMPRESSION_ZSTD:
        stream = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(payload))
    elif compression == COMPRESSION_NONE:
        stream = io.BytesIO(payload)
    else:
        raise UnsupportedError(f"transaction payload compression type {compression} is unknown")
    offset = 0
    try:
        while True:
            header = _read_exact(stream, HEADER_LENGTH, offset, allow_eof=True)
            if header is None:
                return
            size = int.from_bytes(header[9:13], "little")
            if size < HEADER_LENGTH:
                raise MalformedEventError(
                    f"inner event size {size} is smaller than a header", payload_offset=offset
                )
            rest = _read_exact(stream, size - HEADER_LENGTH, offset, allow_eof=False)
            yield header + rest  # type: ignore[operator]
            offset += size
    except zstandard.ZstdError as exc:
        raise MalformedEventError(f"zstd: {exc}", payload_offset=offset) from exc


def _read_exact(stream: io.RawIOBase, n: int, offset: int, *, allow_eof: bool) -> bytes | None:
    chunks = []
    remaining = n
    while remaining:
        chunk = stream.read(remaining)
        if not chunk:
            break
        chunks.append(chunk)
        remaining -= len(chunk)
    data = b"".join(chunks)
    if not data and allow_eof:
        return None
    if len(data) != n:
        raise TruncatedError(
            f"transaction payload ends inside an inner event ({len(data)} of {n} bytes)",
            payload_offset=offset,
        )
    return data


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
